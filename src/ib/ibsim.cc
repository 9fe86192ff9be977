#include "ib/ibsim.h"

#include <fcntl.h>
#include <link.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "common/file.h"

extern char** environ;

namespace gpool::ib {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kKillGraceS = 5;  // `timeout -k`: SIGKILL this long after SIGTERM

std::string Errno(const std::string& what) { return fmt::format("{}: {}", what, strerror(errno)); }

// The log text (or "" when it cannot be read yet).
std::string ReadOrEmpty(const std::string& path) {
  auto s = ReadFile(path);
  return s.ok() ? *s : std::string();
}

std::string Tail(const std::string& s, size_t n = 1500) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

int Count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size()))
    ++n;
  return n;
}

struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE entries overriding the inherited environment
  std::string cwd;
  std::string stdin_path;        // empty: /dev/null
  std::string stdout_path, stderr_path;  // equal paths share one file (opened once, O_APPEND)
};

// Builds the child's environment before fork (no allocation after fork).
std::vector<std::string> MergeEnv(const std::vector<std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    std::string_view name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& o : overrides)
      if (std::string_view(o).substr(0, o.find('=')) == name) replaced = true;
    if (!replaced) out.emplace_back(kv);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

// fork + exec with PR_SET_PDEATHSIG so children die with the test. Only async-signal-safe calls
// after fork.
StatusOr<pid_t> Spawn(const SpawnSpec& spec) {
  std::vector<std::string> env = MergeEnv(spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string in = spec.stdin_path.empty() ? "/dev/null" : spec.stdin_path;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Status::Internal(Errno("fork"));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) _exit(127);
    int ifd = open(in.c_str(), O_RDONLY);
    int ofd = open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int efd = spec.stderr_path == spec.stdout_path
                  ? ofd
                  : open(spec.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (ifd < 0 || ofd < 0 || efd < 0) _exit(127);
    dup2(ifd, 0);
    dup2(ofd, 1);
    dup2(efd, 2);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout_s` for `pid`; SIGKILLs it after. Returns the exit status (128+sig when
// killed by a signal); `cpu_s`, when given, gets the CPU time of pid and its reaped descendants.
int WaitOrKill(pid_t pid, double timeout_s, double* cpu_s = nullptr) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int st = 0;
  rusage ru{};
  for (;;) {
    pid_t r = wait4(pid, &st, WNOHANG, &ru);
    if (r == pid) break;
    if (r < 0) return -1;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      if (wait4(pid, &st, 0, &ru) != pid) return -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (cpu_s)
    *cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
             static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A process that exists and is not a zombie. Zombies count as gone: a client whose parent died
// is reparented to PID 1, which in a container may never reap it.
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  std::string stat = ReadOrEmpty(fmt::format("/proc/{}/stat", pid));
  size_t p = stat.rfind(')');  // "pid (comm) S ...": comm may hold spaces and parentheses
  return p == std::string::npos || p + 2 >= stat.size() || stat[p + 2] != 'Z';
}

// A TCP port that was free a moment ago (for OpenSM's console).
int FreeTcpPort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(s);
  return port;
}

std::atomic<int> g_instances{0};

// The ASan runtime this process runs with (a sanitizer build), else empty.
std::string AsanRuntime() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string_view name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("/libasan.so") != std::string_view::npos) {
          *static_cast<std::string*>(data) = std::string(name);
          return 1;
        }
        return 0;
      },
      &found);
  return found;
}

// Whether `tool` (a path or a name in PATH) is linked with the ASan runtime: ASan refuses to
// start when another preload (umad2sim) comes before its runtime, so such tools get the runtime
// preloaded first. Looks for the runtime's soname in the first MiB, where .dynstr lives.
bool LinksAsan(const std::string& tool) {
  std::string path = tool;
  if (tool.find('/') == std::string::npos) {
    const char* env = getenv("PATH");
    path.clear();
    for (std::string_view dir : Split(env ? env : "", ':')) {
      std::string cand = std::string(dir) + "/" + tool;
      if (access(cand.c_str(), X_OK) == 0) {
        path = cand;
        break;
      }
    }
    if (path.empty()) return false;
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string buf(1 << 20, '\0');
  ssize_t n = read(fd, buf.data(), buf.size());
  close(fd);
  return n > 0 && std::string_view(buf.data(), static_cast<size_t>(n)).find("libasan.so") !=
                      std::string_view::npos;
}

}  // namespace

std::string Umad2simPath() {
  const char* e = getenv("GPOOL_UMAD2SIM");
  return e && *e ? e : "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";
}

std::string ToolResult::Describe(const std::string& what) const {
  if (timed_out) return fmt::format("`{}` timed out; stderr: {}", what, Tail(err, 800));
  return fmt::format("`{}` exited {}; stderr: {}", what, exit_code, Tail(err, 800));
}

// ---------------------------------------------------------------------------------------------
// Ibsim

StatusOr<std::unique_ptr<Ibsim>> Ibsim::Start(const IbsimOptions& options) {
  if (access(Umad2simPath().c_str(), R_OK) != 0)
    return Status::FailedPrecondition(
        fmt::format("umad2sim preload library {} not found (install ibsim-utils)", Umad2simPath()));
  std::unique_ptr<Ibsim> sim(new Ibsim());
  std::string parent = options.scratch_parent;
  if (parent.empty()) {
    const char* t = getenv("TMPDIR");
    parent = t && *t ? t : "/tmp";
  }
  std::string tmpl = parent + "/gpool-ibsim-XXXXXX";
  if (!mkdtemp(tmpl.data())) return Status::IoError(Errno("mkdtemp " + tmpl));
  sim->dir_ = tmpl;
  const char* keep = getenv("GPOOL_KEEP_IBSIM");
  sim->keep_ = options.keep_dir || (keep && std::string(keep) == "1");
  sim->net_path_ = sim->dir_ + "/net";
  sim->log_path_ = sim->dir_ + "/ibsim.log";
  sim->console_path_ = sim->dir_ + "/console";
  sim->sock_ = fmt::format("gpool-{}-{}", getpid(), g_instances.fetch_add(1));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(sim->net_path_, options.net_text));
  if (mkfifo(sim->console_path_.c_str(), 0600) != 0)
    return Status::IoError(Errno("mkfifo " + sim->console_path_));
  // Read-write so that opening does not block and ibsim never reads EOF while we live.
  sim->console_fd_ = open(sim->console_path_.c_str(), O_RDWR | O_CLOEXEC);
  if (sim->console_fd_ < 0) return Status::IoError(Errno("open " + sim->console_path_));

  SpawnSpec spec;
  spec.argv = {"ibsim", "-s"};
  auto limit = [&](const char* flag, int v) {
    if (v > 0) {
      spec.argv.push_back(flag);
      spec.argv.push_back(std::to_string(v));
    }
  };
  limit("-N", options.max_nodes);
  limit("-S", options.max_switches);
  limit("-P", options.max_ports);
  spec.argv.push_back(sim->net_path_);
  spec.env = {"IBSIM_SOCKNAME=" + sim->sock_};
  spec.cwd = sim->dir_;
  spec.stdin_path = sim->console_path_;
  spec.stdout_path = spec.stderr_path = sim->log_path_;
  GPOOL_ASSIGN_OR_RETURN(sim->pid_, Spawn(spec));

  auto deadline = Clock::now() + std::chrono::seconds(options.ready_timeout_s);
  for (;;) {
    std::string log = ReadOrEmpty(sim->log_path_);
    if (log.find("simulator ready") != std::string::npos && log.find("sim> ") != std::string::npos)
      break;
    int st = 0;
    if (waitpid(sim->pid_, &st, WNOHANG) == sim->pid_) {
      sim->pid_ = -1;
      return Status::FailedPrecondition(
          fmt::format("ibsim exited before it was ready ({}): {}", sim->log_path_, Tail(log)));
    }
    if (Clock::now() > deadline)
      return Status(StatusCode::kDeadlineExceeded, fmt::format("ibsim not ready after {} s ({}): {}",
                                                  options.ready_timeout_s, sim->log_path_,
                                                  Tail(log)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return sim;
}

Ibsim::~Ibsim() {
  if (pid_ > 0) {
    if (console_fd_ >= 0) {
      const char q[] = "Quit\n";
      (void)!write(console_fd_, q, sizeof(q) - 1);
    }
    WaitOrKill(pid_, 2.0);
  }
  if (console_fd_ >= 0) close(console_fd_);
  if (!keep_ && !dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::vector<std::string> Ibsim::ClientEnv() const {
  return {"LD_PRELOAD=" + Umad2simPath(), "IBSIM_SOCKNAME=" + sock_};
}

std::string Ibsim::NextPath(const std::string& stem) {
  return fmt::format("{}/{}-{}", dir_, stem, ++counter_);
}

StatusOr<std::string> Ibsim::Console(const std::string& command, int timeout_s) {
  if (command.find('\n') != std::string::npos)
    return Status::InvalidArgument("ibsim console: one command per call: " + command);
  if (pid_ <= 0 || !Alive(pid_)) return Status::Unavailable("ibsim is not running");
  size_t before = ReadOrEmpty(log_path_).size();
  std::string line = command + "\n";
  if (write(console_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return Status::IoError(Errno("write to ibsim console"));
  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    std::string log = ReadOrEmpty(log_path_);
    if (log.size() > before) {
      size_t p = log.find("sim> ", before);
      if (p != std::string::npos) return log.substr(before, p - before);
    }
    if (!Alive(pid_)) return Status::Unavailable("ibsim exited during `" + command + "`");
    if (Clock::now() > deadline)
      return Status(StatusCode::kDeadlineExceeded, 
          fmt::format("ibsim console `{}`: no prompt after {} s", command, timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

namespace {
std::string NodePort(const std::string& node, int port) {
  return port > 0 ? fmt::format("\"{}\"[{}]", node, port) : fmt::format("\"{}\"", node);
}
// ibsim answers a bad console command with a line naming the problem on its stdout/stderr.
Status ConsoleCommand(Ibsim* sim, const std::string& cmd) {
  GPOOL_ASSIGN_OR_RETURN(std::string out, sim->Console(cmd));
  // Refusals are lines starting with '#': `# nodeid "x" (x) not found`, `# can't unlink port 99
  // at nodeid "sw"`. Other output (ibwarn lines about traps that found no route) is not an error.
  LineReader lines(out);
  std::string_view line;
  while (lines.Next(&line))
    if (Trim(line).starts_with("#"))
      return Status::FailedPrecondition(fmt::format("ibsim `{}`: {}", cmd, Trim(line)));
  return Status::Ok();
}
}  // namespace

Status Ibsim::Unlink(const std::string& node, int port) {
  return ConsoleCommand(this, "Unlink " + NodePort(node, port));
}
Status Ibsim::ReLink(const std::string& node, int port) {
  return ConsoleCommand(this, "ReLink " + NodePort(node, port));
}

StatusOr<ToolResult> Ibsim::Run(const std::vector<std::string>& argv, const ToolOptions& options) {
  if (argv.empty()) return Status::InvalidArgument("Ibsim::Run: empty command");
  std::string stem = NextPath("tool");
  SpawnSpec spec;
  spec.argv = {"timeout", "-k", std::to_string(kKillGraceS), std::to_string(options.timeout_s)};
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.env = ClientEnv();
  if (std::string asan = AsanRuntime(); !asan.empty() && LinksAsan(argv[0]))
    spec.env[0] = "LD_PRELOAD=" + asan + ":" + Umad2simPath();
  if (!options.sim_host.empty()) spec.env.push_back("SIM_HOST=" + options.sim_host);
  for (const auto& [k, v] : options.env) spec.env.push_back(k + "=" + v);
  spec.cwd = dir_;
  spec.stdout_path = stem + ".out";
  spec.stderr_path = stem + ".err";
  auto t0 = Clock::now();
  GPOOL_ASSIGN_OR_RETURN(pid_t pid, Spawn(spec));
  ToolResult r;
  r.exit_code = WaitOrKill(pid, options.timeout_s + kKillGraceS + 5, &r.cpu_s);
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.timed_out = r.exit_code == 124 || r.exit_code == 137;
  r.out = ReadOrEmpty(spec.stdout_path);
  r.err = ReadOrEmpty(spec.stderr_path);
  if (r.exit_code == 127 && r.err.empty())
    r.err = fmt::format("could not execute `{}` (not installed?)", argv[0]);
  if (r.timed_out) {
    // A killed client keeps its ibsim slot; give it back so later tools can attach.
    (void)FreeDeadClients();
  }
  return r;
}

StatusOr<ToolResult> Ibsim::RunOk(const std::vector<std::string>& argv,
                                  const ToolOptions& options) {
  GPOOL_ASSIGN_OR_RETURN(ToolResult r, Run(argv, options));
  if (r.exit_code != 0) return Status::FailedPrecondition(r.Describe(argv[0]));
  return r;
}

StatusOr<std::vector<std::pair<int, pid_t>>> Ibsim::AttachedClients() {
  GPOOL_ASSIGN_OR_RETURN(std::string out, Console("Attached"));
  std::vector<std::pair<int, pid_t>> clients;
  LineReader lines(out);
  std::string_view line;
  while (lines.Next(&line)) {
    // "Client 0: pid 501 connected at "Switch1" port 0x200000, lid 1, qp 0 SM"
    int slot = -1, pid = -1;
    if (std::sscanf(std::string(Trim(line)).c_str(), "Client %d: pid %d", &slot, &pid) == 2)
      clients.emplace_back(slot, static_cast<pid_t>(pid));
  }
  return clients;
}

StatusOr<int> Ibsim::FreeDeadClients() {
  GPOOL_ASSIGN_OR_RETURN(auto clients, AttachedClients());
  int freed = 0;
  for (auto [slot, pid] : clients) {
    if (Alive(pid)) continue;
    GPOOL_RETURN_IF_ERROR(Console(fmt::format("X {}", slot)).status());
    ++freed;
  }
  return freed;
}

// ---------------------------------------------------------------------------------------------
// OpenSM

namespace {
std::vector<std::string> OpenSmEnv(const std::string& dir) {
  return {"OSM_CACHE_DIR=" + dir, "OSM_TMP_DIR=" + dir};
}
}  // namespace

StatusOr<OpenSmRun> Ibsim::RunOpenSmOnce(const OpenSmOptions& options) {
  OpenSmRun run;
  run.dump_dir = NextPath("opensm");
  if (mkdir(run.dump_dir.c_str(), 0755) != 0) return Status::IoError(Errno("mkdir " + run.dump_dir));
  run.log_path = run.dump_dir + "/opensm.log";
  run.lfts_path = run.dump_dir + "/opensm-lfts.dump";
  std::vector<std::string> argv = {"opensm", "-o", "-e", "-f", run.log_path, "-D", "0x43",
                                   "-R", options.engine, "--dump_files_dir", run.dump_dir};
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  ToolOptions t{.timeout_s = options.timeout_s, .sim_host = options.sim_host};
  for (const auto& kv : OpenSmEnv(run.dump_dir))
    t.env.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
  GPOOL_ASSIGN_OR_RETURN(run.result, Run(argv, t));
  if (run.result.exit_code != 0)
    return Status::FailedPrecondition(fmt::format(
        "{}; log {}: {}", run.result.Describe("opensm -o -R " + options.engine), run.log_path,
        Tail(ReadOrEmpty(run.log_path), 800)));
  if (access(run.lfts_path.c_str(), R_OK) != 0)
    return Status::FailedPrecondition(fmt::format("opensm -o wrote no {}; log {}: {}",
                                                  run.lfts_path, run.log_path,
                                                  Tail(ReadOrEmpty(run.log_path), 800)));
  return run;
}

StatusOr<std::unique_ptr<OpenSmDaemon>> Ibsim::StartOpenSm(const OpenSmDaemonOptions& options) {
  std::unique_ptr<OpenSmDaemon> d(new OpenSmDaemon());
  d->dump_dir_ = NextPath("opensmd");
  if (mkdir(d->dump_dir_.c_str(), 0755) != 0) return Status::IoError(Errno("mkdir " + d->dump_dir_));
  d->log_path_ = d->dump_dir_ + "/opensm.log";
  SpawnSpec spec;
  // -d 2: flush the log after each message, so WaitForLog sees sweeps as they complete.
  spec.argv = {"opensm", "-e", "-d", "2", "-f", d->log_path_, "-D", "0x43",
               "-R", options.base.engine, "--dump_files_dir", d->dump_dir_};
  if (options.console) {
    d->console_port_ = FreeTcpPort();
    if (d->console_port_ == 0) return Status::Unavailable("no free TCP port for OpenSM's console");
    spec.argv.insert(spec.argv.end(),
                     {"--console", "loopback", "--console-port", std::to_string(d->console_port_)});
  }
  spec.argv.insert(spec.argv.end(), options.base.extra_args.begin(), options.base.extra_args.end());
  spec.env = ClientEnv();
  for (const auto& kv : OpenSmEnv(d->dump_dir_)) spec.env.push_back(kv);
  if (!options.base.sim_host.empty()) spec.env.push_back("SIM_HOST=" + options.base.sim_host);
  spec.cwd = dir_;
  spec.stdout_path = spec.stderr_path = d->dump_dir_ + "/opensm.stdout";
  GPOOL_ASSIGN_OR_RETURN(d->pid_, Spawn(spec));
  GPOOL_RETURN_IF_ERROR(d->WaitForLog("SUBNET UP", 1, options.ready_timeout_s));
  return d;
}

OpenSmDaemon::~OpenSmDaemon() { Stop(); }

int OpenSmDaemon::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int rc = WaitOrKill(pid_, kKillGraceS);
  pid_ = -1;
  return rc;
}

int OpenSmDaemon::CountInLog(const std::string& needle) const {
  return Count(ReadOrEmpty(log_path_), needle);
}

Status OpenSmDaemon::WaitForLog(const std::string& needle, int count, int timeout_s) {
  auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    std::string log = ReadOrEmpty(log_path_);
    if (Count(log, needle) >= count) return Status::Ok();
    int st = 0;
    if (pid_ <= 0 || waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable(fmt::format(
          "OpenSM exited while waiting for \"{}\" ({}): {}", needle, log_path_, Tail(log, 800)));
    }
    if (Clock::now() > deadline)
      return Status(StatusCode::kDeadlineExceeded, fmt::format("OpenSM: \"{}\" x{} not in {} after {} s: {}",
                                                  needle, count, log_path_, timeout_s,
                                                  Tail(log, 800)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status OpenSmDaemon::Signal(int sig) {
  if (pid_ <= 0) return Status::Unavailable("OpenSM is not running");
  if (kill(pid_, sig) != 0) return Status::Internal(Errno("kill OpenSM"));
  return Status::Ok();
}

}  // namespace gpool::ib
