// Trace readers: the openb pod list (Alibaba, 2023), and gpool's generic job formats.
//
// Every reader is strict: a malformed row is an error naming file:line and the field, never a
// crash and never a silently dropped job. Rows dropped on purpose (openb pods that never ran)
// are counted in Workload::skipped with the reason and the first example.
//
// Generic job format (docs/simulator.md), CSV with a header row or JSON Lines with the same keys:
//   submit_s (required)  arrival time in seconds
//   run_s    (required)  base run time in seconds
//   gpus     (required)  GPUs in the gang (0: CPU-only)
//   gpu_milli            per-GPU share 1..1000 (default 1000; < 1000 only with gpus = 1)
//   cpu_milli, mem_mib   whole-gang CPU and memory (default 0)
//   tenant               default "default"
//   comm                 communication share of run_s, 0..1 (default 0)
//   priority             integer, higher first (default 0)
//   gpu_model            allowed GPU models, '|'-separated (default any)
//   name                 default "job-<line>"
//   locality             node | leaf | pod | any (preferred), with a trailing '!' when required
//                        ("leaf!": the gang never spans leaves); default any
//   preemptible          true | false | 1 | 0 (default true)
//   min_runtime_s        not preempted or reclaimed before running this long (default 0)
//   est_s                run-time estimate handed to the scheduler (> 0); column or key absent:
//                        run_s (exact); "none", an empty CSV cell or JSON null: no estimate
//   kind                 training | inference | interactive (default training)
//   allow_split          true | false | 1 | 0: may span fabrics when none fits it (default false)
// JSON Lines also takes booleans (true/false) for the boolean keys.
// Unknown columns or keys are errors (they are usually typos).
//
// Thread safety: free functions over their arguments; safe to call concurrently.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "sim/job.h"

namespace gpool::sim {

enum class TraceFormat { kOpenb, kJobsCsv, kJobsJsonl };
StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);
std::string_view TraceFormatName(TraceFormat f);

// openb_pod_list_*.csv. Each pod that ran becomes a job submitted at creation_time whose run
// time is deletion_time - scheduled_time (what it held in production). Pods without a
// scheduled_time (pending, never ran) are skipped and counted. gpu_spec "nan" or empty = any.
StatusOr<Workload> ParseOpenbTrace(std::string_view text, std::string_view filename);
// The same file as a pod list for the fill experiment (fill.h): every row is a pod, pods that
// never ran included; the time columns, when present, are ignored, and a list without them
// (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]) is valid. Order kept, submit times 0.
StatusOr<Workload> ParseOpenbPodList(std::string_view text, std::string_view filename);
StatusOr<Workload> ParseJobsCsv(std::string_view text, std::string_view filename);
StatusOr<Workload> ParseJobsJsonl(std::string_view text, std::string_view filename);

// Reads `path` and parses it in `format`.
StatusOr<Workload> ReadTrace(const std::string& path, TraceFormat format);

// Checks one job's fields; `where` prefixes the message (file:line).
Status ValidateJob(const SimJob& job, std::string_view where);

}  // namespace gpool::sim
