#include "sim/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/file.h"
#include "sim/baselines.h"
#include "sim/test_util.h"
#include "sim/cluster.h"
#include "sim/metrics.h"
#include "sim/workload_gen.h"

namespace gpool::sim {
namespace {

using test::OneLeaf;

using test::Job;

using test::Jobs;
using test::RunPolicy;

// Hand-checked under FIFO (no head-of-line blocking): A (8 GPUs, 100 s) at 0 runs 0-100; B (16
// GPUs, 50 s) at 10 waits for A; C (8 GPUs, 10 s) at 20 runs 20-30; B runs 100-150.
TEST(Engine, FifoTinyWorkloadHandChecked) {
  SimCluster c = OneLeaf(2);
  Workload w = Jobs({Job(0, 100, 8), Job(10, 50, 16), Job(20, 10, 8)});
  auto r = RunPolicy(c, w, "fifo");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs.size(), 3u);
  EXPECT_DOUBLE_EQ(r->jobs[0].start_s, 0);
  EXPECT_DOUBLE_EQ(r->jobs[0].finish_s, 100);
  EXPECT_DOUBLE_EQ(r->jobs[1].start_s, 100);
  EXPECT_DOUBLE_EQ(r->jobs[1].finish_s, 150);
  EXPECT_DOUBLE_EQ(r->jobs[2].start_s, 20);
  EXPECT_DOUBLE_EQ(r->jobs[2].finish_s, 30);
  Metrics m = ComputeMetrics(*r);
  EXPECT_EQ(m.finished, 3);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, (100 + 140 + 10) / 3.0);
  EXPECT_DOUBLE_EQ(m.p50_jct_s, 100);
  EXPECT_DOUBLE_EQ(m.p99_jct_s, 140);
  EXPECT_DOUBLE_EQ(m.makespan_s, 150);
  // Allocated GPU-seconds: 8*20 + 16*10 + 8*70 + 16*50 = 1680 of 16*150.
  EXPECT_NEAR(m.allocation_rate, 1680.0 / 2400.0, 1e-12);
  // First failed placement at t=10 with 8 GPUs unallocated.
  EXPECT_DOUBLE_EQ(m.first_failed_placement_s, 10);
  EXPECT_DOUBLE_EQ(m.unallocated_gpus, 8);
  // Energy: 2 hosts idle (400 + 8*60 W each) for 150 s, plus 340 W per busy GPU-second.
  EXPECT_NEAR(m.energy_kwh, (2 * 880.0 * 150 + 340.0 * 1680) / 3.6e6, 1e-9);
  EXPECT_EQ(m.preemptions, 0);
  // Wait by gang size: "2-8" has A (0) and C (0); "9-64" has B (90).
  ASSERT_EQ(m.wait_by_gang.size(), 2u);
  EXPECT_EQ(m.wait_by_gang[0].label, "2-8");
  EXPECT_EQ(m.wait_by_gang[1].label, "9-64");
  EXPECT_DOUBLE_EQ(m.wait_by_gang[1].avg_wait_s, 90);
}

// A 16-GPU ring over two hosts whose leaves are joined by half a NIC of uplink runs its
// communication at half speed: 100 s * (0.5 + 0.5 * 2) = 150 s.
TEST(Engine, PlacementStretchesRunTime) {
  SimCluster c = OneLeaf(2);
  c.leaf_names = {"l0", "l1"};
  c.hosts[1].leaf = 1;
  c.leaf_uplink_gbps = {800, 800};
  Workload w = Jobs({Job(0, 100, 16, 0.5)});
  auto r = RunPolicy(c, w, "fifo");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->jobs[0].slowdown, 1.5);
  EXPECT_DOUBLE_EQ(r->jobs[0].finish_s, 150);
  EXPECT_EQ(r->jobs[0].leaves, 2);
}

TEST(Engine, JobsThatCanNeverFitAreRejectedNotLost) {
  SimCluster c = OneLeaf(2);
  Workload w = Jobs({Job(0, 10, 8), Job(1, 10, 64)});
  auto r = RunPolicy(c, w, "fifo");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rejected, 1);
  EXPECT_TRUE(r->jobs[1].rejected);
  EXPECT_EQ(r->unfinished, 0);
  ASSERT_EQ(r->rejected_examples.size(), 1u);
  EXPECT_NE(r->rejected_examples[0].find("64 GPUs"), std::string::npos);
}

std::vector<double> Runtimes() {
  return *ReadRuntimes(*ReadFile("testdata/sim/philly_runtime_sample.csv"), "philly");
}

SimCluster Lingjun() {
  return *ParseClosCsv(*ReadFile("testdata/sim/lingjun_sample.csv"), "lingjun", {});
}

Workload Synthetic(uint64_t seed, int64_t jobs = 300) {
  SyntheticOptions o;
  o.jobs = jobs;
  o.max_gpus = 128;
  o.load = 1.2;
  o.frac_share = 0.1;
  o.seed = seed;
  return *GenerateSynthetic(o, Runtimes(), 320);
}

TEST(Engine, NoJobLostUnderAnyPolicy) {
  SimCluster c = Lingjun();
  Workload w = Synthetic(3);
  for (const auto& name : PolicyNames()) {
    SimFeedback fb;
    auto r = RunPolicy(c, w, name, &fb);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    int64_t finished = 0;
    for (const auto& j : r->jobs) {
      if (j.finish_s >= 0) {
        ++finished;
        EXPECT_GE(j.start_s, j.submit_s) << name;
        EXPECT_GE(j.finish_s, j.start_s) << name;
      }
    }
    EXPECT_EQ(r->unfinished, 0) << name;
    EXPECT_EQ(finished + r->rejected, static_cast<int64_t>(w.jobs.size())) << name;
    EXPECT_GT(r->energy_j, 0) << name;
  }
}

TEST(Engine, DeterministicGivenSeed) {
  SimCluster c = Lingjun();
  Workload w = Synthetic(11);
  for (const char* name : {"gpool", "tiresias"}) {
    SimFeedback fa, fb;
    auto a = RunPolicy(c, w, name, &fa);
    auto b = RunPolicy(c, w, name, &fb);
    ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    ASSERT_TRUE(b.ok()) << name << ": " << b.status().ToString();
    ASSERT_EQ(a->jobs.size(), b->jobs.size());
    for (size_t i = 0; i < a->jobs.size(); ++i) {
      EXPECT_EQ(a->jobs[i].start_s, b->jobs[i].start_s) << name << " job " << i;
      EXPECT_EQ(a->jobs[i].finish_s, b->jobs[i].finish_s) << name << " job " << i;
    }
    EXPECT_EQ(a->energy_j, b->energy_j);
    EXPECT_EQ(a->preemptions, b->preemptions);
  }
}

// A policy that binds a job twice: the engine must refuse, naming the policy.
class BadPolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "bad"; }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    sched::Decisions d;
    if (in.pending->empty()) return d;
    sched::TaskBinding b{.node = sched::NodeId(0), .gpu_mask = 0xff, .gpu_milli = 1000};
    d.binds.push_back({.job = (*in.pending)[0].id, .placement = {.tasks = {b}}});
    d.binds.push_back({.job = (*in.pending)[0].id, .placement = {.tasks = {b}}});
    return d;
  }
};

TEST(Engine, PolicyDecisionsAreChecked) {
  SimCluster c = OneLeaf(1);
  Workload w = Jobs({Job(0, 10, 8)});
  BadPolicy p;
  auto r = RunSimulation(c, w, p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("policy 'bad'"), std::string::npos);
}

// Wraps a policy and records the half-life of the usage ledger the engine hands it.
class LedgerProbe final : public sched::Policy {
 public:
  explicit LedgerProbe(const sched::Policy& inner) : inner_(inner) {}
  std::string_view name() const override { return inner_.name(); }
  double usage_half_life_s() const override { return inner_.usage_half_life_s(); }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    if (in.usage != nullptr) seen_half_life_s = in.usage->half_life_s();
    return inner_.Schedule(in);
  }
  mutable double seen_half_life_s = -1;

 private:
  const sched::Policy& inner_;
};

// The fair-share half-life comes from the policy's config (--policy-config
// fairshare_half_life_s), not a constant. Two 8-GPU hosts. Tenant a used the cluster long ago
// (jobs 0-1, 0-10,000 s), b recently and less (jobs 2-3, 15,000-16,100 s). At 20,000 s each
// submits a 16-GPU job (4: a, 5: b) and only one fits. With the default 7-day half-life a's
// old usage still dominates: b goes first. With a 600 s half-life a's usage has decayed by
// ~2^-18 and b's by ~2^-6.5: a goes first.
TEST(Engine, FairShareHalfLifeComesFromThePolicyConfig) {
  SimCluster c = OneLeaf(2);
  auto job = [](double submit, double run, int gpus, const char* tenant) {
    SimJob j = Job(submit, run, gpus);
    j.tenant = tenant;
    return j;
  };
  Workload w = Jobs({job(0, 10000, 8, "a"), job(5000, 4000, 8, "a"), job(15000, 1000, 16, "b"),
                     job(15500, 100, 8, "b"), job(20000, 100, 16, "a"), job(20000, 100, 16, "b")});
  auto run = [&](const std::string& config, double* seen) -> StatusOr<RunResult> {
    PolicyContext ctx;
    ctx.gpool_config = config;
    GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy("gpool", ctx));
    LedgerProbe probe(*p);
    auto r = RunSimulation(c, w, probe, {});
    *seen = probe.seen_half_life_s;
    return r;
  };
  double seen_default = 0, seen_short = 0;
  auto def = run("power.enabled=false", &seen_default);
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  auto shrt = run("power.enabled=false,fairshare_half_life_s=600", &seen_short);
  ASSERT_TRUE(shrt.ok()) << shrt.status().ToString();
  EXPECT_DOUBLE_EQ(seen_default, 7 * 24 * 3600.0);  // the default stays 7 days
  EXPECT_DOUBLE_EQ(seen_short, 600);
  EXPECT_DOUBLE_EQ(def->jobs[5].start_s, 20000);
  EXPECT_DOUBLE_EQ(def->jobs[4].start_s, 20100);
  EXPECT_DOUBLE_EQ(shrt->jobs[4].start_s, 20000);
  EXPECT_DOUBLE_EQ(shrt->jobs[5].start_s, 20100);
  // A policy without a configured half-life gets the 7-day default.
  auto fifo = MakePolicy("fifo", {});
  ASSERT_TRUE(fifo.ok());
  EXPECT_DOUBLE_EQ((*fifo)->usage_half_life_s(), 7 * 24 * 3600.0);
}

// Wraps a policy, gives the ledger a chosen half-life and records, at each cycle, the GPU usage
// of queue 0 in the ledger the engine hands the policy.
class UsageProbe final : public sched::Policy {
 public:
  UsageProbe(const sched::Policy& inner, double half_life_s) : inner_(inner), half_life_s_(half_life_s) {}
  std::string_view name() const override { return inner_.name(); }
  double usage_half_life_s() const override { return half_life_s_; }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    if (in.usage != nullptr) seen.push_back({in.now_ns, in.usage->usage(sched::QueueId(0)).gpu_milli_s});
    return inner_.Schedule(in);
  }
  mutable std::vector<std::pair<int64_t, double>> seen;  // (now_ns, gpu_milli_s of queue 0)

 private:
  const sched::Policy& inner_;
  double half_life_s_;
};

// A lone 8-GPU job runs 0-100 s with no other event in between; the next job arrives at 1,000 s.
// The cycle at its finish (100 s) sees its whole 8 x 100 GPU-seconds in the ledger, and the one
// at 1,000 s the same decayed by 900 s at a 600 s half-life. (Charged at cycles after the
// finish released it, the job would count nothing.)
TEST(Engine, FairShareLedgerChargesAJobItsWholeRun) {
  SimCluster c = OneLeaf(1);
  Workload w = Jobs({Job(0, 100, 8), Job(1000, 10, 8)});
  auto fifo = MakePolicy("fifo", {});
  ASSERT_TRUE(fifo.ok());
  UsageProbe probe(**fifo, 600);
  auto r = RunSimulation(c, w, probe, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs[0].tenant, 0);
  ASSERT_DOUBLE_EQ(r->jobs[0].finish_s, 100);
  ASSERT_EQ(probe.seen.size(), 4u);  // cycles at 0, 100, 1000, 1010
  EXPECT_EQ(probe.seen[0].first, 0);
  EXPECT_DOUBLE_EQ(probe.seen[0].second, 0);
  EXPECT_EQ(probe.seen[1].first, 100'000'000'000);
  EXPECT_NEAR(probe.seen[1].second, 8000.0 * 100, 1e-6);
  EXPECT_EQ(probe.seen[2].first, 1000'000'000'000);
  EXPECT_NEAR(probe.seen[2].second, 8000.0 * 100 * std::exp2(-900.0 / 600), 1e-6);
  // The second job's 10 s are charged by its finish, on top of the decayed first run.
  EXPECT_NEAR(probe.seen[3].second, 8000.0 * 100 * std::exp2(-910.0 / 600) + 8000.0 * 10, 1e-6);
}

// --min-cycle-s merges cycles: the wait for the merged cycle is batching, not blocking. One
// 8-GPU host, cycles at least 60 s apart: A (8 GPUs) runs 0-100; B (8 GPUs) arrives at 50, is
// first seen by the merged cycle at 60, which leaves it waiting; A's finish at 100 waits for the
// cycle at 120, where B starts. Blocked: [60, 100) only, not the batching waits [50, 60) and
// [100, 120).
TEST(Engine, BatchingWaitsAreNotBlocking) {
  SimCluster c = OneLeaf(1);
  Workload w = Jobs({Job(0, 100, 8), Job(50, 10, 8)});
  PolicyContext ctx;
  auto fifo = MakePolicy("fifo", ctx);
  ASSERT_TRUE(fifo.ok());
  EngineOptions o;
  o.min_cycle_interval_s = 60;
  auto r = RunSimulation(c, w, **fifo, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->jobs[1].start_s, 120);
  EXPECT_DOUBLE_EQ(r->blocked_s, 40);
  // No GPU is free while B is blocked.
  EXPECT_DOUBLE_EQ(r->blocked_unallocated_gpu_s, 0);
  EXPECT_DOUBLE_EQ(r->first_fail_s, 60);
  Metrics m = ComputeMetrics(*r);
  EXPECT_DOUBLE_EQ(m.blocked_s, 40);
  EXPECT_DOUBLE_EQ(m.avg_unallocated_gpus_blocked, 0);
  // Without batching B is blocked from its arrival to A's finish.
  o.min_cycle_interval_s = 0;
  r = RunSimulation(c, w, **fifo, o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->blocked_s, 50);
}

}  // namespace
}  // namespace gpool::sim
