// CUDA remoting speed, each figure beside its raw peer on the same transport in the same run:
//   BM_PlainTcpPingPong   48 bytes echoed over a plain TCP socket (no framing: the TCP floor)
//   BM_RawPingPong        small message echoed by a bare gpool transport server
//   BM_NoopRoundTrip      a synchronous no-op (Ping) through an emulated gpu-server session
//   BM_AsyncOps           asynchronous requests pipelined into a session (zero-byte memsets, the
//                         launch path's protocol cost), then one sync; items/s = ops/s
//   BM_RawStream          one-way bulk messages of 4 MiB over the bare transport (the floor)
//   BM_Copy (h2d / d2h)   cudaMemcpy-sized copies through a session, 64 KiB .. 1 GiB, after one
//                         untimed copy that faults the emulated device memory in
// Servers run in child processes forked before any thread starts. Transport: tcp, or ucx (set
// UCX_TLS, e.g. UCX_TLS=shm,self for shared memory). See docs/benchmarks.md "## Remoting".
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "remote/client/link.h"
#include "remote/server/server.h"
#include "remote/transport/socket.h"
#include "remote/transport/transport.h"

namespace gpool::remote {
namespace {

struct Servers {
  std::string gpu_tcp, gpu_ucx, echo_tcp, echo_ucx, plain_tcp;
  std::vector<pid_t> pids;
} g;

// A child that runs `body(write_fd)`; the parent reads one line (the address) back.
std::string Spawn(const std::function<void(int)>& body) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    body(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  g.pids.push_back(pid);
  char buf[256] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string StartGpuServer(const std::string& transport) {
  return Spawn([&](int fd) {
    server::ServerOptions o;
    o.transport = transport;
    o.emulated.memory_bytes = uint64_t{4} << 30;
    server::GpuServer s(o);
    if (!s.Start().ok()) _exit(1);
    std::string a = s.address();
    if (write(fd, a.data(), a.size()) < 0) _exit(1);
    close(fd);
    (void)s.Serve();
  });
}

// Echo server: replies to each message with a copy of it, except messages of >= 1 KiB, which
// are counted and acknowledged with 1 byte only when their first byte is 1 (end of a burst);
// a 17-byte request {2, u64 n, u64 size} asks for a burst of n messages of `size` bytes back.
std::string StartEcho(const std::string& transport) {
  return Spawn([&](int fd) {
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
        std::vector<std::byte> m;
        std::vector<std::byte> burst(4 << 20, std::byte{5});
        std::byte one{1};
        while (conn->Recv(&m).ok()) {
          if (m.size() == 17 && m[0] == std::byte{2}) {
            uint64_t n, size;
            std::memcpy(&n, m.data() + 1, 8);
            std::memcpy(&size, m.data() + 9, 8);
            size = std::min<uint64_t>(size, burst.size());
            for (uint64_t i = 0; i < n; ++i) (void)conn->Send(ByteSpan(burst.data(), size));
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

// The floor under everything: a plain TCP socket echoing fixed 48-byte messages (one recv and
// one send per message, no framing), as a hand-written RPC would do it.
std::string StartPlainEcho() {
  return Spawn([&](int fd) {
    auto l = net::ListenTcp("127.0.0.1:0");
    if (!l.ok()) _exit(1);
    std::string a = net::LocalAddress(l->get());
    if (write(fd, a.data(), a.size()) < 0) _exit(1);
    close(fd);
    for (;;) {
      auto c = net::AcceptTcp(l->get());
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

void BM_RawStream(benchmark::State& state) {
  auto c = RawConn(state, static_cast<int>(state.range(0)));
  if (!c) return;
  size_t total = static_cast<size_t>(state.range(1));
  bool d2h = state.range(2) != 0;
  size_t chunk = std::min(total, size_t{4} << 20);
  std::vector<std::byte> buf(std::max<size_t>(chunk, 1024), std::byte{0}), in;
  for (auto _ : state) {
    size_t n = (total + chunk - 1) / chunk;
    if (d2h) {
      std::vector<std::byte> req(17, std::byte{2});
      uint64_t k = n, size = chunk;
      std::memcpy(req.data() + 1, &k, 8);
      std::memcpy(req.data() + 9, &size, 8);
      (void)c->Send(req);
      for (size_t i = 0; i < n; ++i) (void)c->Recv(&in);
    } else {
      for (size_t i = 0; i < n; ++i) {
        buf[0] = std::byte{i + 1 == n ? uint8_t{1} : uint8_t{0}};
        (void)c->Send(ByteSpan(buf.data(), buf.size()));
      }
      (void)c->Recv(&in);
    }
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(total));
  state.SetLabel(fmt::format("{} {}", Name(static_cast<int>(state.range(0))), d2h ? "d2h" : "h2d"));
}

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
      if (s.ok()) s = l->Call(ping, &h, &none);  // the copy is done when this returns
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
        for (auto* fn : {&BM_RawStream, &BM_Copy}) {
          benchmark::RegisterBenchmark(fn == &BM_Copy ? "BM_Copy" : "BM_RawStream", fn)
              ->Args({t, size, d2h})
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

BENCHMARK(BM_AsyncOps)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace
}  // namespace gpool::remote

int main(int argc, char** argv) {
  using namespace gpool::remote;  // NOLINT
  signal(SIGPIPE, SIG_IGN);
  g.gpu_tcp = StartGpuServer("tcp");
  g.echo_tcp = StartEcho("tcp");
  g.gpu_ucx = StartGpuServer("ucx");
  g.echo_ucx = StartEcho("ucx");
  g.plain_tcp = StartPlainEcho();
  RegisterPairs();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (pid_t p : g.pids) kill(p, SIGKILL);
  for (pid_t p : g.pids) waitpid(p, nullptr, 0);
  return 0;
}
