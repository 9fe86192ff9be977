#include "sim/perf_model.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>

#include "fabric/generators.h"
#include "fabric/routing.h"
#include "sim/fabric_routes.h"
#include "sim/test_clusters.h"

namespace gpool::sim {
namespace {

SimCluster Tree() { return TestTwoPodTree(); }

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

namespace gpool::sim {
namespace {

// Route-based model on a generated 2-level fat-tree of 4-port switches: 4 leaves x 2 hosts, 2
// spines, 4xNDR (400 Gb/s) everywhere. Each leaf has 2 uplinks (800 Gb/s in aggregate), so the
// aggregate-pipe model would give two cross-leaf rings from one leaf 400 Gb/s each; on the real
// routes two flows that the LFTs send up the same spine link get 200 each.
class RoutedNet : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric::FatTreeOptions o;
    o.levels = 2;
    o.radix = 4;
    auto f = fabric::GenerateFatTree(o);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto c = RoutedClusterFromFabric(*std::move(f), {}, {.engine = fabric::Engine::kMinhop});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = *std::move(c);
    ASSERT_EQ(cluster_.hosts.size(), 8u);
    ASSERT_NE(cluster_.routes, nullptr);
  }
  // Directed links of the 2-host ring {a, b} (both edges).
  std::set<size_t> RingLinks(uint32_t a, uint32_t b) const {
    std::set<size_t> out;
    auto add = [&](size_t l) { out.insert(l); };
    cluster_.routes->ForEachHop(a, b, 0, add);
    cluster_.routes->ForEachHop(b, a, 0, add);
    return out;
  }
  static bool Disjoint(const std::set<size_t>& x, const std::set<size_t>& y) {
    for (size_t l : x) if (y.count(l)) return false;
    return true;
  }
  SimCluster cluster_;
};

TEST_F(RoutedNet, RoutesFollowTheFabric) {
  // Same leaf: CA -> leaf -> CA, 2 links. Other leaf: CA -> leaf -> spine -> leaf -> CA, 4.
  ASSERT_EQ(cluster_.hosts[0].leaf, cluster_.hosts[1].leaf);
  ASSERT_NE(cluster_.hosts[0].leaf, cluster_.hosts[2].leaf);
  int hops = 0;
  cluster_.routes->ForEachHop(0, 1, 0, [&](size_t) { ++hops; });
  EXPECT_EQ(hops, 2);
  hops = 0;
  cluster_.routes->ForEachHop(0, 2, 0, [&](size_t) { ++hops; });
  EXPECT_EQ(hops, 4);
  NetModel net(cluster_);
  ASSERT_TRUE(net.routed());
  net.AddRing({0, 2}, +1);
  for (size_t l : RingLinks(0, 2)) EXPECT_EQ(net.link_flows(l), 1) << l;
  EXPECT_DOUBLE_EQ(net.RingRateGbps({0, 2}), 400);
  EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {0, 2}), 1.0);
  net.AddRing({0, 2}, -1);
  EXPECT_TRUE(net.idle());
}

// Two jobs whose rings the LFTs put on one spine link slow each other; two whose routes are
// disjoint don't, although both pairs cross the same two leaves' uplinks in aggregate.
TEST_F(RoutedNet, SharedUplinkSlowsDisjointRoutesDoNot) {
  // Hosts 0, 1 on one leaf; the other leaves' hosts are peers. Find, among rings {a, x} and
  // {b, y} (a, b = hosts 0, 1; x, y distinct hosts elsewhere), one pair that shares a link and
  // one that shares none.
  std::optional<std::pair<uint32_t, uint32_t>> shared, disjoint;
  for (uint32_t x = 2; x < 8; ++x) {
    for (uint32_t y = 2; y < 8; ++y) {
      if (x == y) continue;
      const bool d = Disjoint(RingLinks(0, x), RingLinks(1, y));
      if (d && !disjoint) disjoint = {{x, y}};
      if (!d && !shared) shared = {{x, y}};
    }
  }
  ASSERT_TRUE(shared.has_value()) << "every route pair disjoint: the fabric is too wide for this test";
  ASSERT_TRUE(disjoint.has_value()) << "no disjoint routes: the engine put everything on one spine";

  {
    NetModel net(cluster_);
    net.AddRing({0, shared->first}, +1);
    EXPECT_DOUBLE_EQ(net.RingRateGbps({0, shared->first}), 400);
    net.AddRing({1, shared->second}, +1);
    EXPECT_DOUBLE_EQ(net.RingRateGbps({0, shared->first}), 200);
    EXPECT_DOUBLE_EQ(net.RingRateGbps({1, shared->second}), 200);
    // (1 - 0.5) + 0.5 * 400 / 200 = 1.5
    EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {1, shared->second}), 1.5);
    net.AddRing({1, shared->second}, -1);
    EXPECT_DOUBLE_EQ(net.RingRateGbps({0, shared->first}), 400);  // flows removed on finish
  }
  {
    NetModel net(cluster_);
    net.AddRing({0, disjoint->first}, +1);
    net.AddRing({1, disjoint->second}, +1);
    EXPECT_DOUBLE_EQ(net.RingRateGbps({0, disjoint->first}), 400);
    EXPECT_DOUBLE_EQ(net.Slowdown(0.5, {1, disjoint->second}), 1.0);
  }
  // The aggregate-pipe model can't tell the two apart: the leaf's 800 Gb/s of uplinks carry both.
  SimCluster pipes = cluster_;
  pipes.routes = nullptr;
  NetModel agg(pipes);
  agg.AddRing({0, shared->first}, +1);
  agg.AddRing({1, shared->second}, +1);
  EXPECT_DOUBLE_EQ(agg.RingRateGbps({0, shared->first}), 400);
}

TEST(FabricRoutes, ClusterNotFromTheFabricIsAnError) {
  fabric::FatTreeOptions o;
  o.levels = 2;
  o.radix = 4;
  auto f = fabric::GenerateFatTree(o);
  ASSERT_TRUE(f.ok());
  auto t = fabric::Route(*f, {.engine = fabric::Engine::kMinhop});
  ASSERT_TRUE(t.ok());
  SimCluster c = Tree();  // hosts with no CA
  auto r = FabricRoutes::Build(*f, *t, c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("host 0 (h0)"), std::string::npos) << r.status().ToString();
  // Tables that leave a destination unrouted are refused up front, naming the switch and LID.
  auto cf = ClusterFromFabric(*f, {});
  ASSERT_TRUE(cf.ok());
  fabric::RoutingTables empty(*f);
  empty.engine = "empty";
  r = FabricRoutes::Build(*f, empty, *cf);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no route at switch"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace gpool::sim
