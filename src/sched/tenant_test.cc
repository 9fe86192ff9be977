// Tenant isolation, reclaim to a placement, and wait reasons: a queue's priorities order its own
// jobs only (never another's place, never another's guarantee), a queue waiting within its
// guarantee is served first and reclaims borrowed GPUs whatever the borrower's priorities (as
// whole room on a node when its job needs that), a queue's cap holds, and every pending job
// that is not bound gets its reason (Decisions::waits). Each test is arranged so that the
// decision changes if the rule is dropped.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <memory>
#include <vector>

#include "sched/fairshare.h"
#include "sched/scheduler.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

Decisions TenantDecide(const ClusterState& s, const std::vector<JobSpec>& pending,
                       const std::vector<QueueSpec>& queues, int64_t now, PolicyConfig c = {},
                       bool explain = false) {
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now,
                     .explain = explain};
  StatusOr<Decisions> d = testing::MakePolicy(c)->Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : Decisions{};
}

// Fills the cluster (8 nodes x 8 GPUs) with 8 one-node jobs of queue `q`, ids 100.., started at
// t = 0..7 s.
void FillWith(ClusterState& s, uint32_t q, int32_t priority = 0) {
  for (uint32_t n = 0; n < 8; ++n) {
    JobSpec j = Job(100 + n, 1, 8, q);
    j.priority = priority;
    ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = 0xFF, .gpu_milli = 1000}}},
                       Sec(n)).ok());
  }
}

std::vector<uint64_t> OrderIds(const std::vector<JobSpec>& jobs, const std::vector<size_t>& order) {
  std::vector<uint64_t> ids;
  for (size_t i : order) ids.push_back(jobs[i].id.value());
  return ids;
}

// Issue 29's repro at the policy: a and b are guaranteed 16 GPUs each; b runs 8 jobs on all 64;
// a's 8 jobs at priority 1000 arrive. a reclaims its guarantee (2 jobs) and nothing more.
// Before the rule, a's priority preempted 8 of b's jobs (b left with 0, inside its guarantee).
TEST(TenantIsolation, PriorityDoesNotPreemptAnotherQueue) {
  ClusterState s = MakeCluster({.nodes = 8});
  std::vector<QueueSpec> queues = {{.name = "a", .tenant = "a", .guaranteed_gpus = 16},
                                   {.name = "b", .tenant = "b", .guaranteed_gpus = 16}};
  FillWith(s, 1);
  std::vector<JobSpec> pending;
  for (uint64_t i = 0; i < 8; ++i) {
    pending.push_back(Job(1 + i, 1, 8, 0));
    pending.back().priority = 1000;
    pending.back().submit_ns = Sec(10);
  }
  Decisions d = TenantDecide(s, pending, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 2u);
  for (const auto& p : d.preemptions) EXPECT_EQ(p.reason, "reclaim");
  EXPECT_EQ(d.binds.size(), 2u);
  // b within its own guarantee: not even reclaim takes from it.
  queues[1].guaranteed_gpus = 64;
  queues[0].guaranteed_gpus = 0;
  Decisions none = TenantDecide(s, pending, queues, Sec(100));
  EXPECT_TRUE(none.preemptions.empty());
  EXPECT_TRUE(none.binds.empty());
}

// Inside one queue priority still preempts: the same pending job takes a lower-priority job of
// its own queue.
TEST(TenantIsolation, PriorityStillPreemptsInsideItsQueue) {
  ClusterState s = MakeCluster({.nodes = 8});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16},
                                   {.name = "b", .guaranteed_gpus = 16}};
  FillWith(s, 0);
  JobSpec hi = Job(1, 1, 8, 0);
  hi.priority = 1000;
  Decisions d = TenantDecide(s, {hi}, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, "priority");
  EXPECT_EQ(d.binds.size(), 1u);
}

// A borrower's high priority does not shield what it borrowed: a, within its guarantee at
// priority 0, reclaims from b running at priority 1000 beyond b's (zero) guarantee. Before the
// rule reclaim took only victims of a priority not above the reclaimer's.
TEST(TenantIsolation, ReclaimIgnoresTheBorrowersPriority) {
  ClusterState s = MakeCluster({.nodes = 8});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16}, {.name = "b"}};
  FillWith(s, 1, /*priority=*/1000);
  Decisions d = TenantDecide(s, {Job(1, 1, 8, 0)}, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, "reclaim");
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
}

// Order: priority counts inside a queue only. a's priority-1000 jobs and b's priority-0 jobs
// interleave by fair share; inside a the higher priority goes first. Before the rule all of a's
// jobs went ahead of b's.
TEST(TenantIsolation, PriorityOrdersOnlyItsOwnQueue) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  std::vector<JobSpec> jobs = {Job(1, 1, 2, 0), Job(2, 1, 2, 0), Job(3, 1, 2, 0),
                               Job(10, 1, 2, 1), Job(11, 1, 2, 1), Job(12, 1, 2, 1)};
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].submit_ns = static_cast<int64_t>(i);
  jobs[0].priority = jobs[1].priority = 1000;
  jobs[2].priority = 2000;  // a's youngest goes first in a
  EXPECT_EQ(OrderIds(jobs, OrderJobs(jobs, s, nullptr, queues, Sec(1), {})),
            (std::vector<uint64_t>{3, 10, 1, 11, 2, 12}));
}

// A queue whose next job fits in its guarantee goes first, even with a larger share: a has
// used the cluster all week (a large decayed share) but is idle now and guaranteed 8 GPUs; b,
// without a guarantee and with no past usage, would go first by share alone.
TEST(TenantIsolation, QueueWithinItsGuaranteeIsServedFirst) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8}, {.name = "b"}};
  UsageLedger ledger(3600);
  ledger.Add(QueueId(0), {.gpu_milli_s = 16000.0 * 7 * 24 * 3600});
  std::vector<JobSpec> jobs = {Job(1, 1, 8, 0), Job(2, 1, 8, 0), Job(10, 1, 8, 1)};
  jobs[0].submit_ns = Sec(2);
  jobs[1].submit_ns = Sec(3);
  jobs[2].submit_ns = Sec(1);
  ASSERT_GT(DominantShare(s, &ledger, queues, QueueId(0)), DominantShare(s, &ledger, queues, QueueId(1)));
  // a's first job fits its 8 guaranteed GPUs; its second would borrow, and b's share is lower.
  EXPECT_EQ(OrderIds(jobs, OrderJobs(jobs, s, &ledger, queues, Sec(10), {})),
            (std::vector<uint64_t>{1, 10, 2}));
}

const WaitReason* WaitOf(const Decisions& d, uint64_t id) {
  for (const WaitReason& w : d.waits) {
    if (w.job == JobId(id)) return &w;
  }
  return nullptr;
}

// Every pending job not bound gets one reason, of the rule that holds it, with the numbers that
// matter; none without `explain`.
TEST(WaitReasons, EveryUnboundPendingJobSaysWhy) {
  ClusterState s = MakeCluster({.nodes = 4});  // 32 GPUs
  std::vector<QueueSpec> queues = {
      {.name = "a", .tenant = "a", .guaranteed_gpus = 16, .max_gpus = 24},
      {.name = "b", .tenant = "b", .guaranteed_gpus = 8, .max_running_jobs = 1},
      {.name = "c", .tenant = "c"}};
  // a runs 16 on nodes 0-1; c borrows nodes 2-3 (its jobs past min run time, but reclaim is off
  // here so that the room stays taken).
  for (uint32_t n = 0; n < 4; ++n) {
    JobSpec j = Job(100 + n, 1, 8, n < 2 ? 0 : 2);
    ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = 0xFF, .gpu_milli = 1000}}}, 0).ok());
  }
  JobSpec b_running = Job(200, 1, 1, 1);
  std::vector<JobSpec> pending = {
      Job(1, 5000, 8, 2),  // 40,000 GPUs: more than the cluster's 32
      Job(2, 4, 8, 0),     // 32 GPUs: more than a's cap of 24
      Job(3, 1, 8, 0),     // 16 + 8 = 24 is a's cap: fits the cap, no room
      Job(4, 2, 8, 0),     // 16 + 16 > 24: held back by a's cap now
      Job(5, 1, 8, 1),     // within b's guarantee of 8, no room
      Job(6, 1, 8, 2),     // c: no guarantee, no room
  };
  for (size_t i = 0; i < pending.size(); ++i) pending[i].submit_ns = Sec(static_cast<double>(i));
  PolicyConfig c;
  c.reclaim = false;
  c.max_reservations = 0;
  Decisions d = TenantDecide(s, pending, queues, Sec(100), c, /*explain=*/true);
  EXPECT_TRUE(d.binds.empty());
  ASSERT_EQ(d.waits.size(), pending.size());
  auto expect = [&](uint64_t id, WaitKind kind, const std::string& words) {
    const WaitReason* w = WaitOf(d, id);
    ASSERT_NE(w, nullptr) << "job " << id << " has no reason";
    EXPECT_EQ(w->kind, kind) << "job " << id << ": " << w->text;
    EXPECT_NE(w->text.find(words), std::string::npos) << "job " << id << ": " << w->text;
  };
  expect(1, WaitKind::kNeverFits, "asks 40000 GPUs; the cluster has 32 in all");
  expect(2, WaitKind::kNeverFits, "asks 32 GPUs, more than tenant a may ever hold (its cap, max_gpus, is 24)");
  expect(3, WaitKind::kNoRoom, "past its guarantee of 16 GPUs");
  expect(4, WaitKind::kQueueCap, "tenant a's running jobs and this one would pass its cap of 24 GPUs");
  expect(5, WaitKind::kNoRoom, "within tenant b's guarantee of 8 GPUs");
  expect(6, WaitKind::kNoRoom, "tenant c has no guarantee");

  // b at its running-job limit; a reservation for the first blocked job.
  ASSERT_TRUE(s.Release(JobId(103), Sec(100)).ok());
  ASSERT_TRUE(s.Bind(b_running, {.tasks = {{.node = NodeId(3), .gpu_mask = 0x1, .gpu_milli = 1000}}}, Sec(100)).ok());
  std::vector<JobSpec> more = {Job(7, 1, 8, 1), Job(8, 2, 8, 2)};
  more[1].submit_ns = Sec(1);
  more[1].est_runtime_s = 1e6;  // too long to backfill
  c.max_reservations = 1;
  Decisions e = TenantDecide(s, more, queues, Sec(101), c, /*explain=*/true);
  ASSERT_EQ(e.waits.size(), 2u);
  const WaitReason* limit = WaitOf(e, 7);
  ASSERT_NE(limit, nullptr);
  EXPECT_EQ(limit->kind, WaitKind::kQueueJobs) << limit->text;
  EXPECT_NE(limit->text.find("tenant b runs its limit of 1 jobs"), std::string::npos) << limit->text;
  const WaitReason* held = WaitOf(e, 8);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->kind, WaitKind::kReserved) << held->text;
  EXPECT_EQ(e.reservations.size(), 1u);

  // Strict order (no backfill): the jobs behind a blocked one say so.
  c.backfill = false;
  std::vector<JobSpec> strict = {Job(9, 2, 8, 2), Job(10, 1, 1, 2)};
  strict[1].submit_ns = Sec(1);
  strict[1].est_runtime_s = 1e6;  // more work: ordered after job 9
  strict[0].est_runtime_s = 1;
  Decisions f = TenantDecide(s, strict, queues, Sec(101), c, /*explain=*/true);
  ASSERT_NE(WaitOf(f, 10), nullptr);
  EXPECT_EQ(WaitOf(f, 10)->kind, WaitKind::kBlocked) << WaitOf(f, 10)->text;

  // Not asked: no reasons (the simulator's default).
  EXPECT_TRUE(TenantDecide(s, pending, queues, Sec(100), c).waits.empty());
  EXPECT_EQ(WaitKindName(WaitKind::kNeverFits), "never-fits");
}


// ---- Reclaim to a placement: the owner's multi-GPU job needs whole room on one node ----
//
// b (guaranteed nothing) holds every GPU as one-GPU jobs. Adding b's cheapest jobs
// cluster-wide frees the young GPUs of every node and a whole node (or 4 GPUs of one) nowhere
// within the 16 victims of a cycle; reclaim must free one node instead (the pooling
// experiment's 4- and 8-GPU jobs that waited for days under their owners' guarantees).

// One-GPU job `id` of queue q on GPU g of node n, started at `start`.
void BindOneGpu(ClusterState& s, uint64_t id, uint32_t q, uint32_t n, int g, int64_t start,
                bool preemptible = true) {
  JobSpec j = Job(id, 1, 1, q);
  j.preemptible = preemptible;
  ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = 1u << g, .gpu_milli = 1000}}},
                     start).ok());
}

uint64_t OneGpuId(uint32_t n, int g) { return 100 + n * 8 + static_cast<uint64_t>(g); }

// Fills nodes [0, nodes) with b's (queue 1) one-GPU jobs: GPUs below `young` of every node
// started at 1000 s (cheap: little work lost at 2000 s), the rest at 100 s, except on node
// `cheap_node`, whose older jobs started at 600 s (the cheapest node to free as a whole).
void FillWithOneGpuJobs(ClusterState& s, uint32_t nodes, int young, uint32_t cheap_node) {
  for (uint32_t n = 0; n < nodes; ++n) {
    for (int g = 0; g < 8; ++g) {
      const double start = g < young ? 1000 + n : (n == cheap_node ? 600 : 100) + n;
      BindOneGpu(s, OneGpuId(n, g), 1, n, g, Sec(start + g * 0.1));
    }
  }
}

std::set<uint64_t> Victims(const Decisions& d) {
  std::set<uint64_t> v;
  for (const auto& p : d.preemptions) {
    EXPECT_EQ(p.reason, "reclaim");
    v.insert(p.victim.value());
  }
  return v;
}

// An 8-GPU job of a, within its guarantee: the 16 cheapest of b's jobs are GPUs 0-3 of every
// node, so cheapest-first reclaim frees no node; reclaim frees node 1 (8 victims, the least
// work lost of any node) and binds the job there. Before the node-targeted pass: no victims,
// no bind, a waited.
TEST(ReclaimToPlacement, FreesAWholeNodeForAnEightGpuJob) {
  ClusterState s = MakeCluster({.nodes = 4});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16}, {.name = "b"}};
  FillWithOneGpuJobs(s, 4, /*young=*/4, /*cheap_node=*/1);
  Decisions d = TenantDecide(s, {Job(1, 1, 8, 0)}, queues, Sec(2000));
  std::set<uint64_t> want;
  for (int g = 0; g < 8; ++g) want.insert(OneGpuId(1, g));
  EXPECT_EQ(Victims(d), want);
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
  ASSERT_EQ(d.binds[0].placement.tasks.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(1));
}

// A gang of 2 x 8 GPUs: reclaim frees the two cheapest nodes whole (node 1, then node 3, whose
// older jobs are the youngest of the rest), 16 victims, and places the gang there.
TEST(ReclaimToPlacement, FreesWholeNodesForAGang) {
  ClusterState s = MakeCluster({.nodes = 4});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16}, {.name = "b"}};
  FillWithOneGpuJobs(s, 4, /*young=*/4, /*cheap_node=*/1);
  Decisions d = TenantDecide(s, {Job(1, 2, 8, 0)}, queues, Sec(2000));
  std::set<uint64_t> want;
  for (uint32_t n : {1u, 3u}) {
    for (int g = 0; g < 8; ++g) want.insert(OneGpuId(n, g));
  }
  EXPECT_EQ(Victims(d), want);
  ASSERT_EQ(d.binds.size(), 1u);
  std::set<uint32_t> nodes;
  for (const TaskBinding& t : d.binds[0].placement.tasks) nodes.insert(t.node.value());
  EXPECT_EQ(nodes, (std::set<uint32_t>{1, 3}));
}

// A 4-GPU job on 8 nodes: the 16 cheapest are GPUs 0-1 of every node (2 free per node); reclaim
// takes 4 jobs of node 5: its two young ones and its two cheapest older ones (the latest
// started, on GPUs 6 and 7).
TEST(ReclaimToPlacement, FreesFourGpusOfOneNodeForAFourGpuJob) {
  ClusterState s = MakeCluster({.nodes = 8});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8}, {.name = "b"}};
  FillWithOneGpuJobs(s, 8, /*young=*/2, /*cheap_node=*/5);
  Decisions d = TenantDecide(s, {Job(1, 1, 4, 0)}, queues, Sec(2000));
  EXPECT_EQ(Victims(d), (std::set<uint64_t>{OneGpuId(5, 0), OneGpuId(5, 1), OneGpuId(5, 6),
                                           OneGpuId(5, 7)}));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(5));
}

// The cheapest node to free holds one job reclaim may not take: of queue c, within its own
// guarantee, or of b but not preemptible. Reclaim frees another node and leaves that job
// running; before the node-targeted pass a waited (no victims at all).
TEST(ReclaimToPlacement, NeverTakesAQueueWithinItsGuaranteeNorANonPreemptibleJob) {
  for (bool within_guarantee : {true, false}) {
    SCOPED_TRACE(within_guarantee ? "within its guarantee" : "not preemptible");
    ClusterState s = MakeCluster({.nodes = 4});
    std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16},
                                     {.name = "b"},
                                     {.name = "c", .guaranteed_gpus = 8}};
    // Node 1 is the cheapest to free but for its GPU 7, the youngest job of all.
    for (uint32_t n = 0; n < 4; ++n) {
      for (int g = 0; g < 8; ++g) {
        if (n == 1 && g == 7) continue;
        const double start = g < 4 ? 1000 + n : (n == 1 ? 600 : 100) + n;
        BindOneGpu(s, OneGpuId(n, g), 1, n, g, Sec(start + g * 0.1));
      }
    }
    const uint64_t guarded = OneGpuId(1, 7);
    BindOneGpu(s, guarded, within_guarantee ? 2 : 1, 1, 7, Sec(1900),
               /*preemptible=*/within_guarantee);
    Decisions d = TenantDecide(s, {Job(1, 1, 8, 0)}, queues, Sec(2000));
    const std::set<uint64_t> victims = Victims(d);
    EXPECT_FALSE(victims.count(guarded));
    ASSERT_EQ(d.binds.size(), 1u);
    const NodeId node = d.binds[0].placement.tasks[0].node;
    EXPECT_NE(node, NodeId(1));
    EXPECT_EQ(victims.size(), 8u);  // exactly the 8 jobs of the node freed
    for (uint64_t v : victims) EXPECT_EQ((v - 100) / 8, node.value()) << v;
  }
}

// The cheapest victim is a 2 x 4-GPU gang G of b with a task on node 0 and one on node 4, which
// holds a reservation (held nodes take no binds). Cheapest-first reclaim takes G and 15 young
// one-GPU jobs and frees no whole node; the node-targeted pass then frees node 0 (G and node
// 0's four young jobs, the least work lost). The plan must name G among its victims: it is
// applied to the real state, where G still runs on node 0 unless preempted. (Undoing the
// first pass by re-binding its victims on the trial copy failed for G, whose task lies on the
// held node; G stayed released on the trial, was skipped as a victim, and the plan placed the
// job on GPUs G still held: the cycle then failed binding it.)
TEST(ReclaimToPlacement, AVictimWithATaskOnAHeldNodeIsNamedNotAssumedGone) {
  ClusterState s = MakeCluster({.nodes = 5});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16}, {.name = "b"}};
  for (int g = 0; g < 4; ++g) BindOneGpu(s, OneGpuId(0, g), 1, 0, g, Sec(1000 + g * 0.1));
  JobSpec gang = Job(50, 2, 4, 1);
  ASSERT_TRUE(s.Bind(gang,
                     {.tasks = {{.node = NodeId(0), .gpu_mask = 0xF0, .gpu_milli = 1000},
                                {.node = NodeId(4), .gpu_mask = 0x0F, .gpu_milli = 1000}}},
                     Sec(1999))
                  .ok());
  for (uint32_t n = 1; n < 4; ++n) {
    for (int g = 0; g < 8; ++g) {
      const double start = g < 4 ? 1000 + n : (n == 1 ? 600 : 100) + n;
      BindOneGpu(s, OneGpuId(n, g), 1, n, g, Sec(start + g * 0.1));
    }
  }
  s.SetHeld(NodeId(4), true);
  const JobSpec job = Job(1, 1, 8, 0);
  std::optional<PreemptionPlan> plan = PlanPreemption(s, job, queues, Sec(2000), {});
  ASSERT_TRUE(plan.has_value());
  std::set<uint64_t> victims;
  for (JobId v : plan->victims) victims.insert(v.value());
  EXPECT_TRUE(victims.count(50)) << "G holds GPUs 4-7 of node 0";
  ASSERT_EQ(plan->placement.tasks.size(), 1u);
  EXPECT_EQ(plan->placement.tasks[0].node, NodeId(0));
  // What the scheduler does with the plan: release the victims, bind the job.
  ClusterState after = s;
  for (JobId v : plan->victims) ASSERT_TRUE(after.Release(v, Sec(2000)).ok());
  const Status bound = after.Bind(job, plan->placement, Sec(2000));
  EXPECT_TRUE(bound.ok()) << bound.ToString();
}

// Priority preemption does not take the node-targeted pass: b's higher-priority 8-GPU job finds
// only pieces among the 16 cheapest lower-priority jobs of its own queue (4 GPUs per node), and
// waits, where reclaim (FreesAWholeNodeForAnEightGpuJob, the same cluster) frees node 1 whole.
TEST(ReclaimToPlacement, PriorityPreemptionDoesNotFreeANodePieceByPiece) {
  ClusterState s = MakeCluster({.nodes = 4});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 16}, {.name = "b"}};
  FillWithOneGpuJobs(s, 4, /*young=*/4, /*cheap_node=*/1);
  JobSpec job = Job(1, 1, 8, 1);
  job.priority = 10;
  EXPECT_FALSE(PlanPreemption(s, job, queues, Sec(2000), {}).has_value());
  // Four GPUs are within the cheapest victims' reach on one node: priority still preempts.
  JobSpec four = Job(2, 1, 4, 1);
  four.priority = 10;
  std::optional<PreemptionPlan> plan = PlanPreemption(s, four, queues, Sec(2000), {});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->victims.size(), 4u);
}

}  // namespace
}  // namespace gpool::sched
