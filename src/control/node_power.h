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
//   resuming --still resuming after power.resume_timeout_s--> resuming again (a retry: the
//     timer restarts, `resume_retries` + 1), and after power.resume_retries retries
//     --> resume-failed: not schedulable, never resumed again by the plan (other off nodes are
//     resumed instead), shown as the node's state and in gpool_nodes{state="resume-failed"};
//     a heartbeat from the running node or a Register brings it back on.
// The power state, when it last changed (power_since_ms) and the retry count are fields of the
// Node record, so they are committed with it and survive a controller restart: a node resuming
// when the controller stopped is still resuming after it, with its timer and retries.
// A node that is really powered off cannot hear "resume": agents registered with power_proxy
// get the names of resuming nodes (HeartbeatResponse.resume_nodes) and run --resume-cmd for them
// (e.g. ipmitool against the node's BMC). A proxy is never suspended.
//
// Limits: idle times live in memory only (a restarted controller gives every node a fresh idle
// period, so nothing is suspended early). A retry is the same "resume" action again: the node's
// own agent gets it in heartbeat answers all along, and power proxies run --resume-cmd for a
// resuming node at most once a minute, so a resume_timeout_s of a minute or more gives every
// attempt at least one run of the command.
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
  // "resume-failed" counts as off (the controller also marks it unhealthy, so it is not resumed).
  static sched::PowerState SchedState(const v1::Node& n);
  static constexpr const char* kResumeFailed = "resume-failed";
  // Sets the power state and when it changed; a node that is on again has no retries left over.
  static void SetPower(v1::Node* n, const std::string& power, int64_t now_ms);

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
