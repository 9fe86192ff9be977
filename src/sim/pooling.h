// The pooling experiment (`gpool sim --pooling`): does pooling a cluster's GPUs raise their
// utilization, as gpool's brief claims (from under 30% to over 85%)? One workload whose jobs
// name their tenant, one cluster made of the tenants' slices, four configurations:
//
//   static        the "before": each tenant runs alone on its own slice (its nodes only; one
//                 simulation per tenant, so no job can touch another tenant's node), whole GPUs
//                 given exclusively: a fractional request is rounded up to a whole GPU. A job
//                 larger than its tenant's slice is rejected.
//   pool          one pool of all the slices' nodes: each tenant a queue guaranteed its slice's
//                 GPUs (weight 1, no limits), free to borrow idle GPUs beyond it; gpool's reclaim
//                 preempts borrowed capacity when an owner needs its quota back. Whole GPUs
//                 still (fractions rounded up as in static).
//   pool+frac     the same pool, requests keep their fractions (GPU sharing).
//   pool+remote   pool+frac with remote attachment (gpool+remote, adapter.h RemoteAttach): a GPU
//                 job that doesn't fit on one node takes GPUs of other nodes.
//
// Every configuration runs gpool's default policy with power management off (the question is
// utilization, and suspended nodes would only add boot waits) and the seed given.
//
// Measures, per tenant and overall, from every run of every job (RunResult::spans):
//   alloc   time-average of the GPU capacity allocated over the capacity (the tenant's slice, or
//           the cluster), over the window: the arrival span [first submit (+ the warm-up,
//           PoolingOptions::warmup_s), last submit], while
//           demand keeps coming (a backlog left after it doesn't count). Whole GPUs given to
//           fractional requests count whole.
//   busy    the same with each job counted at what it asked for (a 0.25-GPU request on a whole
//           GPU counts 0.25): the share of the GPUs the jobs' requests fill, the closest this
//           simulator comes to the "utilization" of the claim (it has no SM activity).
//   alloc_run / busy_run  the same over [first submit, last finish] of the configuration.
//   wait (queueing delay, first start - submit) and JCT (finish - submit), average and p99
//           (nearest rank) over finished jobs; NaN (undefined) when none finished.
// A tenant's alloc may exceed 1 in a pool: it borrowed idle GPUs of others.
//
// Deterministic: same inputs and seed, same result. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/adapter.h"
#include "sim/cluster.h"
#include "sim/job.h"
#include "sim/metrics.h"
#include "sim/tenant_traces.h"

namespace gpool::sim {

// The host every slice is made of.
struct SliceHost {
  int32_t gpus = 8;
  int64_t cpu_milli = 96000;
  int64_t mem_mib = 393216;
  std::string model = "V100";
  double nic_gbps = 1600;
};

// The cluster of all slices: each tenant's GPUs as whole hosts of `host` (a remainder as one
// smaller host), tenants' hosts contiguous in slice order, grouped in that order into leaves of
// `hosts_per_leaf` in one pod (aggregate-pipe network model).
struct SlicedCluster {
  SimCluster cluster;
  std::vector<TenantSlice> slices;
  std::vector<int32_t> first_host;  // per slice; its hosts are [first_host[i], first_host[i+1])
  std::vector<int32_t> end_host;
};
StatusOr<SlicedCluster> BuildSlicedCluster(const std::vector<TenantSlice>& slices, const SliceHost& host,
                                           int32_t hosts_per_leaf = 32);
// The sub-cluster of hosts [first, end) of `c` (leaves renumbered, pods kept as one).
SimCluster SubCluster(const SimCluster& c, int32_t first, int32_t end);

// The stand-in workload (`--trace-format pooling-synthetic:...`) for when no multi-tenant trace
// is at hand: per tenant, Poisson arrivals for `days`, job shapes (GPUs, fraction, CPU, memory)
// drawn from a real pod list (openb; only shapes that fit one host), run times from a real
// run-time list (Philly), clamped to [min_run_s, max_run_s]. Tenant k's offered GPU load (mean
// requested GPUs x mean run time x arrival rate) is f_k x its slice, f_k = exp(skew * z_k),
// z_k standard normal, scaled so that the whole offered load is `load` x the cluster's GPUs:
// some tenants overloaded, others nearly idle. Which job belongs to which tenant is synthetic.
struct StandInOptions {
  double days = 3;
  double load = 0.9;
  double skew = 1.0;
  double min_run_s = 60, max_run_s = 86400;
  uint64_t seed = 1;
};
// Parses "days=3,load=0.9,skew=1,min_run_s=60,max_run_s=86400" (errors name the key).
StatusOr<StandInOptions> ParseStandInSpec(std::string_view spec, StandInOptions base);
struct StandIn {
  Workload workload;
  std::vector<double> offered;  // per slice: offered GPU load / slice GPUs
};
StatusOr<StandIn> GenerateStandIn(const std::vector<TenantSlice>& slices, const SliceHost& host,
                                  const Workload& shapes, const std::vector<double>& runtimes,
                                  const StandInOptions& o);

struct PoolingOptions {
  uint64_t seed = 1;
  std::string gpool_config;  // extra gpool policy config, after power.enabled=false
  bool remote_row = true;    // run pool+remote
  // EngineOptions::min_cycle_interval_s for every run (`--min-cycle-s`): a static slice with a
  // backlog of thousands of jobs makes a cycle per event slow.
  double min_cycle_s = 0;
  RemoteAttach remote;       // its within / max_slowdown / source (enabled implied)
  // Measure from the first submit + warmup_s (`--warmup-s`): a replayed trace starts on an empty
  // cluster, while in production the jobs submitted before the window still hold GPUs. The jobs
  // submitted during the warm-up load the cluster (their GPU time inside the window counts in
  // alloc and busy) but are not counted as jobs nor in waits and JCTs. 0: no warm-up.
  double warmup_s = 0;
  std::function<void(const std::string&)> progress;  // a line per finished run
};

struct PoolingRow {
  std::string tenant;  // "all" for the overall row
  int64_t gpus = 0;    // slice (cluster) GPUs
  // Offered load / capacity: the stand-in's target; for a trace, the load that arrived: the GPU
  // time (requested GPUs x base run time) of the jobs submitted in the window over the
  // capacity's GPU time in the window.
  double offered = kUndefined;
  int64_t jobs = 0, finished = 0, rejected = 0, unfinished = 0;
  double alloc = kUndefined, busy = kUndefined, alloc_run = kUndefined, busy_run = kUndefined;
  double avg_wait_s = kUndefined, p99_wait_s = kUndefined, avg_jct_s = kUndefined, p99_jct_s = kUndefined;
  double max_wait_s = kUndefined;  // the tail p99 hides (pooling.json only)
};

struct PoolingConfig {
  std::string name;         // static, pool, pool+frac, pool+remote
  std::string description;
  PoolingRow all;
  std::vector<PoolingRow> tenants;  // in slice order
  int64_t preemptions = 0;
  int64_t remote_jobs = 0;          // jobs whose last placement used another node's GPU
  double wall_s = 0;
};

struct PoolingResult {
  double window_start_s = 0, window_end_s = 0;  // first submit (+ warm-up) to last submit
  double warmup_s = 0;
  int64_t total_gpus = 0;
  int64_t jobs = 0;
  std::vector<PoolingConfig> configs;
};

// Runs the configurations on `work` (every job's tenant must have a slice: LeaveOutUnsliced).
StatusOr<PoolingResult> RunPooling(const SlicedCluster& sc, const Workload& work, const PoolingOptions& o,
                                   const std::vector<double>& offered = {});

// Drops jobs whose tenant has no slice, counting them in `w->skipped` per tenant.
void LeaveOutUnsliced(const std::vector<TenantSlice>& slices, Workload* w);

nlohmann::json PoolingToJson(const PoolingResult& r);
// The printed table: one block per configuration (overall row, then each tenant).
std::string FormatPoolingTable(const PoolingResult& r);

}  // namespace gpool::sim
