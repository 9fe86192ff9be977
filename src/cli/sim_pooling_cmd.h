// `gpool sim --pooling` (sim/pooling.h): the pooling experiment's command-line side, kept out of
// sim_cmd.cc, which parses the flags and hands them here.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "sim/adapter.h"

namespace gpool::cli {

struct PoolingCliFlags {
  std::string trace;         // the trace, or for pooling-synthetic the run-time list
  std::string trace_format;  // helios | philly | jobs-csv | jobs-jsonl | pooling-synthetic[:k=v,...]
  std::string slices;        // the tenants' slices (sim/tenant_traces.h ParseSlices)
  std::string slices_date;   // the row of a Helios cluster_gpu_number.csv
  std::string shapes;        // pooling-synthetic: the pod list whose GPU shapes the jobs take
  std::string out, output, policy_config, command;
  sim::RemoteAttach remote;  // the pool+remote row's settings (enabled implied)
  double arrival_scale = 1;
  double min_cycle_s = 0;
  double warmup_s = 0;  // sim::PoolingOptions::warmup_s
  uint64_t seed = 1;
  int gpus_per_host = 8;
  bool quiet = false;
};

// Reads the inputs, runs the configurations, prints the table (or pooling.json with -o json)
// and writes pooling.json into `out`.
Status RunPoolingCommand(const PoolingCliFlags& f);

}  // namespace gpool::cli
