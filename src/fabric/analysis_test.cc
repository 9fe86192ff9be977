#include "fabric/analysis.h"

#include <gtest/gtest.h>

#include "fabric/analysis_testutil.h"

namespace gpool::fabric {
namespace {

using testutil::ThreeTier;
using testutil::TwoTier;

NodeId Id(const Fabric& f, const char* name) {
  auto id = f.FindByName(name);
  EXPECT_TRUE(id.has_value()) << name;
  return id.value_or(NodeId());
}

RoutingTables MustRoute(const Fabric& f, Engine e = Engine::kMinhop) {
  auto t = Route(f, {.engine = e});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// Per directed link flow counts of `pairs` computed the slow way, through TracePath.
std::vector<uint64_t> BruteForce(const Fabric& f, const RoutingTables& t,
                                 const std::vector<std::pair<Endpoint, Endpoint>>& pairs) {
  std::vector<uint64_t> flows(f.num_links() * 2, 0);
  for (const auto& [s, d] : pairs) {
    auto path = TracePath(f, t, s.port, d.lid);
    EXPECT_TRUE(path.ok()) << path.status().ToString();
    if (!path.ok()) continue;
    NodeId cur = s.ca;
    for (LinkId l : *path) {
      bool a_to_b = f.port(f.link(l).a).node == cur;
      ++flows[DirectedIndex(l, a_to_b)];
      cur = f.link_peer(l, cur);
    }
    EXPECT_EQ(cur, d.ca);
  }
  return flows;
}

TEST(LocalityTest, UsesGeneratorLevelsForPodsAndLeaves) {
  Fabric f = ThreeTier({.pods = 2, .leaves_per_pod = 2});
  Locality loc = ComputeLocality(f);
  EXPECT_FALSE(loc.inferred);
  EXPECT_EQ(loc.num_levels, 3);
  EXPECT_EQ(loc.num_pods, 2);
  EXPECT_EQ(loc.leaves.size(), 4u);
  // h0,h1 on leaf0.0; h2,h3 on leaf0.1 (pod 0); h4.. in pod 1.
  EXPECT_EQ(loc.leaf_of[Id(f, "h0").value()], Id(f, "leaf0.0"));
  EXPECT_EQ(loc.leaf_of[Id(f, "h3").value()], Id(f, "leaf0.1"));
  EXPECT_EQ(loc.pod_of[Id(f, "h3").value()], 0);
  EXPECT_EQ(loc.pod_of[Id(f, "h4").value()], 1);
  EXPECT_EQ(loc.pod_of[Id(f, "agg1.0").value()], 1);
  EXPECT_EQ(loc.pod_of[Id(f, "core0").value()], -1);  // the top tier belongs to no pod
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h0")), DistanceClass::kSameNode);
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h1")), DistanceClass::kSameLeaf);
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h2")), DistanceClass::kSamePod);
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h4")), DistanceClass::kFabric);
}

TEST(LocalityTest, InfersTheSameDomainsWithoutLevels) {
  Fabric with = ThreeTier({.pods = 3, .leaves_per_pod = 2, .set_levels = true});
  Fabric without = ThreeTier({.pods = 3, .leaves_per_pod = 2, .set_levels = false});
  Locality a = ComputeLocality(with);
  Locality b = ComputeLocality(without);
  EXPECT_TRUE(b.inferred);
  EXPECT_EQ(b.num_levels, 3);
  EXPECT_EQ(b.num_pods, 3);
  EXPECT_EQ(a.level, b.level);
  EXPECT_EQ(a.leaf_of, b.leaf_of);
  EXPECT_EQ(a.pod_of, b.pod_of);
}

TEST(LocalityTest, TwoTiersHaveNoPodLevel) {
  Fabric f = TwoTier({.leaves = 3, .set_levels = false});
  Locality loc = ComputeLocality(f);
  EXPECT_EQ(loc.num_levels, 2);
  EXPECT_EQ(loc.num_pods, 1);
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h1")), DistanceClass::kSameLeaf);
  EXPECT_EQ(loc.Classify(Id(f, "h0"), Id(f, "h2")), DistanceClass::kFabric);
}

TEST(LocalityTest, PartialLevelsAreIgnoredWithANote) {
  FabricBuilder b;
  NodeId s1 = *b.AddNode({.type = NodeType::kSwitch, .name = "s1", .num_ports = 3, .level = 0});
  NodeId s2 = *b.AddNode({.type = NodeType::kSwitch, .name = "s2", .num_ports = 3});
  NodeId h = *b.AddNode({.name = "h"});
  ASSERT_TRUE(b.AddLink(s1, 1, h, 1).ok());
  ASSERT_TRUE(b.AddLink(s1, 2, s2, 1).ok());
  Fabric f = *b.Build();
  Locality loc = ComputeLocality(f);
  EXPECT_TRUE(loc.inferred);
  ASSERT_EQ(loc.notes.size(), 1u);
  EXPECT_NE(loc.notes[0].find("1 of 2 switches"), std::string::npos) << loc.notes[0];
  EXPECT_EQ(loc.level[s2.value()], 1);
}

TEST(DistanceTest, CountsLinksOnTheRoute) {
  Fabric f = ThreeTier({});
  RoutingTables t = MustRoute(f);
  Locality loc = ComputeLocality(f);
  auto eps = Endpoints(f);
  ASSERT_EQ(eps.size(), 8u);
  auto d = Distance(f, t, loc, eps[0], eps[1]);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->links, 2);
  EXPECT_EQ(d->switches, 1);
  EXPECT_EQ(d->cls, DistanceClass::kSameLeaf);
  d = Distance(f, t, loc, eps[0], eps[2]);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->links, 4);
  EXPECT_EQ(d->min_links, 4);
  EXPECT_EQ(d->cls, DistanceClass::kSamePod);
  d = Distance(f, t, loc, eps[0], eps[7]);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->links, 6);
  EXPECT_EQ(d->cls, DistanceClass::kFabric);
}

TEST(DistanceTest, NoPathIsAnError) {
  Fabric f = TwoTier({.leaves = 2, .spines = 1});
  RoutingTables t = MustRoute(f);
  Locality loc = ComputeLocality(f);
  auto eps = Endpoints(f);
  ASSERT_TRUE(f.SetNodeUp(Id(f, "spine0"), false).ok());
  auto d = Distance(f, t, loc, eps[0], eps[3]);
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("h0 to h3"), std::string::npos) << d.status().message();
}

TEST(RouteTreeTest, OrdersSwitchesBeforeTheirNextHop) {
  Fabric f = ThreeTier({.pods = 2});
  RoutingTables t = MustRoute(f);
  RouteTree tree(f);
  Lid dst = f.node(Id(f, "h0")).lid;
  tree.Build(t, dst);
  std::vector<int> pos(f.num_switches(), -1);
  for (size_t i = 0; i < tree.order().size(); ++i) pos[tree.order()[i]] = static_cast<int>(i);
  EXPECT_EQ(tree.order().size(), f.num_switches());  // every switch reaches h0
  for (uint32_t si : tree.order()) {
    ASSERT_TRUE(tree.reaches(si));
    if (tree.next(si) != UINT32_MAX) {
      EXPECT_LT(pos[si], pos[tree.next(si)]);
    }
  }
  // The leaf of h0 delivers directly.
  uint32_t leaf = tree.switch_index(Id(f, "leaf0.0"));
  EXPECT_EQ(tree.next(leaf), UINT32_MAX);
  EXPECT_EQ(tree.order().back(), leaf);
}

TEST(RouteTreeTest, ReportsWhyARouteEnds) {
  Fabric f = TwoTier({.leaves = 2, .spines = 1});
  RoutingTables t = MustRoute(f);
  Lid dst = f.node(Id(f, "h3")).lid;
  t.set_out_port(Id(f, "spine0"), dst, kNoRoute);
  RouteTree tree(f);
  tree.Build(t, dst);
  uint32_t leaf0 = tree.switch_index(Id(f, "leaf0"));
  EXPECT_FALSE(tree.reaches(tree.switch_index(Id(f, "spine0"))));
  EXPECT_EQ(tree.failure(tree.switch_index(Id(f, "spine0"))), "no LFT entry");
  EXPECT_FALSE(tree.reaches(leaf0));
  EXPECT_EQ(tree.failure(leaf0), "a later switch on the route has no way on");
  // A loop: spine0 sends h3's traffic back down to leaf0, which sends it up again.
  t.set_out_port(Id(f, "spine0"), dst, 1);
  tree.Build(t, dst);
  EXPECT_EQ(tree.failure(leaf0), "routing loop");
}

TEST(LoadTest, AllToAllMatchesTracingEveryPair) {
  Fabric f = ThreeTier({.pods = 2, .leaves_per_pod = 2, .aggs_per_pod = 2, .cores = 2});
  RoutingTables t = MustRoute(f);
  auto eps = Endpoints(f);
  std::vector<std::pair<Endpoint, Endpoint>> pairs;
  for (const auto& s : eps)
    for (const auto& d : eps)
      if (s.ca != d.ca) pairs.emplace_back(s, d);
  auto r = AnalyzeLoad(f, t, {}, {.keep_per_link = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flows, pairs.size());
  EXPECT_EQ(r->unroutable, 0u);
  EXPECT_EQ(r->link_flows, BruteForce(f, t, pairs));
  // Every CA uplink carries N-1 flows at the CA's full rate.
  LinkId up = f.port(eps[0].port).link;
  bool a_to_b = f.port(f.link(up).a).node == eps[0].ca;
  EXPECT_EQ(r->link_flows[DirectedIndex(up, a_to_b)], eps.size() - 1);
  EXPECT_NEAR(r->link_gbps[DirectedIndex(up, a_to_b)], 400, 1e-9);
}

// Two leaves of two CAs under one spine, uplinks as fast as the CA links: every cross-leaf flow
// shares one uplink, so the numbers are known in closed form.
TEST(LoadTest, KnownCongestionUnderOneSpine) {
  Fabric f = TwoTier({.leaves = 2, .spines = 1, .cas_per_leaf = 2});
  RoutingTables t = MustRoute(f);
  auto r = AnalyzeLoad(f, t, {}, {});
  ASSERT_TRUE(r.ok());
  // Leaf uplink: 2 sources x 2 remote destinations = 4 flows of 400/3 Gb/s each.
  EXPECT_EQ(r->max_flows, 4u);
  EXPECT_NEAR(r->max_load_ratio, 4.0 / 3.0, 1e-9);
  EXPECT_NEAR(r->max_load_gbps, 1600.0 / 3.0, 1e-9);
  EXPECT_EQ(r->directed_links, 12u);
  EXPECT_EQ(r->directed_links_used, 12u);
  // 8 CA directed links carry 3 flows each (4 uplinks, 4 downlinks); 4 leaf-spine ones carry 4.
  ASSERT_EQ(r->histogram.size(), 2u);
  EXPECT_EQ(r->histogram[0].lo, 3u);
  EXPECT_EQ(r->histogram[0].links, 8u);
  EXPECT_EQ(r->histogram[1].lo, 4u);
  EXPECT_EQ(r->histogram[1].links, 4u);

  auto shift = AnalyzeLoad(f, t, {.kind = PatternKind::kShift}, {});
  ASSERT_TRUE(shift.ok());
  // Shift 2 sends h0->h2 and h1->h3 over leaf0's one uplink; shifts 1 and 3 send one.
  EXPECT_EQ(shift->max_flows, 2u);
  EXPECT_EQ(shift->worst_shift, 2u);
  EXPECT_EQ(shift->shifts_evaluated, 3u);
  EXPECT_NEAR(shift->mean_max_flows, 4.0 / 3.0, 1e-9);
  EXPECT_EQ(shift->flows, 12u);
  EXPECT_NEAR(shift->max_load_ratio, 2.0, 1e-9);

  auto ring = ParsePattern(f, "ring:h0,h2,h1,h3");
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto rr = AnalyzeLoad(f, t, *ring, {});
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->flows, 4u);
  EXPECT_EQ(rr->max_flows, 2u);  // h0->h2 and h1->h3 both leave leaf0
  auto ring2 = ParsePattern(f, "ring:h0,h1");
  auto r2 = AnalyzeLoad(f, t, *ring2, {});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->max_flows, 1u);  // stays on leaf0
  EXPECT_EQ(r2->directed_links_used, 4u);
}

TEST(LoadTest, ShiftSamplingEvaluatesFewerShifts) {
  Fabric f = TwoTier({.leaves = 4, .spines = 2, .cas_per_leaf = 3});
  RoutingTables t = MustRoute(f);
  auto all = AnalyzeLoad(f, t, {.kind = PatternKind::kShift}, {});
  auto some = AnalyzeLoad(f, t, {.kind = PatternKind::kShift}, {.max_shifts = 4});
  ASSERT_TRUE(all.ok() && some.ok());
  EXPECT_EQ(all->shifts_evaluated, 11u);
  EXPECT_EQ(some->shifts_evaluated, 4u);
  EXPECT_LE(some->max_flows, all->max_flows);
  EXPECT_EQ(all->flows, 11u * 12u);
}

TEST(LoadTest, UnroutableFlowsAreCountedAndNamed) {
  Fabric f = TwoTier({.leaves = 2, .spines = 1});
  RoutingTables t = MustRoute(f);
  Lid dst = f.node(Id(f, "h3")).lid;
  t.set_out_port(Id(f, "spine0"), dst, kNoRoute);
  auto r = AnalyzeLoad(f, t, {}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->unroutable, 2u);  // h0 and h1 can no longer reach h3
  EXPECT_EQ(r->flows, 10u);
  ASSERT_FALSE(r->problems.empty());
  EXPECT_NE(r->problems[0].find("h0 -> h3"), std::string::npos) << r->problems[0];
  EXPECT_NE(r->problems[0].find("spine0"), std::string::npos) << r->problems[0];

  auto shift = AnalyzeLoad(f, t, {.kind = PatternKind::kShift}, {});
  ASSERT_TRUE(shift.ok());
  EXPECT_EQ(shift->unroutable, 2u);  // h1->h3 (k=2) and h0->h3 (k=3)
}

TEST(PatternTest, ParsesAndRejects) {
  Fabric f = TwoTier({.leaves = 2, .spines = 1});
  EXPECT_EQ(ParsePattern(f, "all-to-all")->kind, PatternKind::kAllToAll);
  EXPECT_EQ(ParsePattern(f, "shift")->kind, PatternKind::kShift);
  EXPECT_EQ(ParsePattern(f, "ring:all")->ring.size(), 4u);
  auto three = ParsePattern(f, "ring:3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->ring.size(), 3u);
  EXPECT_EQ(PatternName(*three), "ring:3");
  EXPECT_EQ(ParsePattern(f, "ring:5").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePattern(f, "ring:h0").status().code(), StatusCode::kInvalidArgument);
  auto bad = ParsePattern(f, "ring:h0,nosuch");
  EXPECT_NE(bad.status().message().find("'nosuch'"), std::string::npos);
  bad = ParsePattern(f, "ring:h0,spine0");
  EXPECT_NE(bad.status().message().find("'spine0' is not a CA"), std::string::npos);
  bad = ParsePattern(f, "permutation");
  EXPECT_NE(bad.status().message().find("'permutation'"), std::string::npos);
}

TEST(BisectionTest, FullAndBlockingTrees) {
  // Two spines: each leaf has as much uplink as CA bandwidth -> full bisection.
  Fabric full = TwoTier({.leaves = 4, .spines = 2, .cas_per_leaf = 2});
  auto r = Bisection(full, ComputeLocality(full));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->side_a, 4u);
  EXPECT_EQ(r->side_b, 4u);
  EXPECT_NEAR(r->injection_gbps, 1600, 1e-9);
  EXPECT_NEAR(r->cut_gbps, 1600, 1e-9);
  EXPECT_NEAR(r->ratio, 1.0, 1e-9);
  // One spine: 2:1 blocking at every leaf.
  Fabric half = TwoTier({.leaves = 4, .spines = 1, .cas_per_leaf = 2});
  r = Bisection(half, ComputeLocality(half));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->ratio, 0.5, 1e-9);
  // HDR uplinks under NDR CAs: half the rate again.
  Fabric slow = TwoTier({.leaves = 4, .spines = 2, .uplink_speed = LinkSpeed::kHdr});
  r = Bisection(slow, ComputeLocality(slow));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->ratio, 0.5, 1e-9);
  // A failed spine halves the full tree's cut.
  ASSERT_TRUE(full.SetNodeUp(*full.FindByName("spine1"), false).ok());
  r = Bisection(full, ComputeLocality(full));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->cut_gbps, 800, 1e-9);
}

TEST(BisectionTest, ThreeTierCutFallsOnPods) {
  // 2 pods; each pod's 2 aggs have 2 core links each: 4 x 400 up per pod, 4 CAs x 400 per pod.
  Fabric f = ThreeTier({.pods = 2, .leaves_per_pod = 2, .aggs_per_pod = 2, .cores = 2});
  auto r = Bisection(f, ComputeLocality(f));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->cut_gbps, 1600, 1e-9);
  EXPECT_NEAR(r->ratio, 1.0, 1e-9);
  Fabric thin = ThreeTier({.pods = 2, .leaves_per_pod = 2, .aggs_per_pod = 2, .cores = 1});
  r = Bisection(thin, ComputeLocality(thin));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->ratio, 0.5, 1e-9);
}

}  // namespace
}  // namespace gpool::fabric
