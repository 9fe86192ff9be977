// What the gpool SPANK plugin asks of gpool for one Slurm job step, and what it makes of the
// answers: the plugin's configuration (its arguments in plugstack.conf), the user's
// `--gpool-gpus` value, the `gpool` CLI calls it runs, and the step environment built from the
// leases. Pure functions, no I/O, so every rule is unit-tested without Slurm.
//
// Thread safety: functions of values only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool::slurm {

// The plugin's arguments, `key=value` words after the plugin's path in plugstack.conf.
struct PluginConfig {
  std::string gpool = "gpool";   // the gpool CLI (gpool=PATH)
  std::string controller;        // controller=HOST:PORT[,HOST:PORT...] (required)
  std::string token_file;        // token_file=PATH: an admin or tenant token
  std::string tenant;            // tenant=NAME: whose quota the GPUs count against
  std::string lib_dir;           // lib_dir=DIR: gpool's client runtime (default <gpool>/../lib)
  std::string transport;         // transport=tcp|ucx for the step's data path (default: tcp)
  double wait_s = 60;            // wait=DURATION: how long a step waits for its GPUs
  double hold_s = 24 * 3600;     // max_time=DURATION: the gpool job's duration (an upper bound)
};

// Parses plugstack.conf arguments; an unknown key or a bad value is an error naming it.
StatusOr<PluginConfig> ParsePluginArgs(const std::vector<std::string>& args);

// `--gpool-gpus=N` (whole GPUs) or a fraction of one GPU in (0, 1), e.g. 0.5. A fraction is
// rounded to the controller's unit, a thousandth of a GPU; one below that unit is refused.
struct GpuRequest {
  int32_t gpus = 0;       // whole GPUs, or 1 with gpu_milli set
  int32_t gpu_milli = 0;  // 1..999 for a fraction; 0 for whole GPUs
};
StatusOr<GpuRequest> ParseGpusOption(std::string_view text);

// The gpool job that holds the step's GPUs is named after the step, so that a retried submit
// (the same request id) is not a second job: "slurm-JOB.STEP".
std::string StepRequestId(uint32_t job_id, uint32_t step_id);

// argv of `gpool submit` for the step's GPUs. The job's command is what the GPU node's agent
// runs while the step uses the GPUs remotely: a sleep bounded by max_time (the step cancels the
// job when it ends).
std::vector<std::string> SubmitArgv(const PluginConfig& c, const GpuRequest& r, uint32_t job_id,
                                    uint32_t step_id);
// argv of `gpool jobs describe|leases|cancel ID`.
std::vector<std::string> JobArgv(const PluginConfig& c, std::string_view verb, std::string_view id);

// The job id that `gpool submit` printed (its one line of output).
StatusOr<std::string> ParseSubmitOutput(std::string_view out);

// The "state" of `gpool jobs describe ID -o json`.
StatusOr<std::string> ParseJobState(std::string_view json);

// The step's environment from `gpool jobs leases ID` ("TASK GPU TOKEN" lines): the GPUs in
// GPOOL_DEVICES order and one lease per GPU.
struct StepGpus {
  std::string devices;  // GPOOL_DEVICES: HOST:PORT/INDEX,...
  std::string leases;   // GPOOL_LEASE: TOKEN,...
  int count = 0;
};
StatusOr<StepGpus> ParseLeases(std::string_view out);

// LD_LIBRARY_PATH with gpool's client runtime first.
std::string PrependLibraryPath(std::string_view lib_dir, std::string_view current);

// The client runtime's folder: lib_dir if set, else <folder of gpool>/../lib.
std::string ClientLibDir(const PluginConfig& c);

}  // namespace gpool::slurm
