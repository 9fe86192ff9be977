#include "control/history.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/names.h"
#include "control/controller.h"

namespace gpool::control {

History::History(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
  ring_.reserve(capacity_);
}

void History::Add(UtilSample s) {
  std::lock_guard<std::mutex> l(mu_);
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(s));
  } else {
    ring_[next_] = std::move(s);
  }
  next_ = (next_ + 1) % capacity_;
}

std::vector<UtilSample> History::Since(int64_t since_ms) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<UtilSample> out;
  // Oldest first: when full, the oldest sample is the one next_ will overwrite.
  size_t start = ring_.size() < capacity_ ? 0 : next_;
  for (size_t i = 0; i < ring_.size(); ++i) {
    const UtilSample& s = ring_[(start + i) % ring_.size()];
    if (s.t_ms > since_ms) out.push_back(s);
  }
  return out;
}

size_t History::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return ring_.size();
}

std::string History::Json(int64_t since_ms, int64_t interval_ms,
                          const std::string& only_tenant) const {
  nlohmann::json samples = nlohmann::json::array();
  for (UtilSample& s : Since(since_ms)) {
    if (!only_tenant.empty()) {
      std::erase_if(s.tenant_gpus, [&](const auto& kv) { return kv.first != only_tenant; });
    }
    samples.push_back({{"t", s.t_ms},
                       {"total", s.gpus_total},
                       {"allocated", s.gpus_allocated},
                       {"down", s.gpus_down},
                       {"nodes_ready", s.nodes_ready},
                       {"nodes_down", s.nodes_down},
                       {"running", s.jobs_running},
                       {"pending", s.jobs_pending},
                       {"tenants", s.tenant_gpus}});
  }
  nlohmann::json out = {{"capacity", capacity_}, {"interval_ms", interval_ms},
                        {"samples", std::move(samples)}};
  return out.dump();
}

UtilSample SampleController(Controller* c, int64_t now_ms) {
  UtilSample s;
  s.t_ms = now_ms;
  // Two calls, two lock acquisitions: a sample may straddle a scheduling cycle. That is fine
  // for a utilization chart; the counts within each call are consistent.
  v1::ListNodesResponse nodes = c->ListNodes();
  for (const v1::Node& n : nodes.nodes()) {
    s.gpus_total += n.gpus();
    s.gpus_allocated += n.gpus_allocated();
    // Missed heartbeats, powered off, or did not come back from a resume (node_power.h).
    if (n.state() == "down" || n.state() == "off" || n.state() == "resume-failed") {
      ++s.nodes_down;
      s.gpus_down += n.gpus();
    } else {
      ++s.nodes_ready;
    }
  }
  v1::ListTenantsResponse tenants = c->ListTenants();
  for (const v1::Tenant& t : tenants.tenants()) {
    s.jobs_running += t.running_jobs();
    s.jobs_pending += t.pending_jobs();
    if (t.gpus_in_use() > 0) s.tenant_gpus[t.name()] = t.gpus_in_use();
  }
  return s;
}

StatusOr<int64_t> ParseSinceMs(const std::string& text) {
  if (text.empty()) return int64_t{0};
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used != text.size() || v < 0) throw std::out_of_range("");
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return Status::InvalidArgument(
        fmt::format("since: want Unix milliseconds >= 0, got '{}'", EscapeForMessage(text)));
  }
}

}  // namespace gpool::control
