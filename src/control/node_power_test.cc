#include "control/node_power.h"

#include <gtest/gtest.h>

#include "sched/cluster.h"

namespace gpool::control {
namespace {

v1::Node MakeNode(const std::string& name, const std::string& power) {
  v1::Node n;
  n.set_name(name);
  n.set_gpus(8);
  n.set_power(power);
  return n;
}

TEST(NodePowerTest, HeartbeatTransitions) {
  sched::PowerConfig c;
  c.enabled = true;
  NodePower p(c, 5000);
  v1::Node n = MakeNode("a", "suspending");
  EXPECT_FALSE(p.OnHeartbeat(&n, false, 1));  // not yet off
  EXPECT_EQ(n.power(), "suspending");
  EXPECT_TRUE(p.OnHeartbeat(&n, true, 2));
  EXPECT_EQ(n.power(), "off");
  EXPECT_FALSE(p.OnHeartbeat(&n, true, 3));
  n.set_power("resuming");
  EXPECT_FALSE(p.OnHeartbeat(&n, true, 4));  // still booting
  EXPECT_TRUE(p.OnHeartbeat(&n, false, 5));
  EXPECT_EQ(n.power(), "on");
}

TEST(NodePowerTest, ActionsAndProxies) {
  NodePower p;
  std::map<std::string, v1::Node> nodes;
  nodes["a"] = MakeNode("a", "suspending");
  nodes["b"] = MakeNode("b", "resuming");
  nodes["c"] = MakeNode("c", "resuming");
  nodes["p"] = MakeNode("p", "on");
  nodes["p"].set_power_proxy(true);
  v1::HeartbeatResponse r;
  p.FillHeartbeatResponse(nodes["a"], nodes, &r);
  EXPECT_EQ(r.power_action(), "suspend");
  EXPECT_EQ(r.resume_nodes_size(), 0);  // not a proxy
  r.Clear();
  p.FillHeartbeatResponse(nodes["b"], nodes, &r);
  EXPECT_EQ(r.power_action(), "resume");
  r.Clear();
  p.FillHeartbeatResponse(nodes["p"], nodes, &r);
  EXPECT_EQ(r.power_action(), "");
  ASSERT_EQ(r.resume_nodes_size(), 2);
  EXPECT_EQ(r.resume_nodes(0), "b");
  EXPECT_EQ(r.resume_nodes(1), "c");
}

TEST(NodePowerTest, RefreshShowsPowerAsStateAndTracksIdle) {
  NodePower p;
  v1::Node n = MakeNode("a", "off");
  n.set_state("ready");
  p.Refresh(&n, false, 10);
  EXPECT_EQ(n.state(), "off");
  n.set_power("on");
  n.set_state("ready");
  p.Refresh(&n, true, 20);
  EXPECT_EQ(n.state(), "ready");
}

// Four idle 8-GPU nodes past the idle timeout, no fixed warm buffer, and a 16-GPU job that
// arrived a minute ago running on two of them: the other two stay on while the arrival window
// holds that job (a burst like it may follow), and are suspended without the window.
TEST(NodePowerTest, PlanKeepsRecentArrivalsWarm) {
  sched::ClusterSpec spec;
  spec.gpu_models = {"G"};
  for (int i = 0; i < 4; ++i) {
    spec.nodes.push_back({.name = "n" + std::to_string(i), .gpus = 8, .gpu_model = 0,
                          .gpu_memory_bytes = 80ull << 30, .cpu_milli = 64000,
                          .memory_bytes = 512ull << 30});
  }
  ASSERT_TRUE(sched::BuildUniformTopology({.nodes_per_leaf = 4}, &spec).ok());
  auto state = sched::ClusterState::Create(spec);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  const int64_t now_ms = 3'600'000;
  sched::JobSpec job;
  job.id = sched::JobId(1);
  job.name = "burst";
  job.queue = sched::QueueId(0);
  job.num_tasks = 2;
  job.task.gpus = 8;
  job.submit_ns = (now_ms - 60'000) * 1'000'000;
  sched::Placement p;
  p.tasks.push_back({.node = sched::NodeId(0), .gpu_mask = 0xff, .gpu_milli = 1000});
  p.tasks.push_back({.node = sched::NodeId(1), .gpu_mask = 0xff, .gpu_milli = 1000});
  ASSERT_TRUE(state->Bind(job, p, job.submit_ns).ok());

  auto suspended = [&](double window_s) {
    sched::PowerConfig c;
    c.enabled = true;
    c.idle_timeout_s = 600;
    c.warm_buffer_gpus = 0;
    c.arrival_window_s = window_s;
    NodePower power(c, 5000);
    std::map<std::string, v1::Node> nodes;
    for (const auto& n : spec.nodes) {
      nodes[n.name] = MakeNode(n.name, "on");
      nodes[n.name].set_last_heartbeat_ms(now_ms);
      power.OnNodeUp(n.name, 0);  // idle since 0: an hour, past the timeout
    }
    std::vector<const v1::Node*> changed;
    Status s = power.Plan(*state, {}, {}, now_ms, &nodes, &changed);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<std::string> out;
    for (const auto& [name, n] : nodes) {
      if (n.power() == "suspending") out.push_back(name);
    }
    return out;
  };
  EXPECT_EQ(suspended(600), std::vector<std::string>{});
  EXPECT_EQ(suspended(0), (std::vector<std::string>{"n2", "n3"}));
  // The arrival is older than a 30 s window: nothing to keep warm for.
  EXPECT_EQ(suspended(30), (std::vector<std::string>{"n2", "n3"}));
}

}  // namespace
}  // namespace gpool::control
