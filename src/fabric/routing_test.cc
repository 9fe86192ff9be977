#include "fabric/routing.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fabric/analysis.h"
#include "fabric/failure.h"
#include "fabric/generators.h"
#include "fabric/load.h"

namespace gpool::fabric {
namespace {

Fabric SmallFatTree(int levels = 2) {
  FatTreeOptions o{.levels = levels, .radix = 8};
  auto f = GenerateFatTree(o);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(*f);
}

std::vector<PortId> CaPorts(const Fabric& f) {
  std::vector<PortId> ports;
  for (NodeId ca : f.cas()) ports.push_back(f.port_of(ca, 1));
  return ports;
}

// Per leaf: how many CA destination LIDs leave through each uplink.
std::map<std::pair<uint32_t, uint16_t>, int> UplinkCounts(const Fabric& f, const RoutingTables& t) {
  std::map<std::pair<uint32_t, uint16_t>, int> counts;
  for (NodeId s : f.switches()) {
    if (f.node(s).level != 0) continue;
    for (const Adjacent* a = f.adj_begin(s); a != f.adj_end(s); ++a)
      if (f.node(a->peer).type == NodeType::kSwitch) counts[{s.value(), a->port}] = 0;
    for (NodeId ca : f.cas()) {
      Lid d = f.node(ca).lid;
      auto it = counts.find({s.value(), t.out_port(s, d)});
      if (it != counts.end()) ++it->second;
    }
  }
  return counts;
}

void ExpectBalanced(const Fabric& f, const RoutingTables& t) {
  auto counts = UplinkCounts(f, t);
  ASSERT_FALSE(counts.empty());
  std::map<uint32_t, std::pair<int, int>> range;  // leaf -> min, max
  for (auto& [key, c] : counts) {
    auto [it, fresh] = range.try_emplace(key.first, c, c);
    it->second.first = std::min(it->second.first, c);
    it->second.second = std::max(it->second.second, c);
  }
  for (auto& [leaf, mm] : range)
    EXPECT_LE(mm.second - mm.first, 1) << f.node(NodeId(leaf)).name << " uplinks carry "
                                       << mm.first << ".." << mm.second << " destinations";
}

TEST(RoutingTest, EngineNames) {
  EXPECT_EQ(*ParseEngine("FTree"), Engine::kFtree);
  EXPECT_EQ(EngineName(Engine::kDor), "dor");
  EXPECT_FALSE(ParseEngine("lash").ok());
}

TEST(RoutingTest, MinhopReachesEveryPairOnShortestPaths) {
  Fabric f = SmallFatTree();
  auto t = Route(f, {.engine = Engine::kMinhop});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->engine, "minhop");
  for (PortId src : CaPorts(f))
    for (PortId dst : CaPorts(f)) {
      if (src == dst) continue;
      auto path = TracePath(f, *t, src, f.port(dst).lid);
      ASSERT_TRUE(path.ok()) << path.status().ToString();
      bool same_leaf = f.adj_begin(f.port(src).node)->peer == f.adj_begin(f.port(dst).node)->peer;
      EXPECT_EQ(path->size(), same_leaf ? 2u : 4u);
      EXPECT_EQ(path->front(), f.port(src).link);
      EXPECT_EQ(path->back(), f.port(dst).link);
    }
  VerifyReport r = Verify(f, *t, {});
  EXPECT_EQ(r.pairs_checked, 32u * 31u);
  EXPECT_EQ(r.unreachable, 0u);
  EXPECT_EQ(r.loops, 0u);
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
}

TEST(RoutingTest, MinhopBalancesTiesOverUplinks) {
  Fabric f = SmallFatTree();
  auto t = Route(f, {.engine = Engine::kMinhop});
  ASSERT_TRUE(t.ok());
  ExpectBalanced(f, *t);
  Fabric g = *GenerateFatTree({.levels = 3, .radix = 8});
  auto u = Route(g, {.engine = Engine::kMinhop});
  ASSERT_TRUE(u.ok());
  ExpectBalanced(g, *u);
  EXPECT_TRUE(Verify(g, *u, {.check_deadlock = false}).ok());
}

TEST(RoutingTest, TracePathNamesWhereARouteEnds) {
  Fabric f = SmallFatTree();
  RoutingTables empty(f);
  PortId src = f.port_of(*f.FindByName("host0001 mlx5_0"), 1);
  Lid dst = f.node(*f.FindByName("host0032 mlx5_0")).lid;
  auto path = TracePath(f, empty, src, dst);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("switch 'leaf-0' has no route to LID"),
            std::string::npos)
      << path.status().message();
  // A hand-made loop between a leaf and a spine.
  RoutingTables loop(f);
  NodeId leaf = *f.FindByName("leaf-0"), spine = *f.FindByName("spine-0");
  loop.set_out_port(leaf, dst, 5);   // up to spine-0
  loop.set_out_port(spine, dst, 1);  // back down to leaf-0
  path = TracePath(f, loop, src, dst);
  ASSERT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find("loops"), std::string::npos) << path.status().message();
  VerifyReport r = Verify(f, loop, {});
  EXPECT_GT(r.loops, 0u);
  EXPECT_GT(r.unreachable, 0u);
  EXPECT_FALSE(r.ok());
}

TEST(RoutingTest, RerouteChangesOnlyTheGivenDestinations) {
  Fabric f = SmallFatTree(3);
  for (Engine e : {Engine::kMinhop, Engine::kUpdn, Engine::kFtree}) {
    auto t = Route(f, {.engine = e});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    RoutingTables before = *t;
    // Fail leaf-p0-0's first uplink; re-route the destinations whose entry at either end used it.
    NodeId leaf = *f.FindByName("leaf-p0-0");
    PortId up = f.port_of(leaf, 5);
    LinkId link = f.port(up).link;
    NodeId aggr = f.link_peer(link, leaf);
    uint8_t aggr_port = static_cast<uint8_t>(
        f.port(f.link(link).a).node == aggr ? f.port(f.link(link).a).num : f.port(f.link(link).b).num);
    std::vector<Lid> affected;
    for (Lid d = 1; d <= f.max_lid(); ++d)
      if (t->out_port(leaf, d) == 5 || t->out_port(aggr, d) == aggr_port) affected.push_back(d);
    ASSERT_FALSE(affected.empty());
    ASSERT_TRUE(f.SetLinkUp(link, false).ok());
    ASSERT_TRUE(Reroute(f, affected, {.engine = e}, &*t).ok());
    std::vector<uint8_t> is_affected(f.max_lid() + 1, 0);
    for (Lid d : affected) is_affected[d] = 1;
    size_t changed = 0;
    for (NodeId s : f.switches())
      for (Lid d = 1; d <= f.max_lid(); ++d) {
        if (!is_affected[d]) {
          EXPECT_EQ(t->out_port(s, d), before.out_port(s, d));
        } else {
          changed += t->out_port(s, d) != before.out_port(s, d);
        }
      }
    EXPECT_GT(changed, 0u);
    EXPECT_EQ(t->out_port(leaf, affected[0]) == 5, false);
    VerifyReport r = Verify(f, *t, {.check_deadlock = e != Engine::kMinhop});
    EXPECT_TRUE(r.ok()) << EngineName(e) << ": " << (r.problems.empty() ? "" : r.problems[0]);
    ASSERT_TRUE(f.SetLinkUp(link, true).ok());
  }
}

// After one leaf uplink fails, an incremental re-route must spread the displaced destinations
// over the leaf's surviving uplinks (OpenSM counts routes per port for this), not pile them onto
// one, and must leave every other destination's entries as they were.
TEST(RoutingTest, RerouteSpreadsDisplacedDestinationsOverSurvivingUplinks) {
  for (int levels : {2, 3}) {
    Fabric f = SmallFatTree(levels);
    for (Engine e : {Engine::kFtree, Engine::kMinhop, Engine::kUpdn}) {
      SCOPED_TRACE(fmt::format("{}-level, {}", levels, EngineName(e)));
      auto t = Route(f, {.engine = e});
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      const RoutingTables before = *t;
      auto traffic = ParsePattern(f, "all-to-all");
      ASSERT_TRUE(traffic.ok());
      auto load_before = AnalyzeLoad(f, before, *traffic, {});
      ASSERT_TRUE(load_before.ok());
      NodeId leaf = *f.FindByName(levels == 2 ? "leaf-0" : "leaf-p0-0");
      const uint8_t failed_port = 5;  // the first uplink (ports 1-4 face the CAs)
      auto target = ResolveLink(f, fmt::format("{}[{}]", f.node(leaf).name, failed_port));
      ASSERT_TRUE(target.ok()) << target.status().ToString();
      std::vector<Lid> affected = AffectedDestinations(f, before, *target);
      ASSERT_FALSE(affected.empty());
      ASSERT_TRUE(f.SetLinkUp(target->link, false).ok());
      ASSERT_TRUE(Reroute(f, affected, {.engine = e}, &*t).ok());

      std::vector<uint8_t> is_affected(f.max_lid() + 1, 0);
      for (Lid d : affected) is_affected[d] = 1;
      for (NodeId s : f.switches())
        for (Lid d = 1; d <= f.max_lid(); ++d)
          if (!is_affected[d]) {
            ASSERT_EQ(t->out_port(s, d), before.out_port(s, d));
          }
      VerifyReport r = Verify(f, *t, {.check_deadlock = e != Engine::kMinhop});
      EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);

      // Routes per surviving uplink of the leaf.
      int total = 0, most = 0, surviving = 0;
      for (auto& [key, c] : UplinkCounts(f, *t)) {
        if (key.first != leaf.value() || key.second == failed_port) continue;
        ++surviving;
        total += c;
        most = std::max(most, c);
      }
      ASSERT_GT(surviving, 0);
      EXPECT_LE(most, (total + surviving - 1) / surviving + 1)
          << total << " destinations over " << surviving << " uplinks";

      // All-to-all: on two levels the busiest link gains at most its share of one lost link's
      // flows. On three, balancing route counts per port does not balance flows exactly (the
      // cores' down links into the leaf's pod see uneven numbers of sources); ftree must stay
      // within 10% of a full re-route of the degraded tree, minhop and updn well below the
      // doubling that one new top switch per destination gives.
      auto load_after = AnalyzeLoad(f, *t, *traffic, {});
      ASSERT_TRUE(load_after.ok());
      EXPECT_EQ(load_after->unroutable, 0u);
      uint64_t bound = load_before->max_flows + (load_before->max_flows + surviving - 1) / surviving;
      if (levels == 3 && e == Engine::kFtree) {
        auto full = Route(f, {.engine = e});
        ASSERT_TRUE(full.ok());
        auto load_full = AnalyzeLoad(f, *full, *traffic, {});
        ASSERT_TRUE(load_full.ok());
        bound = load_full->max_flows * 11 / 10;
      } else if (levels == 3) {
        bound = load_before->max_flows + load_before->max_flows * 3 / 5;
      }
      EXPECT_LE(load_after->max_flows, bound)
          << "before " << load_before->max_flows << ", now on "
          << f.node(f.port(f.link(load_after->worst_link).a).node).name << " - "
          << f.node(f.port(f.link(load_after->worst_link).b).node).name << " a_to_b "
          << load_after->worst_a_to_b;
      ASSERT_TRUE(f.SetLinkUp(target->link, true).ok());
    }
  }
}

TEST(RoutingTest, UpdnIsDeadlockFreeWhereMinhopIsNot) {
  // A ring of 6 switches: minhop's shortest paths chase each other around it.
  Fabric ring = *GenerateTorus({.dims = {6, 1, 1}});
  auto m = Route(ring, {.engine = Engine::kMinhop});
  ASSERT_TRUE(m.ok());
  VerifyReport rm = Verify(ring, *m, {});
  EXPECT_EQ(rm.unreachable, 0u);
  EXPECT_FALSE(rm.deadlock_free);
  auto u = Route(ring, {.engine = Engine::kUpdn});
  ASSERT_TRUE(u.ok());
  VerifyReport ru = Verify(ring, *u, {});
  EXPECT_TRUE(ru.ok()) << (ru.problems.empty() ? "" : ru.problems[0]);
  Fabric torus = *GenerateTorus({.dims = {4, 3, 3}});
  auto ut = Route(torus, {.engine = Engine::kUpdn});
  ASSERT_TRUE(ut.ok());
  EXPECT_TRUE(Verify(torus, *ut, {}).ok());
}

// Two top switches that meet only through a leaf-to-leaf cable: as roots they leave pairs
// without a legal up*/down* route, so updn says so and ranks from a single root.
TEST(RoutingTest, UpdnFallsBackToOneRootWhenAutomaticRootsDoNotMeet) {
  FabricBuilder b;
  auto sw = [&](const char* name) {
    return *b.AddNode({.type = NodeType::kSwitch, .name = name, .num_ports = 4});
  };
  NodeId c1 = sw("c1"), c2 = sw("c2"), l1 = sw("l1"), l2 = sw("l2"), l3 = sw("l3"), l4 = sw("l4");
  ASSERT_TRUE(b.AddLink(c1, 1, l1, 1).ok());
  ASSERT_TRUE(b.AddLink(c1, 2, l2, 1).ok());
  ASSERT_TRUE(b.AddLink(c2, 1, l3, 1).ok());
  ASSERT_TRUE(b.AddLink(c2, 2, l4, 1).ok());
  ASSERT_TRUE(b.AddLink(l2, 2, l3, 2).ok());
  for (NodeId leaf : {l1, l2, l3, l4}) {
    NodeId h = *b.AddNode({.name = "h-" + std::to_string(leaf.value())});
    ASSERT_TRUE(b.AddLink(leaf, 3, h, 1).ok());
  }
  Fabric f = *b.Build();
  auto t = Route(f, {.engine = Engine::kUpdn});
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->notes.size(), 1u);
  EXPECT_NE(t->notes[0].find("single root"), std::string::npos) << t->notes[0];
  VerifyReport r = Verify(f, *t, {});
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  // Explicit roots are taken as given: the same two, and no retry.
  auto given = Route(f, {.engine = Engine::kUpdn, .roots = {c1, c2}});
  ASSERT_TRUE(given.ok());
  EXPECT_TRUE(given->notes.empty());
  EXPECT_GT(Verify(f, *given, {}).unreachable, 0u);
}

TEST(RoutingTest, UpdnOnFatTreesAndDragonflies) {
  Fabric f = SmallFatTree(3);
  auto t = Route(f, {.engine = Engine::kUpdn});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->notes.empty());
  VerifyReport r = Verify(f, *t, {});
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  // Shortest paths on a fat-tree are legal up*/down* paths: 6 links between pods.
  auto path = TracePath(f, *t, f.port_of(*f.FindByName("host0001 mlx5_0"), 1),
                        f.node(*f.FindByName("host0128 mlx5_0")).lid);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->size(), 6u);
  Fabric df = *GenerateDragonfly({.routers_per_group = 4, .hosts_per_router = 2,
                                  .global_links_per_router = 2});
  auto d = Route(df, {.engine = Engine::kUpdn});
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(Verify(df, *d, {}).ok());
}

TEST(RoutingTest, VerifySamplesLargeFabricsAndSaysSo) {
  Fabric f = SmallFatTree(3);
  auto t = Route(f, {.engine = Engine::kUpdn});
  ASSERT_TRUE(t.ok());
  VerifyReport r = Verify(f, *t, {.max_destinations = 10});
  EXPECT_TRUE(r.sampled);
  EXPECT_LE(r.destinations_checked, 10u);
  EXPECT_TRUE(r.ok());
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems.back().find("sampled"), std::string::npos);
}

TEST(RoutingTest, FtreeBalancesEveryLeafUplink) {
  std::vector<FatTreeOptions> shapes = {
      {.levels = 2, .radix = 8},
      {.levels = 3, .radix = 8},
      {.levels = 3, .radix = 12, .pods = 3},  // cores take 2 links into each pod
      {.levels = 2, .radix = 16, .hcas_per_node = 4},
      KaryNtree(3, 3),
  };
  for (const FatTreeOptions& o : shapes) {
    Fabric f = *GenerateFatTree(o);
    auto t = Route(f, {.engine = Engine::kFtree});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->engine, "ftree");
    EXPECT_TRUE(t->notes.empty()) << t->notes[0];
    ExpectBalanced(f, *t);
    VerifyReport r = Verify(f, *t, {});
    EXPECT_TRUE(r.ok()) << ResolveFatTree(o)->ToString() << ": "
                        << (r.problems.empty() ? "" : r.problems[0]);
  }
}

// ftree's point: every source reaches a destination through the same top switch (its main
// path), and destinations are spread over the top switches evenly.
TEST(RoutingTest, FtreeSendsEachDestinationThroughOneCore) {
  Fabric f = *GenerateFatTree({.levels = 3, .radix = 8});
  auto t = Route(f, {.engine = Engine::kFtree});
  ASSERT_TRUE(t.ok());
  std::map<NodeId, int> per_core;
  for (NodeId dst : f.cas()) {
    Lid d = f.node(dst).lid;
    std::set<NodeId> cores;
    for (NodeId src : f.cas()) {
      auto path = TracePath(f, *t, f.port_of(src, 1), d);
      ASSERT_TRUE(path.ok()) << path.status().ToString();
      for (LinkId l : *path)
        for (PortId p : {f.link(l).a, f.link(l).b})
          if (f.node(f.port(p).node).level == 2) cores.insert(f.port(p).node);
    }
    ASSERT_EQ(cores.size(), 1u) << f.node(dst).name;
    ++per_core[*cores.begin()];
  }
  ASSERT_EQ(per_core.size(), 16u);  // 128 destinations over 16 cores
  for (auto& [core, n] : per_core) EXPECT_EQ(n, 8) << f.node(core).name;
}

TEST(RoutingTest, FtreeOnTheBriefsFabric) {
  Fabric f = *GenerateFatTree({.levels = 3, .radix = 36, .pods = 7});
  auto t = Route(f, {.engine = Engine::kFtree});
  ASSERT_TRUE(t.ok());
  ExpectBalanced(f, *t);
  // Each leaf spreads its 2,250 remote destinations exactly: 125 per uplink.
  auto counts = UplinkCounts(f, *t);
  EXPECT_EQ(counts.begin()->second, 125);
  VerifyReport r = Verify(f, *t, {.max_destinations = 200});
  EXPECT_TRUE(r.sampled);
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
}

TEST(RoutingTest, FtreeRoutesAroundFailuresAndFallsBackWhenItMust) {
  Fabric f = *GenerateFatTree({.levels = 3, .radix = 8});
  // One failed uplink and one failed core: still a fat-tree route, with a note.
  ASSERT_TRUE(f.SetLinkUp(f.port(f.port_of(*f.FindByName("leaf-p1-2"), 6)).link, false).ok());
  ASSERT_TRUE(f.SetNodeUp(*f.FindByName("core-3"), false).ok());
  auto t = Route(f, {.engine = Engine::kFtree});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->engine, "ftree");
  ASSERT_FALSE(t->notes.empty());
  EXPECT_NE(t->notes[0].find("routed around"), std::string::npos) << t->notes[0];
  VerifyReport r = Verify(f, *t, {});
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);

  // leaf-p0-0 keeps one uplink, to spine-p0-0, which has lost every core link: no up*/down*
  // path in the tree's levels, but updn (ranked from the cores) goes through another leaf.
  Fabric g = *GenerateFatTree({.levels = 3, .radix = 8});
  NodeId leaf = *g.FindByName("leaf-p0-0"), spine = *g.FindByName("spine-p0-0");
  for (uint16_t p = 6; p <= 8; ++p) ASSERT_TRUE(g.SetLinkUp(g.port(g.port_of(leaf, p)).link, false).ok());
  for (uint16_t p = 5; p <= 8; ++p) ASSERT_TRUE(g.SetLinkUp(g.port(g.port_of(spine, p)).link, false).ok());
  auto u = Route(g, {.engine = Engine::kFtree});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->engine, "updn");
  ASSERT_FALSE(u->notes.empty());
  EXPECT_NE(u->notes[0].find("fell back to updn"), std::string::npos) << u->notes[0];
  VerifyReport ru = Verify(g, *u, {});
  EXPECT_TRUE(ru.ok()) << (ru.problems.empty() ? "" : ru.problems[0]);

  // Not a fat-tree at all.
  Fabric torus = *GenerateTorus({.dims = {3, 3, 1}});
  auto v = Route(torus, {.engine = Engine::kFtree});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->engine, "updn");
  EXPECT_NE(v->notes.at(0).find("not a fat-tree"), std::string::npos) << v->notes[0];
}

int TorusHops(const std::array<int, 3>& dims, const std::string& a, const std::string& b) {
  auto coord = [](const std::string& n) {
    std::array<int, 3> c;
    sscanf(n.c_str(), "sw-x%d-y%d-z%d", &c[0], &c[1], &c[2]);
    return c;
  };
  auto ca = coord(a), cb = coord(b);
  int hops = 0;
  for (int k = 0; k < 3; ++k) {
    int d = std::abs(ca[k] - cb[k]);
    hops += std::min(d, dims[k] - d);
  }
  return hops;
}

TEST(RoutingTest, DorUsesTheDatelineToStayDeadlockFree) {
  std::array<int, 3> dims = {5, 4, 3};
  Fabric f = *GenerateTorus({.dims = dims});
  auto t = Route(f, {.engine = Engine::kDor});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->engine, "dor");
  EXPECT_EQ(t->num_vls, 2);
  ASSERT_NE(t->torus, nullptr);
  VerifyReport r = Verify(f, *t, {});
  EXPECT_TRUE(r.ok()) << (r.problems.empty() ? "" : r.problems[0]);
  // Minimal paths: torus distance + the two CA links.
  for (NodeId a : f.cas())
    for (NodeId b : f.cas()) {
      if (a == b) continue;
      auto path = TracePath(f, *t, f.port_of(a, 1), f.node(b).lid);
      ASSERT_TRUE(path.ok()) << path.status().ToString();
      int hops = TorusHops(dims, f.node(f.adj_begin(a)->peer).name, f.node(f.adj_begin(b)->peer).name);
      EXPECT_EQ(path->size(), static_cast<size_t>(hops + 2));
    }
  // x from 4 to 1 wraps (4 -> 0 -> 1): VL 0 up to the wrap, 1 on and after it.
  auto path = TracePath(f, *t, f.port_of(*f.FindByName("host0005 mlx5_0"), 1),
                        f.node(*f.FindByName("host0002 mlx5_0")).lid);
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(HopVls(f, *t, *path, f.node(*f.FindByName("host0002 mlx5_0")).lid),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  // Without the second VL the rings close cycles.
  RoutingTables one_vl = *t;
  one_vl.torus.reset();
  one_vl.num_vls = 1;
  EXPECT_FALSE(Verify(f, one_vl, {}).deadlock_free);
}

TEST(RoutingTest, DorFallsBackOnFailuresAndNeedsCoordinates) {
  Fabric f = *GenerateTorus({.dims = {4, 4, 1}});
  ASSERT_TRUE(f.SetLinkUp(f.port(f.port_of(*f.FindByName("sw-x1-y1-z0"), 1)).link, false).ok());
  auto t = Route(f, {.engine = Engine::kDor});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->engine, "updn");
  EXPECT_EQ(t->torus, nullptr);
  EXPECT_NE(t->notes.at(0).find("link of 'sw-x"), std::string::npos) << t->notes[0];
  EXPECT_TRUE(Verify(f, *t, {}).ok());
  // Re-routing a dor table after a failure: the affected destinations go through updn, the
  // table stays dor's and says so.
  Fabric h = *GenerateTorus({.dims = {4, 4, 1}});
  auto d = Route(h, {.engine = Engine::kDor});
  ASSERT_TRUE(d.ok());
  NodeId sw = *h.FindByName("sw-x1-y1-z0"), peer = *h.FindByName("sw-x2-y1-z0");
  std::vector<Lid> affected;  // entries leaving either end over the x link between them
  for (Lid l = 1; l <= h.max_lid(); ++l)
    if (d->out_port(sw, l) == 1 || d->out_port(peer, l) == 2) affected.push_back(l);
  ASSERT_TRUE(h.SetLinkUp(h.port(h.port_of(sw, 1)).link, false).ok());
  ASSERT_TRUE(Reroute(h, affected, {.engine = Engine::kDor}, &*d).ok());
  EXPECT_EQ(d->engine, "dor");
  EXPECT_NE(d->notes.at(0).find("for the re-routed destinations"), std::string::npos)
      << d->notes[0];
  VerifyReport rd = Verify(h, *d, {.check_deadlock = false});
  EXPECT_EQ(rd.unreachable, 0u);
  EXPECT_EQ(rd.loops, 0u);
  auto ft = Route(SmallFatTree(), {.engine = Engine::kDor});
  ASSERT_FALSE(ft.ok());
  EXPECT_NE(ft.status().message().find("leaf-0"), std::string::npos) << ft.status().message();
}

// Real, irregular fabrics (vendor ibnetdiscover dumps, a production three-layer Clos): every
// engine routes every CA pair without loops; updn and ftree (or its updn fallback) are
// deadlock-free.
TEST(RoutingTest, RealFabricsRouteWithEveryEngine) {
  for (const char* path : {"testdata/fabric/jabl_1.topo", "testdata/fabric/jabl_2.topo",
                           "testdata/fabric/jabl_3.topo", "testdata/fabric/jabl_4.topo",
                           "testdata/fabric/alibaba-lingjun-2023-topo.csv"}) {
    auto f = LoadFabric(path);
    ASSERT_TRUE(f.ok()) << path << ": " << f.status().ToString();
    for (Engine e : {Engine::kMinhop, Engine::kUpdn, Engine::kFtree}) {
      auto t = Route(*f, {.engine = e});
      ASSERT_TRUE(t.ok()) << path << " " << EngineName(e) << ": " << t.status().ToString();
      VerifyReport r = Verify(*f, *t, {.check_deadlock = e != Engine::kMinhop});
      if (f->num_cas() > 1) {
        EXPECT_GT(r.pairs_checked, 0u) << path;
      }
      EXPECT_TRUE(r.ok()) << path << " " << EngineName(e) << " (" << t->engine << "): "
                          << (r.problems.empty() ? "" : r.problems[0]);
    }
  }
}

}  // namespace
}  // namespace gpool::fabric
