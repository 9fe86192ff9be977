// Link-load-aware placement (fabric_load.h): a loaded uplink steers a gang away, an empty view
// decides exactly as no view, and on power-managed clusters a gang waits for suspended nodes
// rather than spreading over more leaves.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "sched/backfill.h"
#include "sched/decision_hash.h"
#include "sched/fabric_load.h"
#include "sched/placement.h"
#include "sched/scheduler.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Fill;
using testing::Job;
using testing::MakeCluster;
using testing::Sec;


std::set<DomainId> Leaves(const ClusterState& s, const Placement& p) {
  std::set<DomainId> out;
  for (const TaskBinding& b : p.tasks) out.insert(s.node(b.node).leaf);
  return out;
}

// A view where every uplink runs at the flow's full 400 Gb/s except those given.
std::shared_ptr<FabricLoad> Unloaded(const ClusterState& s) {
  auto load = std::make_shared<FabricLoad>();
  load->flow_gbps = 400;
  load->up_gbps.assign(s.num_domains(), 400);
  load->down_gbps.assign(s.num_domains(), 400);
  return load;
}

TEST(FabricLoad, LoadedUplinksSteerAGangToIdleLeaves) {
  // One pod of 4 leaves x 4 nodes, all free. A 6-node gang needs two leaves.
  ClusterState s = MakeCluster({.nodes = 16, .nodes_per_leaf = 4, .leaves_per_pod = 4});
  const std::vector<DomainId>& leaves = s.domains_at(Level::kLeaf);
  std::optional<Placement> before = PlaceGang(s, Job(1, 6, 8), {});
  ASSERT_TRUE(before);
  ASSERT_EQ(CountLeaves(s, *before), 2);
  // Load the uplinks of the two leaves it took (one up, one down: either counts).
  std::shared_ptr<FabricLoad> load = Unloaded(s);
  const std::set<DomainId> took = Leaves(s, *before);
  load->up_gbps[took.begin()->value()] = 200;
  load->down_gbps[std::next(took.begin())->value()] = 100;
  s.SetFabricLoad(load);
  std::optional<Placement> after = PlaceGang(s, Job(1, 6, 8), {});
  ASSERT_TRUE(after);
  EXPECT_EQ(CountLeaves(s, *after), 2);  // still the fewest leaves
  for (DomainId l : Leaves(s, *after)) EXPECT_EQ(took.count(l), 0u) << "took loaded leaf " << l.value();
  // PlaceInDomain (baselines choosing their own domains) ignores the view.
  std::optional<Placement> in_pod = PlaceInDomain(s, Job(1, 6, 8), s.domains_at(Level::kPod)[0], 6, {});
  ASSERT_TRUE(in_pod);
  EXPECT_EQ(Leaves(s, *in_pod), took);
  // When only loaded leaves can hold it, it still goes there, least loaded first.
  for (DomainId l : leaves) load->up_gbps[l.value()] = 100;
  load->up_gbps[leaves[3].value()] = 300;
  std::optional<Placement> loaded = PlaceGang(s, Job(1, 6, 8), {});
  ASSERT_TRUE(loaded);
  EXPECT_EQ(CountLeaves(s, *loaded), 2);
  EXPECT_EQ(Leaves(s, *loaded).count(leaves[3]), 1u);
}

TEST(FabricLoad, PodWithIdleUplinksBeatsAFullerLoadedOne) {
  // Two pods of 2 leaves x 4 nodes. Pod 0 is fuller (best fit would pick it); its leaves'
  // uplinks are loaded, so a gang that must span two leaves goes to pod 1.
  ClusterState s = MakeCluster({.nodes = 16, .nodes_per_leaf = 4, .leaves_per_pod = 2});
  Fill(s, 0, 8, 100);
  const JobSpec gang = Job(1, 5, 8);
  std::optional<Placement> before = PlaceGang(s, gang, {});
  ASSERT_TRUE(before);
  const DomainId pod0 = s.domains_at(Level::kPod)[0];
  ASSERT_EQ(s.domain(*Leaves(s, *before).begin()).parent, pod0);
  std::shared_ptr<FabricLoad> load = Unloaded(s);
  for (DomainId l : s.children(pod0)) load->up_gbps[l.value()] = 200;
  s.SetFabricLoad(load);
  std::optional<Placement> after = PlaceGang(s, gang, {});
  ASSERT_TRUE(after);
  for (DomainId l : Leaves(s, *after)) EXPECT_NE(s.domain(l).parent, pod0);
  EXPECT_EQ(CountLeaves(s, *after), 2);
  // A gang that fits one leaf ignores uplinks (its ring stays under the leaf switch).
  std::optional<Placement> small = PlaceGang(s, Job(2, 3, 8), {});
  ASSERT_TRUE(small);
  EXPECT_EQ(*Leaves(s, *small).begin(), s.node(NodeId(1)).leaf);  // the fullest leaf, loaded or not
}

// The default policy over a random backlog on a fragmented cluster: decisions with an empty
// view, or an unloaded one, hash the same as with none.
TEST(FabricLoad, EmptyOrIdleViewDecidesExactlyAsNone) {
  ClusterState s = MakeCluster({.nodes = 64, .nodes_per_leaf = 4, .leaves_per_pod = 4});
  std::mt19937_64 rng(7);
  uint64_t id = 1000;
  for (uint32_t n = 0; n < 64; ++n) {
    if (rng() % 3 == 0) Fill(s, n, 1 + static_cast<int>(rng() % 8), id++);
  }
  std::vector<JobSpec> pending;
  for (uint64_t j = 1; j <= 40; ++j) {
    JobSpec job = Job(j, 1 + static_cast<int32_t>(rng() % 12), 1 + static_cast<int32_t>(rng() % 8) / 4 * 4);
    job.est_runtime_s = 600;
    pending.push_back(job);
  }
  std::vector<QueueSpec> queues = {{.name = "q"}};
  StatusOr<std::unique_ptr<Policy>> policy = MakeDefaultPolicy({});
  ASSERT_TRUE(policy.ok());
  auto hash_with = [&](std::shared_ptr<const FabricLoad> load) {
    ClusterState c = s;
    c.SetFabricLoad(std::move(load));
    SchedulingInput in{.state = &c, .pending = &pending, .queues = &queues, .now_ns = Sec(10)};
    StatusOr<Decisions> d = (*policy)->Schedule(in);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->binds.empty());
    return HashDecisions(*d);
  };
  const uint64_t none = hash_with(nullptr);
  EXPECT_EQ(hash_with(std::make_shared<FabricLoad>()), none);
  EXPECT_EQ(hash_with(Unloaded(s)), none);
  // A loaded view does change them (the check above would pass vacuously otherwise).
  std::shared_ptr<FabricLoad> loaded = Unloaded(s);
  for (DomainId l : s.domains_at(Level::kLeaf)) loaded->up_gbps[l.value()] = l.value() % 2 ? 400 : 50;
  EXPECT_NE(hash_with(loaded), none);
}

// Three leaves of 4 nodes: leaves 0 and 1 each have 2 free nodes on, leaf 2 is suspended; a
// 4-node gang submitted at 100 s fits now across leaves 0 and 1, or in leaf 2 once it resumes.
ClusterState SuspendedLeafCluster() {
  ClusterState s = MakeCluster({.nodes = 12, .nodes_per_leaf = 4, .leaves_per_pod = 3});
  Fill(s, 0, 8, 100);
  Fill(s, 1, 8, 101);
  Fill(s, 4, 8, 102);
  Fill(s, 5, 8, 103);
  for (uint32_t n = 8; n < 12; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  return s;
}

JobSpec SuspendedLeafGang() {
  JobSpec gang = Job(1, 4, 8);
  gang.submit_ns = Sec(100);
  gang.est_runtime_s = 3600;
  return gang;
}

TEST(FabricLoad, GangWaitsForSuspendedNodesRatherThanSpreading) {
  ClusterState s = SuspendedLeafCluster();
  JobSpec gang = SuspendedLeafGang();
  const PlacementOptions wait{.resume_latency_s = 180, .now_ns = Sec(100)};
  // No view: placed now, across two leaves.
  std::optional<Placement> p = PlaceGang(s, gang, wait);
  ASSERT_TRUE(p);
  EXPECT_EQ(CountLeaves(s, *p), 2);
  s.SetFabricLoad(Unloaded(s));
  EXPECT_FALSE(PlaceGang(s, gang, wait)) << "should wait for leaf 2 to resume";
  // Not power-managed (no resume latency): placed now.
  EXPECT_TRUE(PlaceGang(s, gang, {}));
  // Waited past max(3 x 180 s, 25% of 3600 s) = 900 s: takes what is on.
  PlacementOptions late = wait;
  late.now_ns = Sec(100 + 901);
  EXPECT_TRUE(PlaceGang(s, gang, late));
  // Once leaf 2 is on, it goes there whole.
  for (uint32_t n = 8; n < 12; ++n) s.SetPower(NodeId(n), PowerState::kOn);
  p = PlaceGang(s, gang, wait);
  ASSERT_TRUE(p);
  EXPECT_EQ(Leaves(s, *p), (std::set<DomainId>{s.node(NodeId(8)).leaf}));
}

// A gang that waits for resumes takes no reservation on the powered-on nodes: it is not going
// to start there (the power plan resumes nodes for its demand and it goes there whole a boot
// later), and a reservation would only keep those nodes from backfill meanwhile. A gang that
// doesn't fit the powered-on nodes at all still gets one, and so does a gang past its wait.
TEST(FabricLoad, GangWaitingForResumesTakesNoReservation) {
  ClusterState s = MakeCluster({.nodes = 12, .nodes_per_leaf = 4, .leaves_per_pod = 3});
  // Leaf 0: nodes 0 and 1 busy until 1,000 s; leaf 1: nodes 4 and 5 until 2,000 s; leaf 2 off.
  const std::pair<uint32_t, double> busy[] = {{0, 1000}, {1, 1000}, {4, 2000}, {5, 2000}};
  for (const auto& [node, end_s] : busy) {
    JobSpec filler = Job(100 + node, 1, 8);
    filler.est_runtime_s = end_s;
    ASSERT_TRUE(s.Bind(filler, {.tasks = {{.node = NodeId(node), .gpu_mask = 0xff}}}, 0).ok());
  }
  for (uint32_t n = 8; n < 12; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  s.SetFabricLoad(Unloaded(s));
  const JobSpec gang = SuspendedLeafGang();  // 4 nodes, fits now across leaves 0 and 1
  const PlacementOptions wait{.resume_latency_s = 180, .now_ns = Sec(100)};

  bool waits = false;
  EXPECT_FALSE(PlaceGang(s, gang, wait, &waits));
  EXPECT_TRUE(waits) << "declined for want of resumes, not for want of room";
  // Leaf 0 alone would hold it at 1,000 s: no reservation there all the same.
  EXPECT_FALSE(ComputeReservation(s, gang, wait, Sec(100)));

  // Past its wait (max(3 x 180 s, 25% of 3,600 s) after submission) it takes the two leaves now.
  PlacementOptions late = wait;
  late.now_ns = Sec(100 + 901);
  std::optional<Reservation> r = ComputeReservation(s, gang, late, late.now_ns);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->start_ns, late.now_ns);
}

// A gang that doesn't fit the powered-on nodes now reserves at the first end after which they
// hold it, even spread over more leaves than it would take with the suspended leaf back on.
TEST(FabricLoad, ReservationIsTheFirstEndThatHoldsTheGangHoweverSpread) {
  ClusterState s = MakeCluster({.nodes = 12, .nodes_per_leaf = 4, .leaves_per_pod = 3});
  // Leaves 0 and 1: two nodes each busy until 1,000 s, the other two until 3,000 s; leaf 2 off.
  for (uint32_t node : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u}) {
    JobSpec filler = Job(100 + node, 1, 8);
    filler.est_runtime_s = node % 4 < 2 ? 1000 : 3000;
    ASSERT_TRUE(s.Bind(filler, {.tasks = {{.node = NodeId(node), .gpu_mask = 0xff}}}, 0).ok());
  }
  for (uint32_t n = 8; n < 12; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  s.SetFabricLoad(Unloaded(s));
  const JobSpec gang = SuspendedLeafGang();
  const PlacementOptions wait{.resume_latency_s = 180, .now_ns = Sec(100)};
  bool waits = true;
  EXPECT_FALSE(PlaceGang(s, gang, wait, &waits));
  EXPECT_FALSE(waits) << "no room on the powered-on nodes at all";
  // At 1,000 s nodes 0, 1, 4 and 5 hold it across two leaves (one with leaf 2 on); leaf 0 alone
  // would hold it at 3,000 s. The reservation promises the earlier start.
  std::optional<Reservation> r = ComputeReservation(s, gang, wait, Sec(100));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->start_ns, Sec(1000));
  EXPECT_EQ(r->nodes, (std::vector<NodeId>{NodeId(0), NodeId(1), NodeId(4), NodeId(5)}));
}

// The pruned scans still match the plain ones with a view (fastpath_test.cc does it without).
TEST(FabricLoad, PrunedScanMatchesReferenceWithAView) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    ClusterState s = MakeCluster({.nodes = 48, .nodes_per_leaf = 4, .leaves_per_pod = 4});
    uint64_t id = 1000;
    for (uint32_t n = 0; n < 48; ++n) {
      if (rng() % 2 == 0) Fill(s, n, 1 + static_cast<int>(rng() % 8), id++);
    }
    std::shared_ptr<FabricLoad> load = Unloaded(s);
    for (size_t d = 0; d < s.num_domains(); ++d) {
      load->up_gbps[d] = static_cast<float>(50 * (1 + rng() % 8));
      load->down_gbps[d] = static_cast<float>(50 * (1 + rng() % 8));
    }
    s.SetFabricLoad(load);
    for (int k = 0; k < 10; ++k) {
      const JobSpec job = Job(1, 1 + static_cast<int32_t>(rng() % 16), rng() % 2 ? 8 : 4);
      std::optional<Placement> fast = PlaceGang(s, job, {});
      std::optional<Placement> ref = PlaceGang(s, job, {.reference_scan = true});
      ASSERT_EQ(fast.has_value(), ref.has_value());
      if (!fast) continue;
      ASSERT_EQ(fast->tasks.size(), ref->tasks.size());
      for (size_t t = 0; t < fast->tasks.size(); ++t) {
        EXPECT_EQ(fast->tasks[t].node, ref->tasks[t].node);
        EXPECT_EQ(fast->tasks[t].gpu_mask, ref->tasks[t].gpu_mask);
      }
    }
  }
}

}  // namespace
}  // namespace gpool::sched
