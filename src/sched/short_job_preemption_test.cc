// Short-job preemption (short_job_preemption.h) through the default policy: each rule of the
// header has a case where it alone stops the preemption.
#include "sched/short_job_preemption.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sched/scheduler.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

Decisions Schedule1(const PolicyConfig& c, const ClusterState& s, const std::vector<JobSpec>& pending,
              const std::vector<QueueSpec>& queues, int64_t now) {
  StatusOr<std::unique_ptr<Policy>> p = MakeDefaultPolicy(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now};
  StatusOr<Decisions> d = (*p)->Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : Decisions{};
}

void StartOn(ClusterState& s, const JobSpec& j, uint32_t node, int64_t now) {
  Placement p{.tasks = {{.node = NodeId(node), .gpu_mask = (1u << j.task.gpus) - 1, .gpu_milli = 1000}}};
  ASSERT_TRUE(s.Bind(j, p, now).ok());
}

// One 8-GPU node held by a long job L (100,000 s estimate, submitted and started at 0) of
// queue `long_queue`; a short 8-GPU job S (1,000 s) of queue 0 arrives at 3,000 s.
struct Case {
  ClusterState state = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  std::vector<QueueSpec> queues = {{.name = "a", .guaranteed_gpus = 8}, {.name = "b"}};
  JobSpec long_job = Job(10, 1, 8, 0);
  JobSpec short_job = Job(1, 1, 8, 0);
  Case(uint32_t long_queue = 0, int64_t long_start_ns = 0) {
    long_job.queue = QueueId(long_queue);
    long_job.est_runtime_s = 100000;
    long_job.submit_ns = 0;
    short_job.est_runtime_s = 1000;
    short_job.submit_ns = Sec(3000);
    StartOn(state, long_job, 0, long_start_ns);
  }
};

TEST(ShortJobPreemption, ShortJobPreemptsALongJobOfItsOwnQueue) {
  Case c;
  PolicyConfig config;
  config.priority_preemption = false;
  config.reclaim = false;  // the short-job rule alone
  ASSERT_TRUE(config.short_preempt.enabled);  // the default
  Decisions d = Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(10));
  EXPECT_EQ(d.preemptions[0].for_job, JobId(1));
  EXPECT_EQ(d.preemptions[0].reason, "short job");
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));

  config.short_preempt.enabled = false;
  d = Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000));
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.binds.empty());
}

TEST(ShortJobPreemption, EachRuleStopsIt) {
  PolicyConfig config;
  config.reclaim = false;
  config.priority_preemption = false;
  {  // ratio (2 by default): 96,000 s left < 2 x 50,000 s
    Case c;
    c.short_job.est_runtime_s = 50000;
    EXPECT_TRUE(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.empty());
    c.short_job.est_runtime_s = 40000;  // 96,000 >= 2 x 40,000 and its wait is worth it
    EXPECT_EQ(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.size(), 1u);
  }
  {  // minimum run: L ran 500 s < min_run_s (600 s)
    Case c(0, Sec(3500));
    EXPECT_TRUE(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.empty());
  }
  {  // run share of its age: L (submitted at 0) ran 400 s of its 5,000 s age < 0.1
    Case c(0, Sec(4600));
    PolicyConfig k = config;
    k.short_preempt.min_run_s = 0;
    EXPECT_TRUE(Schedule1(k, c.state, {c.short_job}, c.queues, Sec(5000)).preemptions.empty());
    k.short_preempt.min_run_fraction = 0.05;  // 400 >= 0.05 x 5,000
    EXPECT_EQ(Schedule1(k, c.state, {c.short_job}, c.queues, Sec(5000)).preemptions.size(), 1u);
  }
  {  // the victim's own min_runtime_s
    Case c;
    c.state = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
    c.long_job.min_runtime_s = 5000;
    StartOn(c.state, c.long_job, 0, 0);
    EXPECT_TRUE(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.empty());
  }
  {  // priority: a higher class is never a victim
    Case c;
    c.state = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
    c.long_job.priority = 1;
    StartOn(c.state, c.long_job, 0, 0);
    EXPECT_TRUE(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.empty());
  }
  {  // no estimate on either side
    Case c;
    c.short_job.est_runtime_s = 0;
    EXPECT_TRUE(Schedule1(config, c.state, {c.short_job}, c.queues, Sec(4000)).preemptions.empty());
  }
}

TEST(ShortJobPreemption, TakesOnlyBorrowedCapacityFromAnotherQueue) {
  PolicyConfig config;
  config.reclaim = false;
  config.priority_preemption = false;
  Case borrowed(1);  // L of queue b, which has no quota: all it holds is borrowed
  Decisions d = Schedule1(config, borrowed.state, {borrowed.short_job}, borrowed.queues, Sec(4000));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, "short job");

  Case owned(1);
  owned.queues[1].guaranteed_gpus = 8;  // now b holds only its own quota
  d = Schedule1(config, owned.state, {owned.short_job}, owned.queues, Sec(4000));
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(d.binds.empty());

  // Priorities compare inside a queue only (EachRuleStopsIt has a's own higher class spared):
  // b's borrowed job is taken at priority 1000 too, so a tenant's priority does not shield
  // what it borrows.
  Case high(1);
  high.state = MakeCluster({.nodes = 1, .nodes_per_leaf = 1});
  high.long_job.priority = 1000;
  StartOn(high.state, high.long_job, 0, 0);
  d = Schedule1(config, high.state, {high.short_job}, high.queues, Sec(4000));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(10));
}

TEST(ShortJobPreemption, NotWhenCapacityComesBackSoonAnyway) {
  // Two nodes: L holds node 0 for long, M (queue 0) ends in 500 s on node 1. S (1,000 s) would
  // wait 500 s: less than the 1,060 s it would cost L, so nothing is preempted; with M ending
  // in 5,000 s it is.
  PolicyConfig config;
  config.reclaim = false;
  config.priority_preemption = false;
  for (const double m_left : {500.0, 5000.0}) {
    ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
    JobSpec l = Job(10, 1, 8, 0), m = Job(11, 1, 8, 0), sj = Job(1, 1, 8, 0);
    l.est_runtime_s = 100000;
    m.est_runtime_s = 4000 + m_left;
    sj.est_runtime_s = 1000;
    sj.submit_ns = Sec(3000);
    StartOn(s, l, 0, 0);
    StartOn(s, m, 1, 0);
    Decisions d = Schedule1(config, s, {sj}, {{.name = "a", .guaranteed_gpus = 16}}, Sec(4000));
    if (m_left < 1000) {
      EXPECT_TRUE(d.preemptions.empty()) << m_left;
    } else {
      ASSERT_EQ(d.preemptions.size(), 1u) << m_left;
      EXPECT_EQ(d.preemptions[0].victim, JobId(10));  // the most work left, not M
    }
  }
}

TEST(ShortJobPreemption, FewestVictimsLargestFirst) {
  // Node 0 holds one 8-GPU job B (remaining 50,000 s); node 1 holds eight 1-GPU jobs with more
  // work left (90,000 s). The 8-GPU short job S preempts B alone, not the eight small jobs
  // whose remaining time is longer: every victim is delayed about S's run time, so the fewest
  // cost least. Nothing else frees capacity for 50,000 s, so S's wait pays for any plan.
  PolicyConfig config;
  config.reclaim = false;
  config.priority_preemption = false;
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec big = Job(20, 1, 8, 0);
  big.est_runtime_s = 54000;
  StartOn(s, big, 0, 0);
  for (uint32_t k = 0; k < 8; ++k) {
    JobSpec small = Job(30 + k, 1, 1, 0);
    small.est_runtime_s = 94000;
    Placement p{.tasks = {{.node = NodeId(1), .gpu_mask = 1u << k, .gpu_milli = 1000}}};
    ASSERT_TRUE(s.Bind(small, p, 0).ok());
  }
  JobSpec sj = Job(1, 1, 8, 0);
  sj.est_runtime_s = 1000;
  sj.submit_ns = Sec(3000);
  Decisions d = Schedule1(config, s, {sj}, {{.name = "a", .guaranteed_gpus = 16}}, Sec(4000));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, JobId(20));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(0));
}

TEST(ShortJobPreemption, TheWaitMustPayForEveryVictim) {
  // Node 0 is held by four 2-GPU long jobs; node 1 by M, of a higher class (never a victim),
  // ending in `m_left` s. S (8 GPUs, 1,000 s) would wait m_left, and needs all four small jobs
  // preempted: its wait must cover 4 x (1,000 + 60) s. 3,000 s pays for two victims, not four.
  PolicyConfig config;
  config.reclaim = false;
  config.priority_preemption = false;
  for (const double m_left : {3000.0, 10000.0}) {
    ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
    for (uint32_t k = 0; k < 4; ++k) {
      JobSpec v = Job(10 + k, 1, 2, 0);
      v.est_runtime_s = 100000;
      Placement p{.tasks = {{.node = NodeId(0), .gpu_mask = 3u << (2 * k), .gpu_milli = 1000}}};
      ASSERT_TRUE(s.Bind(v, p, 0).ok());
    }
    JobSpec m = Job(20, 1, 8, 0);
    m.priority = 1;
    m.est_runtime_s = 4000 + m_left;
    StartOn(s, m, 1, 0);
    JobSpec sj = Job(1, 1, 8, 0);
    sj.est_runtime_s = 1000;
    sj.submit_ns = Sec(3000);
    Decisions d = Schedule1(config, s, {sj}, {{.name = "a", .guaranteed_gpus = 16}}, Sec(4000));
    if (m_left < 4 * 1060) {
      EXPECT_TRUE(d.preemptions.empty()) << m_left;
      EXPECT_TRUE(d.binds.empty()) << m_left;
    } else {
      EXPECT_EQ(d.preemptions.size(), 4u) << m_left;
      ASSERT_EQ(d.binds.size(), 1u) << m_left;
      EXPECT_EQ(d.binds[0].placement.tasks[0].node, NodeId(0)) << m_left;
    }
  }
}

TEST(ShortJobPreemption, ReleaseProfileWaits) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec a = Job(10, 1, 8, 0), b = Job(11, 1, 4, 0);
  a.est_runtime_s = 1000;
  StartOn(s, a, 0, 0);
  StartOn(s, b, 1, 0);  // no estimate: assumed to run 3,000 s
  ReleaseProfile r(s, Sec(100), 3000);
  EXPECT_EQ(r.WaitS(4000), 0);       // 4 GPUs are free now
  EXPECT_EQ(r.WaitS(12000), 900);    // a ends at 1,000 s
  EXPECT_EQ(r.WaitS(16000), 2900);   // b at 3,000 s
  EXPECT_TRUE(std::isinf(r.WaitS(17000)));
}

TEST(ShortJobPreemption, ConfigKeysAndErrors) {
  StatusOr<PolicyConfig> c = ParsePolicyConfig(
      "short_preempt.enabled=false,short_preempt.ratio=2.5,short_preempt.min_run_s=5m,"
      "short_preempt.min_run_fraction=0.1,short_preempt.max_victims=4,short_preempt.restart_cost_s=2m");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->short_preempt.enabled);
  EXPECT_EQ(c->short_preempt.ratio, 2.5);
  EXPECT_EQ(c->short_preempt.min_run_s, 300);
  EXPECT_EQ(c->short_preempt.min_run_fraction, 0.1);
  EXPECT_EQ(c->short_preempt.max_victims, 4);
  EXPECT_EQ(c->short_preempt.restart_cost_s, 120);
  StatusOr<PolicyConfig> bad = ParsePolicyConfig("short_preempt.ratio=0.5");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("policy.short_preempt.ratio"), std::string::npos)
      << bad.status().ToString();
  bad = ParsePolicyConfig("short_preempt.min_run_fraction=2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("min_run_fraction"), std::string::npos);
  bad = ParsePolicyConfig("short_preempt.ratio=x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a number"), std::string::npos);
}

}  // namespace
}  // namespace gpool::sched
