#include "sim/perf_model.h"

#include <gtest/gtest.h>

namespace gpool::sim {
namespace {

// Two pods of two leaves of two hosts; hosts 1600 Gb/s, leaf uplinks 3200 (1:1), pod uplinks
// 3200 (2:1).
SimCluster Tree() {
  SimCluster c;
  c.pod_names = {"p0", "p1"};
  c.leaf_names = {"l0", "l1", "l2", "l3"};
  for (int h = 0; h < 8; ++h) {
    c.hosts.push_back({.name = "h" + std::to_string(h), .gpus = 8, .leaf = h / 2, .pod = h / 4,
                       .nic_gbps = 1600});
  }
  c.leaf_uplink_gbps = {3200, 3200, 3200, 3200};
  c.pod_uplink_gbps = {3200, 3200};
  return c;
}

TEST(NetModel, SingleHostAndUncontendedRingsRunAtFullSpeed) {
  SimCluster c = Tree();
  NetModel net(c);
  EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {0}), 1.0);
  net.AddRing({0, 1}, +1);
  EXPECT_DOUBLE_EQ(net.RingRateGbps({0, 1}), 1600);
  EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {0, 1}), 1.0);
  EXPECT_EQ(net.host_up_flows(0), 1);
  net.AddRing({0, 1}, -1);
  EXPECT_TRUE(net.idle());
}

TEST(NetModel, SharedHostHalvesTheRing) {
  SimCluster c = Tree();
  NetModel net(c);
  net.AddRing({0, 1}, +1);
  net.AddRing({0, 1}, +1);  // a second job on the same two hosts
  EXPECT_DOUBLE_EQ(net.RingRateGbps({0, 1}), 800);
  // (1 - 0.4) + 0.4 * 1600/800 = 1.4
  EXPECT_DOUBLE_EQ(net.Slowdown(0.4, {0, 1}), 1.4);
}

TEST(NetModel, CrossPodRingsShareThePodUplink) {
  SimCluster c = Tree();
  NetModel net(c);
  // Ring 0 -> 4 -> 0 crosses pods once each way: pod uplink 3200 / 1 flow, capped at the NIC.
  net.AddRing({0, 4}, +1);
  EXPECT_EQ(net.pod_up_flows(0), 1);
  EXPECT_EQ(net.leaf_up_flows(0), 1);
  EXPECT_DOUBLE_EQ(net.RingRateGbps({0, 4}), 1600);
  // Three more cross-pod rings from other hosts: 4 flows share 3200 -> 800 each.
  net.AddRing({1, 5}, +1);
  net.AddRing({2, 6}, +1);
  net.AddRing({3, 7}, +1);
  EXPECT_EQ(net.pod_up_flows(0), 4);
  EXPECT_DOUBLE_EQ(net.RingRateGbps({0, 4}), 800);
  EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {0, 4}), 1.5);
}

}  // namespace
}  // namespace gpool::sim
