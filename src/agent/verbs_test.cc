#include "agent/verbs.h"

#include <gtest/gtest.h>

namespace gpool::agent {
namespace {

TEST(VerbsTest, RateMapping) {
  double gbps = 0;
  EXPECT_EQ(IbRate(2, 128, &gbps), "4xNDR");  // IBV_WIDTH_4X, IBV_SPEED_NDR
  EXPECT_DOUBLE_EQ(gbps, 400);
  EXPECT_EQ(IbRate(2, 64, &gbps), "4xHDR");
  EXPECT_DOUBLE_EQ(gbps, 200);
  EXPECT_EQ(IbRate(1, 32, &gbps), "1xEDR");
  EXPECT_EQ(IbRate(8, 1, &gbps), "12xSDR");
  EXPECT_DOUBLE_EQ(gbps, 30);
  EXPECT_EQ(IbRate(16, 128, &gbps), "2xNDR");
  EXPECT_EQ(IbRate(2, 8, &gbps), "4xFDR10");
  EXPECT_EQ(IbRate(2, 256, &gbps), "4xXDR");
  EXPECT_EQ(IbRate(3, 128, &gbps), "unknown");  // not a width enum value
  EXPECT_EQ(gbps, 0);
  EXPECT_EQ(IbRate(2, 3, &gbps), "unknown");
}

TEST(VerbsTest, StateAndGuid) {
  EXPECT_EQ(IbPortState(1), "down");
  EXPECT_EQ(IbPortState(2), "init");
  EXPECT_EQ(IbPortState(3), "armed");
  EXPECT_EQ(IbPortState(4), "active");
  EXPECT_EQ(IbPortState(9), "unknown(9)");
  EXPECT_EQ(FormatGuid(0x0002c90300a1b2c3ull), "0x0002c90300a1b2c3");
}

TEST(VerbsTest, NoDevicesMeansEmpty) {
  // This machine and CI have no RDMA devices: the live path must answer an empty list, not fail.
  VerbsHcas v;
  auto l = v.List();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  for (const HcaPortInfo& h : *l) EXPECT_FALSE(h.device.empty());  // on a machine with HCAs
}

}  // namespace
}  // namespace gpool::agent
