#include "agent/hollow.h"

#include <map>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "common/log.h"
#include "control/api.h"
#include "control/controller_endpoints.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::agent {
namespace {

struct SimNode {
  std::string name;
  bool registered = false;
  struct Task {
    std::chrono::steady_clock::time_point end;
    int attempt = 0;
  };
  // Running tasks: (job, task) -> end time and bind attempt.
  std::map<std::pair<std::string, int>, Task> tasks;
  std::vector<v1::TaskRef> finished;  // to report on the next heartbeat
};

}  // namespace

Status RunHollowAgent(const HollowOptions& options, const std::atomic<bool>* stop) {
  if (options.nodes < 1) return Status::InvalidArgument("--hollow: must be >= 1");
  if (options.gpus_per_node < 1 || options.gpus_per_node > 16) {
    return Status::InvalidArgument("--gpus-per-node: must be 1..16");
  }
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

  std::vector<SimNode> nodes(options.nodes);
  for (int i = 0; i < options.nodes; ++i) {
    nodes[i].name = fmt::format("{}-{:04d}", options.name_prefix, i);
  }
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(5); };
  while (!stop->load()) {
    auto round_start = std::chrono::steady_clock::now();
    for (SimNode& n : nodes) {
      if (stop->load()) break;
      if (!n.registered) {
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline());
        control::AttachToken(&ctx, options.token);
        v1::RegisterNodeRequest req;
        v1::Node* spec = req.mutable_node();
        spec->set_name(n.name);
        spec->set_gpus(options.gpus_per_node);
        spec->set_gpu_model(options.gpu_model);
        spec->set_gpu_memory_bytes(80ull << 30);
        spec->set_cpu_milli(128000);
        spec->set_memory_bytes(1024ull << 30);
        v1::RegisterNodeResponse resp;
        grpc::Status s = stub->Register(&ctx, req, &resp);
        if (!s.ok()) {
          GPOOL_LOG_WARN("register {}: {}", n.name, s.error_message());
          failed(s);
          if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
              s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
              s.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
            return control::FromGrpc(s);
          }
          continue;
        }
        n.registered = true;
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      control::AttachToken(&ctx, options.token);
      v1::HeartbeatRequest req;
      req.set_node(n.name);
      for (int g = 0; g < options.gpus_per_node; ++g) {
        v1::GpuTelemetry* t = req.add_telemetry();
        t->set_index(g);
        bool busy = !n.tasks.empty();
        t->set_utilization(busy ? 0.9 : 0.0);
        t->set_temperature_c(busy ? 70 : 35);
      }
      for (const auto& f : n.finished) *req.add_finished() = f;
      v1::HeartbeatResponse resp;
      grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
      if (!s.ok()) {
        if (s.error_code() == grpc::StatusCode::NOT_FOUND) n.registered = false;
        failed(s);
        continue;  // keep `finished` to report again
      }
      n.finished.clear();
      auto now = std::chrono::steady_clock::now();
      std::set<std::pair<std::string, int>> listed;
      for (const v1::TaskAssignment& t : resp.tasks()) {
        auto key = std::make_pair(t.job_id(), t.task());
        listed.insert(key);
        auto have = n.tasks.find(key);
        if (have == n.tasks.end() || have->second.attempt != t.attempt()) {  // new or re-bound
          n.tasks[key] = {now + std::chrono::milliseconds(static_cast<int64_t>(t.duration_s() * 1000)),
                          t.attempt()};
        }
      }
      for (auto it = n.tasks.begin(); it != n.tasks.end();) {
        if (!listed.count(it->first)) {
          it = n.tasks.erase(it);  // cancelled or preempted
        } else if (it->second.end <= now) {
          v1::TaskRef ref;
          ref.set_job_id(it->first.first);
          ref.set_task(it->first.second);
          ref.set_attempt(it->second.attempt);
          n.finished.push_back(ref);
          it = n.tasks.erase(it);
        } else {
          ++it;
        }
      }
    }
    auto next = round_start + options.heartbeat_interval;
    while (!stop->load() && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return Status::Ok();
}

}  // namespace gpool::agent
