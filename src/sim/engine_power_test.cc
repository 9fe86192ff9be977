// The simulator's power paths, driven by a scripted policy so that every time is known: a
// suspend takes shutdown_s before the node draws off power, a resumed node takes its boot
// latency before a job may use it, and energy counts idle, busy and off power for exactly those
// intervals.
#include <gtest/gtest.h>

#include "sched/placement.h"
#include "sim/engine.h"
#include "sim/test_util.h"

namespace gpool::sim {
namespace {

using sched::NodeId;
using sched::PowerState;

constexpr double kBootS = 180;

// Suspends node 1 in its first cycle (while idle); resumes it, ready after kBootS, when a job
// waits and node 1 is off; binds first fit onto schedulable nodes.
class ScriptedPowerPolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "scripted-power"; }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    sched::Decisions d;
    sched::ClusterState work = *in.state;
    bool waiting = false;
    for (const sched::JobSpec& j : *in.pending) {
      auto p = sched::PlaceFirstFit(work, j, {});
      if (!p) {
        waiting = true;
        continue;
      }
      GPOOL_RETURN_IF_ERROR(work.Bind(j, *p, in.now_ns));
      d.binds.push_back({.job = j.id, .placement = std::move(*p)});
    }
    const NodeId n1(1);
    if (in.now_ns == 0 && work.idle(n1)) d.power.push_back({.node = n1, .target = PowerState::kOff});
    if (waiting && in.state->node(n1).power == PowerState::kOff) {
      d.power.push_back({.node = n1, .target = PowerState::kOn,
                         .ready_ns = in.now_ns + static_cast<int64_t>(kBootS * 1e9)});
    }
    return d;
  }
};

using test::Job;

TEST(EnginePower, ShutdownBootAndOffEnergy) {
  // Two 8-GPU hosts. A (8 GPUs, 1000 s) at 0 on host 0; host 1 is suspended at 0 and off at 30.
  // B (8 GPUs, 100 s) arrives at 500, finds no room, host 1 resumes and is ready at 680: B runs
  // 680-780, not from 500, nor from C's arrival at 600 (a cycle while host 1 still boots).
  // C (8 GPUs, 50 s) runs after B on host 1, 780-830.
  SimCluster c = test::OneLeaf(2);
  Workload w;
  w.jobs = {Job(0, 1000, 8), Job(500, 100, 8), Job(600, 50, 8)};
  w.Finalize();
  ScriptedPowerPolicy policy;
  EngineOptions o;
  o.shutdown_s = 30;
  auto r = RunSimulation(c, w, policy, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs.size(), 3u);
  EXPECT_DOUBLE_EQ(r->jobs[0].start_s, 0);
  EXPECT_DOUBLE_EQ(r->jobs[1].start_s, 500 + kBootS);
  EXPECT_DOUBLE_EQ(r->jobs[1].finish_s, 500 + kBootS + 100);
  EXPECT_DOUBLE_EQ(r->jobs[2].start_s, 780);
  EXPECT_DOUBLE_EQ(r->jobs[2].finish_s, 830);

  // Power: a host on is 400 + 8 x 60 = 880 W idle, each busy GPU adds 340 W, a host off 15 W.
  // [0,30) both on (host 1 shutting down), A busy; [30,500) host 1 off; [500,680) booting,
  // drawing idle power; [680,830) both busy (B, then C); [830,1000) A alone.
  const double on = 880, busy8 = 8 * 340.0, off = 15;
  const double expected = 30 * (2 * on + busy8) + 470 * (on + busy8 + off) + 180 * (2 * on + busy8) +
                          150 * (2 * on + 2 * busy8) + 170 * (2 * on + busy8);
  EXPECT_NEAR(r->energy_j, expected, 1e-6 * expected);

  // The timeline shows host 1 off between its shutdown and its resume.
  bool saw_one_on = false;
  for (const TimelinePoint& p : r->timeline) {
    if (p.t >= 30 && p.t < 500) {
      EXPECT_EQ(p.nodes_on, 1) << "at " << p.t;
      saw_one_on = true;
    }
    if (p.t > 500) {
      EXPECT_EQ(p.nodes_on, 2) << "at " << p.t;
    }
  }
  EXPECT_TRUE(saw_one_on);
}

TEST(EnginePower, SuspendingAWorkingNodeIsAnError) {
  // The engine refuses a suspend of a node that runs work instead of losing the job.
  class BadPolicy final : public sched::Policy {
   public:
    std::string_view name() const override { return "bad"; }
    StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
      sched::Decisions d;
      if (!in.pending->empty()) {
        const sched::JobSpec& j = in.pending->front();
        auto p = sched::PlaceFirstFit(*in.state, j, {});
        if (p) {
          d.power.push_back({.node = p->tasks[0].node, .target = PowerState::kOff});
          d.binds.push_back({.job = j.id, .placement = std::move(*p)});
        }
      }
      return d;
    }
  };
  SimCluster c = test::OneLeaf(1);
  Workload w;
  w.jobs = {Job(0, 100, 8)};
  w.Finalize();
  BadPolicy policy;
  auto r = RunSimulation(c, w, policy, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("runs work"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace gpool::sim
