// Jobs and workloads as the simulator sees them, independent of where they were read from.
//
// A SimJob is one request: a gang of `num_gpus` GPUs (each `gpu_milli` of a GPU; a fraction only
// when num_gpus == 1), CPU and memory per gang, a base run time (its run time when placed ideally:
// inside one host, or on hosts whose network gives it full NIC bandwidth), and the share of that
// run time spent communicating (`comm_fraction`), which the performance model stretches with the
// placement. It also carries what the scheduler library can be told about a job (locality,
// preemption, estimate, kind, splitting), handed on unchanged by the adapter. Values;
// thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/types.h"

namespace gpool::sim {

struct SimJob {
  uint32_t id = 0;          // dense, 0..n-1 in submit order (set by Workload::Finalize)
  std::string name;         // from the trace ("openb-pod-0001") or generated
  std::string tenant = "default";
  double submit_s = 0;      // arrival time, seconds from the start of the trace
  double run_s = 0;         // base run time in seconds (ideal placement)
  int32_t num_gpus = 0;     // 0: CPU-only task
  int32_t gpu_milli = 1000; // per GPU, 1..1000; < 1000 only when num_gpus == 1
  int64_t cpu_milli = 0;    // whole gang
  int64_t mem_mib = 0;      // whole gang
  std::string gpu_model;    // allowed models separated by '|' ("V100M16|V100M32"); empty: any
  double comm_fraction = 0; // share of run_s spent in all-reduce at full bandwidth, 0..1
  int32_t priority = 0;     // higher first, for policies that use it
  bool has_estimate = true; // the scheduler is told an estimate (est_s, else run_s); else none
  double est_s = -1;        // the estimate when has_estimate; < 0: run_s (exact)
  sched::Locality locality; // fabric locality; default any, preferred
  bool preemptible = true;
  double min_runtime_s = 0; // not preempted or reclaimed before running this long
  sched::JobKind kind = sched::JobKind::kTraining;
  bool allow_split = false; // may span several fabrics when none fits it alone
  std::string source;       // "file:line" that produced the job, for error messages

  // GPU demand in milli-GPUs (num_gpus * gpu_milli).
  int64_t gpu_demand_milli() const { return int64_t{num_gpus} * gpu_milli; }
  bool fractional() const { return num_gpus == 1 && gpu_milli < 1000; }
  // The run-time estimate the scheduler gets (0 = none, as sched::JobSpec::est_runtime_s).
  double estimate_s() const { return has_estimate ? (est_s >= 0 ? est_s : run_s) : 0; }
};

// Rows a reader dropped on purpose (e.g. pods that never ran), counted by reason.
struct SkippedRows {
  std::string reason;
  int64_t count = 0;
  std::string example;  // "file:line" of the first such row
};

struct Workload {
  std::vector<SimJob> jobs;
  std::vector<SkippedRows> skipped;
  std::string description;  // "openb trace openb_pod_list_default.csv (7255 jobs)"

  // Adds one skipped row under `reason`.
  void Skip(const std::string& reason, const std::string& where);
  // Sorts jobs by (submit time, input order) and numbers them 0..n-1.
  void Finalize();
  int64_t total_skipped() const;
  // Multiplies every submit time by `factor` (> 0), measured from the first submit: 0.01 makes
  // arrivals come 100 times as fast, keeping run times. The openb trace replayed at its own pace
  // loads its cluster 0.3%; compressed arrivals recreate the contention it was published for.
  void ScaleArrivals(double factor);
  // Multiplies every run time (run_s, and an explicit estimate est_s) by `factor`, then caps
  // them at `cap_s` (0 = no cap): the knobs of a loaded replay (docs/simulator/loaded-replay.md),
  // with ScaleArrivals. A capped job is like one killed at a wall-time limit the scheduler knows:
  // its estimate is capped too. min_runtime_s is left as given (a preemption guard, not a
  // duration). Returns how many jobs the cap shortened; an error (nothing changed) when factor
  // is not a finite number > 0 or cap_s is negative or not finite.
  StatusOr<int64_t> ScaleDurations(double factor, double cap_s);
};

}  // namespace gpool::sim
