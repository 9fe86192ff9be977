// Preemption and quota reclaim: choosing victims of least cost.
//
// A pending job may take room from running jobs that are preemptible, have run at least their
// minimum run time, and are eligible: of the pending job's own queue and a lower priority class
// (priority preemption), or of another queue running over its quota while the pending job's
// queue is within its own (reclaim; the victim's queue must stay at or above its quota after
// losing it). Priority never crosses queues: a queue's priorities order its own jobs only, so
// no tenant takes another's GPUs by raising its priorities, and reclaim takes borrowed GPUs
// whatever the borrower's priorities are. Victims are whole gangs.
// Cost of a victim = GPU-seconds of work lost (milli-GPUs held x time run), so young and small
// jobs go first; ties go to the lower priority, then the younger job, then the larger job id.
// Victims are added in cost order on a copy of the state until the job fits, then any victim
// whose removal still leaves a fit is spared (most costly first).
// When that finds no placement within max_victims (the cheapest victims lie in pieces on many
// nodes, so they free GPUs everywhere and a whole node, or 4 GPUs of one, nowhere), a
// node-targeted pass follows, for reclaim only (priority preemption stops at the first pass):
// for every node, the cheapest prefix of its own eligible victims
// that lets it hold one task of the job; nodes are freed in order of that prefix's work lost
// (then fewest victims, then node id) until the gang places; unneeded victims are spared as
// above. A job of a queue within its guarantee thus gets a placement it can use, not just
// GPUs. Limit: a gang's nodes are chosen by cost, not by fabric domain (PlaceGang picks the
// domain among what is then free), and victims' remote GPUs don't count toward a node's room.
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

#include "sched/cluster.h"
#include "sched/placement.h"
#include "sched/types.h"

namespace gpool::sched {

enum class PreemptReason : uint8_t { kPriority, kReclaim };

struct PreemptionPlan {
  std::vector<JobId> victims;
  std::vector<PreemptReason> reasons;  // one per victim
  Placement placement;                 // where the job goes once the victims are gone
};

struct PreemptionOptions {
  bool priority = true;
  bool reclaim = true;
  int max_victims = 16;
  PlacementOptions placement;
  // Running jobs that must not be chosen as victims (may be null): the scheduler passes the
  // jobs it bound earlier in the same cycle, so that victims are only jobs that were running
  // when the cycle began and no job is both bound and preempted in one set of decisions.
  const std::unordered_set<JobId>* not_victims = nullptr;
  // Where to build the trial copy of the state (may be null: a fresh copy per call). A caller
  // that plans several preemptions per cycle passes the same one each time, so that the copy
  // reuses its buffers instead of allocating (and page-faulting in) megabytes per call. Its
  // contents on return are scratch.
  std::optional<ClusterState>* scratch = nullptr;
};

// Cost of preempting `r` at now_ns (milli-GPU-seconds lost).
double PreemptionCost(const RunningJob& r, int64_t now_ns);
// Whether `r` may be preempted at all now (preemptible and past its minimum run time).
bool PastMinRuntime(const RunningJob& r, int64_t now_ns);

// Each queue's guaranteed quota and the milli-GPUs it uses now, indexed like `queues`.
void QueueQuotaAndUse(const ClusterState& state, const std::vector<QueueSpec>& queues,
                      std::vector<int64_t>* quota, std::vector<int64_t>* used);

// Whether victim `r` holds anything `job` could use: a node of a GPU model the job allows (any
// victim does for a CPU-only job).
bool HoldsUsefulGpus(const ClusterState& s, const RunningJob& r, const JobSpec& job);

// Finds the cheapest victim set that lets `job` start, or nullopt.
std::optional<PreemptionPlan> PlanPreemption(const ClusterState& state, const JobSpec& job,
                                             const std::vector<QueueSpec>& queues,
                                             int64_t now_ns, const PreemptionOptions& options);

}  // namespace gpool::sched
