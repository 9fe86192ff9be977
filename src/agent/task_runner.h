// TaskRunner: runs the tasks the controller binds to this node as local processes.
//
// Each task is spawned (posix_spawn: no allocation between fork and exec, safe in the agent's
// multi-threaded process) in its own process group, with its stdout and stderr appended to
// <log_dir>/<job>.<task>.out and .err. Stop sends SIGTERM to the group, and SIGKILL once the
// grace period has passed (checked by Poll). When a task's main process exits, whatever it left
// in its group is killed too, so nothing outlives its task. A command that cannot be started
// (not found, not executable) ends at once with exit code 127, like a shell.
//
// BuildTaskEnv is the environment a task gets (docs/control-plane.md, "Node agent"):
// GPOOL_JOB_ID, GPOOL_TASK_INDEX, GPOOL_NUM_TASKS, GPOOL_NODE, and either
//   - CUDA_VISIBLE_DEVICES for whole local GPUs (UUIDs when known, else indices, with
//     CUDA_DEVICE_ORDER=PCI_BUS_ID; empty when the task has no GPU; a fraction without a lease
//     also gets GPOOL_GPU_MILLI / GPOOL_GPU_MEMORY_BYTES, its share, not enforced), or
//   - GPOOL_DEVICES and GPOOL_LEASE for remote or fractional GPUs, with LD_LIBRARY_PATH
//     starting with gpool's client runtime directory, as `gpool run` sets them (remoting.md).
//
// Thread safety: not thread-safe; the agent's loop owns it.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::agent {

struct TaskEnvOptions {
  std::string node;
  std::vector<std::string> gpu_uuids;  // by local GPU index; empty entries or list = use indices
  std::string client_lib_dir;          // gpool's libcudart.so.13 directory (remote GPUs)
};

// `base` is KEY=VALUE entries (the agent's environment); variables the task gets are replaced.
std::vector<std::string> BuildTaskEnv(const v1::TaskAssignment& t, const TaskEnvOptions& o,
                                      const std::vector<std::string>& base);
// The agent's own environment as KEY=VALUE entries.
std::vector<std::string> CurrentEnvironment();

using TaskKey = std::pair<std::string, int>;  // (job id, task index)

struct TaskExit {
  TaskKey key;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;
};

struct TaskRunnerOptions {
  std::string log_dir;  // created if missing
  std::chrono::milliseconds kill_grace{5000};
};

class TaskRunner {
 public:
  explicit TaskRunner(TaskRunnerOptions options) : options_(std::move(options)) {}
  ~TaskRunner();  // kills every task still running (SIGKILL) and reaps it

  // Starts a task. A spawn failure is not an error: the task is reported exited with 127 by the
  // next Poll (its .err file says why). Errors: the log files can't be created.
  Status Start(const TaskKey& key, const std::vector<std::string>& argv,
               const std::vector<std::string>& env);
  // Asks a task to stop: SIGTERM to its group now, SIGKILL after the grace period. Its exit is
  // not reported (the controller already dropped it). No-op for unknown tasks.
  void Stop(const TaskKey& key);
  // Reaps exits and escalates stops. Returns tasks that ended on their own since the last call.
  std::vector<TaskExit> Poll();
  bool running(const TaskKey& key) const { return tasks_.count(key) > 0; }
  std::vector<TaskKey> keys() const;
  std::string LogPath(const TaskKey& key, const char* stream) const;

 private:
  struct Proc {
    int pid = -1;  // -1: spawn failed
    int spawn_errno = 0;
    bool stopping = false;
    std::chrono::steady_clock::time_point kill_at;
  };
  TaskRunnerOptions options_;
  std::map<TaskKey, Proc> tasks_;
};

}  // namespace gpool::agent
