// Behaviour tests of the baseline policies (baselines.h): each builds a tiny cluster and queue by
// hand and asserts the decision the baseline's rule must produce, one rule per test, arranged so
// that dropping the rule changes the decision.
#include "sim/baselines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "sched/test_util.h"

namespace gpool::sim {
namespace {

using sched::ClusterState;
using sched::Decisions;
using sched::JobId;
using sched::JobSpec;
using sched::NodeId;
using sched::QueueSpec;
using sched::testing::ClusterShape;
using sched::testing::Job;
using sched::testing::MakeCluster;
using sched::testing::Sec;

std::unique_ptr<sched::Policy> Make(const char* name, const PolicyContext& ctx = {}) {
  auto p = MakePolicy(name, ctx);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

Decisions Decide(const sched::Policy& policy, const ClusterState& s, const std::vector<JobSpec>& pending,
                 int64_t now_ns, std::vector<QueueSpec> queues = {{.name = "q0"}}) {
  sched::SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now_ns};
  auto d = policy.Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return std::move(d).value();
}

std::vector<uint64_t> Bound(const Decisions& d) {
  std::vector<uint64_t> ids;
  for (const auto& b : d.binds) ids.push_back(b.job.value());
  return ids;
}

const sched::BindDecision* BindOf(const Decisions& d, uint64_t id) {
  for (const auto& b : d.binds) {
    if (b.job.value() == id) return &b;
  }
  return nullptr;
}

// Binds a running job of `gpus` GPUs on node n at time start_ns with run time estimate est_s.
void RunOn(ClusterState& s, uint64_t id, uint32_t n, int gpus, int64_t start_ns, double est_s = 0,
           uint32_t queue = 0) {
  JobSpec j = Job(id, 1, gpus, queue);
  j.est_runtime_s = est_s;
  ASSERT_TRUE(
      s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = (1u << gpus) - 1, .gpu_milli = 1000}}},
             start_ns)
          .ok());
}

// ---- FIFO first-fit -------------------------------------------------------------------------

TEST(FifoBaseline, StartsJobsInArrivalOrderNotInputOrder) {
  ClusterState s = MakeCluster({.nodes = 1});
  JobSpec late = Job(1, 1, 8), early = Job(2, 1, 8);
  late.submit_ns = Sec(20);
  early.submit_ns = Sec(10);
  Decisions d = Decide(*Make("fifo"), s, {late, early}, Sec(30));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{2});
}

TEST(FifoBaseline, PlacesOnTheFirstNodeThatFitsNotTheTightest) {
  ClusterState s = MakeCluster({.nodes = 2});
  RunOn(s, 100, 1, 6, 0);  // node 1 has 2 free GPUs: a best fit would pick it
  Decisions d = Decide(*Make("fifo"), s, {Job(1, 1, 2)}, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(0));
}

TEST(FifoBaseline, ABlockedHeadDoesNotStopLaterJobs) {
  ClusterState s = MakeCluster({.nodes = 1});
  JobSpec big = Job(1, 2, 8), small = Job(2, 1, 4);
  big.submit_ns = 0;
  small.submit_ns = Sec(1);
  Decisions d = Decide(*Make("fifo"), s, {big, small}, Sec(2));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{2});
  EXPECT_TRUE(d.reservations.empty());
}

// ---- Slurm-like -----------------------------------------------------------------------------

TEST(SlurmBaseline, PriorityClassOutranksAge) {
  ClusterState s = MakeCluster({.nodes = 1});
  JobSpec old_low = Job(1, 1, 8), new_high = Job(2, 1, 8);
  old_low.submit_ns = 0;
  new_high.submit_ns = Sec(3600);
  new_high.priority = 1;
  Decisions d = Decide(*Make("slurm"), s, {old_low, new_high}, Sec(7200));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{2});
}

TEST(SlurmBaseline, OlderJobFirstAtEqualPriority) {
  ClusterState s = MakeCluster({.nodes = 1});
  // Job 1 has the smaller id (the tie-break) but arrived a day later.
  JobSpec young = Job(1, 1, 8), old = Job(2, 1, 8);
  young.submit_ns = Sec(86400);
  old.submit_ns = 0;
  Decisions d = Decide(*Make("slurm"), s, {young, old}, Sec(2 * 86400));
  EXPECT_EQ(Bound(d).front(), 2u);
  EXPECT_FALSE(BindOf(d, 1));
}

TEST(SlurmBaseline, LargerJobFirstByTheSizeFactor) {
  ClusterState s = MakeCluster({.nodes = 1});
  // Same age and priority; the 4-GPU job has the smaller id and would go first without the
  // size factor, leaving no room for the 8-GPU one.
  Decisions d = Decide(*Make("slurm"), s, {Job(1, 1, 4), Job(2, 1, 8)}, Sec(10));
  EXPECT_EQ(Bound(d).front(), 2u);
  EXPECT_FALSE(BindOf(d, 1));
}

TEST(SlurmBaseline, QueueWithLessUsageFirstByTheFairShareFactor) {
  ClusterState s = MakeCluster({.nodes = 2});
  RunOn(s, 100, 0, 8, 0, 0, /*queue=*/0);  // queue 0 holds half the cluster
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8},
                                   {.name = "b", .guaranteed_gpus = 8}};
  // Equal otherwise; job 1 (queue 0) wins the id tie-break without the fair-share factor.
  Decisions d = Decide(*Make("slurm"), s, {Job(1, 1, 8, 0), Job(2, 1, 8, 1)}, Sec(10), queues);
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{2});
}

// Four nodes of 8 GPUs. Node 0 busy until 100 s, node 2 until 1000 s, node 3 half busy until
// 5000 s, node 1 free. The 16-GPU head job is reserved nodes 0 and 1 from 100 s on.
TEST(SlurmBaseline, EasyBackfillNeverUsesTheHeadJobsReservedNodes) {
  ClusterState s = MakeCluster({.nodes = 4});
  RunOn(s, 100, 0, 8, 0, 100);
  RunOn(s, 101, 2, 8, 0, 1000);
  RunOn(s, 102, 3, 4, 0, 5000);
  JobSpec head = Job(1, 2, 8);
  head.priority = 1;
  JobSpec on_reserved = Job(2, 1, 8);  // fits only on node 1, which the head job needs
  JobSpec outside = Job(3, 1, 4);       // fits on node 3 too
  Decisions d = Decide(*Make("slurm"), s, {head, on_reserved, outside}, Sec(10));
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(1));
  EXPECT_EQ(d.reservations[0].start_ns, Sec(100));
  std::vector<NodeId> nodes = d.reservations[0].nodes;
  std::sort(nodes.begin(), nodes.end());
  EXPECT_EQ(nodes, (std::vector<NodeId>{NodeId(0), NodeId(1)}));
  EXPECT_FALSE(BindOf(d, 1));
  EXPECT_FALSE(BindOf(d, 2)) << "backfill took a node reserved for the head job";
  const sched::BindDecision* b = BindOf(d, 3);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->backfilled);
  EXPECT_EQ(b->placement.tasks[0].node, NodeId(3));
}

TEST(SlurmBaseline, PicksTheTightestLeafThatHoldsTheGang) {
  // Leaf 0 = nodes 0-3 (all free), leaf 1 = nodes 4-7 with only node 7 free.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4, .leaves_per_pod = 2});
  for (uint32_t n = 4; n < 7; ++n) RunOn(s, 100 + n, n, 8, 0);
  Decisions d = Decide(*Make("slurm"), s, {Job(1, 2, 4)}, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  for (const auto& t : d.binds[0].placement.tasks) EXPECT_EQ(t.node, NodeId(7));
}

TEST(SlurmBaseline, FractionsTakeWhollyFreeGpusExclusively) {
  // GRES GPUs are exclusive. Node 1: GPUs 0-5 busy, GPU 6 has 500 milli free, GPU 7 is free.
  // Two 300-milli jobs: the first takes GPU 7 of node 1 (the node with fewest free GPUs), the
  // second a free GPU of node 0; neither shares GPU 6 or each other's GPU.
  ClusterState s = MakeCluster({.nodes = 2});
  RunOn(s, 100, 1, 6, 0);
  JobSpec half = sched::testing::Fractional(101, 500);
  ASSERT_TRUE(s.Bind(half, {.tasks = {{.node = NodeId(1), .gpu_mask = 1u << 6, .gpu_milli = 500,
                                       .gpu_memory_bytes = 1ull << 30}}},
                     0)
                  .ok());
  JobSpec a = sched::testing::Fractional(1, 300), b = sched::testing::Fractional(2, 300);
  b.submit_ns = 1;
  Decisions d = Decide(*Make("slurm"), s, {a, b}, Sec(1));
  ASSERT_EQ(d.binds.size(), 2u);
  const sched::TaskBinding& ta = BindOf(d, 1)->placement.tasks[0];
  const sched::TaskBinding& tb = BindOf(d, 2)->placement.tasks[0];
  EXPECT_EQ(ta.node, NodeId(1));
  EXPECT_EQ(ta.gpu_mask, 1u << 7);
  EXPECT_EQ(tb.node, NodeId(0));
}

// ---- Tiresias-like --------------------------------------------------------------------------

constexpr double kGpuHourMilliS = 3600.0 * 1000;

TEST(TiresiasBaseline, LeastAttainedServiceQueueGoesFirst) {
  ClusterState s = MakeCluster({.nodes = 1});
  SimFeedback fb;
  fb.attained_milli_s = {0, 2 * kGpuHourMilliS, 0};  // job 1 ran two GPU-hours before
  JobSpec served = Job(1, 1, 8), fresh = Job(2, 1, 8);
  served.submit_ns = 0;
  fresh.submit_ns = Sec(60);
  Decisions d = Decide(*Make("tiresias", {.feedback = &fb}), s, {served, fresh}, Sec(120));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{2});
}

TEST(TiresiasBaseline, ServiceBelowTheThresholdKeepsArrivalOrder) {
  ClusterState s = MakeCluster({.nodes = 1});
  SimFeedback fb;
  // Discretized: 0.9 GPU-hours is still the first queue, so arrival order decides.
  fb.attained_milli_s = {0, 0.9 * kGpuHourMilliS, 0};
  JobSpec a = Job(1, 1, 8), b = Job(2, 1, 8);
  a.submit_ns = 0;
  b.submit_ns = Sec(60);
  Decisions d = Decide(*Make("tiresias", {.feedback = &fb}), s, {a, b}, Sec(120));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{1});
}

TEST(TiresiasBaseline, StarvingJobIsPromotedToTheFirstQueue) {
  ClusterState s = MakeCluster({.nodes = 1});
  SimFeedback fb;
  fb.attained_milli_s = {0, 2 * kGpuHourMilliS, 0};
  JobSpec starving = Job(1, 1, 8), fresh = Job(2, 1, 8);
  starving.submit_ns = 0;              // waited 9 h at now: past the 8 h starvation limit
  fresh.submit_ns = Sec(8.5 * 3600);
  Decisions d = Decide(*Make("tiresias", {.feedback = &fb}), s, {starving, fresh}, Sec(9 * 3600));
  EXPECT_EQ(Bound(d), std::vector<uint64_t>{1});
}

TEST(TiresiasBaseline, PreemptsTheRunningJobWithMostAttainedService) {
  ClusterState s = MakeCluster({.nodes = 2});
  RunOn(s, 1, 0, 8, 0);
  RunOn(s, 2, 1, 8, 0);
  SimFeedback fb;
  // Both ran 2 h on 8 GPUs (16 GPU-hours, over the threshold); job 2 had 10 more before.
  fb.attained_milli_s = {0, 0, 10 * kGpuHourMilliS, 0};
  JobSpec fresh = Job(3, 1, 8);
  fresh.submit_ns = Sec(7000);
  Decisions d = Decide(*Make("tiresias", {.feedback = &fb}), s, {fresh}, Sec(7200));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(2));
  EXPECT_EQ(d.preemptions[0].for_job, JobId(3));
  const sched::BindDecision* b = BindOf(d, 3);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->placement.tasks[0].node, NodeId(1));
}

TEST(TiresiasBaseline, DoesNotPreemptForAJobInTheLowerQueue) {
  ClusterState s = MakeCluster({.nodes = 1});
  RunOn(s, 1, 0, 8, 0);
  SimFeedback fb;
  fb.attained_milli_s = {0, 0, 5 * kGpuHourMilliS};
  JobSpec served = Job(2, 1, 8);
  served.submit_ns = Sec(7000);
  Decisions d = Decide(*Make("tiresias", {.feedback = &fb}), s, {served}, Sec(7200));
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.binds.empty());
}

// ---- FGD (score_policies_test.cc has the score policies) ---------------------------------

TEST(FgdBaseline, NeedsATargetWorkload) {
  auto p = MakePolicy("fgd", {});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().ToString().find("target workload"), std::string::npos);
}

}  // namespace
}  // namespace gpool::sim
