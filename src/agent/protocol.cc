#include "agent/protocol.h"

#include <algorithm>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "control/agent_timing.h"
#include "control/api.h"
#include "control/auth.h"
#include "control/controller_endpoints.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::agent {

Status RunNodeLoop(const LoopOptions& options, const std::vector<NodeDriver*>& nodes,
                   const std::atomic<bool>* stop) {
  control::ClientOptions co;
  co.address = options.controller;
  co.token = options.token;
  co.tls_ca_file = options.tls_ca_file;
  // Several controllers (HA): follow the leader; a standby's "not the leader" moves us on.
  GPOOL_ASSIGN_OR_RETURN(auto endpoints, control::ControllerEndpoints::Parse("--controller", co));
  GPOOL_ASSIGN_OR_RETURN(auto channel, endpoints.Channel());
  auto stub = v1::NodeService::NewStub(channel);
  auto failed = [&](const grpc::Status& s) {
    std::string before = endpoints.current();
    if (endpoints.Failed(s) && endpoints.current() != before) {
      auto ch = endpoints.Channel();
      if (ch.ok()) stub = v1::NodeService::NewStub(*ch);
    }
  };
  std::vector<bool> registered(nodes.size(), false);
  // Heartbeat failures in a row, for the log: the first failure and the recovery are what an
  // operator needs (when the agent lost the controller and for how long), not one line per try.
  int failing = 0;
  auto lost_since = std::chrono::steady_clock::now();
  // Short, so that a leader that stopped answering costs little before the agent looks for the
  // new one; the controller refuses node timeouts that do not leave room for it (agent_timing.h).
  auto deadline = [] { return std::chrono::system_clock::now() + control::kAgentCallTimeout; };
  while (!stop->load()) {
    auto round_start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (stop->load()) break;
      NodeDriver* n = nodes[i];
      n->Tick();
      if (!registered[i]) {
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline());
        control::AttachToken(&ctx, options.token);
        v1::RegisterNodeRequest req;
        n->FillRegister(req.mutable_node());
        req.mutable_node()->set_name(n->name());
        v1::RegisterNodeResponse resp;
        grpc::Status s = stub->Register(&ctx, req, &resp);
        if (!s.ok()) {
          GPOOL_LOG_WARN("register {}: {}", n->name(), s.error_message());
          failed(s);
          if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
              s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
              s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
            return control::FromGrpc(s);
          }
          continue;
        }
        registered[i] = true;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      control::AttachToken(&ctx, options.token);
      v1::HeartbeatRequest req;
      n->FillHeartbeat(&req);
      req.set_node(n->name());
      v1::HeartbeatResponse resp;
      grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
      if (!s.ok()) {
        if (failing++ == 0) {
          lost_since = std::chrono::steady_clock::now();
          GPOOL_LOG_WARN("heartbeat {} to {}: {} ({}); retrying", n->name(), endpoints.current(),
                         s.error_message(), static_cast<int>(s.error_code()));
        }
        if (s.error_code() == grpc::StatusCode::NOT_FOUND) registered[i] = false;
        failed(s);
        continue;  // the driver keeps its finished tasks to report again
      }
      if (failing > 0) {
        GPOOL_LOG_INFO("heartbeats to {} succeed again after {} failures in {} ms",
                       endpoints.current(), failing,
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - lost_since).count());
        failing = 0;
      }
      n->OnHeartbeatResponse(resp);
    }
    auto next = round_start + options.heartbeat_interval;
    bool connecting = failing > 0;
    while (!stop->load() && std::chrono::steady_clock::now() < next) {
      if (connecting) {
        // gRPC 1.51 finishes a reconnect attempt only while some thread polls the channel;
        // calls that fail fast (TRANSIENT_FAILURE) do not, which leaves it to gRPC's backup
        // poller, every 5 s: a restarted controller would see our nodes silent past its node
        // timeout. Waiting for the connection polls it, so we are back within the reconnect
        // backoff (auth.cc: at most 1 s). Short slices keep *stop responsive.
        auto ch = endpoints.Channel();
        auto slice = std::min(next, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
        if (ch.ok() && (*ch)->WaitForConnected(std::chrono::system_clock::now() +
                                               (slice - std::chrono::steady_clock::now()))) {
          connecting = false;  // connected; the next round's heartbeat goes at its time
        }
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return Status::Ok();
}

}  // namespace gpool::agent
