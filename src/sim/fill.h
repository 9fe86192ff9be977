// Fill mode: the FGD paper's fragmentation experiment (`gpool sim --fill`).
//
// FGD (Weng et al., "Beware of Fragmentation", USENIX ATC '23) measures fragmentation by filling
// an empty cluster: tasks sampled from the trace arrive one by one and never leave, and the
// cluster is filled until a placement fails. The metric is the GPU capacity left unallocated at
// that first failure: the less a policy leaves stranded in crumbs no arriving task can use, the
// better it packs. A time replay rarely reaches that point (openb's own run times keep its
// cluster nearly empty), hence this separate mode.
//
// How: the trace's jobs that fit the empty cluster are taken in a seeded random order (cycling
// through a fresh permutation if all of them fit); each is submitted alone to the policy on the
// current state (one Policy::Schedule per job, at a fixed instant, so no idle timeout or
// starvation age ever passes) and, if bound, stays bound forever. The first job the policy leaves
// pending ends the run. Every job gets priority 0 and no run-time estimate, since in this
// experiment nothing ends and no job outranks another; a policy that still preempts has its
// victims counted (a preempted job is a departure the experiment doesn't allow, so the run ends
// there too, with `ended_by_preemption`).
//
// Jobs the experiment can't use (CPU-only, or too big for the empty cluster) are left out and
// counted in FillResult::left_out, never dropped silently.
//
// Thread safety: RunFill is reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"
#include "sim/cluster.h"
#include "sim/job.h"

namespace gpool::sim {

struct FillOptions {
  uint64_t seed = 1;
  // Stop after this many placed jobs even without a failure (a guard: a workload of CPU-only or
  // tiny jobs could otherwise run for a very long time). 0 = 20 x the cluster's GPUs.
  int64_t max_jobs = 0;
  // Called about every `progress_every_s` of wall time (checked after each placement) with
  // (jobs placed, GPUs allocated): openb fills of gpool take a minute. Wall time only drives
  // these calls, never the result.
  std::function<void(int64_t, double)> progress;
  double progress_every_s = 2;
};

struct FillResult {
  std::string policy;
  int64_t placed_jobs = 0;
  double allocated_gpus = 0;      // GPU capacity allocated at the first failure
  double unallocated_gpus = 0;    // total GPUs - allocated, at the first failure
  double total_gpus = 0;
  std::string failed_job;         // "source: N GPUs x milli" of the job that failed; empty = none
  bool ended_by_preemption = false;
  bool hit_max_jobs = false;
  double wall_s = 0;
  double cpu_s = 0;               // CPU time of the run (thread)
  // Jobs of the workload the experiment never submits, by reason, with the first one's
  // "file:line": CPU-only jobs (they take no GPU, so have no bearing on the metric) and jobs
  // that can't fit even the empty cluster (a replay rejects them too). The same for every
  // policy and seed.
  std::vector<SkippedRows> left_out;
};

StatusOr<FillResult> RunFill(const SimCluster& cluster, const Workload& workload,
                             const sched::Policy& policy, const FillOptions& options);

}  // namespace gpool::sim
