// What the parts of remote_bench (bench/remote_bench.cc and bench/remote_bench/*.cc) share: the
// spawned peers' addresses and pids, the raw streamer (the echo server's client), the plain ucp
// stream's client, the --interleaved method's contenders and groups, --pin, --clients, and the
// driver's flags. Internal to the remote_bench binary: nothing else includes it.
//
// The files, each along one seam:
//   remote_bench.cc  the head comment (what is measured, the flags), main: flag parsing, which
//                    servers start, Google Benchmark or --interleaved
//   peers.cc         the spawned processes: gpu-server, gpool transport echo (and RawStreamer,
//                    its client), plain TCP echo
//   plain_ucp.cc     the plain ucp peers (no gpool code): tag ping-pong echo and bulk stream
//   microbench.cc    the Google Benchmark pairs (BM_*)
//   method.cc        --interleaved's method: CPU and context-switch accounting, Measure, RunGroup
//   pinning.cc       --pin: pinning, its check and its header line
//   layers.cc        --clients: the interception layers' programs as contenders
//   groups.cc        --interleaved's groups: round trip, async ops, idle, copies, summary lines
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "layer_client.h"
#include "plain_ucx.h"

#include "remote/transport/socket.h"
#include "remote/transport/transport.h"

namespace gpool::remote::remote_bench {

// ---- The spawned peers (peers.cc, plain_ucp.cc) ----

struct Servers {
  std::string gpu_tcp, gpu_ucx, echo_tcp, echo_ucx, plain_tcp, plain_ucx;
  std::string plain_ucx_stream;  // --interleaved copies over ucx: the plain ucp stream server
  std::vector<pid_t> pids;
  std::vector<std::string> roles;  // of pids, for --threads
  bool threads = false;            // --threads: wake-ups per step by thread
  // --pin: the driver's CPU and the one of every process it spawns (-1: not pinned).
  int client_cpu = -1, server_cpu = -1;
  pid_t plain_ucx_pid = -1;
  // --clients: the gpu-servers' kernel plugin (--kernels) and the programs run through
  // `gpool run` (their CPU counts with the servers').
  std::string kernels;
  std::vector<pid_t> client_pids;
};
extern Servers g;  // peers.cc

// A child that runs `body(write_fd)`; the parent reads one line (the address) back.
std::string Spawn(const std::string& role, const std::function<void(int)>& body);
// In a spawned server: listens on a loopback port and writes its address to the parent's `fd`.
net::Fd ListenAndAnnounce(int fd);

// Each returns the server's address (its pid is in g.pids, its role in g.roles).
std::string StartGpuServer(const std::string& transport);
std::string StartEcho(const std::string& transport);  // the echo's protocol: peers.cc
std::string StartPlainEcho();
std::string StartPlainUcxEcho();
std::string StartPlainUcxStream();

// transport 0 is tcp, 1 ucx.
const std::string& GpuAddr(int transport);
const std::string& EchoAddr(int transport);
const char* Name(int transport);

// Memory for the raw peers' device side, backed by transparent huge pages as the emulated
// device memory is (peers.cc says why). Filled with `fill`.
struct HugeBuffer {
  std::byte* data = nullptr;
  size_t size = 0;
  void Assign(size_t n, std::byte fill);
};

// One bulk transfer of `total` bytes in chunks of the copy path's size over a bare connection to
// the echo server (StartEcho). `spread`: from (h2d) or into (d2h) a buffer of `total` bytes, each
// chunk its own slice, as a copy moves them; otherwise one chunk-sized buffer is reused and stays
// in the CPU caches.
struct RawStreamer {
  Connection* c;
  size_t total, chunk;
  bool d2h, spread;
  std::vector<std::byte> buf, in;
  RawStreamer(Connection* conn, size_t total_bytes, bool to_host, bool spread_out,
              size_t chunk_bytes = size_t{4} << 20);
  // Whether the last d2h transfer really landed (the echo's spread buffer holds 6s, its hot one 5s).
  bool Landed() const;
  bool Run();
};

// The UCX floor: plain ucp tag ping-pong of 48 bytes (plain_ucx.h).
using bench::PlainUcx;
// First byte of a message that pauses the plain ucp echo (it is not echoed).
constexpr char kPlainUcxPause = 0x7e;
// What the plain ucp stream server's device side is filled with (d2h checks it landed).
constexpr std::byte kPlainStreamFill{7};

// The driver's end of the plain ucp stream (plain_ucp.cc; one per run, shared by the groups).
struct PlainStreamClient {
  PlainUcx u;
  net::Fd fd;
  std::vector<ucs_status_ptr_t> reqs;
  static PlainStreamClient* Get();  // null if the connection failed
  // One step: `total` bytes in messages of `size` from (h2d) or into (d2h) `buf`.
  bool Run(std::byte* buf, size_t total, size_t size, bool d2h);
};

// ---- Google Benchmark (microbench.cc) ----

// Registers the figures, each right after its raw peer.
void RegisterPairs();

// ---- --interleaved's method (method.cc) ----

// CPU seconds of every process of the bench so far (client, servers, --clients programs).
double AllCpu();
// Context switches so far of every thread of the client and the servers.
void AllSwitches(double* vol, double* invol);
// Calls `fn` with /proc/PID/task/TID of every live thread of `pid` and of its descendants that are
// not spawned servers themselves (a gpu-server's session workers, not the client's servers).
void ForEachThread(pid_t pid, const std::function<void(const std::filesystem::path&)>& fn);
// Prints `what`, kills every spawned process and exits 1.
[[noreturn]] void Die(const std::string& what);

struct Contender {
  std::string name;
  std::function<double()> step;  // one operation; returns the units it did (ops or bytes)
  // Around each of this contender's turns (warm-up and measurement), if set: the plain ucp echo
  // runs only then (see StartPlainUcxEcho), so that it does not spin on a core while the others
  // are measured.
  std::function<void()> begin, end;
};
struct Group {
  std::string name;
  bool throughput;  // units are bytes, reported per second; else ops, reported as time per op
  std::vector<Contender> c;  // c[0] is the peer the others are compared with
  int second = -1;           // if >= 0, a second peer: wall and CPU ratios to it are printed too
};

// Prints the group's figures; returns each contender's median wall ratio to c[0], and in
// `medians`, if given, each one's median rate (units per second).
std::vector<double> RunGroup(const Group& grp, int reps, double min_time,
                             std::vector<double>* medians = nullptr);

// ---- The driver's flags (parsed in remote_bench.cc) ----

struct DriverFlags {
  bool pin = false;                    // --pin or --pin=A,B
  int client_cpu = 0, server_cpu = 1;  // their CPUs
  std::string pin_off;                 // why --pin was not applied (fewer than 2 CPUs), or ""
  bool aa = false;                     // --aa: a second raw contender in each copy group
  int reps = 9;
  double min_time = 0.3;
  std::string only, skip;
  std::vector<size_t> sizes;  // --size: only copies of these sizes (empty: the table's)
  // --clients=DIR: the interception layers' programs (bench/layer_client.h) run through
  // --gpool=PATH against gpu-servers with the kernel plugin --kernels=PATH; --sgemm=M: the
  // SGEMM loop's matrix size.
  std::string clients, gpool, kernels;
  int sgemm = 64;
};

// Prints `what` and exits 2 (remote_bench.cc).
[[noreturn]] void BadFlag(const std::string& what);

// ---- --pin (pinning.cc) ----

// Pins the calling thread, and so every thread and process it starts afterwards, to `cpu`.
bool PinTo(int cpu, const std::string& who);
// "--pin=A,B": two different CPU numbers, the client's and the spawned processes'.
void ParsePinCpus(const std::string& arg, DriverFlags* f);
// --pin, before the driver spawns or starts anything.
void SetUpPinning(DriverFlags* f);
// The header's pinning part, with each process's allowed CPUs read back from /proc.
std::string PinningHeader(const DriverFlags& f);
// --pin: checks every live thread's allowed CPUs; prints a line the first time and on a miss.
void CheckPinning();

// ---- --clients (layers.cc) ----

// The programs of one transport, started on first use and kept connected for the whole run.
struct Layers {
  std::shared_ptr<bench::LayerClient> driver;   // driver_client: the driver API, libcuda stand-in
  std::shared_ptr<bench::LayerClient> runtime;  // layer_runtime: NVIDIA's libcudart.so.13 (the
                                                // client lib dir's) over the driver stand-in
  std::shared_ptr<bench::LayerClient> blas;     // layer_static: NVIDIA's runtime and cuBLAS over
                                                // the driver stand-in (null: not built)
};
// The programs of transport `t`; with `driver_only`, only driver_client (the copy groups').
Layers& LayersFor(const DriverFlags& f, int t, bool driver_only = false);
// Ends the programs of transport `t`, or of all transports if `t` < 0 (each exits at the end of
// its input), and forgets their pids.
void EndLayers(int t);
// A contender whose step is one command of `c` doing calls of `cmd` (layers.cc says how many).
Contender ClientCalls(const std::string& name, std::shared_ptr<bench::LayerClient> c,
                      const std::string& cmd);

// ---- --interleaved's groups (groups.cc) ----

int RunInterleaved(const DriverFlags& f);

}  // namespace gpool::remote::remote_bench
