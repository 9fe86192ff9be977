// Readers for multi-tenant GPU cluster traces, whose jobs name the tenant (virtual cluster, VC)
// they ran in, and for the tenants' static slices of the cluster. The pooling experiment
// (pooling.h) reads them.
//
// Helios (SenseTime, SC '21; S-Lab-System-Group/HeliosData), `cluster_log.csv`:
//   job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
// times "YYYY-MM-DD HH:MM:SS" (no zone), duration and queue in seconds. A job becomes a SimJob of
// tenant `vc`, `gpu_num` GPUs, `cpu_num` CPUs, submitted at submit_time (seconds from the
// earliest submit) and running `duration` s. CPU-only jobs (gpu_num 0) and jobs that ran 0 s are
// skipped and counted (Workload::skipped). start_time, end_time and queue are checked (an empty
// start/end is accepted: a job cancelled while pending) but not used: the scheduler under test
// decides when jobs start.
//
// Philly (Microsoft, ATC '19; msr-fiddle/philly-traces), `cluster_job_log`: a JSON array of jobs
//   {"jobid", "vc", "user", "status", "submitted_time",
//    "attempts": [{"start_time", "end_time", "detail": [{"ip", "gpus": [...]}]}]}
// A job becomes a SimJob of tenant `vc` submitted at submitted_time, whose GPUs are those of its
// last attempt (summed over `detail`), and whose run time is the sum of its attempts' run times
// (every attempt held its GPUs). Jobs with no attempt, an attempt without start or end time
// (null, as the trace writes unfinished ones), or no GPUs are skipped and counted. The whole file
// is parsed into memory (nlohmann::json): the full trace takes some GB.
//
// Neither trace carries a run-time estimate, so every job has none (SimJob::has_estimate false).
//
// Slices (`gpool sim --pooling --slices FILE`), one of:
//   Helios `cluster_gpu_number.csv`: date,vc...,total, one row per day with each VC's GPUs; the
//     row of `date` (empty: the last row) is used, VCs with 0 GPUs that day have no slice;
//   Lucid's `vc_config.csv` (S-Lab-System-Group/Lucid): header ",num", rows "vc,nodes";
//   "tenant,gpus" or "tenant,nodes" with that header.
// Nodes are converted with `gpus_per_host`.
//
// Every error names file:line (for Philly: the job's index and jobid) and the field. Thread
// safety: free functions over their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/job.h"

namespace gpool::sim {

// "YYYY-MM-DD HH:MM:SS" -> seconds since 1970-01-01 00:00:00 in the same (unstated) zone.
// Errors name `field` and `where`.
StatusOr<int64_t> ParseTraceDateTime(std::string_view s, std::string_view field, std::string_view where);

StatusOr<Workload> ParseHeliosLog(std::string_view text, std::string_view filename);
StatusOr<Workload> ParsePhillyJobLog(std::string_view text, std::string_view filename);

struct TenantSlice {
  std::string tenant;
  int64_t gpus = 0;
  std::string where;  // "file:line" it came from
};

// `date` picks the row of a Helios cluster_gpu_number.csv ("2020-09-01"; empty: the last).
StatusOr<std::vector<TenantSlice>> ParseSlices(std::string_view text, std::string_view filename,
                                               std::string_view date, int32_t gpus_per_host);

}  // namespace gpool::sim
