// HollowAgent: simulates N GPU nodes against a real controller over the gpool.v1 gRPC protocol.
//
// Each simulated node registers, then heartbeats (with made-up telemetry). Tasks the controller
// binds to a node "run" for their duration_s (wall clock, from when the agent first saw them) and
// are reported finished on the next heartbeat. Tasks that disappear from the controller's list
// (cancelled, preempted) are dropped. A node the controller does not know (after a controller
// restart on a fresh store) registers again. Like Kubernetes' hollow kubelet (kubemark), this is
// for scale tests and demos: nothing is executed. The protocol loop is the real agent's
// (protocol.h).
//
// Power: a "suspend" from the controller switches the simulated node off at once (it keeps
// heartbeating, with powered_off, since the simulation has no BMC); a "resume" boots it, and it
// reports on again after boot_latency.
//
// Thread safety: Run blocks the calling thread until *stop becomes true; one thread drives all
// nodes (sequential unary RPCs: ~256 nodes at 1 Hz is well within one loopback channel).
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::agent {

struct HollowOptions {
  std::string controller = "127.0.0.1:7070";
  int nodes = 1;
  int gpus_per_node = 8;
  std::string gpu_model = "H100";
  std::string name_prefix = "hollow";   // node names: <prefix>-0000, <prefix>-0001, ...
  // Explicit node names (`--fabric`: the fabric's hosts, so the controller finds them there);
  // when set, the first `nodes` of them are used (all when nodes is 0).
  std::vector<std::string> names;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds boot_latency{2000};  // simulated resume-to-ready time
  std::string token;        // cluster (agent) token; empty = none
  std::string tls_ca_file;  // PEM roots for a TLS controller; empty = plaintext
  // Advertised by every simulated node as its GPU server (Node.gpu_server), so that the
  // scheduler may lend their GPUs to remote tasks. No server runs behind it: hollow tasks run
  // nothing, so remote placements are exercised at scale without GPUs or servers. Empty = none.
  std::string gpu_server;
};

// Returns when *stop is set (OK) or on a non-retryable error (bad options). An unreachable
// controller is retried forever: the agent outlives controller restarts.
Status RunHollowAgent(const HollowOptions& options, const std::atomic<bool>* stop);

}  // namespace gpool::agent
