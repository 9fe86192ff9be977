#include "control/node_power.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gpool::control
