// Following the leader (controller_endpoints.h) and the node timeout the controller accepts
// (agent_timing.h): the two halves of keeping nodes alive across a change of leader.
#include "control/controller_endpoints.h"

#include <filesystem>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "control/agent_timing.h"
#include "control/controller.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

grpc::Status NotLeaderAt(const std::string& leader) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "not the leader; the leader is at " + leader);
}

// A paused leader: the agent's call to it runs out its deadline, and the standbys keep naming it
// until its lease expires. Going back to it would cost another whole deadline per try; the
// agent tries the other controllers instead, and follows the redirect again once the
// avoidance window is over (the "paused" leader may have been merely slow).
TEST(ControllerEndpointsTest, DoesNotFollowRedirectsBackToALeaderThatJustTimedOut) {
  ClientOptions o;
  o.address = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
  auto e = ControllerEndpoints::Parse("--controller", o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(e->current(), "127.0.0.1:1");
  EXPECT_TRUE(e->Failed(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"), t0));
  EXPECT_EQ(e->current(), "127.0.0.1:2");
  EXPECT_TRUE(e->Failed(NotLeaderAt("127.0.0.1:1"), t0 + std::chrono::milliseconds(10)));
  EXPECT_EQ(e->current(), "127.0.0.1:3");
  EXPECT_TRUE(e->Failed(NotLeaderAt("127.0.0.1:1"), t0 + std::chrono::milliseconds(20)));
  EXPECT_EQ(e->current(), "127.0.0.1:2");  // round robin past the silent one
  // A redirect to another controller (the new leader) is followed at once.
  EXPECT_TRUE(e->Failed(NotLeaderAt("127.0.0.1:3"), t0 + std::chrono::milliseconds(30)));
  EXPECT_EQ(e->current(), "127.0.0.1:3");
  // After the window, the old leader is followed again.
  EXPECT_TRUE(e->Failed(NotLeaderAt("127.0.0.1:1"), t0 + kAgentAvoidSilent));
  EXPECT_EQ(e->current(), "127.0.0.1:1");
}

TEST(ControllerEndpointsTest, ASingleControllerIsAlwaysRetried) {
  ClientOptions o;
  o.address = "127.0.0.1:1";
  auto e = ControllerEndpoints::Parse("--controller", o);
  ASSERT_TRUE(e.ok());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(e->Failed(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x"), t0));
  EXPECT_EQ(e->current(), "127.0.0.1:1");
}

// The setting of the report: --node-timeout-ms 3000 with several controllers. An agent may wait
// out its call deadline on the paused leader and then look for the new one; a new leader whose
// grace (the node timeout) is shorter requeues every running job. Refused, saying why.
TEST(NodeTimeoutTest, TooShortForALeaderChangeIsRefusedNamingWhy) {
  ControllerOptions o;
  o.node_timeout = std::chrono::milliseconds(3000);
  Status s = CheckNodeTimeout(o, /*ha=*/true);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  const auto need = kAgentCallTimeout + kAgentAvoidSilent + o.heartbeat_interval;
  EXPECT_NE(s.message().find("--node-timeout-ms 3000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("find the new leader"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fmt::format("use at least {}", need.count())), std::string::npos)
      << s.message();
  o.node_timeout = need;
  EXPECT_TRUE(CheckNodeTimeout(o, true).ok());
  // One controller: no leader to find, the call deadline and the heartbeat interval remain.
  o.node_timeout = kAgentCallTimeout + o.heartbeat_interval;
  EXPECT_TRUE(CheckNodeTimeout(o, false).ok());
  o.node_timeout -= std::chrono::milliseconds(1);
  EXPECT_EQ(CheckNodeTimeout(o, false).code(), StatusCode::kInvalidArgument);
}

TEST(NodeTimeoutTest, ControllerOpenRefusesIt) {
  std::string dir = MakeTempDir("node_timeout_test");
  ControllerOptions o;
  o.store_url = "sqlite:" + dir + "/state.db";
  o.node_timeout = std::chrono::milliseconds(1000);
  auto c = Controller::Open(o);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--node-timeout-ms 1000"), std::string::npos)
      << c.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpool::control
