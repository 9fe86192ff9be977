// CUDA remoting speed, each figure beside its raw peer on the same transport in the same run:
//   BM_PlainTcpPingPong   48 bytes echoed over a plain TCP socket (no framing: the TCP floor)
//   BM_RawPingPong        small message echoed by a bare gpool transport server
//   BM_NoopRoundTrip      a synchronous no-op (Ping) through an emulated gpu-server session
//   BM_AsyncOps           asynchronous requests pipelined into a session (zero-byte memsets, the
//                         launch path's protocol cost), then one sync; items/s = ops/s
//   BM_RawStream          one-way bulk messages of 4 MiB over the bare transport (the floor)
//   BM_Copy (h2d / d2h)   cudaMemcpy-sized copies through a session, 64 KiB .. 1 GiB, after one
//                         untimed copy that faults the emulated device memory in
//   BM_RawStreamSpread    the same, but from and into buffers as large as the copy (no reuse of a
//                         cache-resident 4 MiB buffer): the peer the copies are held to
// Servers run in child processes forked before any thread starts. Transport: tcp, or ucx (set
// UCX_TLS, e.g. UCX_TLS=shm,self for shared memory). See docs/benchmarks.md "## Remoting".
//
// `remote_bench --interleaved [--pin[=A,B]] [--aa] [--reps=N] [--min-time=S] [--only=tcp|ucx]
//  [--skip=lat,bw,h2d,d2h] [--size=BYTES] [--threads]` (--skip=h2d: no host-to-device copies)
// is a driver for a shared, loaded machine instead of Google Benchmark: each repetition runs every
// contender of a group back to back (order reversed on odd repetitions), each for at least
// --min-time seconds, and reports medians of wall and CPU time per operation and the median of
// the per-repetition ratios to the group's peer. CPU time is of all the bench's processes (client,
// servers, workers: from getrusage and /proc), so it counts both ends. --pin puts the client (all
// its threads) on CPU 0 and every spawned process (servers, their session workers, raw and plain
// peers) on CPU 1, or on CPUs A and B (sched_setaffinity; needs 2 CPUs, else it runs unpinned),
// prints each process's allowed CPUs in the header and checks every thread's after the first
// group. --aa adds to each copy group a second, identical raw contender and a summary line of its
// ratios to the first: how often the method itself reports a miss. --threads adds, under each
// contender, the median per step of each thread's voluntary context switches (each a sleep and a
// wake-up: the thread hops of a copy, which do not depend on the machine's load). --size=BYTES
// runs copies of that size only, instead of the table's 64 KiB .. 1 GiB (any size; a
// comma-separated list for several).
// --clients=DIR --gpool=PATH --kernels=PATH [--sgemm=M] adds the interception layers: programs
// run through `gpool run` (bench/layer_client.h; built in build/bench/clients) join the groups,
// the gpu-servers load the no-op kernel plugin --kernels, and "driver layer" lines give issue
// 27's figures: cuCtxSynchronize and cudaDeviceSynchronize against the round trip's peer,
// cuLaunchKernel and <<<>>> launches per second, a cublasSgemm loop (M x M, default 64) per
// call against the round trip and a <<<>>> launch through NVIDIA's shared runtime, and the copies'
// cells through the driver stand-in. bench/driver_layer.sh runs it.
//
// The code: this file parses the flags, starts the servers the run needs and hands over to
// Google Benchmark or the --interleaved driver; bench/remote_bench/ holds the rest, one file per
// part (bench/remote_bench/internal.h lists them).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include <benchmark/benchmark.h>

#include "remote_bench/internal.h"

namespace gpool::remote::remote_bench {

[[noreturn]] void BadFlag(const std::string& what) {
  std::fprintf(stderr, "remote_bench --interleaved: %s\n", what.c_str());
  std::exit(2);
}

}  // namespace gpool::remote::remote_bench

int main(int argc, char** argv) {
  using namespace gpool::remote::remote_bench;  // NOLINT
  signal(SIGPIPE, SIG_IGN);
  DriverFlags flags;
  bool interleaved = false;
  std::string driver_flag;  // the first flag given that only the --interleaved driver reads
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* key) { return a.substr(std::strlen(key)); };
    if (a == "--help" || a == "-h") {
      // Before any server starts (Google Benchmark's own --help would come after them).
      std::printf("usage: remote_bench [Google Benchmark flags]\n"
                  "       remote_bench --interleaved [--pin[=A,B]] [--aa] [--reps=N] "
                  "[--min-time=S] [--only=tcp|ucx] [--skip=lat,bw,h2d,d2h] [--size=BYTES[,...]] "
                  "[--threads] [--clients=DIR --gpool=PATH --kernels=PATH [--sgemm=M]]\n"
                  "(see the head of bench/remote_bench.cc and docs/benchmarks.md, "
                  "\"Remoting\")\n");
      return 0;
    }
    if (a != "--interleaved" && a.rfind("--benchmark_", 0) != 0 && driver_flag.empty()) {
      driver_flag = a;
    }
    if (a == "--interleaved") {
      interleaved = true;
    } else if (a == "--threads") {
      g.threads = true;
    } else if (a == "--pin") {
      flags.pin = true;
    } else if (a.rfind("--pin=", 0) == 0) {
      ParsePinCpus(a, &flags);
    } else if (a == "--aa") {
      flags.aa = true;
    } else if (a.rfind("--reps=", 0) == 0) {
      flags.reps = std::max(1, std::atoi(val("--reps=").c_str()));
    } else if (a.rfind("--min-time=", 0) == 0) {
      flags.min_time = std::atof(val("--min-time=").c_str());
    } else if (a.rfind("--only=", 0) == 0) {
      flags.only = val("--only=");
    } else if (a.rfind("--size=", 0) == 0) {
      // One size or a comma-separated list of them, in bytes (a later --size replaces it).
      flags.sizes.clear();
      std::stringstream list(val("--size="));
      for (std::string item; std::getline(list, item, ',');) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v == 0) {
          BadFlag(a + ": want --size=BYTES[,BYTES...], each a positive number of bytes");
        }
        flags.sizes.push_back(v);
      }
    } else if (a.rfind("--clients=", 0) == 0) {
      flags.clients = val("--clients=");
    } else if (a.rfind("--gpool=", 0) == 0) {
      flags.gpool = val("--gpool=");
    } else if (a.rfind("--kernels=", 0) == 0) {
      flags.kernels = val("--kernels=");
    } else if (a.rfind("--sgemm=", 0) == 0) {
      flags.sgemm = std::atoi(val("--sgemm=").c_str());
      if (flags.sgemm <= 0) BadFlag(a + ": want --sgemm=M, a positive matrix size");
    } else if (a.rfind("--skip=", 0) == 0) {
      flags.skip = val("--skip=");
    } else if (interleaved) {
      BadFlag("unknown flag " + a);
    }
  }
  if (!interleaved && !driver_flag.empty()) {
    // Google Benchmark's runner would ignore it and measure something else than asked.
    std::fprintf(stderr, "remote_bench: %s is a flag of the --interleaved driver; without "
                 "--interleaved only Google Benchmark's --benchmark_* flags apply\n",
                 driver_flag.c_str());
    return 2;
  }
  if (!flags.clients.empty() && (flags.gpool.empty() || flags.kernels.empty())) {
    BadFlag("--clients=DIR needs --gpool=PATH (the gpool CLI) and --kernels=PATH (the "
            "gpu-servers' kernel plugin, libgpool_bench_noop_kernels.so); bench/driver_layer.sh "
            "gives all three");
  }
  g.kernels = flags.kernels;
  if (interleaved) SetUpPinning(&flags);  // before any child or thread starts
  // The driver starts only the servers it uses, so that idle ones add no CPU time to its counts.
  if (!interleaved || flags.only != "ucx") {
    g.gpu_tcp = StartGpuServer("tcp");
    g.echo_tcp = StartEcho("tcp");
    g.plain_tcp = StartPlainEcho();
  }
  if (!interleaved || flags.only != "tcp") {
    g.gpu_ucx = StartGpuServer("ucx");
    g.echo_ucx = StartEcho("ucx");
    if (interleaved && flags.skip.find("lat") == std::string::npos) {
      g.plain_ucx = StartPlainUcxEcho();
      g.plain_ucx_pid = g.pids.back();
    }
    if (interleaved && flags.skip.find("bw") == std::string::npos) {
      g.plain_ucx_stream = StartPlainUcxStream();
    }
  }
  int rc = 0;
  if (interleaved) {
    rc = RunInterleaved(flags);
  } else {
    RegisterPairs();
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  for (pid_t p : g.pids) kill(p, SIGKILL);
  for (pid_t p : g.pids) waitpid(p, nullptr, 0);
  return rc;
}
