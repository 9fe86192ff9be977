#include "sched/power.h"

#include <algorithm>
#include <cmath>

namespace gpool::sched {

int64_t RecentArrivalGpus(const ClusterState& state, const std::vector<JobSpec>& pending, int64_t now_ns,
                          double window_s) {
  if (!(window_s > 0)) return 0;
  const int64_t since = now_ns - static_cast<int64_t>(window_s * 1e9);
  int64_t milli = 0;
  auto add = [&](const JobSpec& j) {
    if (j.submit_ns >= since && j.submit_ns <= now_ns) milli += (j.total_milli_gpus() + 999) / 1000 * 1000;
  };
  // A job bound in this cycle is still in `pending` and already running in `state`: it counts
  // once, as running (it was submitted once; counting it twice would keep its GPUs awake twice).
  for (const JobSpec& j : pending) {
    if (state.FindRunning(j.id) == nullptr) add(j);
  }
  for (const RunningJob& r : state.running()) add(r.spec);
  return milli / 1000;
}

std::vector<PowerDecision> PlanPower(const ClusterState& state, const PowerConfig& config,
                                     const PowerInput& in) {
  std::vector<PowerDecision> out;
  if (!config.enabled) return out;
  int64_t free_on = 0;
  for (DomainId f : state.domains_at(Level::kFabric)) free_on += state.FreeWholeGpus(f, kAnyModel);
  int64_t resuming_gpus = 0;
  int resuming = 0;
  int gpu_nodes = 0;  // healthy nodes with GPUs: what the storm limit scales with
  for (size_t i = 0; i < state.num_nodes(); ++i) {
    const NodeSpec& n = state.spec().nodes[i];
    if (n.health != Health::kHealthy) continue;
    gpu_nodes += n.gpus > 0 ? 1 : 0;
    if (n.power == PowerState::kResuming) {
      resuming_gpus += n.gpus;
      ++resuming;
    }
  }
  const int64_t ready_ns = in.now_ns + static_cast<int64_t>(config.boot_latency_s * 1e9);
  auto keep = [&](NodeId n) {
    return in.keep_on != nullptr && n.value() < in.keep_on->size() && (*in.keep_on)[n.value()];
  };

  const int64_t buffer = std::max(config.warm_buffer_gpus, in.recent_arrival_gpus);
  const int64_t deficit = std::max<int64_t>(0, buffer - free_on) + in.demand_gpus - resuming_gpus;
  if (deficit > 0) {
    // Resume whole leaves: the leaf with the most off nodes first, its nodes in id order.
    std::vector<std::pair<int, DomainId>> leaves;
    for (DomainId l : state.domains_at(Level::kLeaf)) {
      int off = 0;
      for (NodeId n : state.leaf_nodes(l)) {
        const NodeSpec& s = state.node(n);
        off += (s.power == PowerState::kOff && s.health == Health::kHealthy && s.gpus > 0) ? 1 : 0;
      }
      if (off > 0) leaves.push_back({off, l});
    }
    std::sort(leaves.begin(), leaves.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    int64_t got = 0;
    // The limits scale with the cluster (PowerConfig::max_resuming_fraction).
    const int scaled = static_cast<int>(std::ceil(config.max_resuming_fraction * gpu_nodes));
    const int budget = std::min(std::max(config.max_resumes_per_cycle, scaled),
                                std::max(config.max_resuming, scaled) - resuming);
    for (const auto& [off, l] : leaves) {
      for (NodeId n : state.leaf_nodes(l)) {
        if (got >= deficit || static_cast<int>(out.size()) >= budget) return out;
        const NodeSpec& s = state.node(n);
        if (s.power != PowerState::kOff || s.health != Health::kHealthy || s.gpus == 0) continue;
        out.push_back({.node = n, .target = PowerState::kOn, .ready_ns = ready_ns});
        got += s.gpus;
      }
    }
    return out;
  }
  if (in.demand_gpus > 0) return out;  // jobs are waiting: nothing is switched off

  // Suspend idle nodes, leaves closest to entirely off first.
  const double timeout_ns = config.idle_timeout_s * 1e9;
  auto candidate = [&](NodeId n) {
    return state.schedulable(n) && state.idle(n) && !keep(n) &&
           static_cast<double>(in.now_ns - state.idle_since_ns(n)) >= timeout_ns;
  };
  struct Leaf {
    double off_fraction;
    DomainId leaf;
  };
  std::vector<Leaf> leaves;
  for (DomainId l : state.domains_at(Level::kLeaf)) {
    const std::vector<NodeId>& nodes = state.leaf_nodes(l);
    if (nodes.empty()) continue;
    int could_be_off = 0;
    bool any = false;
    for (NodeId n : nodes) {
      const PowerState p = state.node(n).power;
      const bool c = candidate(n);
      any |= c;
      could_be_off += (c || p == PowerState::kOff || p == PowerState::kSuspending) ? 1 : 0;
    }
    if (any) leaves.push_back({static_cast<double>(could_be_off) / static_cast<double>(nodes.size()), l});
  }
  std::sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) {
    return a.off_fraction != b.off_fraction ? a.off_fraction > b.off_fraction : a.leaf < b.leaf;
  });
  int64_t spare = free_on - buffer;
  for (const Leaf& l : leaves) {
    for (NodeId n : state.leaf_nodes(l.leaf)) {
      if (static_cast<int>(out.size()) >= config.max_suspends_per_cycle) return out;
      if (!candidate(n)) continue;
      const int32_t gpus = state.free_whole_gpus(n);
      if (gpus > spare) continue;
      spare -= gpus;
      out.push_back({.node = n, .target = PowerState::kOff, .ready_ns = in.now_ns});
    }
  }
  return out;
}

}  // namespace gpool::sched
