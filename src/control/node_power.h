// NodePower: applies the scheduler's power decisions (src/sched/power.h) to registered nodes.
//
// The sched library decides which nodes to suspend and resume; this class keeps what it needs
// and the library does not: when each node last became idle (the controller rebuilds its
// ClusterState every cycle, so the state's own idle times are meaningless), and each node's
// power state ("on", "suspending", "off", "resuming", persisted in the Node record). Decisions
// reach the agents through heartbeat answers (HeartbeatResponse.power_action), repeated until
// the node reports the new state:
//   on --plan--> suspending --heartbeat powered_off, or heartbeats stop--> off
//   off --plan--> resuming --heartbeat from the running node / Register--> on
// A node that is really powered off cannot hear "resume": agents registered with power_proxy
// get the names of resuming nodes (HeartbeatResponse.resume_nodes) and run --resume-cmd for them
// (e.g. ipmitool against the node's BMC). A proxy is never suspended.
//
// Limits: idle times live in memory only (a restarted controller gives every node a fresh idle
// period, so nothing is suspended early). A node stuck in "resuming" (a boot that never comes
// back) stays there; nothing retries or gives up yet.
//
// Thread safety: none; the Controller calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"
#include "sched/cluster.h"
#include "sched/scheduler.h"
#include "sched/types.h"

namespace gpool::control {

class NodePower {
 public:
  NodePower() = default;
  NodePower(const sched::PowerConfig& config, int64_t node_timeout_ms)
      : config_(config), node_timeout_ms_(node_timeout_ms) {}

  bool enabled() const { return config_.enabled; }
  static sched::PowerState SchedState(const v1::Node& n);

  // A node registered or was recovered: idle from now.
  void OnNodeUp(const std::string& node, int64_t now_ms);
  // Applies what a heartbeat says about power; true when the node record changed (persist it).
  bool OnHeartbeat(v1::Node* node, bool powered_off, int64_t now_ms);
  // Per refresh: idle bookkeeping, and the displayed state of nodes that are not on.
  void Refresh(v1::Node* node, bool busy, int64_t now_ms);
  // Adds this node's power action and, for proxies, the nodes to resume.
  void FillHeartbeatResponse(const v1::Node& node, const std::map<std::string, v1::Node>& nodes,
                             v1::HeartbeatResponse* resp) const;
  // One planning step after a cycle's binds were applied to `state`. Changed nodes (in *nodes)
  // are appended to *changed for the caller to persist.
  Status Plan(const sched::ClusterState& state, const std::vector<sched::JobSpec>& pending,
              const sched::Decisions& decisions, int64_t now_ms,
              std::map<std::string, v1::Node>* nodes, std::vector<const v1::Node*>* changed);

 private:
  sched::PowerConfig config_;
  int64_t node_timeout_ms_ = 10000;
  std::map<std::string, int64_t> idle_since_ms_;  // -1 while busy
};

}  // namespace gpool::control
