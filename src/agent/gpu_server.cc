#include "agent/gpu_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common/file.h"
#include "common/log.h"

extern char** environ;

namespace gpool::agent {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::string_view kListening = "listening on ";

// The last `n` bytes of a file, for error messages ("" when unreadable).
std::string Tail(const std::string& path, size_t n) {
  auto text = ReadFile(path);
  if (!text.ok()) return "";
  std::string_view v = Trim(*text);
  return std::string(v.size() > n ? v.substr(v.size() - n) : v);
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("exit {}", WEXITSTATUS(status));
}

}  // namespace

StatusOr<std::vector<std::string>> GpuServerArgs(const GpuServerConfig& c) {
  if (c.lease_key_file.empty()) {
    return Status::InvalidArgument(
        "--serve-gpus needs --lease-key FILE (the key file the controller signs leases with)");
  }
  if (c.emulated_gpus <= 0 && (!c.emulated_kernels.empty() || !c.emulated_launch_log.empty())) {
    return Status::InvalidArgument(
        "--emulated-kernels / --emulated-launch-log: only for emulated GPUs (--emulated-gpus N)");
  }
  std::vector<std::string> a;
  if (!c.log_level.empty()) a = {"--log-level", c.log_level};
  a.insert(a.end(), {"gpu-server", "--key", c.lease_key_file});
  if (c.emulated_gpus > 0) {
    a.insert(a.end(), {"--backend", "emulated", "--emulated-devices", std::to_string(c.emulated_gpus)});
    if (c.emulated_memory_bytes > 0) {
      a.insert(a.end(), {"--emulated-memory", std::to_string(c.emulated_memory_bytes)});
    }
    if (!c.emulated_kernels.empty()) a.insert(a.end(), {"--emulated-kernels", c.emulated_kernels});
    if (!c.emulated_launch_log.empty()) {
      a.insert(a.end(), {"--emulated-launch-log", c.emulated_launch_log});
    }
  } else {
    a.insert(a.end(), {"--backend", "cuda"});
  }
  if (!c.advertise.empty()) a.insert(a.end(), {"--advertise", c.advertise});
  return a;
}

std::chrono::milliseconds RestartBackoff(const SupervisorOptions& o, int quick_failures) {
  auto backoff = o.backoff_initial;
  for (int i = 1; i < quick_failures && backoff < o.backoff_max; ++i) backoff *= 2;
  return std::min(backoff, o.backoff_max);
}

GpuServerSupervisor::GpuServerSupervisor(SupervisorOptions options) : o_(std::move(options)) {
  listen_ = o_.listen.empty() ? "127.0.0.1:0" : o_.listen;
}

GpuServerSupervisor::~GpuServerSupervisor() { Stop(); }

std::string GpuServerSupervisor::LogPath(const char* stream) const {
  return fmt::format("{}/gpu-server.{}", o_.log_dir, stream);
}

Status GpuServerSupervisor::Spawn() {
  std::error_code ec;
  std::filesystem::create_directories(o_.log_dir, ec);
  if (ec) return Status::IoError(fmt::format("gpu-server log dir {}: {}", o_.log_dir, ec.message()));
  const std::string out = LogPath("out"), err = LogPath("err");
  int out_fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int err_fd = open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out_fd < 0 || err_fd < 0 || null_fd < 0) {
    int e = errno;
    for (int fd : {out_fd, err_fd, null_fd}) {
      if (fd >= 0) close(fd);
    }
    return Status::IoError(fmt::format("gpu-server log {}: {}", out_fd < 0 ? out : err, std::strerror(e)));
  }
  struct stat st{};
  out_offset_ = fstat(out_fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  have_address_ = false;
  // Everything the child needs is built here: after fork only async-signal-safe calls.
  std::vector<std::string> argv_s = {o_.exe};
  argv_s.insert(argv_s.end(), o_.args.begin(), o_.args.end());
  argv_s.insert(argv_s.end(), {"--listen", listen_});
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the agent died before we got here: don't outlive it
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) signal(s, SIG_DFL);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execve(argv[0], argv.data(), environ);
    const char msg[] = "gpool agent: cannot exec the gpu-server program\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  int fork_errno = errno;
  close(out_fd);
  close(err_fd);
  close(null_fd);
  if (pid < 0) return Status::Internal(fmt::format("fork (gpu-server): {}", std::strerror(fork_errno)));
  pid_ = pid;
  started_at_ = Clock::now();
  GPOOL_LOG_INFO("gpu-server: started pid {} ({} ... --listen {}); logs {}", pid_, o_.exe, listen_,
                 LogPath("err"));
  return Status::Ok();
}

bool GpuServerSupervisor::ReadAddress() {
  if (have_address_) return true;
  auto text = ReadFile(LogPath("out"));
  if (!text.ok() || text->size() <= out_offset_) return false;
  std::string_view v(*text);
  v.remove_prefix(out_offset_);
  size_t at = v.find(kListening);
  if (at == std::string_view::npos) return false;
  std::string_view rest = v.substr(at + kListening.size());
  size_t end = rest.find_first_of(" \n");
  if (end == std::string_view::npos) return false;  // the line is not complete yet
  std::string addr(rest.substr(0, end));
  if (addr.empty()) return false;
  have_address_ = true;
  if (addr != address_ && !address_.empty()) {
    GPOOL_LOG_WARN("gpu-server: now at {}, was {} (leases name the old address until the agent "
                   "registers again)", addr, address_);
  }
  address_ = addr;
  GPOOL_LOG_INFO("gpu-server: pid {} listening on {}", pid_, address_);
  // Pin a picked port: the restarted server must be where the controller's leases point.
  if (listen_.size() >= 2 && listen_.compare(listen_.size() - 2, 2, ":0") == 0) listen_ = addr;
  return true;
}

Status GpuServerSupervisor::Start(std::chrono::milliseconds timeout) {
  stopped_ = false;
  GPOOL_RETURN_IF_ERROR(Spawn());
  const auto deadline = Clock::now() + timeout;
  while (!ReadAddress()) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      kill(-pid_, SIGKILL);
      pid_ = -1;
      return Status::FailedPrecondition(fmt::format("gpu-server ended at start ({}): {}",
                                                    DescribeExit(status), Tail(LogPath("err"), 400)));
    }
    if (Clock::now() >= deadline) {
      Stop();
      return Status::Unavailable(fmt::format(
          "gpu-server printed no address within {} ms (see {})", timeout.count(), LogPath("err")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

void GpuServerSupervisor::Reaped(const std::string& how) {
  auto ran = Clock::now() - started_at_;
  quick_failures_ = ran >= o_.stable_after ? 0 : quick_failures_ + 1;
  auto backoff = RestartBackoff(o_, quick_failures_);
  restart_at_ = Clock::now() + backoff;
  GPOOL_LOG_WARN("gpu-server: {}; restarting in {} ms (see {})", how, backoff.count(),
                 LogPath("err"));
  pid_ = -1;
}

void GpuServerSupervisor::Poll() {
  if (stopped_) return;
  if (pid_ > 0) {
    // Seen without reaping (WNOWAIT), so its group is killed while its id cannot be reused.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid_) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      Reaped(fmt::format("pid {} ended ({})", pid_, DescribeExit(status)));
      return;
    }
    ReadAddress();
    return;
  }
  if (Clock::now() < restart_at_) return;
  ++restarts_;
  Status s = Spawn();
  if (!s.ok()) {
    started_at_ = Clock::now();
    Reaped("cannot restart: " + s.ToString());
  }
}

void GpuServerSupervisor::Stop() {
  stopped_ = true;
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const auto kill_at = Clock::now() + o_.stop_grace;
  siginfo_t info{};
  for (;;) {
    info = {};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid_) {
      break;
    }
    if (Clock::now() >= kill_at) {
      GPOOL_LOG_WARN("gpu-server: pid {} still running {} ms after SIGTERM: SIGKILL", pid_,
                     o_.stop_grace.count());
      kill(pid_, SIGKILL);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid_, SIGKILL);  // whatever it left in its group (not yet reaped: the id is still ours)
  int status = 0;
  waitpid(pid_, &status, 0);
  GPOOL_LOG_INFO("gpu-server: pid {} stopped ({})", pid_, DescribeExit(status));
  pid_ = -1;
}

}  // namespace gpool::agent
