#include "sched/placement.h"

#include <gtest/gtest.h>

#include <set>

#include "sched/fragmentation.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::ClusterShape;
using testing::Fractional;
using testing::Fill;
using testing::Job;
using testing::MakeCluster;
using testing::MakeSpec;


std::set<uint32_t> Nodes(const Placement& p) {
  std::set<uint32_t> n;
  for (const TaskBinding& b : p.tasks) n.insert(b.node.value());
  return n;
}

TEST(Placement, PicksTheFullestLeafThatFitsAndKeepsWholeLeavesFree) {
  // Two leaves of 4 nodes. Leaf 0 has two busy nodes; a 2x8 gang goes to leaf 0's free pair.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  Fill(s, 0, 8, 100);
  Fill(s, 1, 8, 101);
  std::optional<Placement> p = PlaceGang(s, Job(1, 2, 8), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p), (std::set<uint32_t>{2, 3}));
  ASSERT_TRUE(s.Bind(Job(1, 2, 8), *p, 0).ok());
  EXPECT_EQ(s.FreeWholeGpus(s.domains_at(Level::kLeaf)[1], kAnyModel), 32);
}

TEST(Placement, BigGangUsesTheFewestLeaves) {
  // 4 leaves x 4 nodes in one pod. Free nodes per leaf: 1, 3, 2, 4. A 6-node gang needs two
  // leaves: the 4-free leaf and the one with 2 free (smallest that covers the rest), not three.
  ClusterState s = MakeCluster({.nodes = 16, .nodes_per_leaf = 4, .leaves_per_pod = 4});
  uint64_t id = 100;
  for (uint32_t n : {0u, 1u, 2u, 4u, 8u, 9u}) Fill(s, n, 8, id++);
  std::optional<Placement> p = PlaceGang(s, Job(1, 6, 8), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(CountLeaves(s, *p), 2);
  std::set<DomainId> leaves;
  for (const TaskBinding& b : p->tasks) leaves.insert(s.node(b.node).leaf);
  EXPECT_EQ(leaves, (std::set<DomainId>{s.domains_at(Level::kLeaf)[2], s.domains_at(Level::kLeaf)[3]}));
  EXPECT_EQ(PlacementSpan(s, *p), Level::kPod);
}

TEST(Placement, RequiredLocalityNeverSplitsPreferredDoes) {
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  Fill(s, 0, 8, 100);
  Fill(s, 4, 8, 101);
  JobSpec j = Job(1, 4, 8);  // 4 nodes: no leaf has 4 free
  j.locality = {.level = Level::kLeaf, .required = true};
  EXPECT_FALSE(PlaceGang(s, j, {}));
  j.locality.required = false;
  j.locality.level = Level::kLeaf;
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(CountLeaves(s, *p), 2);
}

TEST(Placement, GangIsAllOrNothing) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 4});
  Fill(s, 0, 1, 100);  // 3 nodes wholly free, one with 7
  EXPECT_FALSE(PlaceGang(s, Job(1, 4, 8), {}));
  std::optional<Placement> p = PlaceGang(s, Job(2, 3, 8), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks.size(), 3u);
}

TEST(Placement, HonoursModelsHealthAndExclusions) {
  ClusterSpec spec = MakeSpec({.nodes = 4, .nodes_per_leaf = 4, .models = {"V100M16", "T4"}});
  spec.nodes[0].gpu_model = 1;
  spec.nodes[1].gpu_model = 1;
  StatusOr<ClusterState> cs = ClusterState::Create(spec);
  ASSERT_TRUE(cs.ok());
  ClusterState& s = *cs;
  JobSpec j = Job(1, 2, 8);
  j.gpu_models = *ParseGpuModels(s.spec(), "V100M16");
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p), (std::set<uint32_t>{2, 3}));
  s.SetHealth(NodeId(3), Health::kUnhealthy);
  EXPECT_FALSE(PlaceGang(s, j, {}));
  j.num_tasks = 1;
  std::vector<uint8_t> excluded(4, 0);
  excluded[2] = 1;
  EXPECT_FALSE(PlaceGang(s, j, {.excluded_nodes = &excluded}));
}

TEST(Placement, BestFitNodeForSmallTasks) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 4});
  Fill(s, 2, 6, 100);  // node 2 has 2 free: a 2-GPU task fills it exactly
  std::optional<Placement> p = PlaceGang(s, Job(1, 1, 2), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, NodeId(2));
  EXPECT_EQ(p->tasks[0].gpu_mask, 0b11000000u);
}

TEST(Placement, DegradedLeafRanksAfterHealthyOne) {
  ClusterSpec spec = MakeSpec({.nodes = 8, .nodes_per_leaf = 4});
  for (DomainSpec& d : spec.domains) d.nominal_bandwidth_gbps = d.bandwidth_gbps = 1600;
  spec.domains[spec.nodes[0].leaf.value()].bandwidth_gbps = 800;  // a failed uplink in leaf 0
  ClusterState s = *ClusterState::Create(spec);
  std::optional<Placement> p = PlaceGang(s, Job(1, 2, 8), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(s.node(p->tasks[0].node).leaf, spec.nodes[4].leaf);
}

TEST(Placement, NodeLocalityPutsTheGangOnOneNode) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2});
  Fill(s, 0, 4, 100);
  JobSpec j = Job(1, 4, 1);
  j.locality = {.level = Level::kNode, .required = true};
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p).size(), 1u);
  EXPECT_EQ(p->tasks[0].node, NodeId(0));  // the fullest node that holds all four
}

TEST(Placement, SplitAcrossFabricsOnlyWhenAllowed) {
  ClusterSpec spec = MakeSpec({.nodes = 4, .nodes_per_leaf = 1, .leaves_per_pod = 1});
  // Second fabric for nodes 2 and 3.
  const DomainId f2(static_cast<uint32_t>(spec.domains.size()));
  spec.domains.push_back({.name = "fabric1", .level = Level::kFabric});
  for (uint32_t n : {2u, 3u}) {
    const DomainId pod = spec.domains[spec.nodes[n].leaf.value()].parent;
    spec.domains[pod.value()].parent = f2;
  }
  ClusterState s = *ClusterState::Create(spec);
  JobSpec j = Job(1, 3, 8);
  EXPECT_FALSE(PlaceGang(s, j, {}));
  j.allow_split = true;
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks.size(), 3u);
}

TEST(Fragmentation, MatchesTheDefinition) {
  ClusterState s = MakeCluster({.nodes = 1, .gpus_per_node = 2, .nodes_per_leaf = 1});
  ASSERT_TRUE(s.Bind(Fractional(9, 500), {.tasks = {{.node = NodeId(0), .gpu_mask = 0b01}}}, 0).ok());
  // Free: GPU0 500, GPU1 1000. A 600-milli task can't use GPU0's 500: fragment 500.
  // A whole-GPU task can't use GPU0 either: 500. A 2-GPU task can't run: all 1500.
  JobSpec a = Fractional(1, 600), b = Job(2, 1, 1), c = Job(3, 1, 2);
  WorkloadDistribution w({{.task = a.task, .weight = 1}, {.task = b.task, .weight = 1}, {.task = c.task, .weight = 2}});
  EXPECT_DOUBLE_EQ(NodeFragmentation(s, NodeId(0), w), (500.0 + 500.0 + 2 * 1500.0) / 4);
}

TEST(Fragmentation, AGpuLessTaskCountsEveryFreeGpuAsFragmented) {
  // FGD's definition: a task that uses no GPU can use none of the free ones, even where its CPU
  // and memory fit. Free: GPU0 500, GPU1 1000; the CPU task fits the node: 1500 fragmented.
  ClusterState s = MakeCluster({.nodes = 1, .gpus_per_node = 2, .nodes_per_leaf = 1});
  ASSERT_TRUE(s.Bind(Fractional(9, 500), {.tasks = {{.node = NodeId(0), .gpu_mask = 0b01}}}, 0).ok());
  WorkloadDistribution w({{.task = Job(1, 1, 0).task}});
  EXPECT_DOUBLE_EQ(NodeFragmentation(s, NodeId(0), w), 1500.0);
}

TEST(Fragmentation, PackingFollowsTheWorkload) {
  // GPU0 wholly free, GPU1 has 700 left. Target workload: 600-milli tasks. Placing a 300 task on
  // GPU1 leaves 400 that no 600 task can use; on GPU0 it leaves 700, still usable. Plain best
  // fit takes the fuller GPU1; FGD takes GPU0.
  ClusterState s = MakeCluster({.nodes = 1, .gpus_per_node = 2, .nodes_per_leaf = 1});
  ASSERT_TRUE(s.Bind(Fractional(9, 300), {.tasks = {{.node = NodeId(0), .gpu_mask = 0b10}}}, 0).ok());
  WorkloadDistribution w({{.task = Fractional(0, 600).task}});
  JobSpec j = Fractional(1, 300);
  std::optional<Placement> fgd = PlaceGang(s, j, {.workload = &w});
  std::optional<Placement> bestfit = PlaceGang(s, j, {});
  ASSERT_TRUE(fgd && bestfit);
  EXPECT_EQ(fgd->tasks[0].gpu_mask, 0b01u);
  EXPECT_EQ(bestfit->tasks[0].gpu_mask, 0b10u);
  EXPECT_LT(FragmentationDelta(s, fgd->tasks[0], j.task, w),
            FragmentationDelta(s, bestfit->tasks[0], j.task, w));
}

TEST(Placement, SameInputSamePlacement) {
  ClusterState s = MakeCluster({.nodes = 32, .nodes_per_leaf = 4, .leaves_per_pod = 4});
  for (uint32_t n = 0; n < 32; n += 3) Fill(s, n, static_cast<int>(n % 8), 100 + n);
  JobSpec j = Job(1, 9, 4);
  std::optional<Placement> a = PlaceGang(s, j, {});
  std::optional<Placement> b = PlaceGang(ClusterState(s), j, {});
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->tasks.size(), b->tasks.size());
  for (size_t i = 0; i < a->tasks.size(); ++i) {
    EXPECT_EQ(a->tasks[i].node, b->tasks[i].node);
    EXPECT_EQ(a->tasks[i].gpu_mask, b->tasks[i].gpu_mask);
  }
  // Every binding it returned is valid against the state.
  EXPECT_TRUE(ClusterState(s).Bind(j, *a, 0).ok());
}


// ---- Single tasks by fragmentation (PlaceOneByFragmentation) --------------------------------

// Two one-node leaves of 2 GPUs and 16 CPUs. Node 0 keeps both GPUs free; node 1's GPUs are
// taken. The target workload is 1-GPU tasks of 6 CPUs.
ClusterState TwoLeavesOneBusy() {
  ClusterState s = MakeCluster({.nodes = 2, .gpus_per_node = 2, .nodes_per_leaf = 1, .cpu_milli = 16000});
  JobSpec busy = Job(100, 1, 2);
  EXPECT_TRUE(s.Bind(busy, {.tasks = {{.node = NodeId(1), .gpu_mask = 3, .gpu_milli = 1000}}}, 0).ok());
  return s;
}

TEST(PlacementByFragmentation, ACpuTaskGoesWhereTheGpusAreGone) {
  // Node 0 also runs a 2-CPU task: 14 CPUs free, node 1 15. A 12-CPU task on node 0 would leave
  // 2 CPUs: its two free GPUs could no longer take a 6-CPU GPU task (2,000 milli fragmented).
  // On node 1 it strands nothing. Best fit by free CPU would take node 0; the task goes to 1.
  ClusterState s = TwoLeavesOneBusy();
  JobSpec side = Job(101, 1, 0);
  side.task.cpu_milli = 2000;
  ASSERT_TRUE(s.Bind(side, {.tasks = {{.node = NodeId(0)}}}, 0).ok());
  JobSpec gpu_task = Job(50, 1, 1);
  gpu_task.task.cpu_milli = 6000;
  const WorkloadDistribution w = WorkloadDistribution::FromJobs({gpu_task});
  JobSpec cpu = Job(1, 1, 0);
  cpu.task.cpu_milli = 12000;
  std::optional<Placement> p = PlaceGang(s, cpu, {.workload = &w});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p), (std::set<uint32_t>{1}));
}

TEST(PlacementByFragmentation, ComparesDeltasOnFgdsScoreScale) {
  // Two 4-GPU nodes of one model: node 0 has 2 whole GPUs free, node 1 has 3. Target: 1-GPU
  // tasks (weight 0.85) and 2-GPU tasks (0.15). A 1-GPU task on node 0 leaves 1 GPU, which a
  // 2-GPU task can't use: +0.15 x 1000 = +150 milli. On node 1 it leaves 2: +0. FGD's scores are
  // floor(100 sigmoid(-delta/1000)): 46 against 50, so node 1. Deltas in 0.2-GPU steps put both
  // in step 0 and best fit (fewest whole GPUs left) took node 0, giving up 150 milli for nothing.
  ClusterState s = MakeCluster({.nodes = 2, .gpus_per_node = 4, .nodes_per_leaf = 2});
  Fill(s, 0, 2, 100);
  Fill(s, 1, 1, 101);
  const WorkloadDistribution w({{.task = Job(50, 1, 1).task, .weight = 0.85},
                                {.task = Job(51, 1, 2).task, .weight = 0.15}});
  const JobSpec one = Job(1, 1, 1);
  std::optional<Placement> p = PlaceGang(s, one, {.workload = &w});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p), (std::set<uint32_t>{1}));
  EXPECT_DOUBLE_EQ(FragmentationDelta(s, p->tasks[0], one.task, w), 0.0);
  // The other node's delta is the 150 the comment works out.
  TaskBinding on0{.node = NodeId(0), .gpu_mask = 0b0100, .gpu_milli = 1000};
  EXPECT_NEAR(FragmentationDelta(s, on0, one.task, w), 150.0, 1e-9);
}

TEST(PlacementByFragmentation, EqualScoresPackOntoOneNode) {
  // Four empty 2-GPU nodes, target 1-GPU tasks: every placement scores the same (delta 0), and
  // ties go to one fixed node order, so a second task joins the first instead of opening another
  // node (which would leave two half-used nodes where one empty node could take a 2-GPU task).
  ClusterState s = MakeCluster({.nodes = 4, .gpus_per_node = 2, .nodes_per_leaf = 4});
  const WorkloadDistribution w({{.task = Job(50, 1, 1).task}});
  std::set<uint32_t> used;
  for (uint64_t id = 1; id <= 2; ++id) {
    const JobSpec j = Job(id, 1, 1);
    std::optional<Placement> p = PlaceGang(s, j, {.workload = &w});
    ASSERT_TRUE(p);
    ASSERT_TRUE(s.Bind(j, *p, 0).ok());
    used.insert(p->tasks[0].node.value());
  }
  EXPECT_EQ(used.size(), 1u);
}

TEST(PlacementByFragmentation, LooksAcrossLeaves) {
  // Leaf 0: node 0 with 8 free GPUs. Leaf 1: node 1 with 4 free GPUs and 4 GPUs at 500 milli
  // used. Target: 4-GPU tasks. A 1-GPU task on node 1 leaves 3 whole GPUs: the 4-GPU task no
  // longer fits there, and all 5,000 free milli become fragments (from 2,000); on node 0 it
  // leaves 7 whole GPUs, still room for one 4-GPU task: fragmentation unchanged. Best fit by
  // free whole GPUs (node 1's leaf has 4 < 8) would take node 1.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 1});
  for (int g = 4; g < 8; ++g) {
    JobSpec half = Fractional(200 + static_cast<uint64_t>(g), 500);
    ASSERT_TRUE(s.Bind(half, {.tasks = {{.node = NodeId(1), .gpu_mask = 1u << g, .gpu_milli = 500}}}, 0).ok());
  }
  const WorkloadDistribution w = WorkloadDistribution::FromJobs({Job(50, 1, 4)});
  std::optional<Placement> p = PlaceGang(s, Job(1, 1, 1), {.workload = &w});
  ASSERT_TRUE(p);
  EXPECT_EQ(Nodes(*p), (std::set<uint32_t>{0}));
  // Without a workload: best fit in the fullest leaf, as before.
  std::optional<Placement> q = PlaceGang(s, Job(1, 1, 1), {});
  ASSERT_TRUE(q);
  EXPECT_EQ(Nodes(*q), (std::set<uint32_t>{1}));
}

}  // namespace
}  // namespace gpool::sched
