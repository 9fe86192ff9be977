#include "sched/fairshare.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

std::vector<uint64_t> Ids(const std::vector<JobSpec>& jobs, const std::vector<size_t>& order) {
  std::vector<uint64_t> ids;
  for (size_t i : order) ids.push_back(jobs[i].id.value());
  return ids;
}

TEST(Ordering, ShareThenAgeAcrossQueuesPriorityInsideOne) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  // Queue a already holds 8 GPUs, so b's jobs come first: a's priority orders a's jobs only.
  ASSERT_TRUE(s.Bind(Job(100, 1, 8, 0), {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}}}, 0).ok());
  std::vector<JobSpec> jobs = {Job(1, 1, 1, 0), Job(2, 1, 1, 1), Job(3, 1, 1, 1), Job(4, 1, 1, 0)};
  jobs[0].submit_ns = Sec(1);
  jobs[1].submit_ns = Sec(3);
  jobs[2].submit_ns = Sec(2);
  jobs[3].submit_ns = Sec(4);
  jobs[3].priority = 5;
  std::vector<size_t> order = OrderJobs(jobs, s, nullptr, queues, Sec(10), {});
  // b's jobs by age (3 before 2) while b's share stays below a's, then a's: 4 (priority), 1.
  EXPECT_EQ(Ids(jobs, order), (std::vector<uint64_t>{3, 2, 4, 1}));
}

TEST(Ordering, UnknownEstimatesRankLastOrAtTheMean) {
  // One queue: 1 (100 s), 2 (10,000 s), 3 (no estimate, the oldest), 4 (no estimate, no GPU).
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}};
  std::vector<JobSpec> jobs = {Job(1, 1, 1), Job(2, 1, 1), Job(3, 1, 1), Job(4, 1, 0)};
  jobs[0].est_runtime_s = 100;
  jobs[1].est_runtime_s = 10000;
  jobs[0].submit_ns = Sec(3);
  jobs[1].submit_ns = Sec(2);
  jobs[2].submit_ns = Sec(1);
  jobs[3].submit_ns = Sec(4);
  OrderOptions o{.least_work_first = true};
  ASSERT_EQ(o.unknown_estimate, UnknownEstimate::kLast);  // the default
  EXPECT_EQ(Ids(jobs, OrderJobs(jobs, s, nullptr, queues, Sec(10), o)), (std::vector<uint64_t>{1, 2, 3, 4}));
  // At the mean (5,050 s x 1 GPU): between 1 and 2. Job 4 asks no GPU: no work, first.
  o.unknown_estimate = UnknownEstimate::kMean;
  EXPECT_EQ(Ids(jobs, OrderJobs(jobs, s, nullptr, queues, Sec(10), o)), (std::vector<uint64_t>{4, 1, 3, 2}));
  EXPECT_EQ(UnknownEstimateName(UnknownEstimate::kMean), "mean");
  EXPECT_FALSE(ParseUnknownEstimate("median").ok());
}

TEST(Ordering, QueuesInterleaveAsDrf) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  std::vector<JobSpec> jobs;
  for (uint64_t i = 0; i < 3; ++i) jobs.push_back(Job(1 + i, 1, 2, 0));
  for (uint64_t i = 0; i < 3; ++i) jobs.push_back(Job(10 + i, 1, 2, 1));
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].submit_ns = static_cast<int64_t>(i);
  std::vector<size_t> order = OrderJobs(jobs, s, nullptr, queues, Sec(1), {});
  EXPECT_EQ(Ids(jobs, order), (std::vector<uint64_t>{1, 10, 2, 11, 3, 12}));
  // A weight of 2 lets queue b take two jobs for each of a's.
  queues[1].weight = 2;
  order = OrderJobs(jobs, s, nullptr, queues, Sec(1), {});
  EXPECT_EQ(Ids(jobs, order), (std::vector<uint64_t>{1, 10, 11, 2, 12, 3}));
}

TEST(Ordering, StarvedJobGoesFirstInItsClass) {
  ClusterState s = MakeCluster({.nodes = 2});
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  ASSERT_TRUE(s.Bind(Job(100, 2, 8, 0), {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF},
                                                   {.node = NodeId(1), .gpu_mask = 0xFF}}}, 0).ok());
  std::vector<JobSpec> jobs = {Job(1, 1, 1, 0), Job(2, 1, 1, 1)};
  jobs[0].submit_ns = 0;
  jobs[1].submit_ns = Sec(5000);
  EXPECT_EQ(Ids(jobs, OrderJobs(jobs, s, nullptr, queues, Sec(5010), {.starvation_age_s = 1e6})),
            (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(Ids(jobs, OrderJobs(jobs, s, nullptr, queues, Sec(5010), {.starvation_age_s = 3600})),
            (std::vector<uint64_t>{1, 2}));
}

TEST(UsageLedger, DecaysByHalfLife) {
  ClusterState s = MakeCluster({.nodes = 1});
  ASSERT_TRUE(s.Bind(Job(1, 1, 8, 0), {.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}}}, 0).ok());
  UsageLedger ledger(100);
  ledger.Advance(s, 0);
  ledger.Advance(s, Sec(10));
  EXPECT_DOUBLE_EQ(ledger.usage(QueueId(0)).gpu_milli_s, 8000.0 * 10);
  ASSERT_TRUE(s.Release(JobId(1), Sec(10)).ok());
  ledger.Advance(s, Sec(110));
  EXPECT_NEAR(ledger.usage(QueueId(0)).gpu_milli_s, 8000.0 * 10 / 2, 1e-6);
  // Past usage raises the share of a queue that holds nothing now.
  std::vector<QueueSpec> queues = {{.name = "a"}, {.name = "b"}};
  EXPECT_GT(DominantShare(s, &ledger, queues, QueueId(0)), DominantShare(s, &ledger, queues, QueueId(1)));
}

}  // namespace
}  // namespace gpool::sched
