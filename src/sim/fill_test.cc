#include "sim/fill.h"

#include <gtest/gtest.h>

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

StatusOr<FillResult> Fill(const SimCluster& c, const Workload& w, const std::string& policy,
                          uint64_t seed = 1) {
  PolicyContext ctx;
  SimFeedback fb;
  ctx.feedback = &fb;
  ctx.gpool_config = "power.enabled=false";
  if (policy == "fgd") {
    GPOOL_ASSIGN_OR_RETURN(ctx.target, TargetWorkload(c, w));
  }
  GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, ctx));
  return RunFill(c, w, *p, {.seed = seed});
}

TEST(Fill, StopsAtTheFirstFailedPlacementAndCountsWhatIsLeft) {
  // 16 GPUs; only 6-GPU jobs: each host holds one, leaving 2 GPUs no job can use. The third job
  // fails with 4 GPUs unallocated, whatever the policy.
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{6, 1000}, {6, 1000}, {6, 1000}});
  for (const std::string& p : PolicyNames()) {
    StatusOr<FillResult> r = Fill(c, w, p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(r->placed_jobs, 2) << p;
    EXPECT_DOUBLE_EQ(r->unallocated_gpus, 4) << p;
    EXPECT_DOUBLE_EQ(r->allocated_gpus, 12) << p;
    EXPECT_DOUBLE_EQ(r->total_gpus, 16) << p;
    EXPECT_NE(r->failed_job.find("6 GPU"), std::string::npos) << p << ": " << r->failed_job;
    EXPECT_FALSE(r->ended_by_preemption) << p;
  }
}

TEST(Fill, KeepsSubmittingPastTheTraceUntilFull) {
  // Two 1-GPU jobs in the trace, 16 GPUs: the trace is cycled through (fresh permutations) and
  // the cluster fills completely before a placement fails.
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{1, 1000}, {1, 1000}});
  StatusOr<FillResult> r = Fill(c, w, "gpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->placed_jobs, 16);
  EXPECT_DOUBLE_EQ(r->unallocated_gpus, 0);
}

TEST(Fill, SharedGpusFillWhereExclusiveGpusStrandCapacity) {
  // One host of 8 GPUs; only half-GPU jobs. Policies that share a GPU between fractional tasks
  // place 16 and fill it; slurm (GRES GPUs are exclusive) gives each task a whole GPU, so after
  // 8 tasks no GPU is wholly free and half the capacity is stranded.
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{1, 500}, {1, 500}});
  for (const std::string p : {"gpool", "fifo", "fgd"}) {
    StatusOr<FillResult> r = Fill(c, w, p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_EQ(r->placed_jobs, 16) << p;
    EXPECT_NEAR(r->unallocated_gpus, 0, 1e-9) << p;
  }
  StatusOr<FillResult> slurm = Fill(c, w, "slurm");
  ASSERT_TRUE(slurm.ok()) << slurm.status().ToString();
  EXPECT_EQ(slurm->placed_jobs, 8);
  EXPECT_NEAR(slurm->unallocated_gpus, 4, 1e-9);
  // Deterministic given the seed.
  StatusOr<FillResult> again = Fill(c, w, "slurm");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->placed_jobs, slurm->placed_jobs);
}

TEST(Fill, AWorkloadWithoutGpuJobsIsAnError) {
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{0, 1000}});
  StatusOr<FillResult> r = Fill(c, w, "fifo");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no job"), std::string::npos) << r.status().ToString();
}

TEST(Fill, CountsTheJobsItLeavesOut) {
  // 16 GPUs. Two CPU-only jobs and one 32-GPU job are never submitted; they are counted by
  // reason with the first one's source, and the rest fills as without them (two 8-GPU jobs).
  const SimCluster c = OneLeaf(2);
  const Workload w = Jobs({{8, 1000}, {0, 1000}, {32, 1000}, {0, 1000}, {8, 1000}});
  StatusOr<FillResult> r = Fill(c, w, "gpool");
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
  StatusOr<FillResult> clean = Fill(c, Jobs({{8, 1000}}), "gpool");
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->left_out.empty());
}

TEST(Fill, ReportsProgress) {
  // With progress_every_s = 0 every placement is reported, in order (no timing asserted).
  const SimCluster c = OneLeaf(1);
  const Workload w = Jobs({{1, 1000}});
  PolicyContext ctx;
  ctx.gpool_config = "power.enabled=false";
  auto p = MakePolicy("gpool", ctx);
  ASSERT_TRUE(p.ok());
  std::vector<std::pair<int64_t, double>> calls;
  FillOptions o;
  o.progress_every_s = 0;
  o.progress = [&](int64_t placed, double gpus) { calls.push_back({placed, gpus}); };
  StatusOr<FillResult> r = RunFill(c, w, **p, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->placed_jobs, 8);
  ASSERT_EQ(calls.size(), 8u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, static_cast<int64_t>(i + 1));
    EXPECT_DOUBLE_EQ(calls[i].second, static_cast<double>(i + 1));
  }
}

}  // namespace
}  // namespace gpool::sim
