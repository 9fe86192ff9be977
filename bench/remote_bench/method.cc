// remote_bench --interleaved's method (bench/remote_bench/internal.h lists the files): medians
// of repetitions run back to back with their peers. Measure times one contender's turn (wall, CPU
// of all the bench's processes, context switches, UCX waits, with --threads each thread's
// wake-ups); RunGroup runs a group's contenders in alternating order and prints medians and the
// per-repetition ratios to the group's peer. The groups themselves are in groups.cc.
// Apart from the groups so that what a figure counts can be read, and changed, in one place.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "remote_bench/internal.h"

#include "remote/transport/ucx_transport.h"

namespace gpool::remote::remote_bench {
namespace {

// CPU seconds used so far by process `pid` and its descendants: the process's CPU-time clock
// (clock_getcpuclockid: nanoseconds, like /proc/PID/task/TID/schedstat, unlike tick-sampled
// utime), which also counts threads that have exited (a sum over live threads' schedstat would
// drop the CPU of every thread that ended during a step, such as short-lived helper threads), and
// the children it has waited for (ReapedChildrenCpu).
// CPU seconds of the children `pid` has waited for (/proc/PID/stat's cutime and cstime, in clock
// ticks): a gpu-server's session worker that exits during a step leaves the live tree, and
// without these its CPU left the total too, which then read negative for the step.
double ReapedChildrenCpu(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t at = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (at == std::string::npos) return 0;
  std::istringstream rest(stat.substr(at + 1));
  std::string field;
  double cutime = 0, cstime = 0;
  // Fields after the name start at 3 (state); cutime and cstime are 16 and 17.
  for (int i = 3; i <= 17 && rest >> field; ++i) {
    if (i == 16) cutime = std::strtod(field.c_str(), nullptr);
    if (i == 17) cstime = std::strtod(field.c_str(), nullptr);
  }
  return (cutime + cstime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double TreeCpu(pid_t pid) {
  double cpu = 0;
  clockid_t clock;
  timespec ts{};
  if (clock_getcpuclockid(pid, &clock) == 0 && clock_gettime(clock, &ts) == 0) {
    cpu = static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    std::ifstream kids(task.path() / "children");
    for (pid_t kid; kids >> kid;) cpu += TreeCpu(kid);
  }
  return cpu + ReapedChildrenCpu(pid);
}

// Context switches so far (voluntary: the thread slept; involuntary: preempted) of every thread of
// process `pid` and its descendants, from /proc/PID/task/TID/status. A wake-up costs one
// voluntary switch, so per operation this counts the sleeps and hand-offs of a round trip
// whatever the machine's load.
// The servers are the client's children too, but are counted on their own (g.pids): skipped when
// walking the client's tree (before, csw/step counted every server thread twice).
bool IsServer(pid_t pid) { return std::find(g.pids.begin(), g.pids.end(), pid) != g.pids.end(); }
void TreeSwitches(pid_t pid, double* vol, double* invol) {
  ForEachThread(pid, [&](const std::filesystem::path& task) {
    std::ifstream f(task / "status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) *vol += std::atof(line.c_str() + 24);
      if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) *invol += std::atof(line.c_str() + 27);
    }
  });
}

// Voluntary context switches (sleeps, so wake-ups) so far of every live thread, by TID, with its
// label: "<role> main" for a process's first thread, "<role> <name>" for a thread gpool named
// ("gpool-pump", the link's pump; "echo-conn", the echo's connection thread; /proc/.../comm),
// "<role> threads" for the other, unnamed ones (UCX's and the UCX transport's helper threads, the
// TCP transport's per-message striping threads, which exit within the step), "<role> child ..."
// for its children (a gpu-server's session worker). Load-independent: a round trip or copy step
// sleeps and wakes the same threads however busy the machine is. Per step, only threads alive at
// the end count, each from its count at the start (0 if it started since): before, totals were
// summed by label at both ends, so a thread that exited in between (a TCP striping thread, the
// previous group's session worker) subtracted its whole history from whatever thread shared its
// label, and the rows showed other groups' threads.
struct ThreadWake {
  std::string label;
  double vol = 0;
};
using ThreadWakes = std::map<std::string, ThreadWake>;  // by "PID/TID"
void TreeThreadWakes(pid_t pid, const std::string& role, ThreadWakes* out) {
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    const std::string tid = task.path().filename().string();
    std::ifstream f(task.path() / "status");
    std::string line, comm;
    double vol = -1;
    while (std::getline(f, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) vol = std::atof(line.c_str() + 24);
    }
    std::ifstream c(task.path() / "comm");
    std::getline(c, comm);
    if (vol >= 0) {
      const bool named = comm.rfind("gpool-", 0) == 0 || comm.rfind("echo-", 0) == 0;
      std::string label = role + (tid == std::to_string(pid) ? " main"
                                  : named                    ? " " + comm
                                                             : " threads");
      (*out)[fmt::format("{}/{}", pid, tid)] = ThreadWake{std::move(label), vol};
    }
    std::ifstream kids(task.path() / "children");
    for (pid_t kid; kids >> kid;) {
      if (!IsServer(kid)) TreeThreadWakes(kid, role + " child", out);
    }
  }
}
ThreadWakes AllThreadWakes() {
  ThreadWakes m;
  TreeThreadWakes(getpid(), "client", &m);
  for (size_t i = 0; i < g.pids.size(); ++i) TreeThreadWakes(g.pids[i], g.roles[i], &m);
  return m;
}
// Wake-ups between two snapshots by label, of the threads alive at the second.
std::map<std::string, double> WakesSince(const ThreadWakes& before, const ThreadWakes& after) {
  std::map<std::string, double> out;
  for (const auto& [id, t] : after) {
    auto it = before.find(id);
    out[t.label] += t.vol - (it == before.end() ? 0 : it->second.vol);
  }
  return out;
}

struct Sample {
  double wall = 0, cpu = 0, units = 0, steps = 0;
  double vol = 0, invol = 0;  // context switches, all processes
  double sleeps = 0;          // this (client) process's UCX sleeps on the worker event fd
  double yields = 0, oob_polls = 0, helper_wakes = 0;  // its other UCX waits (GetUcxWaitCounters)
  std::map<std::string, double> wakes;  // --threads: voluntary switches by thread (total)
};

Sample Measure(const Contender& c, double min_time) {
  if (c.begin) c.begin();
  Sample s;
  double vol0, invol0;
  AllSwitches(&vol0, &invol0);
  ThreadWakes wakes0;
  if (g.threads) wakes0 = AllThreadWakes();
  const UcxWaitCounters ucx0 = GetUcxWaitCounters();
  double cpu0 = AllCpu();
  auto t0 = std::chrono::steady_clock::now();
  do {
    s.units += c.step();
    s.steps += 1;
    s.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (s.wall < min_time);
  s.cpu = AllCpu() - cpu0;
  const UcxWaitCounters ucx1 = GetUcxWaitCounters();
  s.sleeps = static_cast<double>(ucx1.sleeps - ucx0.sleeps);
  s.yields = static_cast<double>(ucx1.yields - ucx0.yields);
  s.oob_polls = static_cast<double>(ucx1.oob_polls - ucx0.oob_polls);
  s.helper_wakes = static_cast<double>(ucx1.helper_notifies - ucx0.helper_notifies +
                                       ucx1.helper_runs - ucx0.helper_runs);
  AllSwitches(&s.vol, &s.invol);
  s.vol -= vol0;
  s.invol -= invol0;
  if (g.threads) {
    s.wakes = WakesSince(wakes0, AllThreadWakes());
  }
  if (c.end) c.end();
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The q-quantile (0..1) of v, linear between neighbours: with the median, the spread of the
// per-repetition ratios is printed, so that a reader can tell a real gap from the noise of a
// shared machine (where the same binary's ratio swings +-20% between repetitions).
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

double AllCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  for (pid_t p : g.pids) cpu += TreeCpu(p);
  for (pid_t p : g.client_pids) cpu += TreeCpu(p);
  return cpu;
}

// Calls `fn` with /proc/PID/task/TID of every live thread of `pid` and of its descendants that are
// not spawned servers themselves (a gpu-server's session workers, not the client's servers).
void ForEachThread(pid_t pid, const std::function<void(const std::filesystem::path&)>& fn) {
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    fn(task.path());
    std::ifstream kids(task.path() / "children");
    for (pid_t kid; kids >> kid;) {
      if (!IsServer(kid)) ForEachThread(kid, fn);
    }
  }
}

void AllSwitches(double* vol, double* invol) {
  *vol = *invol = 0;
  TreeSwitches(getpid(), vol, invol);
  for (pid_t p : g.pids) TreeSwitches(p, vol, invol);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "remote_bench --interleaved: %s\n", what.c_str());
  for (pid_t p : g.pids) kill(p, SIGKILL);
  for (pid_t p : g.client_pids) kill(p, SIGKILL);
  std::exit(1);
}

// Prints the group's figures; returns each contender's median wall ratio to c[0], and in
// `medians`, if given, each one's median rate (units per second).
std::vector<double> RunGroup(const Group& grp, int reps, double min_time,
                             std::vector<double>* medians) {
  std::vector<double> ratios;
  for (const Contender& c : grp.c) {  // warm-up: connections, page faults
    if (c.begin) c.begin();
    c.step();
    if (c.end) c.end();
  }
  std::vector<std::vector<Sample>> samples(grp.c.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < grp.c.size(); ++k) {
      size_t i = r % 2 ? grp.c.size() - 1 - k : k;
      samples[i].push_back(Measure(grp.c[i], min_time));
    }
  }
  std::printf("%s (median of %d; ratio = median of per-repetition ratios to %s, [quartiles]%s)\n",
              grp.name.c_str(), reps, grp.c[0].name.c_str(),
              grp.second >= 0 ? fmt::format("; vs #{}: to {}", grp.second + 1,
                                            grp.c[grp.second].name)
                                    .c_str()
                              : "");
  for (size_t i = 0; i < grp.c.size(); ++i) {
    std::vector<double> wall, cpu, ratio, cpu_ratio, vol, invol, sleeps, ratio2, cpu_ratio2;
    std::vector<double> yields, oob_polls, helper_wakes;
    for (int r = 0; r < reps; ++r) {
      const Sample& s = samples[i][r];
      const Sample& p = samples[0][r];
      if (grp.second >= 0) {
        const Sample& q = samples[grp.second][r];
        // As the first ratio: throughput over the peer's for bytes (was time over time, so a
        // copy slower than the second peer read above 1x), time over the peer's for ops.
        ratio2.push_back(grp.throughput ? (s.units / s.wall) / (q.units / q.wall)
                                        : (s.wall / s.units) / (q.wall / q.units));
        cpu_ratio2.push_back((s.cpu / s.units) / (q.cpu / q.units));
      }
      vol.push_back(s.vol / s.steps);
      invol.push_back(s.invol / s.steps);
      sleeps.push_back(s.sleeps / s.steps);
      yields.push_back(s.yields / s.steps);
      oob_polls.push_back(s.oob_polls / s.steps);
      helper_wakes.push_back(s.helper_wakes / s.steps);
      if (grp.throughput) {
        wall.push_back(s.units / s.wall);
        cpu.push_back(s.cpu / s.units * 1e9);  // CPU ns per byte... per GB below
        ratio.push_back((s.units / s.wall) / (p.units / p.wall));
        cpu_ratio.push_back((s.cpu / s.units) / (p.cpu / p.units));
      } else {
        wall.push_back(s.wall / s.units * 1e6);
        cpu.push_back(s.cpu / s.units * 1e6);
        ratio.push_back((s.wall / s.units) / (p.wall / p.units));
        cpu_ratio.push_back((s.cpu / s.units) / (p.cpu / p.units));
      }
    }
    // Per step (one op, or one burst/stream): voluntary and involuntary context switches of all
    // processes, and the client process's UCX waits: sleeps, yields (syscalls), liveness-socket
    // polls (syscalls), helper-thread wake-ups (load-independent hop counts).
    std::string per_step = fmt::format(
        "  csw/step {:.2f}+{:.2f} ucx sleeps/step {:.2f} yields {:.2f} oob polls {:.2f} helper {:.3f}",
        Median(vol), Median(invol), Median(sleeps), Median(yields), Median(oob_polls),
        Median(helper_wakes));
    if (grp.second >= 0) {
      per_step += fmt::format("  vs #{}: {:.2f}x cpu {:.2f}x", grp.second + 1, Median(ratio2),
                              Median(cpu_ratio2));
    }
    ratios.push_back(Median(ratio));
    if (medians) {
      std::vector<double> rate;
      for (const Sample& s : samples[i]) rate.push_back(s.units / s.wall);
      medians->push_back(Median(rate));
    }
    if (grp.throughput) {
      std::printf("  %-34s %10.1f MB/s  ratio %.2fx [%.2f-%.2f]  CPU %7.3f s/GB  cpu ratio %.2fx%s\n",
                  grp.c[i].name.c_str(), Median(wall) / 1e6, Median(ratio), Quantile(ratio, 0.25),
                  Quantile(ratio, 0.75), Median(cpu), Median(cpu_ratio), per_step.c_str());
    } else {
      std::printf("  %-34s %10.2f us/op  ratio %.2fx [%.2f-%.2f]  CPU %7.2f us/op  cpu ratio %.2fx%s\n",
                  grp.c[i].name.c_str(), Median(wall), Median(ratio), Quantile(ratio, 0.25),
                  Quantile(ratio, 0.75), Median(cpu), Median(cpu_ratio), per_step.c_str());
    }
    if (g.threads) {
      // Median per step of each thread's sleeps (each one a wake-up, a thread hop).
      // Every label seen in any repetition (not only the first's).
      std::string line;
      std::set<std::string> labels;
      for (int r = 0; r < reps; ++r) {
        for (const auto& kv : samples[i][r].wakes) labels.insert(kv.first);
      }
      for (const std::string& label : labels) {
        std::vector<double> per;
        for (int r = 0; r < reps; ++r) {
          auto it = samples[i][r].wakes.find(label);
          per.push_back(it == samples[i][r].wakes.end() ? 0 : it->second / samples[i][r].steps);
        }
        if (Median(per) >= 0.05) line += fmt::format("  {} {:.2f}", label, Median(per));
      }
      std::printf("    wake-ups/step:%s\n", line.c_str());
    }
  }
  CheckPinning();
  std::fflush(stdout);
  return ratios;
}

}  // namespace gpool::remote::remote_bench
