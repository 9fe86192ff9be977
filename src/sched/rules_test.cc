// Behaviour tests of resource and queue rules that the other tests leave open: DRF with CPU or
// memory as the dominant resource, nodes refused for lack of CPU, memory or GPU memory, and the
// queue features (whole-domain quotas, preferred domains, max_running_jobs). Each test is
// arranged so that the decision changes if the rule is dropped.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "sched/fairshare.h"
#include "sched/placement.h"
#include "sched/power.h"
#include "sched/scheduler.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

std::unique_ptr<Policy> Make(PolicyConfig c = {}) { return testing::MakePolicy(c); }

Decisions Decide(const ClusterState& s, const std::vector<JobSpec>& pending,
                 const std::vector<QueueSpec>& queues, int64_t now, PolicyConfig c = {}) {
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now};
  StatusOr<Decisions> d = Make(c)->Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : Decisions{};
}

// Binds job j's single task on node n, GPUs 0..gpus-1 (whole) at time `at`.
void BindOn(ClusterState& s, const JobSpec& j, uint32_t n, int64_t at = 0) {
  Status st = s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = (1u << j.task.gpus) - 1,
                                    .gpu_milli = 1000}}},
                     at);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// ---- DRF over GPU, CPU and memory -------------------------------------------------------------

// Two 8-GPU nodes (16 GPUs, 128 cores, 1 TiB). Queue a runs a 1-GPU job that takes `cpu_milli`
// and `mem` too; queue b runs a 4-GPU job with little else (dominant share 4/16 = 0.25).
struct DrfCase {
  int64_t cpu_milli;
  uint64_t mem;
};

void ExpectCpuOrMemoryDominates(const DrfCase& c) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  JobSpec a = Job(10, 1, 1, 0);
  a.task.cpu_milli = c.cpu_milli;
  a.task.memory_bytes = c.mem;
  BindOn(s, a, 0);
  BindOn(s, Job(11, 1, 4, 1), 1);
  // GPU shares alone: a 1/16, b 4/16. Queue a's non-GPU share is 0.375 (48 of 128 cores, or
  // 384 GiB of 1 TiB), which is what DRF must compare.
  const double share_a = DominantShare(s, nullptr, queues, QueueId(0));
  const double share_b = DominantShare(s, nullptr, queues, QueueId(1));
  EXPECT_DOUBLE_EQ(share_a, 0.375);
  EXPECT_DOUBLE_EQ(share_b, 0.25);
  // Same age: the job of queue b, whose dominant share is lower, goes first.
  std::vector<JobSpec> pending = {Job(1, 1, 1, 0), Job(2, 1, 1, 1)};
  std::vector<size_t> order = OrderJobs(pending, s, nullptr, queues, Sec(1), {});
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(pending[order[0]].id, JobId(2));
}

TEST(Drf, CpuAsTheDominantResource) {
  ExpectCpuOrMemoryDominates({.cpu_milli = 48000, .mem = 1ull << 30});
}

TEST(Drf, MemoryAsTheDominantResource) {
  ExpectCpuOrMemoryDominates({.cpu_milli = 1000, .mem = 384ull << 30});
}

TEST(Drf, UsageLedgerCountsCpuAndMemoryTime) {
  // Queue a used 48 cores and 1 GPU for 100 s; queue b 4 GPUs. The ledger's decayed usage must
  // rank a above b as the current allocation does.
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  JobSpec a = Job(10, 1, 1, 0);
  a.task.cpu_milli = 48000;
  BindOn(s, a, 0);
  BindOn(s, Job(11, 1, 4, 1), 1);
  UsageLedger ledger(3600);
  ledger.Advance(s, 0);
  ledger.Advance(s, Sec(100));
  EXPECT_GT(DominantShare(s, &ledger, queues, QueueId(0)), DominantShare(s, &ledger, queues, QueueId(1)));
}

// ---- A node short of CPU, memory or GPU memory is refused -------------------------------------

// Node 0 has 4 GPUs busy and little CPU (or memory) left; node 1 is empty. A best fit by GPUs
// would take node 0 for a 4-GPU task; the task's CPU (memory) must send it to node 1.
TEST(NodeFit, NodeShortOfCpuIsRefused) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec hog = Job(10, 1, 4);
  hog.task.cpu_milli = 62000;  // 2 cores left on node 0
  BindOn(s, hog, 0);
  JobSpec j = Job(1, 1, 4);
  j.task.cpu_milli = 4000;
  EXPECT_EQ(s.TasksThatFit(NodeId(0), j.task, kAnyModel), 0);
  Status st = s.CheckBinding({.node = NodeId(0), .gpu_mask = 0xF0, .gpu_milli = 1000}, j.task);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("milli-CPU"), std::string::npos) << st.ToString();
  Decisions d = Decide(s, {j}, {{.name = "q"}}, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(1));
}

TEST(NodeFit, NodeShortOfMemoryIsRefused) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec hog = Job(10, 1, 4);
  hog.task.memory_bytes = 500ull << 30;  // 12 GiB left on node 0
  BindOn(s, hog, 0);
  JobSpec j = Job(1, 1, 4);
  j.task.memory_bytes = 64ull << 30;
  EXPECT_EQ(s.TasksThatFit(NodeId(0), j.task, kAnyModel), 0);
  Status st = s.CheckBinding({.node = NodeId(0), .gpu_mask = 0xF0, .gpu_milli = 1000}, j.task);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("bytes free"), std::string::npos) << st.ToString();
  Decisions d = Decide(s, {j}, {{.name = "q"}}, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(1));
}

TEST(NodeFit, GpuShortOfMemoryIsRefusedForAFraction) {
  // One-GPU nodes with 80 GiB each. Node 0's GPU has 800 milli but only 20 GiB free; a
  // 300-milli task asking 30 GiB must go to node 1, though packing prefers the partial GPU.
  ClusterState s = MakeCluster({.nodes = 2, .gpus_per_node = 1, .nodes_per_leaf = 2});
  JobSpec used = testing::Fractional(10, 200);
  used.task.gpu_memory_bytes = 60ull << 30;
  ASSERT_TRUE(s.Bind(used, {.tasks = {{.node = NodeId(0), .gpu_mask = 1, .gpu_milli = 200,
                                       .gpu_memory_bytes = 60ull << 30}}},
                     0)
                  .ok());
  JobSpec j = testing::Fractional(1, 300);
  j.task.gpu_memory_bytes = 30ull << 30;
  EXPECT_EQ(s.TasksThatFit(NodeId(0), j.task, kAnyModel), 0);
  Status st = s.CheckBinding({.node = NodeId(0), .gpu_mask = 1, .gpu_milli = 300,
                              .gpu_memory_bytes = 30ull << 30},
                             j.task);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("lacks memory"), std::string::npos) << st.ToString();
  Decisions d = Decide(s, {j}, {{.name = "q"}}, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(1));
  // The same task with 10 GiB packs onto node 0's partial GPU.
  j.task.gpu_memory_bytes = 10ull << 30;
  Decisions e = Decide(s, {j}, {{.name = "q"}}, Sec(1));
  ASSERT_EQ(e.binds.size(), 1u);
  EXPECT_EQ(e.binds[0].placement.tasks[0].node, NodeId(0));
}

// ---- Queue features ---------------------------------------------------------------------------

TEST(QueueRules, MaxRunningJobsHoldsAJobBackDespiteFreeGpus) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "a", .max_running_jobs = 1}, {.name = "b"}};
  BindOn(s, Job(10, 1, 1, 0), 0);
  std::vector<JobSpec> pending = {Job(1, 1, 1, 0), Job(2, 1, 1, 1)};
  Decisions d = Decide(s, pending, queues, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(2));
  // Two pending jobs of an idle queue limited to one: only the first starts.
  ClusterState empty = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  std::vector<JobSpec> two = {Job(3, 1, 1, 0), Job(4, 1, 1, 0)};
  two[1].submit_ns = 1;
  Decisions e = Decide(empty, two, queues, Sec(1));
  ASSERT_EQ(e.binds.size(), 1u);
  EXPECT_EQ(e.binds[0].job, JobId(3));
}

TEST(QueueRules, WholeDomainQuotaCountsTheDomainsGpus) {
  // Two leaves of one 8-GPU node. Queue a is guaranteed leaf 1 (no GPU count), b nothing.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 1});
  const DomainId leaf1 = s.ancestor(NodeId(1), Level::kLeaf);
  QueueSpec a{.name = "a", .guaranteed_domains = {leaf1}};
  EXPECT_EQ(QueueQuotaMilli(s, a), 8000);
  a.guaranteed_gpus = 2;
  EXPECT_EQ(QueueQuotaMilli(s, a), 10000);
}

TEST(QueueRules, WholeDomainQuotaIsReclaimed) {
  // Queue b borrowed both nodes; queue a, guaranteed leaf 1 as a whole domain, reclaims one.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 1});
  const DomainId leaf1 = s.ancestor(NodeId(1), Level::kLeaf);
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_domains = {leaf1}}, {.name = "b"}};
  BindOn(s, Job(10, 1, 8, 1), 0, 0);
  BindOn(s, Job(11, 1, 8, 1), 1, Sec(5));
  Decisions d = Decide(s, {Job(1, 1, 8, 0)}, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, "reclaim");
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
}

TEST(QueueRules, GuaranteedDomainIsPreferredForPlacement) {
  // Two leaves of two empty nodes. Queue b (no guarantee) places a job where the policy's ties
  // send it; queue a, guaranteed the other leaf, places the identical job in its own leaf.
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2});
  const DomainId leaf0 = s.ancestor(NodeId(0), Level::kLeaf);
  const DomainId leaf1 = s.ancestor(NodeId(2), Level::kLeaf);
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  Decisions e = Decide(s, {Job(2, 1, 8, 1)}, queues, Sec(1));
  ASSERT_EQ(e.binds.size(), 1u);
  const DomainId unguarded = s.ancestor(e.binds[0].placement.tasks[0].node, Level::kLeaf);
  const DomainId other = unguarded == leaf0 ? leaf1 : leaf0;
  queues[0].guaranteed_domains = {other};
  Decisions d = Decide(s, {Job(1, 1, 8, 0)}, queues, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(s.ancestor(d.binds[0].placement.tasks[0].node, Level::kLeaf), other);
}

// ---- Power rate limits ------------------------------------------------------------------------

TEST(PowerLimits, AtMostMaxSuspendsPerCycle) {
  // 8 idle nodes past the idle timeout and no buffer: all could go, the limit lets 3.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  PowerConfig c{.enabled = true, .idle_timeout_s = 60, .warm_buffer_gpus = 0, .arrival_window_s = 0,
                .max_suspends_per_cycle = 3};
  std::vector<PowerDecision> p = PlanPower(s, c, {.now_ns = Sec(100)});
  ASSERT_EQ(p.size(), 3u);
  for (const PowerDecision& d : p) EXPECT_EQ(d.target, PowerState::kOff);
  c.max_suspends_per_cycle = 100;
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(100)}).size(), 8u);
}

TEST(PowerLimits, AtMostMaxResumingBootAtOnce) {
  // 8 nodes: 2 already booting, 6 off, 64 GPUs wanted. max_resuming 3 leaves room for one more
  // boot although max_resumes_per_cycle would allow them all.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  for (uint32_t n = 0; n < 8; ++n) s.SetPower(NodeId(n), n < 2 ? PowerState::kResuming : PowerState::kOff);
  PowerConfig c{.enabled = true, .warm_buffer_gpus = 0, .arrival_window_s = 0, .boot_latency_s = 120,
                .max_resumes_per_cycle = 128, .max_resuming = 3, .max_resuming_fraction = 0};
  std::vector<PowerDecision> p = PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].target, PowerState::kOn);
  EXPECT_EQ(p[0].ready_ns, Sec(130));
  c.max_resuming = 128;
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64}).size(), 6u);
}

TEST(PowerLimits, StormLimitScalesWithTheCluster) {
  // 8 healthy nodes of 8 GPUs, all off, 64 GPUs wanted; the fixed limits allow 2 boots. With
  // max_resuming_fraction 0.5 both limits rise to ceil(0.5 x 8) = 4, so 4 nodes boot in this
  // wave instead of 2.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  for (uint32_t n = 0; n < 8; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  PowerConfig c{.enabled = true, .warm_buffer_gpus = 0, .arrival_window_s = 0, .boot_latency_s = 120,
                .max_resumes_per_cycle = 2, .max_resuming = 2, .max_resuming_fraction = 0};
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64}).size(), 2u);
  c.max_resuming_fraction = 0.5;
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64}).size(), 4u);
  // The per-cycle limit alone does not hold it back, nor the boot-at-once limit alone.
  c.max_resumes_per_cycle = 1;
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64}).size(), 4u);
  // Boots already under way count against the scaled limit: 3 booting leave room for 1.
  for (uint32_t n = 0; n < 3; ++n) s.SetPower(NodeId(n), PowerState::kResuming);
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 64}).size(), 1u);
  // Never more than the demand: 24 GPUs wanted and 24 already booting resume nothing more.
  EXPECT_EQ(PlanPower(s, c, {.now_ns = Sec(10), .demand_gpus = 24}).size(), 0u);
}

TEST(PowerLimits, StormFractionIsParsedAndChecked) {
  StatusOr<PolicyConfig> c = ParsePolicyConfig("power.max_resuming_fraction=0.25");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->power.max_resuming_fraction, 0.25);
  c = ParsePolicyConfig("power.max_resuming_fraction=1.5");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("power.max_resuming_fraction"), std::string::npos) << c.status().ToString();
}

// ---- Fragmentation-aware packing, through the policy -----------------------------------------

// The default policy packs a fractional task by FGD over the workload it builds each cycle from
// the pending AND the running jobs. Node 0 (2 GPUs) has GPU0 free and GPU1 with 700 left (a
// running 300); nodes 1 and 2 are full of running 600- and 400-milli tasks. Pending: a 300-milli
// task (queue a) and a whole-GPU job held back by queue b's max_gpus=0.
//   300 on GPU1 leaves 400: a 600 task can't use it (+400 each), a whole-GPU task loses nothing
//   it had (GPU1 was already partial: -300). 300 on GPU0 leaves two partial GPUs: 600 tasks are
//   fine (0), a whole-GPU task loses GPU0 (+700).
// Running shapes give four 600s, the pending ones one whole GPU: GPU1 costs 4*400 - 300 = 1300,
// GPU0 costs 700, so FGD takes GPU0. Plain best fit takes the fuller GPU1, and so would FGD over
// the pending jobs alone (GPU1 -300 vs GPU0 +700): the test fails if the policy stops packing
// by fragmentation or stops counting the running jobs in its workload.
TEST(FragmentationPolicy, PacksByTheWorkloadOfPendingAndRunningJobs) {
  ClusterState s = MakeCluster({.nodes = 3, .gpus_per_node = 2, .nodes_per_leaf = 4});
  uint64_t id = 100;
  auto run = [&](int32_t milli, uint32_t node, uint32_t gpu_mask) {
    Status st = s.Bind(testing::Fractional(id++, milli),
                       {.tasks = {{.node = NodeId(node), .gpu_mask = gpu_mask}}}, 0);
    ASSERT_TRUE(st.ok()) << st.ToString();
  };
  run(300, 0, 0b10);
  for (uint32_t n : {1u, 2u}) {
    for (uint32_t g : {0b01u, 0b10u}) {
      run(600, n, g);
      run(400, n, g);
    }
  }
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b", .max_gpus = 0}};
  std::vector<JobSpec> pending = {testing::Fractional(1, 300, 0), Job(2, 1, 1, 1)};
  auto gpu_of_job1 = [&](PolicyConfig c) -> uint32_t {
    Decisions d = Decide(s, pending, queues, Sec(1), c);
    EXPECT_EQ(d.binds.size(), 1u);  // job 2 stays held back by its queue's limit
    if (d.binds.empty()) return 0;
    EXPECT_EQ(d.binds[0].job, JobId(1));
    EXPECT_EQ(d.binds[0].placement.tasks.size(), 1u);
    EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(0));
    return d.binds[0].placement.tasks[0].gpu_mask;
  };
  PolicyConfig fgd;
  ASSERT_TRUE(fgd.fragmentation_aware);  // the default
  EXPECT_EQ(gpu_of_job1(fgd), 0b01u);
  PolicyConfig bestfit;
  bestfit.fragmentation_aware = false;
  EXPECT_EQ(gpu_of_job1(bestfit), 0b10u);
}

}  // namespace
}  // namespace gpool::sched
