// The simulator's power paths, driven by a scripted policy so that every time is known: a
// suspend takes shutdown_s before the node draws off power, a resumed node takes its boot
// latency before a job may use it, and energy counts idle, busy and off power for exactly those
// intervals.
#include <gtest/gtest.h>

#include "sched/placement.h"
#include "sim/engine.h"
#include "sim/metrics.h"
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

// First fit; suspends every powered-on node when nothing is pending or running (after the first
// instant), resumes every suspended node (ready after kBootS) when a job waits.
class SuspendWhenIdlePolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "suspend-when-idle"; }
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
    for (uint32_t n = 0; n < work.num_nodes(); ++n) {
      const auto power = in.state->node(NodeId(n)).power;
      if (in.now_ns > 0 && !waiting && work.running().size() == 0 && power == PowerState::kOn) {
        d.power.push_back({.node = NodeId(n), .target = PowerState::kOff});
      }
      if (waiting && power == PowerState::kOff) {
        d.power.push_back({.node = NodeId(n), .target = PowerState::kOn,
                           .ready_ns = in.now_ns + static_cast<int64_t>(kBootS * 1e9)});
      }
    }
    return d;
  }
};

TEST(EnginePower, BusySpanAndWithWorkEnergyOnAHandCheckedCluster) {
  // Two 8-GPU hosts. A (8 GPUs, 0-100) on host 0. At 100 nothing is left: both suspend, off at
  // 130. B (8 GPUs) arrives at 300, both resume, ready at 480; B runs 480-530; both suspend
  // again, off at 560: the run's last event, 30 s after the last finish.
  SimCluster c = test::OneLeaf(2);
  Workload w = test::Jobs({Job(0, 100, 8), Job(300, 50, 8)});
  SuspendWhenIdlePolicy policy;
  EngineOptions o;
  o.shutdown_s = 30;
  auto r = RunSimulation(c, w, policy, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->jobs[1].start_s, 480);
  EXPECT_DOUBLE_EQ(r->jobs[1].finish_s, 530);
  // A host on: 880 W idle; 8 busy GPUs add 2720 W; off: 15 W.
  const double idle2 = 2 * 880.0, busy = idle2 + 8 * 340.0, off2 = 2 * 15.0;
  const double busy_span = 100 * busy + 30 * idle2 + 170 * off2 + 180 * idle2 + 50 * busy;  // [0, 530]
  const double tail = 30 * idle2;                                                          // [530, 560]
  EXPECT_NEAR(r->energy_j, busy_span + tail, 1e-6);
  EXPECT_NEAR(r->energy_busy_span_j, busy_span, 1e-6);
  // Work: A running [0, 100), B pending or running [300, 530).
  EXPECT_DOUBLE_EQ(r->work_s, 330);
  EXPECT_NEAR(r->energy_with_work_j, 100 * busy + 180 * idle2 + 50 * busy, 1e-6);
  Metrics m = ComputeMetrics(*r);
  EXPECT_DOUBLE_EQ(m.makespan_s, 530);
  EXPECT_NEAR(m.energy_busy_span_kwh, busy_span / 3.6e6, 1e-12);
  EXPECT_NEAR(m.energy_kwh, (busy_span + tail) / 3.6e6, 1e-12);
  EXPECT_NEAR(m.energy_with_work_kwh, r->energy_with_work_j / 3.6e6, 1e-12);
  auto j = MetricsToJson(m);
  EXPECT_NEAR(j["energy_busy_span_kwh"].get<double>(), busy_span / 3.6e6, 1e-12);
  EXPECT_DOUBLE_EQ(j["work_s"].get<double>(), 330);
}

TEST(EnginePower, IdlePowerOffSuspendsIdleNodesAndResumesThemForJobs) {
  // fifo, which never manages power, with the engine's idle power-off after 50 s. Two 8-GPU
  // hosts: A (8 GPUs, 0-100) on host 0; host 1 idle from 0, suspended at 50, off at 80; host 0
  // idle from 100, suspended at 150, off at 180. B (16 GPUs) arrives at 5000: fifo sees both
  // hosts available and binds it at once; the engine resumes both, B starts at 5180, ends 5230.
  SimCluster c = test::OneLeaf(2);
  Workload w = test::Jobs({Job(0, 100, 8), Job(5000, 50, 16)});
  PolicyContext ctx;
  auto fifo = MakePolicy("fifo", ctx);
  ASSERT_TRUE(fifo.ok());
  EngineOptions plain;
  plain.shutdown_s = 30;
  EngineOptions off = plain;
  off.idle_power_off_s = 50;
  off.idle_power_boot_s = kBootS;
  auto a = RunSimulation(c, w, **fifo, plain);
  auto b = RunSimulation(c, w, **fifo, off);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_DOUBLE_EQ(a->jobs[1].start_s, 5000);
  EXPECT_DOUBLE_EQ(b->jobs[1].start_s, 5000 + kBootS);
  EXPECT_DOUBLE_EQ(b->jobs[1].finish_s, 5000 + kBootS + 50);
  EXPECT_EQ(b->idle_power_offs, 2);
  EXPECT_EQ(b->boot_waits, 1);
  EXPECT_DOUBLE_EQ(b->idle_power_off_s, 50);
  const double idle = 880, busy8 = 8 * 340.0, off1 = 15;
  // Without power-off both hosts stay on: A's 100 s, 4900 s idle, B's 50 s on 16 GPUs.
  const double plain_j = 100 * (2 * idle + busy8) + 4900 * 2 * idle + 50 * (2 * idle + 2 * busy8);
  EXPECT_NEAR(a->energy_j, plain_j, 1e-6);
  // With it: [0,80) both on (host 1 going down from 50), [80,100) host 1 off, [100,180) host 0
  // idle then going down, [180,5000) both off, [5000,5180) both booting with B's GPUs held (idle
  // power), [5180,5230) B. The run ends with its last job.
  const double off_j = 80 * (2 * idle + busy8) + 20 * (idle + busy8 + off1) + 80 * (idle + off1) +
                       4820 * 2 * off1 + 180 * 2 * idle + 50 * (2 * idle + 2 * busy8);
  EXPECT_NEAR(b->energy_j, off_j, 1e-6);
  EXPECT_NEAR(b->energy_busy_span_j, off_j, 1e-6);
  EXPECT_LT(b->energy_j, a->energy_j / 5);
  // The timeline (written at cycles) shows host 1 off at A's finish, both on again for B.
  for (const TimelinePoint& p : b->timeline) {
    if (p.t == 100) {
      EXPECT_EQ(p.nodes_on, 1);
    }
    if (p.t >= 5000) {
      EXPECT_EQ(p.nodes_on, 2) << "at " << p.t;
    }
  }
}

TEST(EnginePower, IdlePowerOffRefusesAPolicyThatManagesPower) {
  SimCluster c = test::OneLeaf(2);
  Workload w = test::Jobs({Job(0, 100, 8), Job(300, 50, 8)});
  SuspendWhenIdlePolicy policy;
  EngineOptions o;
  o.idle_power_off_s = 3600;
  auto r = RunSimulation(c, w, policy, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("manages node power itself"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace gpool::sim
