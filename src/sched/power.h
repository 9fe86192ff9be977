// Power decisions: suspend idle nodes, resume nodes on demand.
//
// Suspend: a powered-on, healthy node that has been fully idle longer than the idle timeout is
// suspended, as long as the free GPUs left powered on (plus those booting) stay at or above the
// warm buffer: max(warm_buffer_gpus, the GPUs that jobs submitted within arrival_window_s asked
// for), so that a burst of arrivals finds the capacity of the previous one's size awake.
// Candidates in leaves that are closest to entirely off go first, so whole leaves power down
// and contiguous capacity comes back when they resume.
// Resume: when jobs wait for GPUs that powered-on nodes can't give (`demand_gpus`) or the warm
// buffer is short, off nodes are resumed, whole leaves first (leaves with the most off nodes),
// at most max_resumes_per_cycle per call and max_resuming booting at once, each limit raised to
// max_resuming_fraction of the healthy GPU nodes on a large cluster. A resumed node is
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
  // GPUs asked for by jobs submitted within PowerConfig::arrival_window_s (RecentArrivalGpus):
  // the free powered-on GPUs are kept at max(warm_buffer_gpus, this). 0 = the fixed buffer.
  int64_t recent_arrival_gpus = 0;
};

// GPUs (fractions rounded up per job) of the pending and running jobs submitted in the last
// `window_s` before now; 0 when window_s is 0. Jobs that already finished are not seen, so
// this is a lower bound on the recent arrivals. Each job counts once: one in `pending` that is
// also running in `state` (bound in this cycle, not yet removed from pending) counts as running.
// O(pending + running).
int64_t RecentArrivalGpus(const ClusterState& state, const std::vector<JobSpec>& pending, int64_t now_ns,
                          double window_s);

std::vector<PowerDecision> PlanPower(const ClusterState& state, const PowerConfig& config,
                                     const PowerInput& in);

}  // namespace gpool::sched
