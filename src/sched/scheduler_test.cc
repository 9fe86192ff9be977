#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>

#include "sched/backfill.h"
#include "sched/power.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

std::unique_ptr<Policy> Make(PolicyConfig c = {}) { return testing::MakePolicy(c); }

Decisions RunPolicy(const Policy& p, const ClusterState& s, const std::vector<JobSpec>& pending,
              const std::vector<QueueSpec>& queues, int64_t now) {
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now};
  StatusOr<Decisions> d = p.Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : Decisions{};
}

// Starts `j` where the policy would put it on an empty-enough cluster (test setup).
void Start(ClusterState& s, const JobSpec& j, int64_t now) {
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p) << "setup job " << j.id.value() << " does not fit";
  ASSERT_TRUE(s.Bind(j, *p, now).ok());
}

// A canonical text of decisions, to compare runs.
std::string Text(const Decisions& d) {
  std::string s;
  for (const auto& p : d.preemptions) s += fmt::format("P{}>{} {};", p.victim.value(), p.for_job.value(), p.reason);
  for (const auto& b : d.binds) {
    s += fmt::format("B{}{}:", b.job.value(), b.backfilled ? "*" : "");
    for (const auto& t : b.placement.tasks) s += fmt::format("{}/{:x}/{},", t.node.value(), t.gpu_mask, t.gpu_milli);
    s += ";";
  }
  for (const auto& r : d.reservations) {
    s += fmt::format("R{}@{}:", r.job.value(), r.start_ns);
    for (NodeId n : r.nodes) s += fmt::format("{},", n.value());
  }
  for (const auto& p : d.power) s += fmt::format("W{}{}", p.node.value(), PowerStateName(p.target));
  return s;
}

TEST(Policy, BindsInOrderAndKeepsGangsWhole) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 3, 8), Job(2, 2, 8), Job(3, 1, 4)};
  pending[0].submit_ns = 0;
  pending[1].submit_ns = 1;
  pending[2].submit_ns = 2;
  PolicyConfig c;
  c.backfill = false;
  Decisions d = RunPolicy(*Make(c), s, pending, queues, Sec(1));
  // Job 1 takes 3 of 4 nodes; job 2 (2 nodes) can't fit and, without backfill, blocks job 3.
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
  EXPECT_EQ(d.binds[0].placement.tasks.size(), 3u);
  // With backfill, job 2 gets a reservation (job 1 is assumed to end after assumed_runtime_s)
  // on two nodes, and job 3 is backfilled on the node outside it.
  Decisions e = RunPolicy(*Make(), s, pending, queues, Sec(1));
  ASSERT_EQ(e.binds.size(), 2u);
  EXPECT_EQ(e.binds[1].job, JobId(3));
  EXPECT_TRUE(e.binds[1].backfilled);
  ASSERT_EQ(e.reservations.size(), 1u);
  EXPECT_EQ(e.reservations[0].job, JobId(2));
  EXPECT_EQ(e.reservations[0].nodes.size(), 2u);
  for (NodeId n : e.reservations[0].nodes) EXPECT_NE(n, e.binds[1].placement.tasks[0].node);
  // With no assumed run time nothing can be promised, so there is no reservation.
  PolicyConfig no_assume;
  no_assume.assumed_runtime_s = 0;
  EXPECT_TRUE(RunPolicy(*Make(no_assume), s, pending, queues, Sec(1)).reservations.empty());
}

// The last job of a cycle gets its reservation only where one can matter: explanations or power
// management (no later job can be held off the nodes). Binds are the same either way.
TEST(Policy, TheLastJobsReservationIsMadeOnlyWhereItMatters) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec ends = Job(50, 1, 8);
  ends.est_runtime_s = 100;
  ASSERT_TRUE(s.Bind(ends, {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}}}, 0).ok());
  ASSERT_TRUE(s.Bind(Job(51, 1, 4), {.tasks = {{.node = NodeId(1), .gpu_mask = 0x0F}}}, 0).ok());
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 2, 8)};
  auto policy = Make({.least_work_first = false});  // age order: job 1 first below
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = Sec(10)};
  StatusOr<Decisions> quiet = policy->Schedule(in);
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->reservations.empty());
  EXPECT_TRUE(quiet->binds.empty());
  in.explain = true;
  StatusOr<Decisions> told = policy->Schedule(in);
  ASSERT_TRUE(told.ok());
  ASSERT_EQ(told->reservations.size(), 1u);
  ASSERT_EQ(told->waits.size(), 1u);
  EXPECT_EQ(told->waits[0].kind, WaitKind::kReserved);
  EXPECT_TRUE(told->binds.empty());
  in.explain = false;
  pending.push_back(Job(2, 1, 4));  // a later job: the reservation holds node 1 against it
  pending[1].submit_ns = 1;
  StatusOr<Decisions> two = policy->Schedule(in);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->reservations.size(), 1u);
}

TEST(Policy, BackfillDoesNotDelayTheReservation) {
  // 4 nodes. Node 0 runs a job ending at t=100, node 1 a job with no estimate, node 3 half used
  // by a job with no estimate. Head: a 2-node gang -> reserved on nodes 0 and 2 from t=100.
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 4});
  JobSpec ends = Job(50, 1, 8);
  ends.est_runtime_s = 100;
  ASSERT_TRUE(s.Bind(ends, {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}}}, 0).ok());
  ASSERT_TRUE(s.Bind(Job(51, 1, 8), {.tasks = {{.node = NodeId(1), .gpu_mask = 0xFF}}}, 0).ok());
  ASSERT_TRUE(s.Bind(Job(52, 1, 4), {.tasks = {{.node = NodeId(3), .gpu_mask = 0x0F}}}, 0).ok());
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 2, 8), Job(2, 1, 8), Job(3, 1, 4)};
  for (size_t i = 0; i < pending.size(); ++i) pending[i].submit_ns = static_cast<int64_t>(i);
  pending[1].est_runtime_s = 1000;
  const int64_t now = Sec(10);

  std::optional<Reservation> before = ComputeReservation(s, pending[0], {}, now);
  ASSERT_TRUE(before);
  EXPECT_EQ(before->start_ns, Sec(100));

  // Age order (least_work_first off), so that the head is job 1, which has no estimate: the
  // backfill rule is what is tested here, not the order.
  Decisions d = RunPolicy(*Make({.least_work_first = false}), s, pending, queues, now);
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(1));
  EXPECT_EQ(d.reservations[0].start_ns, Sec(100));
  EXPECT_EQ(d.reservations[0].nodes, (std::vector<NodeId>{NodeId(0), NodeId(2)}));
  // Job 2 (a full node for 1000 s) would take node 2 and push the head past t=100: not placed.
  // Job 3 (4 GPUs) is backfilled onto node 3, outside the reservation.
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(3));
  EXPECT_TRUE(d.binds[0].backfilled);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(3));

  // Applying the binds leaves the head's reservation exactly where it was.
  ClusterState after = s;
  for (const BindDecision& b : d.binds) ASSERT_TRUE(after.Bind(pending[2], b.placement, now).ok());
  std::optional<Reservation> again = ComputeReservation(after, pending[0], {}, now);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->start_ns, before->start_ns);
  EXPECT_EQ(again->nodes, before->nodes);
}

TEST(Policy, ShortJobsBackfillOntoReservedNodesWhenTheyEndBeforeTheShadowTime) {
  // As above: the head (2 nodes) is reserved on nodes 0 and 2 from t=100. Job 2 asks a full node
  // until t=101 and may not use reserved node 2; job 3 asks one for 50 s from t=10, ends at
  // t=60, before the reservation starts, so EASY lets it use node 2.
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 4});
  JobSpec ends = Job(50, 1, 8);
  ends.est_runtime_s = 100;
  ASSERT_TRUE(s.Bind(ends, {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}}}, 0).ok());
  ASSERT_TRUE(s.Bind(Job(51, 1, 8), {.tasks = {{.node = NodeId(1), .gpu_mask = 0xFF}}}, 0).ok());
  ASSERT_TRUE(s.Bind(Job(52, 1, 4), {.tasks = {{.node = NodeId(3), .gpu_mask = 0x0F}}}, 0).ok());
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 2, 8), Job(2, 1, 8), Job(3, 1, 8)};
  for (size_t i = 0; i < pending.size(); ++i) pending[i].submit_ns = static_cast<int64_t>(i);
  pending[1].est_runtime_s = 91;  // would end at t=101: too late for reserved node 2
  pending[2].est_runtime_s = 50;  // ends at t=60: fits before the shadow time
  const int64_t now = Sec(10);

  // Age order (least_work_first off), so that the head is job 1, which has no estimate: the
  // backfill rule is what is tested here, not the order.
  Decisions d = RunPolicy(*Make({.least_work_first = false}), s, pending, queues, now);
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].start_ns, Sec(100));
  EXPECT_EQ(d.reservations[0].nodes, (std::vector<NodeId>{NodeId(0), NodeId(2)}));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(3));
  EXPECT_TRUE(d.binds[0].backfilled);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(2));

  // The short job doesn't delay the head: with it bound, the reservation is unchanged.
  ClusterState after = s;
  ASSERT_TRUE(after.Bind(pending[2], d.binds[0].placement, now).ok());
  std::optional<Reservation> again = ComputeReservation(after, pending[0], {}, now);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->start_ns, Sec(100));
  EXPECT_EQ(again->nodes, d.reservations[0].nodes);
}

TEST(Policy, ReserveOldestGivesTheReservationToTheOldestBlockedJob) {
  // Two 8-GPU nodes: node 0 full (job 90), node 1 half used (job 91), 4 GPUs free. Pending,
  // both 8 GPUs and blocked: job 1 (oldest, 5,000 s) and job 2 (newer, 100 s). Least work first
  // orders 2 before 1; with reserve_oldest the reservation still goes to 1, the job that has
  // waited longest.
  // Neither running job is past short_preempt.min_run_s, so nothing is preempted.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec r90 = Job(90, 1, 8), r91 = Job(91, 1, 4);
  r90.est_runtime_s = 1000;
  r91.est_runtime_s = 2000;
  Start(s, r90, 0);
  Start(s, r91, 0);
  std::vector<QueueSpec> queues = {{.name = "q"}, {.name = "r", .max_running_jobs = 0}};
  // Job 3, newest and longest, is last in the order: the cycle's last job gets no
  // reservation computed (it would change nothing), so it keeps jobs 1 and 2 from being last.
  std::vector<JobSpec> pending = {Job(1, 1, 8), Job(2, 1, 8), Job(3, 1, 8)};
  pending[0].est_runtime_s = 5000;
  pending[0].submit_ns = Sec(1);
  pending[1].est_runtime_s = 100;
  pending[1].submit_ns = Sec(2);
  pending[2].est_runtime_s = 100000;
  pending[2].submit_ns = Sec(3);
  PolicyConfig c;  // reserve_oldest is the default
  Decisions d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  EXPECT_TRUE(d.binds.empty());
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(1));
  // Without the rule, the first blocked job in the order takes it.
  PolicyConfig head;
  head.reserve_oldest = false;
  d = RunPolicy(*Make(head), s, pending, queues, Sec(10));
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(2));
  // An older job that can't take a reservation (its queue runs its limit of 0 jobs) doesn't
  // keep it from the newer one.
  pending[0].queue = QueueId(1);
  d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(2));
}

TEST(Policy, ReserveOldestStaysInsideTheQueueWhoseTurnItIs) {
  // Two 8-GPU nodes, 4 GPUs free; queue b runs 12 GPUs (jobs 90, 91), queue a none, no quotas.
  // Pending, all 8 GPUs and blocked: b's job 1 (oldest: say a job b had preempted and
  // requeued), a's job 2 (older, long) and a's job 4 (newer, short). Fair share puts a first
  // (share 0 against b's 12/16), least work puts 4 before 2. The reservation goes to a, the
  // tenant whose turn it is, and inside a to its oldest job, 2: not to b's older job 1, which
  // would hand the next free GPUs to the tenant holding most of them.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec r90 = Job(90, 1, 8, 1), r91 = Job(91, 1, 4, 1);
  r90.est_runtime_s = 1000;
  r91.est_runtime_s = 2000;
  Start(s, r90, 0);
  Start(s, r91, 0);
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  std::vector<JobSpec> pending = {Job(1, 1, 8, 1), Job(2, 1, 8, 0), Job(4, 1, 8, 0)};
  pending[0].est_runtime_s = 3000;
  pending[0].submit_ns = Sec(1);
  pending[1].est_runtime_s = 5000;
  pending[1].submit_ns = Sec(2);
  pending[2].est_runtime_s = 100;
  pending[2].submit_ns = Sec(3);
  Decisions d = RunPolicy(*Make(), s, pending, queues, Sec(10));
  EXPECT_TRUE(d.binds.empty());
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(2));
  // The head-of-order rule gives it to a's least-work head.
  PolicyConfig head;
  head.reserve_oldest = false;
  d = RunPolicy(*Make(head), s, pending, queues, Sec(10));
  ASSERT_EQ(d.reservations.size(), 1u);
  EXPECT_EQ(d.reservations[0].job, JobId(4));
}

TEST(Policy, ReservationWaitsForReserveAfter) {
  // Job 2 (2 nodes) is blocked behind job 1 (3 of 4 nodes). With reserve_after_s=100 it gets no
  // reservation while younger than 100 s, and one once it has waited that long.
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 3, 8), Job(2, 2, 8), Job(3, 1, 4)};
  for (size_t i = 0; i < pending.size(); ++i) pending[i].submit_ns = static_cast<int64_t>(i);
  PolicyConfig c;
  c.reserve_after_s = 100;
  Decisions young = RunPolicy(*Make(c), s, pending, queues, Sec(50));
  EXPECT_TRUE(young.reservations.empty());
  ASSERT_EQ(young.binds.size(), 2u);
  EXPECT_FALSE(young.binds[1].backfilled);
  Decisions old = RunPolicy(*Make(c), s, pending, queues, Sec(101));
  ASSERT_EQ(old.reservations.size(), 1u);
  EXPECT_EQ(old.reservations[0].job, JobId(2));
  ASSERT_EQ(old.binds.size(), 2u);
  EXPECT_TRUE(old.binds[1].backfilled);
  EXPECT_FALSE(ParsePolicyConfig("reserve_after_s=-1").ok());
  StatusOr<PolicyConfig> parsed = ParsePolicyConfig("reserve_after_s=1h,backfill_reserved_nodes=false");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->reserve_after_s, 3600);
  EXPECT_FALSE(parsed->backfill_reserved_nodes);
}

TEST(Policy, LeastWorkFirstInsideAQueueUntilAJobStarves) {
  // One free node (8 GPUs) for three 8-GPU jobs of one queue: an old long job, a newer short
  // one, and a job with no estimate. Least work first binds the short one; once the old job has
  // waited starvation_age_s it goes first; without least_work_first age decides.
  ClusterState s = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 1, 8), Job(2, 1, 8), Job(3, 1, 8)};
  pending[0].submit_ns = Sec(0);
  pending[0].est_runtime_s = 10000;
  pending[1].submit_ns = Sec(20);
  pending[1].est_runtime_s = 100;
  pending[2].submit_ns = Sec(10);  // no estimate: after every job that has one
  PolicyConfig c;
  c.backfill = false;
  ASSERT_TRUE(c.least_work_first);  // the default
  Decisions d = RunPolicy(*Make(c), s, pending, queues, Sec(60));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(2));
  d = RunPolicy(*Make(c), s, {pending[0], pending[2]}, queues, Sec(60));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
  // Job 1 starves at 8 h (the default age), job 2 doesn't yet: age wins.
  d = RunPolicy(*Make(c), s, pending, queues, Sec(8 * 3600 + 5));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
  c.least_work_first = false;
  d = RunPolicy(*Make(c), s, pending, queues, Sec(60));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
  StatusOr<PolicyConfig> parsed = ParsePolicyConfig("least_work_first=false,starvation_age_s=1h");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_FALSE(parsed->least_work_first);
  EXPECT_EQ(parsed->starvation_age_s, 3600);
}

TEST(Policy, ReclaimsBorrowedGpusAfterMinRuntime) {
  // Queue a is guaranteed 8 GPUs, b none. b borrowed both nodes. a's 8-GPU job reclaims one of
  // b's jobs, but only once that job has run its minimum run time.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8}, {.name = "b"}};
  JobSpec b1 = Job(10, 1, 8, 1), b2 = Job(11, 1, 8, 1);
  b1.min_runtime_s = 60;
  b2.min_runtime_s = 60;
  Start(s, b1, 0);
  Start(s, b2, Sec(5));
  std::vector<JobSpec> pending = {Job(1, 1, 8, 0)};

  Decisions early = RunPolicy(*Make(), s, pending, queues, Sec(30));
  EXPECT_TRUE(early.preemptions.empty());
  EXPECT_TRUE(early.binds.empty());

  Decisions d = RunPolicy(*Make(), s, pending, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(11));  // younger: less GPU-time lost
  EXPECT_EQ(d.preemptions[0].reason, "reclaim");
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));

  // Queue b within its own quota is not reclaimed from.
  queues[1].guaranteed_gpus = 16;
  Decisions none = RunPolicy(*Make(), s, pending, queues, Sec(100));
  EXPECT_TRUE(none.preemptions.empty());
}

TEST(Policy, NeverPreemptsAJobBoundInTheSameCycle) {
  // Queue b (no quota) already borrows node 0. Queue a (guaranteed 8) goes first with job 3,
  // which fits its guarantee but no node: it needs every CPU of a node, and queue c's CPU-only
  // jobs hold one on each. a's job 1 then ranks as borrowing (job 3 counts as a's), so b's
  // starved job 2 is ordered before it and binds on node 1 at `now`, where it costs nothing to
  // preempt. Job 1, within a's guarantee by what runs, then reclaims: the victim must be job
  // 10, which was running when the cycle began, never job 2 bound a moment earlier.
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8}, {.name = "b"}, {.name = "c"}};
  Start(s, Job(10, 1, 8, 1), 0);
  ASSERT_EQ(s.FindRunning(JobId(10))->placement.tasks[0].node, NodeId(0));
  for (uint32_t n = 0; n < 2; ++n) {
    ASSERT_TRUE(s.Bind(Job(30 + n, 1, 0, 2), {.tasks = {{.node = NodeId(n)}}}, 0).ok());
  }
  JobSpec whole_node = Job(3, 1, 8, 0);
  whole_node.task.cpu_milli = 64000;
  std::vector<JobSpec> pending = {Job(1, 1, 8, 0), Job(2, 1, 8, 1), whole_node};
  pending[0].submit_ns = Sec(100);
  pending[1].submit_ns = 0;
  pending[2].submit_ns = Sec(99);
  // No reservation: job 3's would hold node 0 (c's jobs are assumed to end some day).
  Decisions d = RunPolicy(*Make({.starvation_age_s = 10, .max_reservations = 0}), s, pending,
                          queues, Sec(100));
  std::set<uint64_t> bound;
  for (const auto& b : d.binds) bound.insert(b.job.value());
  for (const auto& p : d.preemptions) {
    EXPECT_EQ(bound.count(p.victim.value()), 0u) << "job " << p.victim.value() << " bound and preempted";
    EXPECT_NE(s.FindRunning(p.victim), nullptr) << "victim " << p.victim.value() << " was not running";
  }
  ASSERT_EQ(d.preemptions.size(), 1u) << Text(d);
  EXPECT_EQ(d.preemptions[0].victim, JobId(10));
  EXPECT_EQ(bound, (std::set<uint64_t>{1, 2}));
}

TEST(Policy, HigherPriorityPreemptsWholeGangsOfLeastCost) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 4});
  JobSpec old_gang = Job(10, 2, 8), young_gang = Job(11, 2, 8);
  Start(s, old_gang, 0);
  Start(s, young_gang, Sec(50));
  JobSpec keep = Job(12, 1, 8);
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 1, 8)};
  pending[0].priority = 10;
  Decisions d = RunPolicy(*Make(), s, pending, queues, Sec(100));
  // The younger gang costs less GPU-time: both of its tasks go, the older gang stays.
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(11));
  EXPECT_EQ(d.preemptions[0].reason, "priority");
  ASSERT_EQ(d.binds.size(), 1u);
  // Non-preemptible jobs are never chosen.
  ClusterState t = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  keep.preemptible = false;
  Start(t, keep, 0);
  Decisions none = RunPolicy(*Make(), t, pending, queues, Sec(100));
  EXPECT_TRUE(none.preemptions.empty());
  EXPECT_TRUE(none.binds.empty());
}

TEST(Policy, QueueLimitsHold) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  std::vector<QueueSpec> queues = {{.name = "q", .max_gpus = 8}};
  std::vector<JobSpec> pending = {Job(1, 1, 8), Job(2, 1, 8)};
  pending[1].submit_ns = 1;
  Decisions d = RunPolicy(*Make(), s, pending, queues, Sec(1));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
}

TEST(Policy, SuspendsIdleNodesKeepingTheWarmBuffer) {
  // 8 nodes in 2 leaves, all idle since t=0 but node 0 (busy). Warm buffer 16 GPUs: of 56 free GPUs,
  // 40 may go; the fully idle leaf (0) goes first.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  Start(s, Job(99, 1, 8), 0);  // lands on node 0 (best fit, lowest id)
  std::vector<QueueSpec> queues = {{.name = "q"}};
  PolicyConfig c;
  c.power = {.enabled = true, .idle_timeout_s = 60, .warm_buffer_gpus = 16, .max_suspends_per_cycle = 100};
  Decisions early = RunPolicy(*Make(c), s, {}, queues, Sec(30));
  EXPECT_TRUE(early.power.empty());
  Decisions d = RunPolicy(*Make(c), s, {}, queues, Sec(100));
  ASSERT_EQ(d.power.size(), 5u);
  for (const PowerDecision& p : d.power) EXPECT_EQ(p.target, PowerState::kOff);
  // Leaf 1 (nodes 4-7, all idle) goes first and whole.
  for (uint32_t n = 4; n < 8; ++n) EXPECT_EQ(d.power[n - 4].node, NodeId(n));
  // After these suspends 16 GPUs stay free and on.
  ClusterState after = s;
  for (const PowerDecision& p : d.power) after.SetPower(p.node, PowerState::kOff);
  EXPECT_EQ(after.FreeWholeGpus(after.domains_at(Level::kFabric)[0], kAnyModel), 16);
}

TEST(Policy, KeepsTheRecentArrivalsGpusWarm) {
  // 8 nodes of 8 GPUs, all idle since t=0 but the 24-GPU job on nodes 0-2, submitted at t=900.
  // At t=1000 the fixed buffer (16) lets 3 idle nodes go; with the arrivals of the last 600 s
  // (24 GPUs) only 2 may, and once the job's submission is older than the window, 3 again.
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  JobSpec running = Job(99, 3, 8);
  running.submit_ns = Sec(900);
  Start(s, running, 0);
  std::vector<QueueSpec> queues = {{.name = "q"}};
  PolicyConfig c;
  c.power = {.enabled = true, .idle_timeout_s = 60, .warm_buffer_gpus = 16, .max_suspends_per_cycle = 100};
  ASSERT_EQ(c.power.arrival_window_s, 600);  // the default
  auto suspends = [&](const PolicyConfig& pc, double now_s) {
    Decisions d = RunPolicy(*Make(pc), s, {}, queues, Sec(now_s));
    for (const PowerDecision& p : d.power) EXPECT_EQ(p.target, PowerState::kOff);
    return d.power.size();
  };
  EXPECT_EQ(suspends(c, 1000), 2u);
  EXPECT_EQ(suspends(c, 1600), 3u);
  PolicyConfig fixed = c;
  fixed.power.arrival_window_s = 0;
  EXPECT_EQ(suspends(fixed, 1000), 3u);

  // Resume side: every idle node off, nothing pending. The recent 24 GPUs bring 3 nodes back,
  // the fixed buffer 2.
  for (uint32_t n = 3; n < 8; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  Decisions d = RunPolicy(*Make(c), s, {}, queues, Sec(1000));
  EXPECT_EQ(d.power.size(), 3u);
  for (const PowerDecision& p : d.power) EXPECT_EQ(p.target, PowerState::kOn);
  EXPECT_EQ(RunPolicy(*Make(fixed), s, {}, queues, Sec(1000)).power.size(), 2u);
  // Pending jobs count too, fractions rounded up per job: 24 + 8 + 1 GPUs.
  std::vector<JobSpec> pending = {Job(1, 1, 8), testing::Fractional(2, 300)};
  pending[0].submit_ns = Sec(950);
  pending[1].submit_ns = Sec(960);
  EXPECT_EQ(RecentArrivalGpus(s, pending, Sec(1000), 600), 33);
  EXPECT_EQ(RecentArrivalGpus(s, pending, Sec(1000), 0), 0);
  EXPECT_EQ(RecentArrivalGpus(s, pending, Sec(1545), 600), 9);  // the running job is older
}

// Three leaves of 4 nodes. The lowest-id off nodes, 0 and 4, sit in leaves 0 and 1, whose other
// nodes are on and busy; leaf 2 (nodes 8-11) is wholly off. A 32-GPU gang waits; at 2 resumes
// per cycle the policy boots 8 and 9 (the leaf with the most off nodes, so that whole leaves
// come back), where node-id order would boot 0 and 4, one in each leaf.
TEST(Policy, ResumesWholeLeavesOnDemandAtALimitedRate) {
  ClusterState s = MakeCluster({.nodes = 12, .nodes_per_leaf = 4, .leaves_per_pod = 3});
  for (uint32_t n : {0u, 4u, 8u, 9u, 10u, 11u}) s.SetPower(NodeId(n), PowerState::kOff);
  for (uint32_t n : {1u, 2u, 3u, 5u, 6u, 7u}) testing::Fill(s, n, 8, 100 + n);
  std::vector<QueueSpec> queues = {{.name = "q"}};
  PolicyConfig c;
  // The fixed limit only: the scaled one (every node by default) would boot all four at once.
  // No arrival window: the warm buffer would ask for the gang's 32 GPUs again (power.h).
  c.power = {.enabled = true, .warm_buffer_gpus = 0, .arrival_window_s = 0, .boot_latency_s = 120,
             .max_resumes_per_cycle = 2, .max_resuming_fraction = 0};
  std::vector<JobSpec> pending = {Job(1, 4, 8)};
  Decisions d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  EXPECT_TRUE(d.binds.empty());
  ASSERT_EQ(d.power.size(), 2u);  // 4 nodes wanted, 2 per cycle
  std::set<uint32_t> resumed;
  for (const PowerDecision& p : d.power) {
    EXPECT_EQ(p.target, PowerState::kOn);
    EXPECT_EQ(p.ready_ns, Sec(130));
    resumed.insert(p.node.value());
  }
  EXPECT_EQ(resumed, (std::set<uint32_t>{8, 9}));
  // With the default storm limit (the cluster's size): the whole leaf boots in one wave.
  c.power.max_resuming_fraction = PowerConfig{}.max_resuming_fraction;
  d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  resumed.clear();
  for (const PowerDecision& p : d.power) resumed.insert(p.node.value());
  EXPECT_EQ(resumed, (std::set<uint32_t>{8, 9, 10, 11}));
}

TEST(Policy, ResumesABigGangsNodesInOneBootWaveByDefault) {
  // 160 suspended 8-GPU nodes and a 1,024-GPU gang (128 x 8): with the default limits all 128
  // nodes it needs boot in this cycle (the old limits, 8 per cycle and 32 at once, made it wait
  // four boot latencies), and the warm buffer's 32 more nodes: it keeps the size of the last
  // 10 minutes' arrivals (this gang's 1,024 GPUs) free for the next burst, and the storm limit
  // scales to the whole cluster. With the fixed limits only (max_resuming_fraction=0), 128
  // boot and the buffer waits for the next wave.
  ClusterState s = MakeCluster({.nodes = 160, .nodes_per_leaf = 8, .leaves_per_pod = 20});
  for (uint32_t n = 0; n < 160; ++n) s.SetPower(NodeId(n), PowerState::kOff);
  std::vector<QueueSpec> queues = {{.name = "q"}};
  PolicyConfig c;
  c.power.enabled = true;
  std::vector<JobSpec> pending = {Job(1, 128, 8)};
  Decisions d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  EXPECT_TRUE(d.binds.empty());
  EXPECT_EQ(d.power.size(), 160u);
  for (const PowerDecision& p : d.power) EXPECT_EQ(p.target, PowerState::kOn);
  c.power.max_resuming_fraction = 0;
  d = RunPolicy(*Make(c), s, pending, queues, Sec(10));
  EXPECT_EQ(d.power.size(), 128u);
}

TEST(Policy, JobsWithoutAnEstimateRankAtTheMeanByDefault) {
  // 2 free GPUs; pending 1 (100 s), 2 (10,000 s) and 3 (no estimate, the oldest), 1 GPU each.
  // By default 3 ranks as if it ran the mean (5,050 s): 1 and 3 start, 2 waits. With
  // least_work_unknown=last, 3 waits behind every estimated job.
  ClusterState s = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  Start(s, Job(99, 1, 6), 0);  // no estimate: nothing to preempt it for
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 1, 1), Job(2, 1, 1), Job(3, 1, 1)};
  pending[0].est_runtime_s = 100;
  pending[1].est_runtime_s = 10000;
  pending[0].submit_ns = Sec(3);
  pending[1].submit_ns = Sec(2);
  pending[2].submit_ns = Sec(1);
  auto bound = [&](const PolicyConfig& c) {
    std::vector<uint64_t> ids;
    for (const auto& b : RunPolicy(*Make(c), s, pending, queues, Sec(10)).binds) ids.push_back(b.job.value());
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  EXPECT_EQ(bound(PolicyConfig{}), (std::vector<uint64_t>{1, 3}));
  StatusOr<PolicyConfig> last = ParsePolicyConfig("least_work_unknown=last");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(bound(*last), (std::vector<uint64_t>{1, 2}));
}

TEST(Policy, SameInputSameDecisions) {
  ClusterState s = MakeCluster({.nodes = 32, .nodes_per_leaf = 4, .leaves_per_pod = 4});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 64}, {.name = "b", .weight = 2}};
  std::vector<JobSpec> pending;
  for (uint64_t i = 0; i < 60; ++i) {
    JobSpec j = (i % 5 == 0) ? Job(i + 1, 4, 8, i % 2) : (i % 3 == 0) ? testing::Fractional(i + 1, 300, i % 2)
                                                                        : Job(i + 1, 1, 1 + i % 4, i % 2);
    j.submit_ns = static_cast<int64_t>(i % 7);
    j.priority = static_cast<int32_t>(i % 3);
    j.est_runtime_s = 100 + static_cast<double>(i);
    pending.push_back(j);
  }
  for (uint64_t i = 0; i < 12; ++i) {
    JobSpec r = Job(1000 + i, 1, 8, 1);
    r.est_runtime_s = 50;
    Start(s, r, 0);
  }
  PolicyConfig c;
  c.power.enabled = true;
  auto p1 = Make(c), p2 = Make(c);
  UsageLedger ledger;
  ledger.Advance(s, 0);
  ledger.Advance(s, Sec(20));
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .usage = &ledger, .now_ns = Sec(20)};
  StatusOr<Decisions> a = p1->Schedule(in);
  ClusterState copy = s;
  std::vector<JobSpec> pending2 = pending;
  in.state = &copy;
  in.pending = &pending2;
  StatusOr<Decisions> b = p2->Schedule(in);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->binds.empty());
  EXPECT_EQ(Text(*a), Text(*b));
  // And every bind applies cleanly, in order, after the preemptions.
  for (const auto& p : a->preemptions) ASSERT_TRUE(copy.Release(p.victim, Sec(20)).ok());
  for (const auto& bd : a->binds) {
    const JobSpec* j = nullptr;
    for (const JobSpec& x : pending) if (x.id == bd.job) j = &x;
    ASSERT_NE(j, nullptr);
    ASSERT_TRUE(copy.Bind(*j, bd.placement, Sec(20)).ok()) << bd.job.value();
  }
}

TEST(PolicyConfig, ErrorsNameTheField) {
  StatusOr<PolicyConfig> c = ParsePolicyConfig("backfill=false, power.enabled=true, power.idle_timeout_s=15m");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->backfill);
  EXPECT_TRUE(c->power.enabled);
  EXPECT_DOUBLE_EQ(c->power.idle_timeout_s, 900);
  StatusOr<PolicyConfig> bad = ParsePolicyConfig("power.warm_buffer_gpus=-3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("power.warm_buffer_gpus"), std::string::npos);
  bad = ParsePolicyConfig("backfil=true");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("backfil"), std::string::npos);
  bad = ParsePolicyConfig("max_reservations=two");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_reservations"), std::string::npos);
  PolicyConfig pc;
  pc.fairshare_half_life_s = 0;
  EXPECT_FALSE(MakeDefaultPolicy(pc).ok());
}

TEST(PolicyInput, BadJobIsAnErrorNamingIt) {
  ClusterState s = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  std::vector<QueueSpec> queues = {{.name = "q"}};
  std::vector<JobSpec> pending = {Job(1, 1, 1), Job(1, 1, 1)};
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues};
  StatusOr<Decisions> d = Make()->Schedule(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("job 1"), std::string::npos);
  pending = {Job(2, 1, 1, 3)};
  d = Make()->Schedule(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("queue"), std::string::npos);
}

}  // namespace
}  // namespace gpool::sched
