// Metrics of one simulated run, computed from the engine's RunResult.
//
// JCT = finish - submit; wait = first start - submit; both over finished jobs. Percentiles are
// nearest-rank (p = the value at rank ceil(p/100 * n)). Allocation rate = time-average of
// allocated GPU capacity over the cluster's, between the first submit and the last finish.
// Fragmentation as in FGD: unallocated GPUs at the first failed placement (the first cycle that
// left a job waiting); also their time-average while jobs wait. Energy = integral of the node
// power model. Tenant share = a tenant's GPU-seconds over all GPU-seconds, against its
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
  double share = 0;        // share of the GPU-seconds it got
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
  double first_failed_placement_s = -1;
  double avg_unallocated_gpus_blocked = kUndefined;
  double allocation_rate = 0;
  double makespan_s = 0;
  int64_t preemptions = 0;
  int64_t duplicate_preemptions = 0;
  double energy_kwh = 0;
  int64_t cycles = 0;
  double wall_s = 0;
  std::vector<GangBucket> wait_by_gang;
  std::vector<TenantShare> tenants;
  // Remote attachment (RunResult::remote_attach); the rest undefined without remote jobs.
  bool remote_attach = false;
  int64_t remote_jobs = 0;
  double remote_job_share = 0;   // of the GPU jobs that started
  double remote_gpu_share = 0;   // of their GPU capacity
  double avg_remote_slowdown = kUndefined, p99_remote_slowdown = kUndefined;
};

// Nearest-rank percentile of `v` (sorted in place); 0 for an empty vector.
double Percentile(std::vector<double>* v, double p);
// The gang-size bucket label of a job of `gpus` GPUs (gpu_milli < 1000: "<1").
std::string GangBucketLabel(int32_t gpus, int32_t gpu_milli);

Metrics ComputeMetrics(const RunResult& r);
nlohmann::json MetricsToJson(const Metrics& m);

}  // namespace gpool::sim
