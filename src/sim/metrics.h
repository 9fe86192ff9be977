// Metrics of one simulated run, computed from the engine's RunResult.
//
// JCT = finish - submit; wait = first start - submit; both over finished jobs. Percentiles are
// nearest-rank (p = the value at rank ceil(p/100 * n)). Allocation rate = time-average of
// allocated GPU capacity over the cluster's, between the first submit and the last finish.
// Fragmentation as in FGD: unallocated GPUs at the first failed placement (the first cycle that
// left a job waiting); also their time-average while jobs are blocked (a cycle left them
// waiting; batching waits don't count). Energy = integral of the node power model: over the
// whole run, over the busy span (first submit to last finish, the makespan: the same span for
// every policy) and over the time the cluster has work (a job pending or running). Tenant share = a tenant's GPU-seconds over all GPU-seconds, against its
// entitlement. Remote attachment (a run with it only): over GPU jobs that started, by their last
// placement, the share of jobs with a GPU on a node other than their task's ("remote jobs"), the
// share of GPU capacity (milli) on such nodes, and the mean and p99 estimated slowdown of the
// remote jobs (remote_cost.h: a model's estimate, not a measurement).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine.h"

namespace gpool::sim {

struct GangBucket {
  std::string label;  // "<1", "1", "2-8", "9-64", "65-256", "257-1024", ">1024"
  int64_t jobs = 0;
  double avg_wait_s = 0;
  double p99_wait_s = 0;
};

struct TenantShare {
  std::string tenant;
  double entitlement = 0;  // share of the GPUs it is entitled to
  double share = 0;        // share of the GPU-seconds it got (undefined when none were)
  double gpu_hours = 0;
};

inline constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();
// "undefined" for NaN, else the value in `spec` ("{:.1f}").
std::string FormatMetric(double v, const char* spec);

struct Metrics {
  std::string policy;
  int64_t jobs = 0, finished = 0, rejected = 0, unfinished = 0;
  // A measure with nothing to measure is NaN (undefined): no finished job for the JCT figures,
  // no failed placement for unallocated_gpus, no blocked time for its average. metrics.json
  // writes it as null and the tables as "undefined", never as 0.
  double avg_jct_s = kUndefined, p50_jct_s = kUndefined, p99_jct_s = kUndefined;
  double avg_wait_s = kUndefined;
  double avg_slowdown = kUndefined;
  double unallocated_gpus = kUndefined;  // at the first failed placement
  double first_failed_placement_s = kUndefined;
  double avg_unallocated_gpus_blocked = kUndefined;
  double blocked_s = 0;
  // Over the busy span: undefined when no job finished (or it finished at the first submit).
  double allocation_rate = kUndefined;
  double makespan_s = kUndefined;  // first submit to last finish (the busy span)
  int64_t preemptions = 0;
  int64_t duplicate_preemptions = 0;
  double energy_kwh = 0;                      // first submit to the run's last event
  double energy_busy_span_kwh = kUndefined;   // first submit to last finish
  double work_s = 0;                          // time with a job pending or running
  double energy_with_work_kwh = 0;            // energy over that time
  // The engine's idle power-off (EngineOptions::idle_power_off_s; a baseline's "+off" variant):
  // its timeout (0: none), the suspends it made and the job starts that waited for a boot.
  double idle_power_off_s = 0;
  int64_t idle_power_offs = 0;
  int64_t boot_waits = 0;
  int64_t cycles = 0;
  double wall_s = 0;
  std::vector<GangBucket> wait_by_gang;
  std::vector<TenantShare> tenants;
  // Remote attachment (RunResult::remote_attach); the rest undefined without remote jobs.
  bool remote_attach = false;
  int64_t remote_jobs = 0;
  double remote_job_share = kUndefined;  // of the GPU jobs that started (undefined: none did)
  double remote_gpu_share = kUndefined;  // of their GPU capacity
  double avg_remote_slowdown = kUndefined, p99_remote_slowdown = kUndefined;
};

// Nearest-rank percentile of `v` (sorted in place); 0 for an empty vector.
double Percentile(std::vector<double>* v, double p);
// The gang-size bucket label of a job of `gpus` GPUs (gpu_milli < 1000: "<1").
std::string GangBucketLabel(int32_t gpus, int32_t gpu_milli);

Metrics ComputeMetrics(const RunResult& r);

// The load a workload offers a cluster, independent of any policy: each job asks for its GPUs
// from its submit time for its base run time (as if it started at once). Peak and time-average
// over the span from the first submit to the last such end; in GPUs and as a share of the
// cluster's (`capacity_gpus`). Undefined (NaN) for an empty workload.
struct OfferedLoad {
  double capacity_gpus = 0;
  double peak_gpus = kUndefined, avg_gpus = kUndefined;
  double span_s = 0;
  double peak_share() const { return peak_gpus / capacity_gpus; }
  double avg_share() const { return avg_gpus / capacity_gpus; }
};
OfferedLoad ComputeOfferedLoad(const Workload& w, double capacity_gpus);
nlohmann::json OfferedLoadToJson(const OfferedLoad& o);
nlohmann::json MetricsToJson(const Metrics& m);

}  // namespace gpool::sim
