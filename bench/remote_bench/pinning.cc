// remote_bench --interleaved's --pin (bench/remote_bench/internal.h lists the files): the driver
// on one CPU and every process it spawns on another, so that the two ends of a transfer never
// share a core or migrate; the flag's parsing, the pinning itself (before anything starts), the
// header line that reads each process's allowed CPUs back, and the check after each group that
// no thread escaped.
// One file because --pin reaches start-up (main), every spawn (Spawn) and every group.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "remote_bench/internal.h"

namespace gpool::remote::remote_bench {
namespace {

// The CPUs a thread or process may run on, as the kernel lists them ("1", "0-1"), from the
// Cpus_allowed_list line of its /proc status file; "?" if it has gone.
std::string CpusAllowed(const std::filesystem::path& status) {
  std::ifstream f(status);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      size_t from = line.find_first_not_of(" \t", 18);
      return from == std::string::npos ? "" : line.substr(from);
    }
  }
  return "?";
}

}  // namespace

// Pins the calling thread, and so every thread and process it starts afterwards (both inherit
// the affinity), to `cpu`; false, with the reason on stderr, if the kernel refused.
bool PinTo(int cpu, const std::string& who) {
  if (cpu < 0) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) == 0) return true;
  std::fprintf(stderr, "remote_bench: pinning %s to CPU %d: %s\n", who.c_str(), cpu,
               std::strerror(errno));
  return false;
}

// "--pin=A,B": two different CPU numbers, the client's and the spawned processes'.
void ParsePinCpus(const std::string& arg, DriverFlags* f) {
  const std::string v = arg.substr(std::strlen("--pin="));
  int a = -1, b = -1, used = 0;
  if (std::sscanf(v.c_str(), "%d,%d%n", &a, &b, &used) != 2 || used != static_cast<int>(v.size()) ||
      a < 0 || b < 0 || a == b) {
    BadFlag(fmt::format("{}: want --pin=A,B, two different CPU numbers (client, spawned processes)",
                        arg));
  }
  f->pin = true;
  f->client_cpu = a;
  f->server_cpu = b;
}

// --pin, before the driver spawns or starts anything: the client and the spawned processes on two
// CPUs of their own, so that the two ends of a transfer never share a core or migrate (on this
// 2-core VM the scheduler moves them, and a cell's ratio drifts by up to 0.2 between runs). Pins
// this thread to the client's CPU, so every later thread inherits it; the spawned processes pin
// themselves to theirs right after fork (Spawn). A host with fewer than 2 usable CPUs runs
// unpinned and says so; a CPU this process may not use is an error.
void SetUpPinning(DriverFlags* f) {
  if (!f->pin) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    BadFlag(fmt::format("--pin: sched_getaffinity: {}", std::strerror(errno)));
  }
  if (CPU_COUNT(&allowed) < 2) {
    f->pin = false;
    f->pin_off = fmt::format(" (--pin needs 2 CPUs; this process may use {})", CPU_COUNT(&allowed));
    return;
  }
  for (int cpu : {f->client_cpu, f->server_cpu}) {
    if (cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) {
      BadFlag(fmt::format("--pin: CPU {} is not one this process may use ({})", cpu,
                          CpusAllowed("/proc/self/status")));
    }
  }
  if (!PinTo(f->client_cpu, "the driver")) std::exit(2);
  g.client_cpu = f->client_cpu;
  g.server_cpu = f->server_cpu;
}

// The header's pinning part, with each process's allowed CPUs read back from /proc.
std::string PinningHeader(const DriverFlags& f) {
  if (!f.pin) return "no" + f.pin_off;
  std::string read_back = "client " + CpusAllowed("/proc/self/status");
  for (size_t i = 0; i < g.pids.size(); ++i) {
    read_back +=
        fmt::format(", {} {}", g.roles[i], CpusAllowed(fmt::format("/proc/{}/status", g.pids[i])));
  }
  return fmt::format("client on CPU {}, spawned processes on CPU {} (read back: {})", f.client_cpu,
                     f.server_cpu, read_back);
}

// --pin: reads back the allowed CPUs of every live thread (the client's; each spawned process's
// with its session workers), since a thread that escaped the pinning would share a core with the
// other side unnoticed. Prints one line the first time and again only when some thread is off
// its CPU. It sees the threads alive now: call it while a group's connections are still open.
void CheckPinning() {
  static bool shown = false;
  if (g.client_cpu < 0) return;
  int client = 0, spawned = 0;
  std::vector<std::string> off;
  auto check = [&](pid_t root, int cpu, const std::string& role, int* on) {
    ForEachThread(root, [&](const std::filesystem::path& task) {
      std::string allowed = CpusAllowed(task / "status");
      if (allowed == std::to_string(cpu)) {
        ++*on;
      } else if (allowed != "?") {  // "?": exited meanwhile
        off.push_back(fmt::format("{} thread {} on {}", role, task.filename().string(), allowed));
      }
    });
  };
  check(getpid(), g.client_cpu, "client", &client);
  for (size_t i = 0; i < g.pids.size(); ++i) check(g.pids[i], g.server_cpu, g.roles[i], &spawned);
  if (shown && off.empty()) return;
  shown = true;
  std::printf(
      "  pinning %s: %d client threads on CPU %d, %d threads of the spawned processes "
      "on CPU %d",
      off.empty() ? "held" : "NOT held", client, g.client_cpu, spawned, g.server_cpu);
  for (const std::string& o : off) std::printf("; %s", o.c_str());
  std::printf("\n");
}

}  // namespace gpool::remote::remote_bench
