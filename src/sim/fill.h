// Fill mode: the FGD paper's fragmentation experiment (`gpool sim --fill`).
//
// FGD (Weng et al., "Beware of Fragmentation", USENIX ATC '23) measures how much GPU capacity a
// policy strands by loading an empty cluster with pods that never leave. Its artifact
// (hkust-adsl/kubernetes-scheduler-simulator: pkg/simulator/core.go, simulator.go) builds the
// workload and runs it this way, which RunFill follows:
//   - every pod of the trace is used, CPU-only pods and pods that never ran in production
//     included; timestamps play no part;
//   - the pods are shuffled (seeded), then random copies of trace pods are appended until the
//     GPU request would pass `tune_ratio` (1.3) x the cluster's GPUs (tuneUpPods; a trace that
//     asks for more loses random pods instead, tuneDownPods);
//   - the pods arrive one at a time and never leave; a pod the policy can't place is recorded
//     as failed and the run goes on (SchedulePods).
// After every pod the run records the GPU request that has arrived (failed pods included) and
// the GPUs allocated. The result is the allocation against the arrived load, in whole percent
// of the cluster's GPUs from 0 to 130 (the mean over the pods at that percent, as the artifact's
// merge_alloc_discrete.py takes it), and the same for the fragmentation rate (fragmented over
// free GPU milli, NodeFrag in score_policies.h against the trace's typical pods). The paper's
// headline is the unallocated GPUs at 100% arrived, averaged over 10 seeds (42-51).
//
// Each pod is submitted alone to the policy on the current state (one Policy::Schedule per pod,
// at a fixed instant, so no idle timeout or starvation age ever passes), with priority 0 and no
// run-time estimate. The paper's score policies (ScorePolicy) take a faster path with the same
// decisions: a node's score is cached per pod shape until that node changes.
//
// Remote attachment (a policy RemoteAttachOf names, baselines.h: gpool+remote): every GPU host
// serves its GPUs and GPU pods are submitted with JobSpec::remote, so a GPU whose host has no CPU
// or memory left for a pod ("stranded": no local placement could ever use it for that pod) can
// serve the pod running on another host. The run then also reports, at 100% arrived and by the
// same per-percent mean as the allocation: the GPUs allocated to tasks from nodes other than
// their own ("remote GPUs"), the part of them lent by a node that could not have hosted the pod
// itself when it was placed (short of the pod's CPU or memory: "recovered" stranded GPUs), the
// share of placed pods that have a remote GPU, and the mean and p99 of those pods' estimated
// slowdown (sched/remote_cost.h; a model's estimate, not a measurement).
//
// The first-failure variant, RunFillUntilFirstFailure, fills with GPU pods only until the first
// placement fails and reports what is left then (`--fill-until-first-failure`).
//
// Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"
#include "sim/cluster.h"
#include "sim/job.h"

namespace gpool::sim {

// The pods of one fill, in arrival order: indices into the workload's jobs (copies repeat one).
struct FillWorkload {
  std::vector<uint32_t> order;
  int64_t trace_pods = 0;      // pods of the trace (all of them are in `order`, unless tuned down)
  int64_t copies = 0;          // random copies appended
  int64_t removed = 0;         // pods taken out (a trace asking for more than the ratio)
  int64_t gpu_milli = 0;       // GPU request of `order`
};
// Seeded: the same seed gives the same order. Fails on an empty workload or a cluster without
// GPUs.
StatusOr<FillWorkload> BuildFillWorkload(const Workload& w, int64_t cluster_gpus, double tune_ratio,
                                         uint64_t seed);

struct FillOptions {
  uint64_t seed = 42;
  double tune_ratio = 1.3;
  // Called about every `progress_every_s` of wall time with (pods submitted, GPUs allocated).
  // Wall time only drives these calls, never the result.
  std::function<void(int64_t, double)> progress;
  double progress_every_s = 2;
};

inline constexpr int kFillMaxPct = 130;

struct FillResult {
  std::string policy;
  double total_gpus = 0;
  int64_t submitted = 0;       // pods submitted (the workload's length)
  int64_t placed = 0;
  int64_t failed = 0;          // pods the policy could not place
  int64_t failed_gpu_pods = 0;
  int64_t copies = 0;          // of `submitted`, random copies of trace pods
  // Per arrived percent 0..kFillMaxPct: mean allocated GPUs and fragmentation rate (0..1) over
  // the pods at that percent; NaN where no pod arrived at (or next to) that percent.
  std::vector<double> allocated_at_pct;
  std::vector<double> frag_rate_at_pct;
  double unallocated_at_100 = 0;  // total - allocated_at_pct[100] (NaN when undefined)
  double allocated_end = 0;       // after the last pod
  int64_t preemptions = 0;        // victims a policy named (applied: the experiment allows no
                                  // departures, so a preempted pod counts as failed)
  double wall_s = 0;
  double cpu_s = 0;
  // Remote attachment (see the top); zero, or NaN for the slowdowns, without it. The *_at_100
  // figures are NaN where unallocated_at_100 is.
  bool remote_attach = false;
  double remote_gpus_at_100 = 0;
  double recovered_gpus_at_100 = 0;
  double remote_pod_share_at_100 = 0;
  int64_t remote_pods_by_100 = 0;   // pods placed with a remote GPU up to 100% arrived
  double avg_remote_slowdown_at_100 = std::numeric_limits<double>::quiet_NaN();  // of those pods
  double p99_remote_slowdown_at_100 = std::numeric_limits<double>::quiet_NaN();
  int64_t remote_pods = 0;          // over the whole run
};

StatusOr<FillResult> RunFill(const SimCluster& cluster, const Workload& workload,
                             const sched::Policy& policy, const FillOptions& options);

// --- The first-failure variant ---------------------------------------------------------------
// GPU jobs that fit the empty cluster, in a seeded random order (a fresh permutation each time
// the list runs out), until the policy leaves one pending; CPU-only jobs and jobs too big for
// the empty cluster are left out and counted.
struct FirstFailureOptions {
  uint64_t seed = 1;
  int64_t max_jobs = 0;  // stop after this many placed jobs; 0 = 20 x the cluster's GPUs
  std::function<void(int64_t, double)> progress;
  double progress_every_s = 2;
};

struct FirstFailureResult {
  std::string policy;
  int64_t placed_jobs = 0;
  double allocated_gpus = 0;      // GPU capacity allocated at the first failure
  double unallocated_gpus = 0;    // total GPUs - allocated, at the first failure
  double total_gpus = 0;
  std::string failed_job;         // "name: N GPU x milli, T task(s)"; empty = none
  bool ended_by_preemption = false;
  bool hit_max_jobs = false;
  double wall_s = 0;
  double cpu_s = 0;
  std::vector<SkippedRows> left_out;
};

StatusOr<FirstFailureResult> RunFillUntilFirstFailure(const SimCluster& cluster,
                                                      const Workload& workload,
                                                      const sched::Policy& policy,
                                                      const FirstFailureOptions& options);

}  // namespace gpool::sim
