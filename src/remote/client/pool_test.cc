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

// The rule both stand-ins and NVML show: the domain is the server's ordinal, bus and device the
// GPU's own; two servers' GPU 0 (both 00:00 there) get distinct ids, and a GPU listed twice gets
// a domain no server uses (servers + its device ordinal).
TEST(PoolPciTest, EveryDeviceOfTheProgramGetsItsOwnAddress) {
  PoolEnv e = ParsePoolEnv("a:1/0,b:2/0,b:2/1,b:2/0", nullptr, nullptr);
  ASSERT_EQ(e.devices.size(), 4u);
  // {bus, device} on each server: the emulated server's device i is on bus i.
  std::vector<std::pair<int, int>> own = {{0, 0}, {0, 0}, {1, 0}, {0, 0}};
  EXPECT_EQ(PoolPciAddress(e.devices, own, 0), (PciAddr{0, 0, 0}));
  EXPECT_EQ(PoolPciAddress(e.devices, own, 1), (PciAddr{1, 0, 0}));
  EXPECT_EQ(PoolPciAddress(e.devices, own, 2), (PciAddr{1, 1, 0}));
  EXPECT_EQ(PoolPciAddress(e.devices, own, 3), (PciAddr{2 + 3, 0, 0}));
}

}  // namespace
}  // namespace gpool::remote::client
