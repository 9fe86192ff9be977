#include "sim/fill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "sim/baselines.h"
#include "sim/test_util.h"

namespace gpool::sim {
namespace {

using test::OneLeaf;

Workload Jobs(std::vector<std::pair<int, int>> gpus_milli) {
  Workload w;
  for (size_t i = 0; i < gpus_milli.size(); ++i) {
    SimJob j;
    j.name = "j" + std::to_string(i);
    j.submit_s = static_cast<double>(i);
    j.run_s = 100;
    j.num_gpus = gpus_milli[i].first;
    j.gpu_milli = gpus_milli[i].second;
    j.source = "test:" + std::to_string(i + 1);
    w.jobs.push_back(j);
  }
  w.Finalize();
  return w;
}

// The first-failure variant (RunFillUntilFirstFailure).
StatusOr<FirstFailureResult> Fill(const SimCluster& c, const Workload& w, const std::string& policy,
                          uint64_t seed = 1) {
  PolicyContext ctx;
  SimFeedback fb;
  ctx.feedback = &fb;
  ctx.gpool_config = "power.enabled=false";
  if (policy == "fgd") {
    GPOOL_ASSIGN_OR_RETURN(ctx.target, TargetWorkload(c, w));
  }
  GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, ctx));
  return RunFillUntilFirstFailure(c, w, *p, {.seed = seed});
}

TEST(FillFirstFailure, StopsAtTheFirstFailedPlacementAndCountsWhatIsLeft) {
  // 16 GPUs; only 6-GPU jobs: each host holds one, leaving 2 GPUs no job can use. The third job
  // fails with 4 GPUs unallocated, whatever the policy.
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{6, 1000}, {6, 1000}, {6, 1000}});
  for (const std::string& p : PolicyNames()) {
    StatusOr<FirstFailureResult> r = Fill(c, w, p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(r->placed_jobs, 2) << p;
    EXPECT_DOUBLE_EQ(r->unallocated_gpus, 4) << p;
    EXPECT_DOUBLE_EQ(r->allocated_gpus, 12) << p;
    EXPECT_DOUBLE_EQ(r->total_gpus, 16) << p;
    EXPECT_NE(r->failed_job.find("6 GPU"), std::string::npos) << p << ": " << r->failed_job;
    EXPECT_FALSE(r->ended_by_preemption) << p;
  }
}

TEST(FillFirstFailure, KeepsSubmittingPastTheTraceUntilFull) {
  // Two 1-GPU jobs in the trace, 16 GPUs: the trace is cycled through (fresh permutations) and
  // the cluster fills completely before a placement fails.
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{1, 1000}, {1, 1000}});
  StatusOr<FirstFailureResult> r = Fill(c, w, "gpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->placed_jobs, 16);
  EXPECT_DOUBLE_EQ(r->unallocated_gpus, 0);
}

TEST(FillFirstFailure, SharedGpusFillWhereExclusiveGpusStrandCapacity) {
  // One host of 8 GPUs; only half-GPU jobs. Policies that share a GPU between fractional tasks
  // place 16 and fill it; slurm (GRES GPUs are exclusive) gives each task a whole GPU, so after
  // 8 tasks no GPU is wholly free and half the capacity is stranded.
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{1, 500}, {1, 500}});
  for (const std::string p : {"gpool", "fifo", "fgd"}) {
    StatusOr<FirstFailureResult> r = Fill(c, w, p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(r->placed_jobs, 16) << p;
    EXPECT_NEAR(r->unallocated_gpus, 0, 1e-9) << p;
  }
  StatusOr<FirstFailureResult> slurm = Fill(c, w, "slurm");
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm->placed_jobs, 8);
  EXPECT_NEAR(slurm->unallocated_gpus, 4, 1e-9);
  // Deterministic given the seed.
  StatusOr<FirstFailureResult> again = Fill(c, w, "slurm");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->placed_jobs, slurm->placed_jobs);
}

TEST(FillFirstFailure, AWorkloadWithoutGpuJobsIsAnError) {
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{0, 1000}});
  StatusOr<FirstFailureResult> r = Fill(c, w, "fifo");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no job"), std::string::npos) << r.status().ToString();
}

TEST(FillFirstFailure, CountsTheJobsItLeavesOut) {
  // 16 GPUs. Two CPU-only jobs and one 32-GPU job are never submitted; they are counted by
  // reason with the first one's source, and the rest fills as without them (two 8-GPU jobs).
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{8, 1000}, {0, 1000}, {32, 1000}, {0, 1000}, {8, 1000}});
  StatusOr<FirstFailureResult> r = Fill(c, w, "gpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->placed_jobs, 2);
  ASSERT_EQ(r->left_out.size(), 2u);
  EXPECT_EQ(r->left_out[0].reason, "CPU-only (takes no GPU)");
  EXPECT_EQ(r->left_out[0].count, 2);
  EXPECT_EQ(r->left_out[0].example, "test:2");
  EXPECT_EQ(r->left_out[1].reason, "can't fit the empty cluster");
  EXPECT_EQ(r->left_out[1].count, 1);
  EXPECT_EQ(r->left_out[1].example.rfind("test:3 (", 0), 0u) << r->left_out[1].example;
  // Nothing left out: nothing counted.
  StatusOr<FirstFailureResult> clean = Fill(c, Jobs({{8, 1000}}), "gpool");
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->left_out.empty());
}

TEST(FillFirstFailure, ReportsProgress) {
  // With progress_every_s = 0 every placement is reported, in order (no timing asserted).
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{1, 1000}});
  PolicyContext ctx;
  ctx.gpool_config = "power.enabled=false";
  auto p = MakePolicy("gpool", ctx);
  ASSERT_TRUE(p.ok());
  std::vector<std::pair<int64_t, double>> calls;
  FirstFailureOptions o;
  o.progress_every_s = 0;
  o.progress = [&](int64_t placed, double gpus) { calls.push_back({placed, gpus}); };
  StatusOr<FirstFailureResult> r = RunFillUntilFirstFailure(c, w, **p, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->placed_jobs, 8);
  ASSERT_EQ(calls.size(), 8u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, static_cast<int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(calls[i].second, static_cast<double>(i + 1));
  }
}


// ---- FGD's method (RunFill) -----------------------------------------------------------------

StatusOr<FillResult> FgdFill(const SimCluster& c, const Workload& w, const std::string& policy,
                             double ratio, uint64_t seed = 42) {
  PolicyContext ctx;
  SimFeedback fb;
  ctx.feedback = &fb;
  ctx.gpool_config = "power.enabled=false";
  GPOOL_ASSIGN_OR_RETURN(ctx.target, TargetWorkload(c, w));
  GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, ctx));
  return RunFill(c, w, *p, {.seed = seed, .tune_ratio = ratio});
}

TEST(FillWorkload, EveryTracePodThenRandomCopiesUpToTheRatio) {
  // 16 GPUs x 1.3 = 20,800 milli. The trace asks 3,500 (a CPU-only pod included).
  const Workload w = Jobs({{1, 1000}, {0, 1000}, {1, 500}, {2, 1000}});
  StatusOr<FillWorkload> f = BuildFillWorkload(w, 16, 1.3, 42);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->trace_pods, 4);
  // The trace's pods come first, each once, the CPU-only one too, shuffled.
  std::vector<uint32_t> head(f->order.begin(), f->order.begin() + 4);
  std::vector<uint32_t> sorted = head;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(f->copies, static_cast<int64_t>(f->order.size()) - 4);
  int64_t milli = 0;
  for (uint32_t k : f->order) milli += w.jobs[k].gpu_demand_milli();
  EXPECT_EQ(milli, f->gpu_milli);
  // Copies stop when the next one's per-GPU share would pass the target; a 2-GPU copy checked
  // that way can end up to 1,000 over it (the artifact's test, kept).
  EXPECT_GT(milli, 20800 - 1000);
  EXPECT_LE(milli, 20800 + 1000);
  // Seeded: the same order again, another with another seed.
  StatusOr<FillWorkload> again = BuildFillWorkload(w, 16, 1.3, 42);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->order, f->order);
  StatusOr<FillWorkload> other = BuildFillWorkload(w, 16, 1.3, 43);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->order, f->order);
  // A trace asking for more than the ratio loses random pods instead.
  StatusOr<FillWorkload> down = BuildFillWorkload(w, 2, 1.0, 42);
  ASSERT_TRUE(down.ok());
  EXPECT_LE(down->gpu_milli, 2000);
  EXPECT_GT(down->removed, 0);
  EXPECT_FALSE(BuildFillWorkload(Workload{}, 16, 1.3, 42).ok());
}

TEST(Fill, GoesOnAfterAFailedPlacement) {
  // 8 GPUs; pods of 6, 6 and 2 GPUs and a CPU-only pod, no copies (the ratio is the trace's
  // own request, 14,000 milli). Whatever the order, one 6-GPU pod fails and the run goes on:
  // the 2-GPU and CPU-only pods are placed and the node ends full.
  const SimCluster c = OneLeaf(1);
  Workload w = Jobs({{6, 1000}, {6, 1000}, {2, 1000}, {0, 1000}});
  for (SimJob& j : w.jobs) j.cpu_milli = 1000;  // a pod asks for some CPU
  for (const std::string& p : FillPolicyNames()) {
    for (uint64_t seed : {42, 43, 44}) {
      StatusOr<FillResult> r = FgdFill(c, w, p, 14000.0 / 8000, seed);
      ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
      EXPECT_EQ(r->submitted, 4) << p;
      EXPECT_EQ(r->copies, 0) << p;
      EXPECT_EQ(r->failed, 1) << p << " seed " << seed;
      EXPECT_EQ(r->failed_gpu_pods, 1) << p;
      EXPECT_EQ(r->placed, 3) << p << " seed " << seed;
      EXPECT_DOUBLE_EQ(r->allocated_end, 8) << p;
    }
  }
}

TEST(Fill, APodNoNodeCanEverHoldFailsAndTheRunGoesOn) {
  // 8 GPUs; a 16-GPU pod can never fit (gpool's policy refuses it as input): it is recorded as
  // failed, its request counts as arrived, and the 1-GPU pods are placed.
  const SimCluster c = OneLeaf(1);
  Workload w = Jobs({{16, 1000}, {1, 1000}, {1, 1000}});
  for (SimJob& j : w.jobs) j.cpu_milli = 1000;
  for (const std::string& p : FillPolicyNames()) {
    StatusOr<FillResult> r = FgdFill(c, w, p, 18000.0 / 8000);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(r->failed, 1) << p;
    EXPECT_EQ(r->placed, 2) << p;
  }
}

TEST(Fill, ReportsAllocationAgainstTheArrivedLoad) {
  // 8 one-GPU pods on 8 GPUs (ratio 1: no copies). After pod k, k/8 of the GPUs have arrived
  // and k GPUs are allocated. Percents (rounded half to even): 12, 25, 38, 50, 62, 75, 88, 100.
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{1, 1000}, {1, 1000}, {1, 1000}, {1, 1000},
                           {1, 1000}, {1, 1000}, {1, 1000}, {1, 1000}});
  for (const std::string p : {"gpool", "bestfit"}) {
    StatusOr<FillResult> r = FgdFill(c, w, p, 1.0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->allocated_at_pct.size(), static_cast<size_t>(kFillMaxPct + 1));
    EXPECT_DOUBLE_EQ(r->allocated_at_pct[100], 8) << p;
    EXPECT_DOUBLE_EQ(r->unallocated_at_100, 0) << p;
    EXPECT_DOUBLE_EQ(r->allocated_at_pct[50], 4) << p;
    EXPECT_DOUBLE_EQ(r->allocated_at_pct[51], 4) << p;  // no pod at 51%: the one at 50% next to it
    EXPECT_TRUE(std::isnan(r->allocated_at_pct[30])) << p;  // none at 29..31%: undefined
    EXPECT_TRUE(std::isnan(r->allocated_at_pct[130])) << p;
    // Nothing is free at 100%: the fragmentation rate is 0 by convention there, defined.
    EXPECT_FALSE(std::isnan(r->frag_rate_at_pct[100])) << p;
  }
}

// A policy that hides ScorePolicy's type, so the fill takes the generic path through Schedule.
class Opaque final : public sched::Policy {
 public:
  explicit Opaque(const sched::Policy& p) : p_(p) {}
  std::string_view name() const override { return p_.name(); }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    return p_.Schedule(in);
  }

 private:
  const sched::Policy& p_;
};

TEST(Fill, ScorePoliciesFastPathDecidesAsTheirSchedule) {
  // Mixed pods on 3 hosts, 1.3 x the GPUs: the cached fast path and Schedule agree pod by pod.
  const SimCluster c = OneLeaf(3);
  const Workload w = Jobs({{1, 300}, {1, 500}, {2, 1000}, {1, 1000}, {0, 1000}, {4, 1000},
                           {1, 700}, {8, 1000}});
  PolicyContext ctx;
  StatusOr<std::shared_ptr<const TypicalPods>> t = TargetWorkload(c, w);
  ASSERT_TRUE(t.ok());
  ctx.target = *t;
  for (const char* name : {"random", "dotprod", "clustering", "packing", "bestfit", "fgd"}) {
    auto p = MakePolicy(name, ctx);
    ASSERT_TRUE(p.ok()) << name;
    StatusOr<FillResult> fast = RunFill(c, w, **p, {.seed = 42});
    Opaque slow_policy(**p);
    StatusOr<FillResult> slow = RunFill(c, w, slow_policy, {.seed = 42});
    ASSERT_TRUE(fast.ok() && slow.ok()) << name;
    EXPECT_EQ(fast->placed, slow->placed) << name;
    EXPECT_DOUBLE_EQ(fast->allocated_end, slow->allocated_end) << name;
    for (size_t b = 0; b < fast->allocated_at_pct.size(); ++b) {
      if (std::isnan(fast->allocated_at_pct[b])) {
        EXPECT_TRUE(std::isnan(slow->allocated_at_pct[b])) << name << " " << b;
      } else {
        EXPECT_DOUBLE_EQ(fast->allocated_at_pct[b], slow->allocated_at_pct[b]) << name << " " << b;
      }
    }
  }
}

}  // namespace
}  // namespace gpool::sim
