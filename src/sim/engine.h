// The discrete-event engine: replays a workload on a cluster under one sched::Policy.
//
// Events (arrival, finish, node booted, node shut down) are processed in (time, sequence) order;
// after all events of one instant the engine runs a scheduling cycle through the same interface
// the controller uses: it keeps a sched::ClusterState current, hands the policy a snapshot
// (state, pending jobs, queues, usage ledger, time), and applies the decisions it returns:
// preemptions first (the victim's progress is kept, as after a checkpoint, plus a restart
// overhead), then binds, then power actions. A decision that doesn't apply (a bind that doesn't
// fit, a suspend of a busy node) is an error naming the policy and the job or node: policies are
// checked, never trusted.
//
// Run times come from the performance model (perf_model.h), fixed at each start, times the
// placement's estimated remote-attachment slowdown (the worst task's TaskBinding::slowdown,
// sched/remote_cost.h; 1 for local GPUs). A policy with remote attachment (baselines.h,
// gpool+remote) runs on a cluster whose GPU hosts serve their GPUs, its GPU jobs submitted with
// JobSpec::remote (adapter.h, RemoteAttach). Energy comes
// from a node power model (idle, busy per GPU, off). No job is lost: every job ends finished,
// or is reported as rejected (it can never fit the cluster) or unfinished (a policy left it
// waiting with nothing left to happen).
//
// Deterministic: same inputs and seed, same result (no wall clock or unordered iteration enters
// the simulation; the wall clock only drives progress messages).
//
// Thread safety: RunSimulation is reentrant; runs of different policies may go in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/scheduler.h"
#include "sim/adapter.h"
#include "sim/cluster.h"
#include "sim/job.h"

namespace gpool::sim {

// Node power model, per host (watts).
struct PowerModel {
  double host_idle_w = 400;   // CPUs, memory, NICs, fans of a powered-on host
  double gpu_idle_w = 60;     // per GPU, powered on and idle
  double gpu_busy_w = 400;    // per GPU fully allocated (fractions scale linearly)
  double host_off_w = 15;     // suspended (BMC only)
};

// What the engine tells policies that need history the snapshot lacks (Tiresias' attained
// service). Updated by the engine before each cycle; read-only to policies.
struct SimFeedback {
  // Milli-GPU-seconds each job has received in earlier runs (before preemptions), by job id.
  std::vector<double> attained_milli_s;
};

struct EngineOptions {
  uint64_t seed = 1;
  PowerModel power;
  double preempt_overhead_s = 30;   // added to a preempted job's remaining run time
  double shutdown_s = 30;           // suspend takes this long before the node draws off power
  // Cycles closer together than this are merged (0 = a cycle at every event instant). The wait
  // until the merged cycle is a batching wait, not blocking (RunResult::blocked_s).
  double min_cycle_interval_s = 0;
  // Idle power-off done by the engine, for policies that don't manage power (the baselines'
  // `+off` variants, `gpool sim --baseline-power-off-s`), like Slurm's power saving
  // (SuspendTime / ResumeTimeout): a node idle for idle_power_off_s is suspended (shutdown_s,
  // then off power). The policy still sees it as available; a job bound to a suspended,
  // suspending or booting node holds its resources at once and starts when every node of its
  // placement is up (idle_power_boot_s after the bind that resumed it). 0 = never. A policy that
  // makes power decisions of its own can't run with it (an error).
  double idle_power_off_s = 0;
  double idle_power_boot_s = 180;
  // A stalled queue (jobs waiting, nothing scheduled to happen) is retried this often, at most
  // max_stalled_retries times in a row, before the rest is reported unfinished.
  double stall_retry_s = 300;
  int max_stalled_retries = 3;
  SimFeedback* feedback = nullptr;  // filled by the engine when set
  // The tenants' queues (sim/queues.h, `--queues`); null: one per tenant with an equal share
  // (MakeTenantQueues). Must hold a queue for every tenant of the workload.
  const TenantQueues* queues = nullptr;
  // Called about every `progress_every_s` of wall time with (sim time, finished, total).
  std::function<void(double, int64_t, int64_t)> progress;
  double progress_every_s = 2;
};

struct JobOutcome {
  double submit_s = 0;
  double start_s = -1;     // first start; -1 never started
  double finish_s = -1;    // -1 not finished
  double slowdown = 1;     // of its last run (network model x remote_slowdown)
  double remote_slowdown = 1;  // of its last placement: the worst task's estimated slowdown
  int32_t remote_gpus = 0;     // of its last placement: GPUs on nodes other than their task's
  double base_run_s = 0;   // the job's run time on an ideal placement (SimJob::run_s)
  int32_t gpus = 0;
  int32_t gpu_milli = 1000;
  int32_t preemptions = 0;
  int32_t leaves = 0;      // leaf domains its last placement touched
  int32_t tenant = 0;
  bool rejected = false;   // can never fit the cluster
  double wait_s() const { return start_s - submit_s; }
  double jct_s() const { return finish_s - submit_s; }
};

struct TimelinePoint {
  double t = 0;
  int64_t used_milli = 0;
  int32_t running = 0;
  int32_t pending = 0;
  int32_t nodes_on = 0;
  double power_w = 0;
};

struct RunResult {
  std::string policy;
  std::vector<JobOutcome> jobs;          // by job id
  std::vector<TimelinePoint> timeline;   // after every cycle
  int64_t total_gpu_milli = 0;
  double energy_j = 0;             // first submit to the last event (a policy's last power action)
  // Energy over the busy span, first submit to last finish (the makespan), the same span for
  // every policy; -1 when no job finished.
  double energy_busy_span_j = -1;
  double work_s = 0;                // time with a job pending or running
  double energy_with_work_j = 0;    // energy over that time
  double idle_power_off_s = 0;      // EngineOptions::idle_power_off_s it ran with
  int64_t idle_power_offs = 0;      // suspends by the engine's idle power-off
  int64_t boot_waits = 0;           // jobs (runs) whose start waited for a node the engine resumed
  int64_t preemptions = 0;
  // Inconsistent decisions absorbed: a victim named twice in one cycle, or a job bound and
  // preempted in the same cycle (it stays pending).
  int64_t duplicate_preemptions = 0;
  int64_t cycles = 0;
  // First cycle that left a job waiting while every node was powered on (a placement failure,
  // not a wait for boot), and the unallocated GPUs then.
  double first_fail_s = -1;
  double unallocated_gpus_at_first_fail = 0;
  // Time with jobs waiting that the last cycle saw and left waiting, until the capacity changes
  // (a finish, a boot): not arrivals waiting for a merged cycle (--min-cycle-s), nor waiting
  // jobs while capacity that came back waits for one.
  double blocked_s = 0;
  double blocked_unallocated_gpu_s = 0;  // integral of unallocated powered-on GPUs over it
  std::vector<std::string> tenants;
  std::vector<double> tenant_entitlement;
  std::vector<double> tenant_gpu_s;      // GPU-seconds allocated per tenant
  std::vector<std::string> rejected_examples;  // "source: why" for the first few
  int64_t rejected = 0, unfinished = 0;
  double start_s = 0, end_s = 0;         // first submit, last finish
  bool remote_attach = false;            // the policy ran with remote attachment
  double wall_s = 0;
  // Every run of every job, in the order the runs ended (finish or preemption): [start_s,
  // end_s) of job `job`. Measures over a window need them (sim/pooling.h); a job preempted
  // twice has three.
  struct Span {
    uint32_t job = 0;
    double start_s = 0, end_s = 0;
  };
  std::vector<Span> spans;
};

// Runs `workload` on `cluster` under `policy`.
StatusOr<RunResult> RunSimulation(const SimCluster& cluster, const Workload& workload,
                                  const sched::Policy& policy, const EngineOptions& options);

}  // namespace gpool::sim
