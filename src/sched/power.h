// Power decisions: suspend idle nodes, resume nodes on demand.
//
// Suspend: a powered-on, healthy node that has been fully idle longer than the idle timeout is
// suspended, as long as the free GPUs left powered on (plus those booting) stay at or above the
// warm buffer. Candidates in leaves that are closest to entirely off go first, so whole leaves
// power down and contiguous capacity comes back when they resume.
// Resume: when jobs wait for GPUs that powered-on nodes can't give (`demand_gpus`) or the warm
// buffer is short, off nodes are resumed, whole leaves first (leaves with the most off nodes),
// at most max_resumes_per_cycle per call and max_resuming booting at once. A resumed node is
// ready after the boot latency; the decision carries that time.
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/cluster.h"
#include "sched/scheduler.h"
#include "sched/types.h"

namespace gpool::sched {

struct PowerInput {
  int64_t now_ns = 0;
  int64_t demand_gpus = 0;  // GPUs that pending jobs need and powered-on nodes can't give
  const std::vector<uint8_t>* keep_on = nullptr;  // nodes not to suspend (reservations)
};

std::vector<PowerDecision> PlanPower(const ClusterState& state, const PowerConfig& config,
                                     const PowerInput& in);

}  // namespace gpool::sched
