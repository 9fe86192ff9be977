#include "agent/task_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "common/log.h"

extern char** environ;

namespace gpool::agent {
namespace {

void SetVar(std::vector<std::string>* env, const std::string& key, const std::string& value) {
  for (std::string& e : *env) {
    if (e.compare(0, key.size() + 1, key + "=") == 0) {
      e = key + "=" + value;
      return;
    }
  }
  env->push_back(key + "=" + value);
}

void UnsetVar(std::vector<std::string>* env, const std::string& key) {
  std::erase_if(*env, [&](const std::string& e) { return e.compare(0, key.size() + 1, key + "=") == 0; });
}

std::string GetVar(const std::vector<std::string>& env, const std::string& key) {
  for (const std::string& e : env) {
    if (e.compare(0, key.size() + 1, key + "=") == 0) return e.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::vector<std::string> BuildTaskEnv(const v1::TaskAssignment& t, const TaskEnvOptions& o,
                                      const std::vector<std::string>& base) {
  std::vector<std::string> env = base;
  SetVar(&env, "GPOOL_JOB_ID", t.job_id());
  SetVar(&env, "GPOOL_TASK_INDEX", std::to_string(t.task()));
  SetVar(&env, "GPOOL_NUM_TASKS", std::to_string(t.num_tasks() > 0 ? t.num_tasks() : 1));
  SetVar(&env, "GPOOL_NODE", o.node);
  if (!t.devices().empty()) {
    // Remote or fractional GPUs: the remoting runtime, not the local driver.
    UnsetVar(&env, "CUDA_VISIBLE_DEVICES");
    SetVar(&env, "GPOOL_DEVICES", t.devices());
    if (t.lease().empty()) {
      UnsetVar(&env, "GPOOL_LEASE");
    } else {
      SetVar(&env, "GPOOL_LEASE", t.lease());
    }
    if (!o.client_lib_dir.empty()) {
      std::string old = GetVar(env, "LD_LIBRARY_PATH");
      SetVar(&env, "LD_LIBRARY_PATH", old.empty() ? o.client_lib_dir : o.client_lib_dir + ":" + old);
    }
    return env;
  }
  UnsetVar(&env, "GPOOL_DEVICES");
  UnsetVar(&env, "GPOOL_LEASE");
  std::string visible;
  for (int g = 0; g < 32; ++g) {
    if (!(t.gpu_mask() >> g & 1u)) continue;
    if (!visible.empty()) visible += ",";
    bool uuid = static_cast<size_t>(g) < o.gpu_uuids.size() && !o.gpu_uuids[g].empty();
    visible += uuid ? o.gpu_uuids[g] : std::to_string(g);
  }
  SetVar(&env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID");  // NVML's order, which gpu_mask indexes
  SetVar(&env, "CUDA_VISIBLE_DEVICES", visible);    // empty: no GPU for this task
  if (t.gpu_milli() > 0 && t.gpu_milli() < 1000) {
    // A fraction without a lease from the controller: the task sees the whole device and is
    // told its share; nothing enforces it (the remoting runtime does, with devices + lease).
    SetVar(&env, "GPOOL_GPU_MILLI", std::to_string(t.gpu_milli()));
    SetVar(&env, "GPOOL_GPU_MEMORY_BYTES", std::to_string(t.gpu_memory_bytes()));
  } else {
    UnsetVar(&env, "GPOOL_GPU_MILLI");
    UnsetVar(&env, "GPOOL_GPU_MEMORY_BYTES");
  }
  return env;
}

std::string TaskRunner::LogPath(const TaskKey& key, const char* stream) const {
  return fmt::format("{}/{}.{}.{}", options_.log_dir, key.first, key.second, stream);
}

Status TaskRunner::Start(const TaskKey& key, const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  if (tasks_.count(key)) return Status::AlreadyExists(fmt::format("task {}.{} is running", key.first, key.second));
  std::error_code ec;
  std::filesystem::create_directories(options_.log_dir, ec);
  if (ec) return Status::IoError(fmt::format("log dir {}: {}", options_.log_dir, ec.message()));
  const std::string out = LogPath(key, "out"), err = LogPath(key, "err");
  // Open the logs here (not in the child) so a bad log dir is an agent error, not a task exit.
  int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    int e = errno;
    if (out_fd >= 0) close(out_fd);
    if (err_fd >= 0) close(err_fd);
    return Status::IoError(fmt::format("task log {}: {}", out_fd < 0 ? out : err, std::strerror(e)));
  }
  Proc p;
  if (argv.empty()) {
    p.spawn_errno = ENOENT;
    dprintf(err_fd, "gpool agent: task has no command\n");
  } else {
    std::vector<char*> args, envp;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);  // its own process group, led by the task
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      p.spawn_errno = rc;
      dprintf(err_fd, "gpool agent: cannot start %s: %s\n", argv[0].c_str(), std::strerror(rc));
    } else {
      p.pid = pid;
    }
  }
  close(out_fd);
  close(err_fd);
  if (p.pid < 0) {
    GPOOL_LOG_WARN("task {}.{}: cannot start: {}", key.first, key.second, std::strerror(p.spawn_errno));
  } else {
    GPOOL_LOG_INFO("task {}.{}: started pid {}", key.first, key.second, p.pid);
  }
  tasks_[key] = p;
  return Status::Ok();
}

void TaskRunner::Stop(const TaskKey& key) {
  auto it = tasks_.find(key);
  if (it == tasks_.end() || it->second.stopping) return;
  Proc& p = it->second;
  p.stopping = true;
  p.kill_at = std::chrono::steady_clock::now() + options_.kill_grace;
  if (p.pid > 0) {
    GPOOL_LOG_INFO("task {}.{}: stopping (SIGTERM to group {})", key.first, key.second, p.pid);
    kill(-p.pid, SIGTERM);
  }
}

std::vector<TaskExit> TaskRunner::Poll() {
  std::vector<TaskExit> out;
  auto now = std::chrono::steady_clock::now();
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    const TaskKey& key = it->first;
    Proc& p = it->second;
    if (p.pid < 0) {  // never started
      if (!p.stopping) out.push_back({.key = key, .exit_code = 127, .signal = 0});
      it = tasks_.erase(it);
      continue;
    }
    int status = 0;
    pid_t r = waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) {
      kill(-p.pid, SIGKILL);  // whatever the task left behind in its group
      TaskExit e{.key = key};
      if (WIFSIGNALED(status)) {
        e.signal = WTERMSIG(status);
      } else {
        e.exit_code = WEXITSTATUS(status);
      }
      GPOOL_LOG_INFO("task {}.{}: pid {} ended (exit {}, signal {}){}", key.first, key.second, p.pid,
                     e.exit_code, e.signal, p.stopping ? ", stopped" : "");
      if (!p.stopping) out.push_back(e);
      it = tasks_.erase(it);
      continue;
    }
    if (p.stopping && now >= p.kill_at) {
      GPOOL_LOG_WARN("task {}.{}: still running after the grace period: SIGKILL", key.first, key.second);
      kill(-p.pid, SIGKILL);
      p.kill_at = now + std::chrono::hours(24);  // once; waitpid reaps it next
    }
    ++it;
  }
  return out;
}

std::vector<TaskKey> TaskRunner::keys() const {
  std::vector<TaskKey> out;
  for (const auto& [k, p] : tasks_) out.push_back(k);
  return out;
}

TaskRunner::~TaskRunner() {
  for (auto& [key, p] : tasks_) {
    if (p.pid <= 0) continue;
    kill(-p.pid, SIGKILL);
    waitpid(p.pid, nullptr, 0);
  }
}

}  // namespace gpool::agent
