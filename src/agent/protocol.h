// The agent side of the gpool.v1 NodeService protocol, shared by the real agent (node_agent.h)
// and the hollow agent (hollow.h): register, heartbeat every interval, register again when the
// controller does not know the node (NOT_FOUND, e.g. after a restart on a fresh store).
//
// A NodeDriver is one node: it fills the Register and Heartbeat requests and acts on the
// answers. Finished tasks stay in the driver until a heartbeat carrying them succeeds
// (OnHeartbeatResponse is called only then), so nothing is lost across controller restarts.
//
// Thread safety: RunNodeLoop blocks its thread until *stop; drivers are called from it only.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::agent {

class NodeDriver {
 public:
  virtual ~NodeDriver() = default;
  virtual const std::string& name() const = 0;
  virtual void FillRegister(v1::Node* node) = 0;
  virtual void FillHeartbeat(v1::HeartbeatRequest* req) = 0;
  virtual void OnHeartbeatResponse(const v1::HeartbeatResponse& resp) = 0;
  // Called once per round before the heartbeats (reap processes, advance simulated time).
  virtual void Tick() {}
};

struct LoopOptions {
  std::string controller = "127.0.0.1:7070";
  std::chrono::milliseconds heartbeat_interval{500};
  std::string token;        // cluster (agent) token; empty = none
  std::string tls_ca_file;  // PEM roots for a TLS controller; empty = plaintext
};

// Returns OK when *stop is set, or the error of a Register the controller rejects (invalid,
// unauthenticated, permission denied). An unreachable controller is retried forever.
Status RunNodeLoop(const LoopOptions& options, const std::vector<NodeDriver*>& nodes,
                   const std::atomic<bool>* stop);

}  // namespace gpool::agent
