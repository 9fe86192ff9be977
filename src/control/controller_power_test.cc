// Power state through the Controller (node_power.h) on a real SQLite store and a ManualClock:
// the power state, its timer and its resume retries are in the Node record, so they survive a
// controller restart; a node that does not come back from "resuming" is resumed again after
// power.resume_timeout_s, up to power.resume_retries times, then marked resume-failed (not
// schedulable, in gpool_nodes{state="resume-failed"}) and another off node is resumed instead;
// a heartbeat of the running node brings it back on.
#include <filesystem>

#include <gtest/gtest.h>

#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

class ControllerPowerTest : public ControllerFixture {
 protected:
  ControllerPowerTest() : ControllerFixture("controller_power_test") {}
  void SetUp() override {
    ControllerFixture::SetUp();
    // No warm buffer, fixed or from recent arrivals (power.arrival_window_s; tested in
    // NodePowerTest.PlanKeepsRecentArrivalsWarm): a job resumes exactly the nodes it needs.
    opts_.policy_config =
        "power.enabled=true,power.idle_timeout_s=1,power.warm_buffer_gpus=0,"
        "power.arrival_window_s=0,power.boot_latency_s=1,power.resume_timeout_s=10,"
        "power.resume_retries=2";
  }
  void AddNode(const std::string& name) {
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_gpus(8);
    r.mutable_node()->set_gpu_model("H100");
    ASSERT_TRUE(c_->RegisterNode(r).ok());
  }
  v1::HeartbeatResponse Beat(const std::string& node, bool powered_off) {
    v1::HeartbeatRequest r;
    r.set_node(node);
    r.set_powered_off(powered_off);
    auto s = c_->Heartbeat(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::HeartbeatResponse();
  }
  void Schedule() {
    Status s = c_->ScheduleOnce();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  v1::Node Node(const std::string& name) {
    const v1::ListNodesResponse all = c_->ListNodes();  // not a temporary's member in the loop
    for (const v1::Node& n : all.nodes()) {
      if (n.name() == name) return n;
    }
    ADD_FAILURE() << "no node " << name;
    return v1::Node();
  }
  int64_t NowMs() const { return clock_.NowNanos() / 1000000; }
};

TEST_F(ControllerPowerTest, PowerStateSurvivesRestartAndResumeIsRetriedThenFails) {
  Open();
  AddNode("a");
  AddNode("b");
  clock_.AdvanceSeconds(2);  // idle longer than power.idle_timeout_s
  Beat("a", false);
  Beat("b", false);
  Schedule();
  ASSERT_EQ(Node("a").power(), "suspending");
  ASSERT_EQ(Node("b").power(), "suspending");
  EXPECT_EQ(Beat("a", false).power_action(), "suspend");
  Beat("a", true);
  Beat("b", true);
  ASSERT_EQ(Node("a").state(), "off");

  Open();  // restart: both are still off, not "ready"
  EXPECT_EQ(Node("a").power(), "off");
  EXPECT_EQ(Node("a").state(), "off");
  EXPECT_EQ(Node("b").state(), "off");

  // Demand resumes one node (8 GPUs are enough).
  v1::SubmitJobRequest sub;
  sub.set_tenant("t");
  sub.set_gpus(8);
  ASSERT_TRUE(c_->Submit(sub).ok());
  Schedule();
  std::string r = Node("a").power() == "resuming" ? "a" : "b";
  std::string other = r == "a" ? "b" : "a";
  ASSERT_EQ(Node(r).power(), "resuming");
  ASSERT_EQ(Node(other).power(), "off");
  const int64_t since = Node(r).power_since_ms();
  EXPECT_EQ(since, NowMs());
  EXPECT_EQ(Node(r).resume_retries(), 0);

  Open();  // restart while it boots: still resuming, with its timer
  EXPECT_EQ(Node(r).power(), "resuming");
  EXPECT_EQ(Node(r).power_since_ms(), since);
  EXPECT_EQ(Beat(r, true).power_action(), "resume");  // it keeps being told

  clock_.AdvanceSeconds(5);
  Schedule();
  EXPECT_EQ(Node(r).resume_retries(), 0);  // within resume_timeout_s
  clock_.AdvanceSeconds(6);
  Schedule();
  EXPECT_EQ(Node(r).power(), "resuming");
  EXPECT_EQ(Node(r).resume_retries(), 1);
  EXPECT_EQ(Node(r).power_since_ms(), NowMs());

  Open();  // the retry count is durable too
  EXPECT_EQ(Node(r).resume_retries(), 1);
  clock_.AdvanceSeconds(11);
  Schedule();
  EXPECT_EQ(Node(r).resume_retries(), 2);
  EXPECT_EQ(Node(other).power(), "off");  // retries do not resume more nodes
  clock_.AdvanceSeconds(11);
  Schedule();
  EXPECT_EQ(Node(r).power(), "resume-failed");
  EXPECT_EQ(Node(r).state(), "resume-failed");
  EXPECT_NE(c_->MetricsText().find("gpool_nodes{state=\"resume-failed\"} 1"), std::string::npos)
      << c_->MetricsText();
  // The demand goes to the other off node; the failed one is not resumed again.
  Schedule();
  EXPECT_EQ(Node(other).power(), "resuming");
  EXPECT_EQ(Node(r).power(), "resume-failed");
  // A node that reports itself still off gets no action and stays failed.
  EXPECT_EQ(Beat(r, true).power_action(), "");
  EXPECT_EQ(Node(r).power(), "resume-failed");

  Open();  // and that survives a restart
  EXPECT_EQ(Node(r).state(), "resume-failed");
  Schedule();
  EXPECT_EQ(Node(r).power(), "resume-failed");

  // It finally boots: a heartbeat from the running node brings it back on, retries cleared.
  Beat(r, false);
  EXPECT_EQ(Node(r).power(), "on");
  EXPECT_EQ(Node(r).resume_retries(), 0);
  Schedule();
  v1::ListJobsRequest lj;
  lj.set_state("running");
  EXPECT_EQ(c_->ListJobs(lj).jobs_size(), 1);
}

}  // namespace
}  // namespace gpool::control
