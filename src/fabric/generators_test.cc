#include "fabric/generators.h"

#include <set>

#include <gtest/gtest.h>

namespace gpool::fabric {
namespace {

size_t ConnectedPorts(const Fabric& f, NodeId n) { return f.degree(n); }

int CountLevel(const Fabric& f, int level) {
  int c = 0;
  for (NodeId s : f.switches()) c += f.node(s).level == level;
  return c;
}

NodeId Peer(const Fabric& f, NodeId n, uint16_t port) {
  for (const Adjacent* a = f.adj_begin(n); a != f.adj_end(n); ++a)
    if (a->port == port) return a->peer;
  return NodeId();
}

TEST(GeneratorsTest, TwoLevelFullFatTree) {
  auto f = GenerateFatTree({.levels = 2, .radix = 36});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_switches(), 36u + 18u);
  EXPECT_EQ(f->num_cas(), 648u);
  EXPECT_EQ(CountLevel(*f, 0), 36);
  EXPECT_EQ(CountLevel(*f, 1), 18);
  // Every switch port is cabled: 18 hosts + 18 spines per leaf, 36 leaves per spine.
  for (NodeId s : f->switches()) EXPECT_EQ(ConnectedPorts(*f, s), 36u) << f->node(s).name;
  NodeId leaf3 = *f->FindByName("leaf-3");
  EXPECT_EQ(f->node(Peer(*f, leaf3, 19)).name, "spine-0");
  EXPECT_EQ(f->node(Peer(*f, leaf3, 1)).name, "host0055 mlx5_0");  // 3 * 18 + 1
  // LIDs: switches first.
  EXPECT_EQ(f->node(*f->FindByName("leaf-0")).lid, 1);
  EXPECT_EQ(f->max_lid(), 36 + 18 + 648);
}

TEST(GeneratorsTest, ThreeLevelSevenPodsIsTheBriefsFabric) {
  auto shape = ResolveFatTree({.levels = 3, .radix = 36, .pods = 7});
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->core_ports_per_pod, 2);
  auto f = GenerateFatTree({.levels = 3, .radix = 36, .pods = 7});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 2268u);
  EXPECT_EQ(CountLevel(*f, 0), 7 * 18);
  EXPECT_EQ(CountLevel(*f, 1), 7 * 18);
  EXPECT_EQ(CountLevel(*f, 2), 162);
  EXPECT_EQ(f->num_switches(), 126u + 126u + 162u);
  for (NodeId s : f->switches()) {
    const Node& n = f->node(s);
    // Leaves and aggregation switches are full; each core takes 2 links into each of 7 pods.
    EXPECT_EQ(ConnectedPorts(*f, s), n.level == 2 ? 14u : 36u) << n.name;
    for (const Adjacent* a = f->adj_begin(s); a != f->adj_end(s); ++a) {
      const Node& p = f->node(a->peer);
      if (p.type == NodeType::kSwitch) {
        EXPECT_EQ(std::abs(p.level - n.level), 1) << n.name;
      } else {
        EXPECT_EQ(n.level, 0) << "CA on " << n.name;
      }
    }
  }
  // A core reaches every pod; a leaf reaches every aggregation switch of its pod only.
  NodeId core = *f->FindByName("core-5");
  std::set<std::string> pods;
  for (const Adjacent* a = f->adj_begin(core); a != f->adj_end(core); ++a)
    pods.insert(f->node(a->peer).name.substr(0, 8));
  EXPECT_EQ(pods.size(), 7u);
  NodeId leaf = *f->FindByName("leaf-p3-4");
  for (uint16_t p = 19; p <= 36; ++p)
    EXPECT_EQ(f->node(Peer(*f, leaf, p)).name.rfind("spine-p3-", 0), 0u);
}

TEST(GeneratorsTest, KaryNtreeHalfFillsTheTop) {
  auto f = GenerateFatTree(KaryNtree(4, 3));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 64u);
  EXPECT_EQ(f->num_switches(), 48u);
  for (NodeId s : f->switches())
    if (f->node(s).level == 2) {
      EXPECT_EQ(ConnectedPorts(*f, s), 4u);
    }
}

TEST(GeneratorsTest, RailOptimisedHosts) {
  // The brief's 2,048 GPUs: 256 hosts x 8 HCAs on 64-port NDR switches, two levels, 1:1.
  auto f = GenerateFatTree({.levels = 2, .radix = 64, .hcas_per_node = 8});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 2048u);
  EXPECT_EQ(f->num_switches(), 64u + 32u);
  ASSERT_TRUE(f->FindByName("host0256 mlx5_7").has_value());
  EXPECT_FALSE(f->FindByName("host0257 mlx5_0").has_value());
  // HCA i of every host is on a leaf of rail i (leaf index mod 8 == i).
  for (NodeId ca : f->cas()) {
    const Node& n = f->node(ca);
    int rail = n.name.back() - '0';
    NodeId leaf = f->adj_begin(ca)->peer;
    int idx = std::stoi(f->node(leaf).name.substr(5));
    EXPECT_EQ(idx % 8, rail) << n.name;
  }
  // The 8 HCAs of a host share its system image GUID.
  EXPECT_EQ(f->node(*f->FindByName("host0002 mlx5_0")).sysimg_guid,
            f->node(*f->FindByName("host0002 mlx5_7")).sysimg_guid);
}

TEST(GeneratorsTest, OversubscriptionAndPartialHosts) {
  auto shape = ResolveFatTree({.levels = 2, .radix = 36, .oversubscription = {2, 1}});
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->leaf_down, 24);
  EXPECT_EQ(shape->leaf_up, 12);
  EXPECT_EQ(shape->hcas, 36 * 24);
  auto f = GenerateFatTree({.levels = 2, .radix = 8, .hosts = 5});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->num_cas(), 5u);
}

TEST(GeneratorsTest, LargeFabrics) {
  auto f = GenerateFatTree({.levels = 3, .radix = 36});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->num_cas(), 11664u);  // >= 10,000 HCAs
  // Beyond one subnet's 49,151 LIDs: an error naming the limit (assign_lids = false builds the
  // model without LIDs; bench/routing_bench.cc does that for 100,800 HCAs).
  auto big = ResolveFatTree({.levels = 3, .radix = 64, .pods = 50});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->hcas, 51200);
  auto h = GenerateFatTree({.levels = 3, .radix = 64, .pods = 50});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted);
}

TEST(GeneratorsTest, BadOptionsAreErrors) {
  EXPECT_FALSE(GenerateFatTree({.levels = 4}).ok());
  EXPECT_FALSE(GenerateFatTree({.levels = 2, .radix = 300}).ok());
  EXPECT_FALSE(GenerateFatTree({.levels = 2, .radix = 8, .leaves = 9}).ok());
  auto r = GenerateFatTree({.levels = 2, .radix = 8, .leaves = 6, .hcas_per_node = 4});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple of hcas_per_node"), std::string::npos);
  EXPECT_FALSE(GenerateFatTree({.levels = 2, .radix = 8, .hosts = 33}).ok());
  EXPECT_FALSE(GenerateFatTree({.levels = 3, .radix = 8, .pods = 9, .core_ports_per_pod = 1}).ok());
  EXPECT_FALSE(GenerateTorus({.dims = {0, 2, 2}}).ok());
}

TEST(GeneratorsTest, Torus) {
  auto f = GenerateTorus({.dims = {4, 4, 4}, .hcas_per_switch = 2});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_switches(), 64u);
  EXPECT_EQ(f->num_cas(), 128u);
  EXPECT_EQ(f->num_links(), 64u * 3 + 128u);
  NodeId s = *f->FindByName("sw-x3-y0-z1");
  EXPECT_EQ(f->node(Peer(*f, s, 1)).name, "sw-x0-y0-z1");  // x+ wraps
  EXPECT_EQ(f->node(Peer(*f, s, 2)).name, "sw-x2-y0-z1");  // x-
  EXPECT_EQ(f->node(Peer(*f, s, 4)).name, "sw-x3-y3-z1");  // y- wraps
  auto thin = GenerateTorus({.dims = {2, 1, 3}});
  ASSERT_TRUE(thin.ok()) << thin.status().ToString();
  EXPECT_EQ(thin->num_links(), 3u * 1 + 2u * 3 + 6u);
}

TEST(GeneratorsTest, DragonflyCanonicalHasOneLinkPerGroupPair) {
  auto f = GenerateDragonfly({.routers_per_group = 4, .hosts_per_router = 2,
                              .global_links_per_router = 2});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_switches(), 9u * 4);
  EXPECT_EQ(f->num_cas(), 9u * 4 * 2);
  std::set<std::pair<int, int>> pairs;
  size_t global = 0;
  for (const Link& l : f->links()) {
    const Node& a = f->node(f->port(l.a).node);
    const Node& b = f->node(f->port(l.b).node);
    if (a.type != NodeType::kSwitch || b.type != NodeType::kSwitch) continue;
    int ga = std::stoi(a.name.substr(4)), gb = std::stoi(b.name.substr(4));
    if (ga == gb) continue;
    ++global;
    pairs.insert({std::min(ga, gb), std::max(ga, gb)});
  }
  EXPECT_EQ(global, 36u);
  EXPECT_EQ(pairs.size(), 36u);
  for (NodeId s : f->switches()) EXPECT_EQ(ConnectedPorts(*f, s), 3u + 2u + 2u);
}

}  // namespace
}  // namespace gpool::fabric
