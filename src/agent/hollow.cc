#include "agent/hollow.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "agent/protocol.h"
#include "common/log.h"

namespace gpool::agent {
namespace {

using Clock = std::chrono::steady_clock;

class SimNode : public NodeDriver {
 public:
  SimNode(std::string name, const HollowOptions& o) : name_(std::move(name)), o_(o) {}
  const std::string& name() const override { return name_; }

  void FillRegister(v1::Node* spec) override {
    spec->set_gpus(o_.gpus_per_node);
    spec->set_gpu_model(o_.gpu_model);
    spec->set_gpu_memory_bytes(80ull << 30);
    spec->set_cpu_milli(128000);
    spec->set_memory_bytes(1024ull << 30);
    spec->set_gpu_server(o_.gpu_server);
    off_ = false;  // a registering node is running
    boot_done_.reset();
  }

  void Tick() override {
    if (boot_done_ && Clock::now() >= *boot_done_) {
      off_ = false;
      boot_done_.reset();
      GPOOL_LOG_INFO("hollow {}: booted", name_);
    }
  }

  void FillHeartbeat(v1::HeartbeatRequest* req) override {
    for (int g = 0; g < o_.gpus_per_node && !off_; ++g) {
      v1::GpuTelemetry* t = req->add_telemetry();
      t->set_index(g);
      bool busy = !tasks_.empty();
      t->set_utilization(busy ? 0.9 : 0.0);
      t->set_temperature_c(busy ? 70 : 35);
      t->set_power_w(busy ? 600 : 90);
    }
    for (const auto& f : finished_) *req->add_finished() = f;
    req->set_powered_off(off_);
  }

  void OnHeartbeatResponse(const v1::HeartbeatResponse& resp) override {
    finished_.clear();
    if (resp.power_action() == "suspend" && !off_) {
      GPOOL_LOG_INFO("hollow {}: suspend", name_);
      off_ = true;
      tasks_.clear();
    } else if (resp.power_action() == "resume" && off_ && !boot_done_) {
      GPOOL_LOG_INFO("hollow {}: resume (boot {} ms)", name_, o_.boot_latency.count());
      boot_done_ = Clock::now() + o_.boot_latency;
    }
    auto now = Clock::now();
    std::set<std::pair<std::string, int>> listed;
    for (const v1::TaskAssignment& t : resp.tasks()) {
      auto key = std::make_pair(t.job_id(), t.task());
      listed.insert(key);
      auto have = tasks_.find(key);
      if (have == tasks_.end() || have->second.attempt != t.attempt()) {  // new or re-bound
        tasks_[key] = {now + std::chrono::milliseconds(static_cast<int64_t>(t.duration_s() * 1000)),
                       t.attempt()};
      }
    }
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (!listed.count(it->first)) {
        it = tasks_.erase(it);  // cancelled or preempted
      } else if (it->second.end <= now) {
        v1::TaskRef ref;
        ref.set_job_id(it->first.first);
        ref.set_task(it->first.second);
        ref.set_attempt(it->second.attempt);
        finished_.push_back(ref);
        it = tasks_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  std::string name_;
  const HollowOptions& o_;
  bool off_ = false;
  std::optional<Clock::time_point> boot_done_;
  struct Task {
    Clock::time_point end;
    int attempt = 0;  // TaskAssignment.attempt, echoed in the TaskRef
  };
  // Running tasks: (job, task) -> end time and bind attempt.
  std::map<std::pair<std::string, int>, Task> tasks_;
  std::vector<v1::TaskRef> finished_;  // to report on the next heartbeat
};

}  // namespace

Status RunHollowAgent(const HollowOptions& options, const std::atomic<bool>* stop) {
  if (options.names.empty() && options.nodes < 1) return Status::InvalidArgument("--hollow: must be >= 1");
  if (options.nodes < 0) return Status::InvalidArgument("--hollow: must be >= 0");
  if (!options.names.empty() && static_cast<size_t>(options.nodes) > options.names.size()) {
    return Status::InvalidArgument(fmt::format("--hollow {}: the fabric has only {} hosts",
                                               options.nodes, options.names.size()));
  }
  const size_t count = options.nodes == 0 ? options.names.size() : static_cast<size_t>(options.nodes);
  if (options.gpus_per_node < 1 || options.gpus_per_node > 16) {
    return Status::InvalidArgument("--gpus-per-node: must be 1..16");
  }
  std::vector<std::unique_ptr<SimNode>> nodes;
  std::vector<NodeDriver*> drivers;
  for (size_t i = 0; i < count; ++i) {
    std::string name = options.names.empty() ? fmt::format("{}-{:04d}", options.name_prefix, i)
                                             : options.names[i];
    nodes.push_back(std::make_unique<SimNode>(name, options));
    drivers.push_back(nodes.back().get());
  }
  return RunNodeLoop({.controller = options.controller,
                      .heartbeat_interval = options.heartbeat_interval,
                      .token = options.token,
                      .tls_ca_file = options.tls_ca_file},
                     drivers, stop);
}

}  // namespace gpool::agent
