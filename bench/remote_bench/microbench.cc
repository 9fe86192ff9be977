// remote_bench's Google Benchmark figures (bench/remote_bench/internal.h lists the files; the
// head of bench/remote_bench.cc says what each BM_ measures): each registered right after its raw
// peer on the same transport, so that the pair runs under the same load. The servers are spawned
// by main before these run.
// Apart from --interleaved: Google Benchmark's runner shares only the peers with it.
#include <algorithm>
#include <mutex>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "remote_bench/internal.h"

#include "remote/client/link.h"

namespace gpool::remote::remote_bench {
namespace {

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

// The raw peers of the copies: one bulk transfer per iteration over the bare transport
// (RawStreamer), from and into a reused 4 MiB buffer or, `spread`, buffers of the copy's size.
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

BENCHMARK(BM_AsyncOps)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

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

}  // namespace gpool::remote::remote_bench
