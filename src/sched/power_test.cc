// RecentArrivalGpus and the warm buffer it sets: each recently submitted job counts once, also
// one bound in the current cycle (still in `pending`, already running in the state).
#include "sched/power.h"

#include <gtest/gtest.h>

#include <optional>

#include "sched/placement.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::Job;
using testing::MakeCluster;
using testing::Sec;

TEST(RecentArrivalGpus, AJobBoundThisCycleCountsOnce) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2});
  JobSpec j = Job(7, 2, 8);  // 16 GPUs, submitted at t=950
  j.submit_ns = Sec(950);
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p);
  ASSERT_TRUE(s.Bind(j, *p, Sec(1000)).ok());
  // Bound in this cycle: the caller's pending list still holds it.
  EXPECT_EQ(RecentArrivalGpus(s, {j}, Sec(1000), 600), 16);
  // Running only, or pending only: 16 as well.
  EXPECT_EQ(RecentArrivalGpus(s, {}, Sec(1000), 600), 16);
  EXPECT_EQ(RecentArrivalGpus(MakeCluster({.nodes = 4, .nodes_per_leaf = 2}), {j}, Sec(1000), 600), 16);
  // Another pending job still adds its own GPUs.
  JobSpec other = Job(8, 1, 4);
  other.submit_ns = Sec(990);
  EXPECT_EQ(RecentArrivalGpus(s, {j, other}, Sec(1000), 600), 20);
}

TEST(RecentArrivalGpus, ThePolicysWarmBufferCountsAJobItBindsOnce) {
  // 8 idle nodes of 8 GPUs (idle since t=0, timeout 60 s), no fixed buffer, a 600 s window. A
  // 16-GPU gang submitted at t=950 is bound at t=1000 on 2 nodes: 48 GPUs stay free on 6 idle
  // nodes, and the buffer is its 16 GPUs, so 4 nodes may go (counted twice, 32: only 2).
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 4});
  std::vector<QueueSpec> queues = {{.name = "q"}};
  PolicyConfig c;
  c.power = {.enabled = true, .idle_timeout_s = 60, .warm_buffer_gpus = 0, .max_suspends_per_cycle = 100};
  ASSERT_EQ(c.power.arrival_window_s, 600);
  std::vector<JobSpec> pending = {Job(1, 2, 8)};
  pending[0].submit_ns = Sec(950);
  std::unique_ptr<Policy> policy = testing::MakePolicy(c);
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = Sec(1000)};
  StatusOr<Decisions> d = policy->Schedule(in);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->binds.size(), 1u);
  size_t off = 0;
  for (const PowerDecision& p : d->power) off += p.target == PowerState::kOff;
  EXPECT_EQ(off, 4u);
  EXPECT_EQ(d->power.size(), 4u);
}

}  // namespace
}  // namespace gpool::sched
