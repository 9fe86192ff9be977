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

}  // namespace
}  // namespace gpool::sim
