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
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "layer_client.h"
#include "plain_ucx.h"

#include "remote/client/link.h"
#include "remote/server/server.h"
#include "remote/transport/socket.h"
#include "remote/transport/transport.h"
#include "remote/transport/ucx_transport.h"

namespace gpool::remote {
namespace {

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
} g;

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

// A child that runs `body(write_fd)`; the parent reads one line (the address) back.
std::string Spawn(const std::string& role, const std::function<void(int)>& body) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // Before `body` starts a thread or forks a session worker, so that all of them inherit it.
    if (!PinTo(g.server_cpu, role)) _exit(1);
    body(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  g.pids.push_back(pid);
  g.roles.push_back(role);
  char buf[256] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string StartGpuServer(const std::string& transport) {
  return Spawn("gpu-server " + transport, [&](int fd) {
    server::ServerOptions o;
    o.transport = transport;
    o.emulated.memory_bytes = uint64_t{4} << 30;
    o.emulated.kernels_plugin = g.kernels;
    server::GpuServer s(o);
    if (!s.Start().ok()) _exit(1);
    std::string a = s.address();
    if (write(fd, a.data(), a.size()) < 0) _exit(1);
    close(fd);
    (void)s.Serve();
  });
}

// Memory for the raw peers' device side, backed by transparent huge pages as the emulated
// device memory is (emulated_backend.cc: MADV_HUGEPAGE): over UCX shared memory the receiver pulls
// a large message from the sender's pages (CMA), pinning them page by page, so a sender whose
// pages are 4 KiB moved 16 MiB-1 GiB at 0.3-0.4x the speed of the session sending from huge-page
// device memory (measured: the raw d2h peer at 415 MB/s and 0.74 s/GB against 2.75 GB/s and
// 0.12 s/GB for the copy); the peer was slow, not the copy fast. Filled with `fill`.
struct HugeBuffer {
  std::byte* data = nullptr;
  size_t size = 0;
  void Assign(size_t n, std::byte fill) {
    if (data != nullptr) munmap(data, size);
    size = (std::max<size_t>(n, 1) + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    (void)madvise(p, size, MADV_HUGEPAGE);
    data = static_cast<std::byte*>(p);
    std::memset(data, static_cast<int>(fill), size);
  }
};

// Echo server: replies to each message with a copy of it, except messages of >= 1 KiB, which
// are counted and acknowledged with 1 byte only when their first byte is 1 (end of a burst);
// a 17-byte request {2, u64 n, u64 size} asks for a burst of n messages of `size` bytes back, all
// from one 4 MiB buffer; {3, n, size} for the same from successive slices of an n * size buffer;
// {4, n, size} announces n messages of `size` bytes, received into successive slices of an
// n * size buffer (as a copy lands in device memory) and acknowledged with 1 byte after the last.
// (Until session 11 the host-to-device peer received every message into one reused buffer, which
// stayed in the CPU caches where the copy's destination does not: docs/benchmarks.md.)
std::string StartEcho(const std::string& transport) {
  return Spawn("echo " + transport, [&](int fd) {
    auto t = MakeTransport(transport, {});
    if (!t.ok()) _exit(1);
    auto l = (*t)->Listen("127.0.0.1:0");
    if (!l.ok()) _exit(1);
    std::string a = (*l)->address();
    if (write(fd, a.data(), a.size()) < 0) _exit(1);
    close(fd);
    for (;;) {
      auto c = (*l)->Accept();
      if (!c.ok()) _exit(0);
      std::thread([conn = std::shared_ptr<Connection>(std::move(*c))] {
        pthread_setname_np(pthread_self(), "echo-conn");  // --threads labels it
        std::vector<std::byte> m;
        std::vector<std::byte> burst(4 << 20, std::byte{5});
        HugeBuffer spread;  // the d2h peer's source, like device memory (see HugeBuffer)
        HugeBuffer landing;  // the h2d peer's destination, likewise
        std::byte one{1};
        while (conn->Recv(&m).ok()) {
          if (m.size() == 17 && m[0] == std::byte{4}) {
            uint64_t n, size;
            std::memcpy(&n, m.data() + 1, 8);
            std::memcpy(&size, m.data() + 9, 8);
            if (n == 0 || size == 0 || n * size > (uint64_t{1} << 31)) _exit(1);
            if (landing.size < n * size) landing.Assign(n * size, std::byte{0});
            bool split = false;
            for (uint64_t i = 0; i < n; ++i) {
              if (!conn->RecvSplit(&m, std::span<std::byte>(landing.data + i * size, size), &split)
                       .ok() ||
                  !split || !m.empty()) {
                _exit(1);  // the driver dies too ("raw stream failed"): never a silent figure
              }
            }
            (void)conn->Send(ByteSpan(&one, 1));
            continue;
          }
          if (m.size() == 17 && (m[0] == std::byte{2} || m[0] == std::byte{3})) {
            uint64_t n, size;
            std::memcpy(&n, m.data() + 1, 8);
            std::memcpy(&size, m.data() + 9, 8);
            size = std::min<uint64_t>(size, burst.size());
            bool spread_out = m[0] == std::byte{3} && n * size <= (uint64_t{1} << 31);
            if (spread_out && spread.size < n * size) spread.Assign(n * size, std::byte{6});
            for (uint64_t i = 0; i < n; ++i) {
              const std::byte* from = spread_out ? spread.data + i * size : burst.data();
              (void)conn->Send(ByteSpan(from, size));
            }
          } else if (m.size() >= 1024) {
            if (m[0] == std::byte{1}) (void)conn->Send(ByteSpan(&one, 1));
          } else {
            (void)conn->Send(m);
          }
        }
      }).detach();
    }
  });
}

// In a spawned server: listens on a loopback port and writes its address to the parent's `fd`.
net::Fd ListenAndAnnounce(int fd) {
  auto l = net::ListenTcp("127.0.0.1:0");
  if (!l.ok()) _exit(1);
  std::string a = net::LocalAddress(l->get());
  if (write(fd, a.data(), a.size()) < 0) _exit(1);
  close(fd);
  return std::move(*l);
}

// The floor under everything: a plain TCP socket echoing fixed 48-byte messages (one recv and
// one send per message, no framing), as a hand-written RPC would do it.
std::string StartPlainEcho() {
  return Spawn("plain tcp echo", [&](int fd) {
    net::Fd l = ListenAndAnnounce(fd);
    for (;;) {
      auto c = net::AcceptTcp(l.get());
      if (!c.ok()) _exit(0);
      std::thread([s = std::make_shared<net::Fd>(std::move(*c))] {
        char buf[48];
        while (net::ReadAll(s->get(), buf, sizeof buf, "client").ok() &&
               net::WriteAll(s->get(), buf, sizeof buf, "client").ok()) {
        }
      }).detach();
    }
  });
}

// The UCX floor: plain ucp tag ping-pong of 48 bytes (plain_ucx.h).
using bench::PlainUcx;

// The fair UCX floor for copies (the copy target): plain ucp, no gpool code, moving the copy's bytes in
// the copy path's message size (min(size, 4 MiB)) between buffers as large as the copy, each
// message from or into its own slice, as a ucp program streaming a buffer would: every message
// of a step posted at once (all in flight: tag sends and receives, non-blocking, contiguous, so
// UCX picks eager or zero-copy rendezvous itself), then one wait for all, polling and yielding
// the CPU on an empty poll like the plain ping-pong. A step: the client writes {d2h, n, size} on
// the wire-up TCP socket (the server sleeps in read() between steps, so an idle stream server
// costs no CPU while other contenders run); h2d: the client posts n sends, the server n receives
// and then acknowledges with 1 byte (tag 1); d2h: the client posts its n receives first, then
// asks, and the server posts n sends. gpool's raw peer (its own Connection echo) sends each
// large message only after the previous one completed (SendAndWait), as gpool's copies do.
struct PlainStreamAsk {
  uint64_t d2h = 0, n = 0, size = 0;
};
constexpr std::byte kPlainStreamFill{7};

std::string StartPlainUcxStream() {
  return Spawn("plain ucp stream", [&](int fd) {
    net::Fd l = ListenAndAnnounce(fd);
    PlainUcx u;
    if (!u.Init()) _exit(1);
    auto c = net::AcceptTcp(l.get());  // one client: the driver connects once
    if (!c.ok() || !u.Wire(c->get())) _exit(1);
    HugeBuffer buf;  // the device side, like device memory (see HugeBuffer)
    std::vector<ucs_status_ptr_t> reqs;
    PlainStreamAsk q;
    while (net::ReadAll(c->get(), &q, sizeof q, "client").ok()) {
      if (q.n == 0 || q.size == 0 || q.n * q.size > (uint64_t{1} << 31)) _exit(1);
      if (buf.size < q.n * q.size) buf.Assign(q.n * q.size, kPlainStreamFill);
      for (uint64_t i = 0; i < q.n; ++i) {
        std::byte* slice = buf.data + i * q.size;
        reqs.push_back(q.d2h ? u.PostSend(slice, q.size) : u.PostRecv(slice, q.size));
      }
      if (!u.WaitAll(&reqs)) _exit(1);
      char one = 1;
      if (!q.d2h && !u.Send(&one, 1)) _exit(1);
    }
    _exit(0);
  });
}

// The driver's end of the plain ucp stream (one per run, shared by the groups).
struct PlainStreamClient {
  PlainUcx u;
  net::Fd fd;
  std::vector<ucs_status_ptr_t> reqs;
  static PlainStreamClient* Get() {
    static PlainStreamClient* c = [] {
      auto* p = new PlainStreamClient;
      auto fd = net::ConnectTcp(g.plain_ucx_stream);
      if (!fd.ok() || !p->u.Init() || !p->u.Wire(fd->get())) return static_cast<PlainStreamClient*>(nullptr);
      p->fd = std::move(*fd);
      return p;
    }();
    return c;
  }
  // One step: `total` bytes in messages of `size` from (h2d) or into (d2h) `buf`.
  bool Run(std::byte* buf, size_t total, size_t size, bool d2h) {
    PlainStreamAsk q{.d2h = d2h, .n = total / size, .size = size};
    if (d2h) {
      for (uint64_t i = 0; i < q.n; ++i) reqs.push_back(u.PostRecv(buf + i * size, size));
    }
    if (!net::WriteAll(fd.get(), &q, sizeof q, "plain ucp stream").ok()) return false;
    if (!d2h) {
      for (uint64_t i = 0; i < q.n; ++i) reqs.push_back(u.PostSend(buf + i * size, size));
    }
    if (!u.WaitAll(&reqs)) return false;
    char one = 0;
    return d2h || (u.Recv(&one, 1) && one == 1);
  }
};

// First byte of a message that pauses the plain ucp echo (it is not echoed).
constexpr char kPlainUcxPause = 0x7e;

std::string StartPlainUcxEcho() {
  return Spawn("plain ucp echo", [&](int fd) {
    net::Fd l = ListenAndAnnounce(fd);
    PlainUcx u;
    if (!u.Init()) _exit(1);
    for (;;) {  // one client at a time
      auto c = net::AcceptTcp(l.get());
      if (!c.ok()) _exit(0);
      if (!u.Wire(c->get())) _exit(1);
      char buf[48];
      while (u.Recv(buf, sizeof buf)) {
        if (buf[0] == kPlainUcxPause) {
          // Paused between its turns (see the round-trip group): no polling until the driver
          // writes a byte to the bootstrap socket.
          char go;
          if (!net::ReadAll(c->get(), &go, 1, "driver").ok()) break;
          continue;
        }
        if (!u.Send(buf, sizeof buf)) break;
      }
    }
  });
}

void BM_PlainTcpPingPong(benchmark::State& state) {
  auto c = net::ConnectTcp(g.plain_tcp);
  if (!c.ok()) return state.SkipWithError(c.status().ToString().c_str());
  char buf[48] = {0};
  for (auto _ : state) {
    if (!net::WriteAll(c->get(), buf, sizeof buf, "echo").ok() ||
        !net::ReadAll(c->get(), buf, sizeof buf, "echo").ok()) {
      state.SkipWithError("echo failed");
    }
  }
  state.SetLabel("plain tcp socket");
}

const std::string& GpuAddr(int transport) { return transport == 0 ? g.gpu_tcp : g.gpu_ucx; }
const std::string& EchoAddr(int transport) { return transport == 0 ? g.echo_tcp : g.echo_ucx; }
const char* Name(int transport) { return transport == 0 ? "tcp" : "ucx"; }

std::unique_ptr<client::ServerLink> Link(benchmark::State& state, int transport) {
  auto l = client::ServerLink::Connect({.address = GpuAddr(transport), .transport = Name(transport)});
  if (!l.ok()) {
    state.SkipWithError(l.status().ToString().c_str());
    return nullptr;
  }
  return std::move(*l);
}
std::unique_ptr<Connection> RawConn(benchmark::State& state, int transport) {
  auto t = MakeTransport(Name(transport), {});
  auto c = t.ok() ? (*t)->Connect(EchoAddr(transport)) : StatusOr<std::unique_ptr<Connection>>(t.status());
  if (!c.ok()) {
    state.SkipWithError(c.status().ToString().c_str());
    return nullptr;
  }
  static std::vector<std::unique_ptr<Transport>> keep;  // transports outlive their connections
  keep.push_back(std::move(*t));
  return std::move(*c);
}

void BM_RawPingPong(benchmark::State& state) {
  auto c = RawConn(state, static_cast<int>(state.range(0)));
  if (!c) return;
  std::vector<std::byte> msg(48, std::byte{0}), in;
  for (auto _ : state) {
    if (!c->Send(msg).ok() || !c->Recv(&in).ok()) state.SkipWithError("echo failed");
  }
  state.SetLabel(Name(static_cast<int>(state.range(0))));
}

void BM_NoopRoundTrip(benchmark::State& state) {
  auto l = Link(state, static_cast<int>(state.range(0)));
  if (!l) return;
  proto::Ping ping;
  proto::ReplyHead h;
  proto::Empty none;
  std::lock_guard<std::mutex> lk(l->mu());  // as the runtime does (the link's pump try-locks it)
  for (auto _ : state) {
    if (!l->Call(ping, &h, &none).ok()) state.SkipWithError("ping failed");
  }
  state.SetLabel(Name(static_cast<int>(state.range(0))));
}

void BM_AsyncOps(benchmark::State& state) {
  auto l = Link(state, static_cast<int>(state.range(0)));
  if (!l) return;
  std::lock_guard<std::mutex> lk(l->mu());
  proto::Malloc m{.size = 4096};
  proto::Pointer p;
  proto::ReplyHead h;
  if (!l->Call(m, &h, &p).ok() || h.error) return state.SkipWithError("malloc failed");
  const int kBurst = 10000;
  proto::DeviceSync sync;
  proto::Empty none;
  for (auto _ : state) {
    for (int i = 0; i < kBurst; ++i) {
      proto::Memset op{.dst = p.ptr, .value = 0, .size = 0};
      if (!l->Post(op).ok()) return state.SkipWithError("post failed");
    }
    if (!l->Call(sync, &h, &none).ok() || h.async_error) return state.SkipWithError("sync failed");
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
  state.SetLabel(Name(static_cast<int>(state.range(0))));
}

// One bulk transfer of `total` bytes in chunks of the copy path's size over a bare connection.
// `spread`: from (h2d) or into (d2h) a buffer of `total` bytes, each chunk its own slice, as a copy
// moves them; otherwise one chunk-sized buffer is reused and stays in the CPU caches.
struct RawStreamer {
  Connection* c;
  size_t total, chunk;
  bool d2h, spread;
  std::vector<std::byte> buf, in;
  RawStreamer(Connection* conn, size_t total_bytes, bool to_host, bool spread_out,
              size_t chunk_bytes = size_t{4} << 20)
      : c(conn), total(total_bytes), chunk(std::min({total_bytes, chunk_bytes, size_t{4} << 20})),
        d2h(to_host),
        spread(spread_out) {
    buf.assign(spread ? std::max<size_t>(total, 1024) : std::max<size_t>(chunk, 1024), std::byte{0});
  }
  // Whether the last d2h transfer really landed (the echo's spread buffer holds 6s, its hot one 5s).
  bool Landed() const {
    std::byte want{spread ? uint8_t{6} : uint8_t{5}};
    return !d2h || !spread || (buf[0] == want && buf[total - 1] == want);
  }
  bool Run() {
    size_t n = (total + chunk - 1) / chunk;
    if (d2h) {
      std::vector<std::byte> req(17, std::byte{spread ? uint8_t{3} : uint8_t{2}});
      uint64_t k = n, size = chunk;
      std::memcpy(req.data() + 1, &k, 8);
      std::memcpy(req.data() + 9, &size, 8);
      if (!c->Send(req).ok()) return false;
      for (size_t i = 0; i < n; ++i) {
        bool split = false;
        std::span<std::byte> into = spread ? std::span<std::byte>(buf.data() + i * chunk, chunk)
                                           : std::span<std::byte>();
        if (!c->RecvSplit(&in, into, &split).ok()) return false;
      }
      return true;
    }
    if (spread) {  // received into slices of a buffer of the copy's size, as device memory
      std::vector<std::byte> req(17, std::byte{4});
      uint64_t k = n, size = std::max<size_t>(chunk, 1024);  // as sent below
      std::memcpy(req.data() + 1, &k, 8);
      std::memcpy(req.data() + 9, &size, 8);
      if (!c->Send(req).ok()) return false;
    }
    for (size_t i = 0; i < n; ++i) {
      std::byte* from = spread ? buf.data() + i * chunk : buf.data();
      from[0] = std::byte{i + 1 == n ? uint8_t{1} : uint8_t{0}};
      if (!c->Send(ByteSpan(from, std::max<size_t>(chunk, 1024))).ok()) return false;
    }
    return c->Recv(&in).ok();
  }
};

void RawStreamBench(benchmark::State& state, bool spread) {
  auto c = RawConn(state, static_cast<int>(state.range(0)));
  if (!c) return;
  size_t total = static_cast<size_t>(state.range(1));
  bool d2h = state.range(2) != 0;
  RawStreamer r(c.get(), total, d2h, spread);
  if (spread && !r.Run()) return state.SkipWithError("warm-up stream failed");  // fault pages in
  for (auto _ : state) {
    if (!r.Run()) return state.SkipWithError("stream failed");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(total));
  state.SetLabel(fmt::format("{} {}", Name(static_cast<int>(state.range(0))), d2h ? "d2h" : "h2d"));
}
void BM_RawStream(benchmark::State& state) { RawStreamBench(state, false); }
void BM_RawStreamSpread(benchmark::State& state) { RawStreamBench(state, true); }

void BM_Copy(benchmark::State& state) {
  auto l = Link(state, static_cast<int>(state.range(0)));
  if (!l) return;
  size_t total = static_cast<size_t>(state.range(1));
  bool d2h = state.range(2) != 0;
  std::lock_guard<std::mutex> lk(l->mu());
  proto::Malloc m{.size = total};
  proto::Pointer p;
  proto::ReplyHead h;
  if (!l->Call(m, &h, &p).ok() || h.error) return state.SkipWithError("malloc failed");
  std::vector<std::byte> host(total, std::byte{3});
  proto::Ping ping;
  proto::Empty none;
  // One untimed copy first: the emulated device memory's first touch costs page faults, which
  // on the shared VM dominate (~5 s per 256 MiB of 4 KiB faults, ~1.2 s with huge pages) and
  // measure the VM, not the remoting path (a real GPU's memory is resident).
  if (!l->CopyToDevice(p.ptr, host, 0).ok() || !l->Call(ping, &h, &none).ok() || h.async_error) {
    return state.SkipWithError("warm-up copy failed");
  }
  for (auto _ : state) {
    Status s;
    if (d2h) {
      s = l->CopyFromDevice(host.data(), p.ptr, total, 0, &h);
    } else {
      s = l->CopyToDevice(p.ptr, host, 0);
      if (s.ok()) s = l->SyncStream(0, 0, &h);  // the copy is done when this returns
    }
    if (!s.ok() || h.error || h.async_error) return state.SkipWithError("copy failed");
  }
  proto::Free f{.ptr = p.ptr};
  (void)l->Call(f, &h, &none);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(total));
  state.SetLabel(fmt::format("{} {}", Name(static_cast<int>(state.range(0))), d2h ? "d2h" : "h2d"));
}

// Each figure is registered right after its raw peer (same transport, size, direction), so
// that the pair runs under the same load on a shared machine.
void RegisterPairs() {
  benchmark::RegisterBenchmark("BM_PlainTcpPingPong", BM_PlainTcpPingPong)->UseRealTime();
  for (int t : {0, 1}) {
    benchmark::RegisterBenchmark("BM_RawPingPong", BM_RawPingPong)->Arg(t)->UseRealTime();
    benchmark::RegisterBenchmark("BM_NoopRoundTrip", BM_NoopRoundTrip)->Arg(t)->UseRealTime();
  }
  for (int t : {0, 1}) {
    for (int64_t size : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20,
                         int64_t{256} << 20, int64_t{1} << 30}) {
      for (int d2h : {0, 1}) {
        for (auto* fn : {&BM_RawStream, &BM_RawStreamSpread, &BM_Copy}) {
          const char* name = fn == &BM_Copy           ? "BM_Copy"
                             : fn == &BM_RawStream    ? "BM_RawStream"
                                                      : "BM_RawStreamSpread";
          benchmark::RegisterBenchmark(name, fn)
              ->Args({t, size, d2h})
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

BENCHMARK(BM_AsyncOps)->Arg(0)->Arg(1)->UseRealTime();

// ---- `--interleaved`: medians of repetitions run back to back with their peers ----

// CPU seconds used so far by process `pid` and its descendants: the process's CPU-time clock
// (clock_getcpuclockid: nanoseconds, like /proc/PID/task/TID/schedstat, unlike tick-sampled
// utime), which also counts threads that have exited. Summing the live threads' schedstat, as
// before, dropped the CPU of every thread that ended during a step: all the work of the old TCP
// transport's per-message striping threads at the receiving end.
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
  return cpu;
}
double AllCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  for (pid_t p : g.pids) cpu += TreeCpu(p);
  for (pid_t p : g.client_pids) cpu += TreeCpu(p);
  return cpu;
}

// Context switches so far (voluntary: the thread slept; involuntary: preempted) of every thread of
// process `pid` and its descendants, from /proc/PID/task/TID/status. A wake-up costs one
// voluntary switch, so per operation this counts the sleeps and hand-offs of a round trip
// whatever the machine's load.
// The servers are the client's children too, but are counted on their own (g.pids): skipped when
// walking the client's tree (before, csw/step counted every server thread twice).
bool IsServer(pid_t pid) { return std::find(g.pids.begin(), g.pids.end(), pid) != g.pids.end(); }
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

// Prints the group's figures; returns each contender's median wall ratio to c[0], and in
// `medians`, if given, each one's median rate (units per second).
std::vector<double> RunGroup(const Group& grp, int reps, double min_time,
                             std::vector<double>* medians = nullptr) {
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

std::unique_ptr<client::ServerLink> DriverLink(int transport) {
  auto l = client::ServerLink::Connect({.address = GpuAddr(transport), .transport = Name(transport)});
  if (!l.ok()) Die(l.status().ToString());
  return std::move(*l);
}
std::shared_ptr<Connection> DriverRaw(int transport) {
  static std::vector<std::unique_ptr<Transport>> keep;  // transports outlive their connections
  auto t = MakeTransport(Name(transport), {});
  if (!t.ok()) Die(t.status().ToString());
  auto c = (*t)->Connect(EchoAddr(transport));
  if (!c.ok()) Die(c.status().ToString());
  keep.push_back(std::move(*t));
  return std::shared_ptr<Connection>(std::move(*c));
}

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

[[noreturn]] void BadFlag(const std::string& what) {
  std::fprintf(stderr, "remote_bench --interleaved: %s\n", what.c_str());
  std::exit(2);
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

// One copy cell of a summary line: "tcp h2d 64K 0.97".
// A miss that two decimals would round up to 0.95 gets three ("0.949"), so that the list does not
// show a "0.95" among the cells that did not count as met.
std::string CellName(int transport, bool d2h, size_t size, double ratio) {
  return fmt::format(
      "{} {} {} {}", Name(transport), d2h ? "d2h" : "h2d",
      size >= (size_t{1} << 20) ? fmt::format("{}M", size >> 20) : fmt::format("{}K", size >> 10),
      ratio < 0.95 && ratio >= 0.945 ? fmt::format("{:.3f}", ratio) : fmt::format("{:.2f}", ratio));
}
// "<head>: N of M cells <met>: [cell] [cell] ...": ratios >= 0.95 count.
void PrintCells(const std::string& head, const char* met,
                const std::vector<std::pair<std::string, double>>& cells) {
  auto n =
      std::count_if(cells.begin(), cells.end(), [](const auto& c) { return c.second >= 0.95; });
  std::printf("%s: %td of %zu cells %s:", head.c_str(), n, cells.size(), met);
  for (const auto& c : cells) std::printf(" [%s]", c.first.c_str());
  std::printf("\n");
}

// ---- --clients: the interception layers (bench/layer_client.h) ----

// The programs of one transport, started on first use and kept connected for the whole run.
struct Layers {
  std::shared_ptr<bench::LayerClient> driver;   // driver_client: the driver API, libcuda stand-in
  std::shared_ptr<bench::LayerClient> runtime;  // layer_runtime: NVIDIA's libcudart.so.13 (the
                                                // client lib dir's) over the driver stand-in
  std::shared_ptr<bench::LayerClient> blas;     // layer_static: NVIDIA's runtime and cuBLAS over
                                                // the driver stand-in (null: not built)
};
std::map<int, Layers> g_layers;

// Forgets the pids of programs that have exited (each destructor waited for its own).
void StopClients() {
  std::vector<pid_t> live;
  for (const auto& [t, l] : g_layers) {
    for (const auto* c : {l.driver.get(), l.runtime.get(), l.blas.get()}) {
      if (c) live.push_back(c->pid());
    }
  }
  g.client_pids = live;
}

std::shared_ptr<bench::LayerClient> StartClient(const DriverFlags& f, int t,
                                                const std::vector<std::string>& argv,
                                                const std::string& first) {
  std::string why;
  auto c = bench::LayerClient::Start(f.gpool, Name(t), GpuAddr(t), argv, first, &why);
  if (!c) Die("--clients: " + why);
  g.client_pids.push_back(c->pid());
  return std::shared_ptr<bench::LayerClient>(std::move(c));
}

// The programs of transport `t`; with `driver_only`, only driver_client (the copy groups').
Layers& LayersFor(const DriverFlags& f, int t, bool driver_only = false) {
  auto it = g_layers.find(t);
  if (it != g_layers.end() && (driver_only || it->second.runtime)) return it->second;
  Layers l;
  l.driver = StartClient(f, t, {f.clients + "/driver_client", f.clients + "/layer_kernels.fatbin"},
                         "sync 1");
  if (driver_only) return g_layers[t] = l;
  l.runtime = StartClient(f, t, {f.clients + "/layer_runtime"}, "sync 1");
  const std::string blas = f.clients + "/layer_static";
  if (access(blas.c_str(), X_OK) == 0) {
    l.blas = StartClient(f, t, {blas, std::to_string(f.sgemm)}, "sgemm 1");
  } else {
    std::printf("note: no %s (the toolkit has no cuBLAS?): no SGEMM loop, no static-runtime "
                "launches\n",
                blas.c_str());
  }
  return g_layers[t] = l;
}

// A contender whose step is one command of `c` doing `n` calls, with `n` such that a step takes
// ~30 ms here (the fastest of three untimed probes: a probe slowed by the machine's load would
// shorten every step), and at least 1,000 calls, so that the pipe's round trip per step (~10-50 us)
// stays well under 1%.
Contender ClientCalls(const std::string& name, std::shared_ptr<bench::LayerClient> c,
                      const std::string& cmd) {
  const int probe = 200;
  double per = 1;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!c->Do(fmt::format("{} {}", cmd, probe))) Die(c->name() + ": " + cmd + " failed");
    per = std::min(
        per, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / probe);
  }
  const long n = std::clamp(static_cast<long>(0.03 / std::max(per, 1e-9)), 1000L, 1000000L);
  const std::string line = fmt::format("{} {}", cmd, n);
  return {fmt::format("{} ({}/step)", name, n), [c, line, n] {
            if (!c->Do(line)) Die(c->name() + ": '" + line + "' failed");
            return static_cast<double>(n);
          }};
}

int RunInterleaved(const DriverFlags& f) {
  std::vector<int> transports;
  if (f.only != "ucx") transports.push_back(0);
  if (f.only != "tcp") transports.push_back(1);
  const char* tls = std::getenv("UCX_TLS");
  std::printf(
      "remote_bench --interleaved: reps %d, min time %.2f s, UCX_TLS=%s, A/A calibration %s\n"
      "  pinned: %s\n",
      f.reps, f.min_time, tls ? tls : "(unset)", f.aa ? "on" : "off", PinningHeader(f).c_str());
  if (f.skip.find("lat") == std::string::npos) {
    for (int t : transports) {
      Group grp{fmt::format("round trip, {}", Name(t)), false, {}};
      if (t == 0) {
        auto plain = std::make_shared<net::Fd>();
        auto c = net::ConnectTcp(g.plain_tcp);
        if (!c.ok()) Die(c.status().ToString());
        *plain = std::move(*c);
        grp.c.push_back({"plain TCP socket, 48 B", [plain] {
                           char buf[48] = {0};
                           if (!net::WriteAll(plain->get(), buf, sizeof buf, "echo").ok() ||
                               !net::ReadAll(plain->get(), buf, sizeof buf, "echo").ok()) {
                             Die("plain echo failed");
                           }
                           return 1.0;
                         }});
      }
      if (t == 1) {
        // The plain ucp ping-pong is the peer (the round-trip target is against it), as the plain
        // socket is for TCP; the ratio to gpool's own Connection echo is printed second. Its
        // echo server busy-polls while it waits, so it is paused outside its own turns (a
        // message makes it block on its bootstrap socket; a byte there resumes it): left
        // polling, it kept one of the two cores busy while gpool's contenders were measured,
        // whose two ends then had to share a CPU (a round trip on one CPU is ~8x (shm) and
        // ~1.8x (tcp) one on two here, bench/ucx_rt_bench.cc), while gpool's servers sleep
        // during its turns. (SIGSTOP/SIGCONT did the same, but a signal interrupts UCX's
        // syscalls; this keeps the peer plain.)
        auto plain = std::make_shared<PlainUcx>();
        auto fd = net::ConnectTcp(g.plain_ucx);
        if (!fd.ok()) Die(fd.status().ToString());
        if (!plain->Init() || !plain->Wire(fd->get())) Die("plain ucx ping-pong setup failed");
        auto keep_fd = std::make_shared<net::Fd>(std::move(*fd));
        auto pause = [plain] {
          char buf[48] = {kPlainUcxPause};
          if (!plain->Send(buf, sizeof buf)) Die("plain ucx pause failed");
        };
        auto resume = [keep_fd] {
          char go = 1;
          if (!net::WriteAll(keep_fd->get(), &go, 1, "plain ucp echo").ok()) Die("resume failed");
        };
        pause();
        grp.c.push_back({"plain ucp tag ping-pong, 48 B",
                         [plain, keep_fd] {
                           char buf[48] = {0};
                           if (!plain->Send(buf, sizeof buf) || !plain->Recv(buf, sizeof buf)) {
                             Die("plain ucx echo failed");
                           }
                           return 1.0;
                         },
                         resume, pause});
        grp.second = 1;
      }
      auto raw = DriverRaw(t);
      grp.c.push_back({fmt::format("gpool {} Connection echo, 48 B", Name(t)), [raw] {
                         static thread_local std::vector<std::byte> msg(48), in;
                         if (!raw->Send(msg).ok() || !raw->Recv(&in).ok()) Die("echo failed");
                         return 1.0;
                       }});
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      // The shape of a program's step: one asynchronous op (a launch), then a synchronizing call
      // (cudaStreamSynchronize): one round trip, plus whatever queuing the op costs the client
      // (arming the pump's timer).
      proto::Malloc pm{.size = 4096};
      proto::Pointer pp;
      proto::ReplyHead ph;
      if (!link->Call(pm, &ph, &pp).ok() || ph.error) Die("malloc failed");
      grp.c.push_back({fmt::format("one async op + sync through a session, {}", Name(t)),
                       [link, ptr = pp.ptr] {
                         std::lock_guard<std::mutex> lk(link->mu());
                         proto::Memset op{.dst = ptr, .value = 0, .size = 0};
                         proto::StreamSync sync{};
                         proto::ReplyHead h;
                         proto::Empty none;
                         if (!link->Post(op).ok() || !link->Call(sync, &h, &none).ok() ||
                             h.async_error) {
                           Die("post and sync failed");
                         }
                         return 1.0;
                       }});
      grp.c.push_back({fmt::format("no-op call through a session, {}", Name(t)), [link] {
                         std::lock_guard<std::mutex> lk(link->mu());
                         proto::Ping ping;
                         proto::ReplyHead h;
                         proto::Empty none;
                         if (!link->Call(ping, &h, &none).ok()) Die("ping failed");
                         return 1.0;
                       }});
      const size_t session_noop = grp.c.size() - 1;
      // --clients: the same round trip and launches through the interception layers, and the
      // SGEMM loop (bench/layer_client.h). Indices into the group's contenders.
      size_t drv_sync = 0, rt_sync = 0, drv_launch = 0, rt_launch = 0, st_launch = 0, sgemm = 0;
      if (!f.clients.empty()) {
        Layers& l = LayersFor(f, t);
        auto add = [&grp](Contender c) {
          grp.c.push_back(std::move(c));
          return grp.c.size() - 1;
        };
        drv_sync = add(ClientCalls("cuCtxSynchronize, driver stand-in", l.driver, "sync"));
        rt_sync = add(ClientCalls("cudaDeviceSynchronize, NVIDIA shared runtime over driver stand-in",
                                  l.runtime, "sync"));
        drv_launch = add(ClientCalls("cuLaunchKernel, driver stand-in", l.driver, "launch"));
        rt_launch = add(ClientCalls("<<<>>> launch, NVIDIA shared runtime over driver stand-in",
                                    l.runtime, "launch"));
        if (l.blas) {
          st_launch = add(ClientCalls("<<<>>> launch, NVIDIA static runtime over driver stand-in",
                                      l.blas, "launch"));
          sgemm = add(ClientCalls(fmt::format("cublasSgemm {0}x{0}, cuBLAS over driver stand-in",
                                              f.sgemm), l.blas, "sgemm"));
        }
      }
      std::vector<double> rate;
      std::vector<double> r = RunGroup(grp, f.reps, f.min_time, &rate);
      std::printf("round trip, %s%s: no-op call through a session / %s = %.2fx (target <= 1.3x)\n",
                  Name(t), t == 1 ? fmt::format(" (UCX_TLS={})", tls ? tls : "unset").c_str() : "",
                  grp.c[0].name.c_str(), r[session_noop]);
      if (!f.clients.empty()) {
        // The driver layer's targets (issue 27), each against the peer of this same run.
        std::printf("driver layer, %s: cuCtxSynchronize through the driver stand-in / %s = %.2fx "
                    "(target <= 1.3x); cudaDeviceSynchronize through NVIDIA's shared runtime %.2fx\n",
                    Name(t), grp.c[0].name.c_str(), r[drv_sync], r[rt_sync]);
        std::printf("driver layer, %s: cuLaunchKernel %.2f M launches/s (target >= 0.5 M/s); "
                    "<<<>>> through NVIDIA's shared runtime %.2f M/s",
                    Name(t), rate[drv_launch] / 1e6, rate[rt_launch] / 1e6);
        if (st_launch) {
          std::printf("; NVIDIA's static runtime over the driver stand-in %.2f M/s",
                      rate[st_launch] / 1e6);
        }
        std::printf("\n");
        if (sgemm) {
          std::printf("driver layer, %s: cublasSgemm %dx%d through cuBLAS over the driver "
                      "stand-in: %.0f calls/s, %.2f us/call = %.2fx the raw round trip (%.2f us), "
                      "%.2fx a <<<>>> launch through NVIDIA's shared runtime (%.2f us)\n",
                      Name(t), f.sgemm, f.sgemm, rate[sgemm], 1e6 / rate[sgemm], r[sgemm],
                      1e6 / rate[0], rate[rt_launch] / rate[sgemm], 1e6 / rate[rt_launch]);
        }
        // Their sessions (UCX ones poll) would count in the idle figure below and load the copy
        // groups: the copies start driver_client alone again.
        g_layers.erase(t);
        StopClients();
      }
      std::fflush(stdout);
    }
    Group async{"async ops pipelined into a session (10,000 zero-byte memsets + 1 sync)", false, {}};
    for (int t : transports) {
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      proto::Malloc m{.size = 4096};
      proto::Pointer p;
      proto::ReplyHead h;
      if (!link->Call(m, &h, &p).ok() || h.error) Die("malloc failed");
      uint64_t ptr = p.ptr;
      async.c.push_back({fmt::format("async ops, {}", Name(t)), [link, ptr] {
                           std::lock_guard<std::mutex> lk(link->mu());
                           for (int i = 0; i < 10000; ++i) {
                             proto::Memset op{.dst = ptr, .value = 0, .size = 0};
                             if (!link->Post(op).ok()) Die("post failed");
                           }
                           proto::DeviceSync sync;
                           proto::ReplyHead h;
                           proto::Empty none;
                           if (!link->Call(sync, &h, &none).ok() || h.async_error) Die("sync failed");
                           return 10000.0;
                         }});
    }
    RunGroup(async, f.reps, f.min_time);
    // The plain ucp echo polls forever for its (now idle) client: stop it before the idle figure.
    if (g.plain_ucx_pid > 0) {
      kill(g.plain_ucx_pid, SIGKILL);
      waitpid(g.plain_ucx_pid, nullptr, 0);
      g.pids.erase(std::find(g.pids.begin(), g.pids.end(), g.plain_ucx_pid));
      g.plain_ucx_pid = -1;
    }
    // Idle cost: a connected session (one round trip done) left alone for 1 s; CPU and context
    // switches of all processes (client with its pump and transport helper threads, server,
    // session worker). A waiting thread that polls shows up here whatever the load.
    for (int t : transports) {
      std::shared_ptr<client::ServerLink> link = DriverLink(t);
      {
        std::lock_guard<std::mutex> lk(link->mu());
        proto::Ping ping;
        proto::ReplyHead h;
        proto::Empty none;
        if (!link->Call(ping, &h, &none).ok()) Die("ping failed");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // pump and helpers settle
      double vol0, invol0, vol1, invol1;
      AllSwitches(&vol0, &invol0);
      uint64_t sleeps0 = GetUcxWaitCounters().sleeps;
      double cpu0 = AllCpu();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      double cpu = AllCpu() - cpu0;
      AllSwitches(&vol1, &invol1);
      std::printf("idle connected session, %s: CPU %.2f ms per s (all processes), context switches "
                  "%.0f+%.0f per s, client ucx sleeps %.0f per s\n",
                  Name(t), cpu * 1e3, vol1 - vol0, invol1 - invol0,
                  static_cast<double>(GetUcxWaitCounters().sleeps - sleeps0));
    }
    std::fflush(stdout);
  }
  if (f.skip.find("bw") != std::string::npos) {
    g_layers.clear();
    StopClients();
    return 0;
  }
  // Copies of `size` bytes; below 4 MiB (one chunk) a step streams 4 MiB worth of them and syncs
  // once (d2h copies into "pinned" memory, asynchronous, as a program streaming small copies
  // would), against as many messages of `size` and one acknowledgement on the raw connection.
  // For the summary lines: the copy's ratio, and with --aa the second raw contender's, per cell.
  std::vector<std::pair<std::string, double>> cells, aa_cells, driver_cells;
  for (int t : transports) {
    // The table's sizes, or --size alone (any size: 128 KiB, say, where thresholds lie).
    std::vector<size_t> sizes = {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                                 size_t{256} << 20, size_t{1} << 30};
    if (!f.sizes.empty()) sizes = f.sizes;
    for (size_t size : sizes) {
      const size_t per_step = std::max(size, proto::kCopyChunkBytes) / size;
      const size_t total = size * per_step;
      for (bool d2h : {false, true}) {
        if (f.skip.find(d2h ? "d2h" : "h2d") != std::string::npos) continue;
        Group grp{fmt::format("{} {} copies of {} bytes{}", Name(t), d2h ? "d2h" : "h2d", size,
                              per_step > 1 ? fmt::format(", {} per sync", per_step) : ""),
                  true, {}};
        auto raw = DriverRaw(t);
        auto spread = std::make_shared<RawStreamer>(raw.get(), total, d2h, true, size);
        auto hot = std::make_shared<RawStreamer>(raw.get(), total, d2h, false, size);
        if (!spread->Run() || !spread->Landed()) {
          Die("raw stream's data did not arrive");
        }
        grp.c.push_back({"raw, buffers of the copy's size", [raw, spread, total] {
                           if (!spread->Run()) Die("raw stream failed");
                           return static_cast<double>(total);
                         }});
        grp.c.push_back({"raw, one cache-resident chunk", [raw, hot, total] {
                           if (!hot->Run()) Die("raw stream failed");
                           return static_cast<double>(total);
                         }});
        if (t == 1) {
          // The plain ucp stream (see StartPlainUcxStream): the second peer, printed as "vs #3".
          PlainStreamClient* plain = PlainStreamClient::Get();
          if (plain == nullptr) Die("plain ucp stream setup failed");
          auto buf = std::make_shared<std::vector<std::byte>>(
              total, d2h ? std::byte{0} : kPlainStreamFill);
          if (!plain->Run(buf->data(), total, std::min(size, proto::kCopyChunkBytes), d2h) ||
              (*buf)[0] != kPlainStreamFill || (*buf)[total - 1] != kPlainStreamFill) {
            Die("plain ucp stream's data did not arrive");
          }
          grp.second = static_cast<int>(grp.c.size());
          grp.c.push_back({"plain ucp stream, all in flight", [plain, buf, total, size, d2h] {
                             if (!plain->Run(buf->data(), total,
                                             std::min(size, proto::kCopyChunkBytes), d2h)) {
                               Die("plain ucp stream failed");
                             }
                             return static_cast<double>(total);
                           }});
        }
        // --aa: the first contender again, same code and buffers, right before the copy (so as
        // far from the first in each repetition's order as the copy): its ratio to the first is
        // what the method reports between two identical contenders.
        const size_t aa_index = grp.c.size();
        if (f.aa) grp.c.push_back({"raw again (A/A), copy's size", grp.c[0].step});
        std::shared_ptr<client::ServerLink> link = DriverLink(t);
        proto::Malloc m{.size = total};
        proto::Pointer p;
        proto::ReplyHead h;
        if (!link->Call(m, &h, &p).ok() || h.error) Die("malloc failed");
        auto host = std::make_shared<std::vector<std::byte>>(total, std::byte{3});
        uint64_t ptr = p.ptr;
        if (d2h) {
          // Fill the device memory first (untimed), as a program's results would be: never
          // written, emulated memory reads back from the kernel's shared zero page, which stays in
          // the CPU caches and made the server's side of a copy cheaper than the raw echo's
          // (which sends from a written buffer of the same size).
          proto::Ping ping;
          proto::Empty none;
          if (!link->CopyToDevice(ptr, *host, 0).ok() || !link->Call(ping, &h, &none).ok() ||
              h.async_error) {
            Die("filling device memory failed");
          }
        }
        const size_t session_copy = grp.c.size();
        grp.c.push_back({"copy through a session", [link, host, ptr, total, size, per_step, d2h] {
                           std::lock_guard<std::mutex> lk(link->mu());
                           proto::ReplyHead h;
                           Status s;
                           if (d2h && per_step == 1) {
                             s = link->CopyFromDevice(host->data(), ptr, total, 0, &h);
                           } else {
                             for (size_t i = 0; i < per_step && s.ok(); ++i) {
                               s = d2h ? link->CopyFromDevice(host->data() + i * size, ptr + i * size,
                                                              size, 0, &h, /*async=*/true)
                                       : link->CopyToDevice(ptr + i * size,
                                                            ByteSpan(host->data() + i * size, size), 0);
                             }
                             // As the program's cudaStreamSynchronize(0) (ServerLink::SyncStream:
                             // after reads, answered by their replies; after writes, a round trip).
                             if (s.ok()) s = link->SyncStream(0, 0, &h);
                           }
                           if (!s.ok() || h.error || h.async_error) Die("copy failed");
                           return static_cast<double>(total);
                         }});
        size_t driver_copy = 0;
        if (!f.clients.empty()) {
          // The same copies through the driver stand-in (driver_client's h2d/d2h: cuMemcpyHtoD,
          // cuMemcpyDtoH, cuMemcpyDtoHAsync into page-locked memory), a command repeating the
          // step up to >= 64 MiB so that the pipe's round trip per command stays negligible.
          auto c = LayersFor(f, t, /*driver_only=*/true).driver;
          const size_t repeat = std::max<size_t>(1, (size_t{64} << 20) / total);
          const std::string line =
              fmt::format("{} {} {} {}", d2h ? "d2h" : "h2d", size, per_step, repeat);
          if (!c->Do(fmt::format("{} {} {} 1", d2h ? "d2h" : "h2d", size, per_step))) {
            Die(c->name() + ": " + line + " failed");  // allocates and fills, untimed
          }
          driver_copy = grp.c.size();
          grp.c.push_back({"copy through the driver stand-in", [c, line, total, repeat] {
                             if (!c->Do(line)) Die(c->name() + ": '" + line + "' failed");
                             return static_cast<double>(total * repeat);
                           }});
        }
        std::vector<double> r = RunGroup(grp, f.reps, f.min_time);
        const double copy = r[session_copy];
        if (driver_copy) {
          driver_cells.emplace_back(CellName(t, d2h, size, r[driver_copy]), r[driver_copy]);
        }
        cells.emplace_back(CellName(t, d2h, size, copy), copy);
        if (f.aa) aa_cells.emplace_back(CellName(t, d2h, size, r[aa_index]), r[aa_index]);
      }
    }
  }
  if (!cells.empty()) {
    PrintCells(
        "copies through a session / raw, buffers of the copy's size (target >= 0.95)",
        "met", cells);
  }
  if (!driver_cells.empty()) {
    PrintCells("driver layer, copies through the driver stand-in / raw, buffers of the copy's size "
               "(target >= 0.95)", "met", driver_cells);
  }
  if (!aa_cells.empty()) {
    PrintCells("A/A calibration", ">= 0.95 (the method's own false-miss rate on this host)",
               aa_cells);
  }
  g_layers.clear();  // the programs exit at the end of their input
  StopClients();
  return 0;
}

}  // namespace
}  // namespace gpool::remote

int main(int argc, char** argv) {
  using namespace gpool::remote;  // NOLINT
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
