#include "sim/load_view.h"

#include <gtest/gtest.h>

#include "fabric/generators.h"
#include "fabric/routing.h"
#include "sim/adapter.h"
#include "sim/fabric_routes.h"
#include "sim/test_clusters.h"

namespace gpool::sim {
namespace {

// Domain id of leaf l / pod p in ToClusterSpec's numbering, checked against its names.
sched::DomainId LeafDomain(const SimCluster& c, int32_t l) {
  const sched::ClusterSpec spec = ToClusterSpec(c);
  const sched::DomainId d(static_cast<uint32_t>(1 + c.pod_names.size() + l));
  EXPECT_EQ(spec.domains[d.value()].name, c.leaf_names[l]);
  EXPECT_EQ(spec.domains[d.value()].level, sched::Level::kLeaf);
  return d;
}
sched::DomainId PodDomain(const SimCluster& c, int32_t p) {
  const sched::ClusterSpec spec = ToClusterSpec(c);
  const sched::DomainId d(static_cast<uint32_t>(1 + p));
  EXPECT_EQ(spec.domains[d.value()].name, c.pod_names[p]);
  EXPECT_EQ(spec.domains[d.value()].level, sched::Level::kPod);
  return d;
}

// 2-level fat tree of 4-port switches: 4 leaves x 2 hosts, 2 uplinks per leaf, 400 Gb/s links.
TEST(LoadView, RoutedUplinksLoseRateAsRingsCrossThem) {
  fabric::FatTreeOptions o;
  o.levels = 2;
  o.radix = 4;
  auto f = fabric::GenerateFatTree(o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto made = RoutedClusterFromFabric(*std::move(f), {}, {.engine = fabric::Engine::kMinhop});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const SimCluster& c = *made;
  ASSERT_EQ(c.routes->leaf_uplinks().size(), c.leaf_names.size());
  for (const auto& u : c.routes->leaf_uplinks()) {
    EXPECT_EQ(u.up.size(), 2u);
    EXPECT_EQ(u.down.size(), 2u);
  }
  NetModel net(c);
  std::shared_ptr<const sched::FabricLoad> idle = FabricLoadOf(c, net);
  EXPECT_DOUBLE_EQ(idle->flow_gbps, 400);
  for (int32_t l = 0; l < static_cast<int32_t>(c.leaf_names.size()); ++l) {
    EXPECT_DOUBLE_EQ(idle->Rate(LeafDomain(c, l)), 400) << l;
  }
  // Hosts 0 and 2 sit on different leaves: the ring 0 -> 2 -> 0 puts one flow on one of each
  // leaf's two uplinks and one of its two downlinks: mean of 400 / 2 and 400 / 1 = 300.
  const int32_t l0 = c.hosts[0].leaf, l2 = c.hosts[2].leaf;
  ASSERT_NE(l0, l2);
  net.AddRing({0, 2}, +1);
  std::shared_ptr<const sched::FabricLoad> busy = FabricLoadOf(c, net);
  EXPECT_FLOAT_EQ(busy->up_gbps[LeafDomain(c, l0).value()], 300);
  EXPECT_FLOAT_EQ(busy->down_gbps[LeafDomain(c, l0).value()], 300);
  EXPECT_FLOAT_EQ(busy->up_gbps[LeafDomain(c, l2).value()], 300);
  EXPECT_NEAR(busy->Contention(LeafDomain(c, l0)), 4.0 / 3, 1e-6);
  for (int32_t l = 0; l < static_cast<int32_t>(c.leaf_names.size()); ++l) {
    if (l != l0 && l != l2) {
      EXPECT_DOUBLE_EQ(busy->Contention(LeafDomain(c, l)), 1.0) << l;
    }
  }
  // The rings leave: the view is idle again.
  net.AddRing({0, 2}, -1);
  EXPECT_DOUBLE_EQ(FabricLoadOf(c, net)->Contention(LeafDomain(c, l0)), 1.0);
}

// Aggregate pipes: two pods of two leaves of two 1600 Gb/s hosts; 3200 Gb/s leaf and pod pipes.
TEST(LoadView, AggregatePipesShareTheirCapacity) {
  SimCluster c = TestTwoPodTree();
  NetModel net(c);
  // One cross-pod ring: pod 0's pipe gives the next flow 3200 / 2 = 1600, the NIC: no contention.
  net.AddRing({0, 4}, +1);
  std::shared_ptr<const sched::FabricLoad> one = FabricLoadOf(c, net);
  EXPECT_DOUBLE_EQ(one->flow_gbps, 1600);
  EXPECT_FLOAT_EQ(one->up_gbps[PodDomain(c, 0).value()], 1600);
  EXPECT_DOUBLE_EQ(one->Contention(PodDomain(c, 0)), 1.0);
  // Three more: 3200 / 5 = 640 for the next, 2.5 times short of its NIC.
  net.AddRing({1, 5}, +1);
  net.AddRing({2, 6}, +1);
  net.AddRing({3, 7}, +1);
  std::shared_ptr<const sched::FabricLoad> four = FabricLoadOf(c, net);
  EXPECT_FLOAT_EQ(four->up_gbps[PodDomain(c, 0).value()], 640);
  EXPECT_FLOAT_EQ(four->down_gbps[PodDomain(c, 1).value()], 640);
  EXPECT_NEAR(four->Contention(PodDomain(c, 0)), 2.5, 1e-6);
  // Leaf 0 (hosts 0, 1) carries two of them up: 3200 / 3 for the next.
  EXPECT_FLOAT_EQ(four->up_gbps[LeafDomain(c, 0).value()], 3200.0f / 3);
}

}  // namespace
}  // namespace gpool::sim
