// The FGD paper's score policies on small hand-built nodes: each expected score is worked out
// by hand from the artifact's definition (score_policies.h), not read off the code.
#include "sim/score_policies.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sched/test_util.h"

namespace gpool::sim {
namespace {

// An 8-GPU node of model 0 with `left` milli per GPU (missing GPUs wholly free).
NodeRes Node(int64_t cpu_left, std::vector<int32_t> left = {}, int gpus = 8) {
  NodeRes n;
  n.cpu_left = cpu_left;
  n.cpu_cap = 64000;
  n.mem_left = 1ull << 40;
  n.gpus = gpus;
  n.model = 0;
  for (int g = 0; g < gpus; ++g) n.gpu_left[g] = g < static_cast<int>(left.size()) ? left[g] : 1000;
  return n;
}

PodRes Pod(int64_t cpu, int gpus, int milli) {
  PodRes p;
  p.cpu = cpu;
  p.gpus = gpus;
  p.milli = gpus == 0 ? 0 : milli;
  return p;
}

int64_t ScoreOf(ScoreKind k, const NodeRes& n, const PodRes& p,
                std::shared_ptr<const TypicalPods> t = nullptr) {
  return ScorePolicy(k, std::move(t)).Score(n, p);
}

TEST(ScorePolicies, DotProductPrefersTheSmallestAlignment) {
  // Node [64 CPUs, 8 GPUs] / [128, 8] = [0.5, 1]; pod [16 CPUs, 1 GPU] / [128, 8] = [0.125,
  // 0.125]: dot 0.1875, halved 0.09375, 100 * (1 - 0.09375) = 90.6 -> 90.
  EXPECT_EQ(ScoreOf(ScoreKind::kDotProd, Node(64000), Pod(16000, 1, 1000)), 90);
  // [32 CPUs, 2 GPUs left] -> [0.25, 0.25]: dot 0.0625, 100 * (1 - 0.03125) = 96.9 -> 96.
  EXPECT_EQ(ScoreOf(ScoreKind::kDotProd, Node(32000, {1000, 1000, 0, 0, 0, 0, 0, 0}),
                    Pod(16000, 1, 1000)),
            96);
}

TEST(ScorePolicies, BestFitScoresWhatIsLeftOnCpuAndGpu) {
  // 0.5 * 48/128 + 0.5 * 7/8 = 0.625 -> 100 * 0.375 = 37.5 -> 37.
  EXPECT_EQ(ScoreOf(ScoreKind::kBestFit, Node(64000), Pod(16000, 1, 1000)), 37);
  // 0.5 * 16/128 + 0.5 * 1/8 = 0.125 -> 87.5 -> 87.
  EXPECT_EQ(ScoreOf(ScoreKind::kBestFit, Node(32000, {1000, 1000, 0, 0, 0, 0, 0, 0}),
                    Pod(16000, 1, 1000)),
            87);
}

TEST(ScorePolicies, PackingRanksSharedThenUsedNodesThenEmptyOnes) {
  const NodeRes partial = Node(64000, {300});
  // Case 1: the 200-milli pod fits the 300 left on a used GPU: 100 - (300 * 100 / 1000) / 10 = 97.
  EXPECT_EQ(ScoreOf(ScoreKind::kPacking, partial, Pod(1000, 1, 200)), 97);
  // Case 2: a 2-GPU pod must open two free GPUs of a used node: max(50 - 2, 33) = 48.
  EXPECT_EQ(ScoreOf(ScoreKind::kPacking, partial, Pod(1000, 2, 1000)), 48);
  // Case 3: an empty node: max(33 - free GPUs, free GPUs): 25 with 8 GPUs, 31 with 2.
  EXPECT_EQ(ScoreOf(ScoreKind::kPacking, Node(64000), Pod(1000, 1, 1000)), 25);
  EXPECT_EQ(ScoreOf(ScoreKind::kPacking, Node(64000, {}, 2), Pod(1000, 1, 1000)), 31);
  // CPU-only pods score 0 everywhere.
  EXPECT_EQ(ScoreOf(ScoreKind::kPacking, partial, Pod(1000, 0, 0)), 0);
}

TEST(ScorePolicies, ClusteringGroupsPodsOfOneGpuClass) {
  const PodRes shared = Pod(1000, 1, 500);
  ASSERT_EQ(shared.gpu_class(), 1);
  NodeRes only_shared = Node(64000, {0});  // 7,000 milli left
  only_shared.classes = 1u << 1;
  // Only its class: 25 * (8000 - 7000) / 8000 = 3 (integer), + 75.
  EXPECT_EQ(ScoreOf(ScoreKind::kClustering, only_shared, shared), 78);
  NodeRes mixed = Node(64000, {0, 0});  // 6,000 left; "share" and "1-gpu" pods
  mixed.classes = (1u << 1) | (1u << Pod(1000, 1, 1000).gpu_class());
  EXPECT_EQ(ScoreOf(ScoreKind::kClustering, mixed, shared), 25 * 2000 / 8000 + 50);
  EXPECT_EQ(ScoreOf(ScoreKind::kClustering, Node(64000), shared), 25);  // empty node
  NodeRes other = Node(64000, {0});
  other.classes = 1u << Pod(1000, 1, 1000).gpu_class();
  EXPECT_EQ(ScoreOf(ScoreKind::kClustering, other, shared), 3);  // other classes only
  EXPECT_EQ(ScoreOf(ScoreKind::kClustering, only_shared, Pod(1000, 0, 0)), 0);
}

TEST(ScorePolicies, FgdFragmentationAndScore) {
  // Typical pods: half whole 1-GPU pods, half 500-milli pods, 4 CPUs each.
  auto target = std::make_shared<const TypicalPods>(
      TypicalPods{{Pod(4000, 1, 1000), 0.5}, {Pod(4000, 1, 500), 0.5}});
  const NodeRes n = Node(16000, {1000, 300}, 2);
  // Both fit; each strands the 300 left on GPU 1: 0.5 * 300 + 0.5 * 300 = 300.
  EXPECT_DOUBLE_EQ(NodeFrag(n, *target), 300);
  // A 300-milli pod on GPU 0 leaves [700, 300]: whole pods no longer fit (1000 frag), halves
  // strand 300: 650; on GPU 1 it leaves [1000, 0]: 0. Scores: int(100 sigmoid((300 - 650) /
  // 1000)) = int(41.3) = 41 and int(100 sigmoid(0.3)) = int(57.4) = 57: GPU 1 wins.
  const PodRes p = Pod(1000, 1, 300);
  ScorePolicy fgd(ScoreKind::kFgd, target);
  EXPECT_EQ(fgd.Score(n, p), 57);
  SplitMix rng(1);
  EXPECT_EQ(fgd.ChooseGpus(n, p, &rng), 1u << 1);
  NodeRes left0 = n;
  left0.gpu_left[0] = 700;
  EXPECT_DOUBLE_EQ(NodeFrag(left0, *target), 650);
  EXPECT_EQ(static_cast<int64_t>(100 / (1 + std::exp(0.35))), 41);
  // Too little CPU for the typical pods: every free milli is fragmented (1,300).
  EXPECT_DOUBLE_EQ(NodeFrag(Node(3000, {1000, 300}, 2), *target), 1300);
  // CPU-only typical pods count every free GPU milli, as do pods of another GPU model.
  TypicalPods cpu_only{{Pod(1000, 0, 0), 1}};
  EXPECT_DOUBLE_EQ(NodeFrag(n, cpu_only), 1300);
  PodRes other_model = Pod(1000, 1, 1000);
  other_model.models = sched::ModelMask{1} << 1;
  EXPECT_DOUBLE_EQ(NodeFrag(n, TypicalPods{{other_model, 1}}), 1300);
}

TEST(ScorePolicies, FilterChecksCpuMemoryModelAndGpuRoom) {
  NodeRes n = Node(8000, {400, 0}, 2);  // one GPU with 400 left, one used up
  EXPECT_TRUE(Feasible(n, Pod(8000, 1, 400)));
  EXPECT_FALSE(Feasible(n, Pod(8001, 1, 400)));   // CPU
  EXPECT_FALSE(Feasible(n, Pod(1000, 1, 500)));   // no GPU with 500 left
  EXPECT_FALSE(Feasible(n, Pod(1000, 1, 1000)));  // no wholly free GPU
  PodRes big = Pod(1000, 0, 0);
  big.mem = (1ull << 40) + 1;
  EXPECT_FALSE(Feasible(n, big));  // memory
  PodRes other = Pod(1000, 1, 100);
  other.models = sched::ModelMask{1} << 3;
  EXPECT_FALSE(Feasible(n, other));  // model
}

TEST(ScorePolicies, TypicalPodsAreTheMostPopularUpTo95Percent) {
  // 20 pods: 10 of A, 6 of B, 3 of C, 1 of D. 95% of 20 is 19: A, B and C (10 + 6 + 3 = 19),
  // frequencies renormalised over 19.
  std::vector<sched::JobSpec> jobs;
  auto add = [&](int n, int64_t cpu, int gpus, int milli) {
    for (int i = 0; i < n; ++i) {
      sched::JobSpec j;
      j.task.cpu_milli = cpu;
      j.task.gpus = gpus;
      j.task.gpu_milli = milli < 1000 ? milli : 0;
      jobs.push_back(j);
    }
  };
  add(10, 4000, 1, 1000);
  add(6, 2000, 1, 500);
  add(3, 8000, 0, 0);  // CPU-only pods are typical pods too
  add(1, 1000, 8, 1000);
  const TypicalPods t = MakeTypicalPods(jobs);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].pod.cpu, 4000);
  EXPECT_DOUBLE_EQ(t[0].freq, 10.0 / 19);
  EXPECT_EQ(t[1].pod.milli, 500);
  EXPECT_DOUBLE_EQ(t[1].freq, 6.0 / 19);
  EXPECT_EQ(t[2].pod.gpus, 0);
  EXPECT_DOUBLE_EQ(t[2].freq, 3.0 / 19);
}

TEST(ScorePolicies, TiesGoToTheSameNodeAllRunLong) {
  // Four empty identical nodes: every node scores the same for bestfit, so each pod goes to the
  // node ranked first among those that still fit: the ranks of the run, not a new draw per pod.
  sched::ClusterState s = sched::testing::MakeCluster({.nodes = 4, .gpus_per_node = 2});
  ScorePolicy bestfit(ScoreKind::kBestFit, nullptr);
  const uint64_t seed = 7;
  const std::vector<uint32_t> rank = NodeRanks(seed, 4);
  uint32_t first = 0;
  for (uint32_t n = 1; n < 4; ++n) {
    if (rank[n] < rank[first]) first = n;
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<sched::JobSpec> pending{sched::testing::Job(static_cast<uint64_t>(i + 1), 1, 1)};
    sched::UsageLedger ledger;
    std::vector<sched::QueueSpec> queues(1);
    sched::SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .usage = &ledger,
                              .now_ns = 0, .seed = seed};
    auto d = bestfit.Schedule(in);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_EQ(d->binds.size(), 1u);
    // The second pod goes to the same node: it now has less left, which bestfit prefers.
    EXPECT_EQ(d->binds[0].placement.tasks[0].node.value(), first) << i;
    ASSERT_TRUE(s.Bind(pending[0], d->binds[0].placement, 0).ok());
  }
}

}  // namespace
}  // namespace gpool::sim
