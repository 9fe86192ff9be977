// Outputs of `gpool sim`: metrics.json, timeline.csv, jobs.csv and a self-contained report.html whose plots
// are inline SVG generated here (no scripts, no network): allocation over time, JCT CDF per
// policy, wait per gang size, energy. Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/engine.h"
#include "sim/metrics.h"

namespace gpool::sim {

struct RunInfo {
  std::string workload;  // description
  std::string cluster;
  std::string command;   // the command line, for reproducibility
  uint64_t seed = 0;
  std::vector<SkippedRows> skipped;
  // The workload's offered load on the cluster (metrics.h OfferedLoad; absent when unset).
  std::optional<OfferedLoad> offered_load;
};

// {"workload":..., "cluster":..., "seed":..., "skipped_rows":[...], "offered_load":{...},
//  "policies":{name:{...}}}
nlohmann::json MetricsDocument(const RunInfo& info, const std::vector<Metrics>& metrics);
// policy,t_s,allocated_gpus,running_jobs,pending_jobs,nodes_on,power_w; at most `max_rows` rows
// per policy (evenly thinned, the last point kept).
std::string TimelineCsv(const std::vector<RunResult>& runs, size_t max_rows = 2000);
// One row per job and policy, in job id order, for per-job comparisons between policies:
// policy,job,tenant,gpus,gpu_milli,submit_s,start_s,finish_s,wait_s,jct_s,base_run_s,slowdown,
// preemptions,leaves,remote_gpus,remote_slowdown (start/finish -1 and wait/jct empty when the job
// never started/finished; remote_gpus: GPUs of its last placement on nodes other than their
// task's, remote_slowdown: that placement's estimated slowdown, 1 when local).
std::string JobsCsv(const std::vector<RunResult>& runs);
std::string ReportHtml(const RunInfo& info, const std::vector<RunResult>& runs,
                       const std::vector<Metrics>& metrics);
// Writes metrics.json, timeline.csv, jobs.csv and report.html into `dir` (created if missing).
Status WriteOutputs(const std::string& dir, const RunInfo& info, const std::vector<RunResult>& runs,
                    const std::vector<Metrics>& metrics);

}  // namespace gpool::sim
