// spank_gpool.so: a Slurm SPANK plugin that gives a job step pooled GPUs from gpool.
//
//   srun --gpool-gpus=2 ./app        two whole GPUs, anywhere in the pool
//   srun --gpool-gpus=0.25 ./app     a quarter of one GPU, enforced by its GPU server
//
// plugstack.conf: `required /usr/lib/gpool/spank_gpool.so controller=HOST:PORT gpool=PATH
// [token_file=PATH] [tenant=NAME] [lib_dir=DIR] [transport=tcp|ucx] [wait=60s] [max_time=24h]`
// (docs/slurm.md).
//
// In slurmstepd (the remote context), before the step's tasks start, the plugin submits a gpool
// job for the GPUs (named after the step, so a retry is not a second job), waits until the
// scheduler has bound it, fetches one signed lease per GPU and puts GPOOL_DEVICES, GPOOL_LEASE
// and LD_LIBRARY_PATH (gpool's client runtime first) into the step's environment: the unmodified
// program's CUDA calls go to those GPUs' servers. When the step ends, however it ends (success,
// failure, scancel), slurmstepd calls slurm_spank_exit and the plugin cancels the job, which
// frees the GPUs. Until the scheduler places remote GPUs itself, the gpool job's own command is
// a bounded sleep on the GPU node that marks the GPUs as held.
//
// The plugin talks to gpool through its CLI (one process per call) rather than linking gRPC into
// every slurmstepd: a step start costs a few CLI calls, and the CLI's failover, TLS and token
// handling stay in one place.
// spank.h declares the plugin's entry points without extern "C" of its own.
extern "C" {
#include <slurm/spank.h>
}

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "slurm/request.h"
#include "slurm/run_command.h"

// What SPANK_PLUGIN(gpool, 1) defines, spelled out: in C++ a const object at namespace scope has
// internal linkage unless declared extern, so the macro's symbols would not reach Slurm's loader.
extern "C" {
extern const char plugin_name[] = "gpool";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 1;
}

namespace {

using gpool::Status;
using gpool::StatusOr;
namespace gs = gpool::slurm;

// One slurmstepd serves one step, and SPANK calls a plugin from one thread: plain statics.
std::string g_option;         // the --gpool-gpus value as given ("" = not given)
gs::GpuRequest g_request;     // ... and as parsed
std::string g_job;            // the gpool job holding this step's GPUs, once submitted
gs::PluginConfig g_config;
constexpr double kCliTimeoutS = 30;

int OnGpusOption(int, const char* optarg, int) {
  StatusOr<gs::GpuRequest> r = gs::ParseGpusOption(optarg ? optarg : "");
  if (!r.ok()) {
    // Checked in srun too (the local context), so a bad value fails before anything is allocated.
    slurm_error("gpool: %s", r.status().message().c_str());
    return -1;
  }
  g_option = optarg;
  g_request = *r;
  return 0;
}

struct spank_option g_options[] = {
    {const_cast<char*>("gpool-gpus"), const_cast<char*>("N"),
     const_cast<char*>("GPUs from the gpool pool for this step: N whole GPUs, or a fraction of "
                       "one (e.g. 0.25)"),
     1, 0, OnGpusOption},
    SPANK_OPTIONS_TABLE_END};

StatusOr<std::string> Cli(const std::vector<std::string>& argv) {
  StatusOr<gs::CommandResult> r = gs::RunCommand(argv, kCliTimeoutS);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    std::string err = r->err.empty() ? r->out : r->err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    return Status::Unavailable(
        gs::CommandName(argv) + " exited " + std::to_string(r->exit_code) + ": " + err);
  }
  return r->out;
}

void CancelJob() {
  if (g_job.empty()) return;
  StatusOr<std::string> r = Cli(gs::JobArgv(g_config, "cancel", g_job));
  if (!r.ok()) {
    slurm_error("gpool: job %s holds GPUs and could not be cancelled: %s", g_job.c_str(),
                r.status().message().c_str());
  } else {
    slurm_info("gpool: job %s cancelled, its GPUs are free", g_job.c_str());
  }
  g_job.clear();
}

Status WaitRunning() {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(g_config.wait_s * 1000));
  while (true) {
    StatusOr<std::string> out = Cli(gs::JobArgv(g_config, "describe", g_job));
    if (!out.ok()) return out.status();
    StatusOr<std::string> state = gs::ParseJobState(*out);
    if (!state.ok()) return state.status();
    if (*state == "running") return Status::Ok();
    if (*state != "pending") {
      return Status::FailedPrecondition("gpool job " + g_job + " is " + *state +
                                        " before it was bound");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::ResourceExhausted("gpool job " + g_job + " still pending after " +
                                       std::to_string(static_cast<int>(g_config.wait_s)) +
                                       " s (wait= in plugstack.conf); see `gpool jobs describe " +
                                       g_job + "` for why");
    }
    usleep(100 * 1000);
  }
}

Status Acquire(spank_t sp) {
  uint32_t job_id = 0, step_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS) {
    return Status::Internal("cannot read the Slurm job and step ids");
  }
  StatusOr<std::string> out = Cli(gs::SubmitArgv(g_config, g_request, job_id, step_id));
  if (!out.ok()) return out.status();
  StatusOr<std::string> id = gs::ParseSubmitOutput(*out);
  if (!id.ok()) return id.status();
  g_job = *id;
  Status running = WaitRunning();
  if (!running.ok()) return running;
  out = Cli(gs::JobArgv(g_config, "leases", g_job));
  if (!out.ok()) return out.status();
  StatusOr<gs::StepGpus> gpus = gs::ParseLeases(*out);
  if (!gpus.ok()) return gpus.status();
  char current[8192] = "";
  if (spank_getenv(sp, "LD_LIBRARY_PATH", current, sizeof current) != ESPANK_SUCCESS) {
    current[0] = '\0';
  }
  std::string libs = gs::PrependLibraryPath(gs::ClientLibDir(g_config), current);
  if (spank_setenv(sp, "GPOOL_DEVICES", gpus->devices.c_str(), 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "GPOOL_LEASE", gpus->leases.c_str(), 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "GPOOL_JOB_ID", g_job.c_str(), 1) != ESPANK_SUCCESS ||
      spank_setenv(sp, "LD_LIBRARY_PATH", libs.c_str(), 1) != ESPANK_SUCCESS ||
      (!g_config.transport.empty() &&
       spank_setenv(sp, "GPOOL_TRANSPORT", g_config.transport.c_str(), 1) != ESPANK_SUCCESS)) {
    return Status::Internal("cannot set the step's environment");
  }
  slurm_info("gpool: step %u.%u runs on %d pooled GPU(s) of gpool job %s: %s", job_id, step_id,
             gpus->count, g_job.c_str(), gpus->devices.c_str());
  return Status::Ok();
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) {
  StatusOr<gs::PluginConfig> c = gs::ParsePluginArgs(std::vector<std::string>(av, av + ac));
  if (!c.ok()) {
    slurm_error("gpool: %s", c.status().message().c_str());
    return -1;
  }
  g_config = *c;
  for (struct spank_option* o = g_options; o->name != nullptr; ++o) {
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("gpool: cannot register --%s", o->name);
      return -1;
    }
  }
  return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  if (spank_context() != S_CTX_REMOTE || g_option.empty()) return 0;
  Status s = Acquire(sp);
  if (!s.ok()) {
    slurm_error("gpool: --gpool-gpus=%s: %s", g_option.c_str(), s.message().c_str());
    CancelJob();  // a job submitted before the failure must not keep its GPUs
    return -1;
  }
  return 0;
}

int slurm_spank_exit(spank_t, int, char**) {
  if (spank_context() == S_CTX_REMOTE) CancelJob();
  return 0;
}

}  // extern "C"
