// The synthetic gang workload: what the openb trace lacks (multi-host gangs of up to 1,024 GPUs).
//
// Arrivals are a Poisson process whose rate follows a daily cycle,
//   rate(t) = base * (1 + day_amplitude * sin(2 pi t / 86400)),
// with `base` set so that the offered GPU load (arrival rate x mean GPUs x mean run time) is
// `load` times the cluster's GPUs, unless `jobs_per_hour` is given. Gang sizes are powers of two
// from 1 to `max_gpus`, drawn from a hand-set distribution shaped like published cluster traces
// (most jobs take one GPU, a long tail of large gangs; see docs/simulator.md). Run times are
// sampled from a run-time list (Philly 2017), clamped to [min_run_s, max_run_s]. Jobs of more
// than one GPU get a communication share uniform in [comm_min, comm_max]; single-GPU jobs have 0.
// Tenants are assigned round-robin with weights 4:2:1:1... (tenant-0 is the heaviest).
//
// Deterministic given the seed (its own PRNG arithmetic, no std distributions whose results vary
// between standard libraries). Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sim/job.h"

namespace gpool::sim {

struct SyntheticOptions {
  int64_t jobs = 10000;
  double load = 0.9;            // offered GPU load relative to the cluster (used when rate is 0)
  double jobs_per_hour = 0;     // explicit mean arrival rate; 0 = derive from load
  double day_amplitude = 0.5;   // 0..1
  int32_t max_gpus = 1024;      // largest gang (a power of two)
  double comm_min = 0.1, comm_max = 0.5;
  double frac_share = 0.0;      // share of jobs asking a fraction of one GPU
  double min_run_s = 60, max_run_s = 5 * 86400.0;
  int32_t tenants = 4;
  // Share of jobs whose run time the scheduler is told as an estimate (exact); the others have
  // none. Drawn from a stream of its own, so the jobs are the same whatever the share.
  double est_known = 1.0;
  uint64_t seed = 1;
};

// Parses "jobs=100000,load=0.9,max_gpus=1024,..." (the part after "synthetic:"). Unknown keys
// and bad values are errors naming the key.
StatusOr<SyntheticOptions> ParseSyntheticSpec(std::string_view spec, SyntheticOptions base);

// Reads a run-time list: a CSV whose first column is a run time in seconds (header "runtime").
StatusOr<std::vector<double>> ReadRuntimes(std::string_view text, std::string_view filename);

// Generates the workload for a cluster of `cluster_gpus` GPUs with at most `gpus_per_host` per
// host (gangs larger than a host come as whole hosts).
StatusOr<Workload> GenerateSynthetic(const SyntheticOptions& options,
                                     const std::vector<double>& runtimes, int64_t cluster_gpus);

// The gang-size distribution used by the generator: pairs (gpus, weight).
std::vector<std::pair<int32_t, double>> GangSizeDistribution(int32_t max_gpus);

}  // namespace gpool::sim
