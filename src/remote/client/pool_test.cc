#include "remote/client/pool.h"

#include <gtest/gtest.h>

namespace gpool::remote::client {
namespace {

TEST(PoolEnvTest, DevicesLeaseAndTransportAsGpoolRunSetsThem) {
  PoolEnv e = ParsePoolEnv("h1:7000/0,h2:7001/3,h3:7002", "TOKEN", "ucx");
  ASSERT_EQ(e.devices.size(), 3u) << e.env_error;
  EXPECT_EQ(e.devices[0].server, "h1:7000");
  EXPECT_EQ(e.devices[0].index, 0u);
  EXPECT_EQ(e.devices[1].server, "h2:7001");
  EXPECT_EQ(e.devices[1].index, 3u);
  EXPECT_EQ(e.devices[2].server, "h3:7002");  // no "/INDEX": device 0
  EXPECT_EQ(e.devices[2].index, 0u);
  EXPECT_EQ(e.token, "TOKEN");
  EXPECT_EQ(e.transport, "ucx");
  EXPECT_EQ(ParsePoolEnv("h:1/0", nullptr, nullptr).transport, "tcp");
}

TEST(PoolEnvTest, MalformedEntriesLeaveNoDevicesAndSayWhich) {
  PoolEnv unset = ParsePoolEnv(nullptr, nullptr, nullptr);
  EXPECT_TRUE(unset.devices.empty());
  EXPECT_NE(unset.env_error.find("GPOOL_DEVICES is not set"), std::string::npos);
  PoolEnv index = ParsePoolEnv("h:1/0,h:1/x", nullptr, nullptr);
  EXPECT_TRUE(index.devices.empty());
  EXPECT_NE(index.env_error.find("'h:1/x': index after '/' is not a number"), std::string::npos)
      << index.env_error;
  PoolEnv port = ParsePoolEnv("hostonly/0", nullptr, nullptr);
  EXPECT_TRUE(port.devices.empty());
  EXPECT_NE(port.env_error.find("want HOST:PORT/INDEX"), std::string::npos) << port.env_error;
  EXPECT_EQ(ParsePoolEnv(",,", nullptr, nullptr).env_error, "GPOOL_DEVICES lists no devices");
}

}  // namespace
}  // namespace gpool::remote::client
