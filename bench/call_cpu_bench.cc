// The CPU cost of one call at each end, without a transport: each end runs over a scripted
// connection (each receive hands it the same pre-encoded message, each send only counts), so
// what is timed is gpool's own work: on the server, the session's receive loop, parse, dispatch,
// reply encoding and send call; on the client, ServerLink::Call's encoding, send call, reply
// parse and decode. On a round trip both sit between a message's arrival and the next one's
// departure, so they add to the latency as they are (remote_bench's "no-op call through a
// session" against "gpool ... Connection echo").
//   BM_SessionPing   the server's side of a synchronous no-op (Ping): request in, reply out
//   BM_LinkPing      the client's side: ServerLink::Call(Ping), reply scripted
//   BM_ScriptedEcho  the scripted connection alone: receive the message, send it back (the floor)
// Reported per call (ns/call), in CPU time, so this VM's latency noise does not enter.
// Run: build/bench/call_cpu_bench
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "remote/client/link.h"
#include "remote/protocol/messages.h"
#include "remote/server/backend.h"
#include "remote/server/session.h"
#include "remote/transport/transport.h"

namespace gpool::remote {
namespace {

// Hands out `message` `count` times, then reports the peer gone (which ends Serve with OK).
class ScriptedConnection final : public Connection {
 public:
  ScriptedConnection(std::vector<std::byte> message, int64_t count)
      : message_(std::move(message)), left_(count) {}
  Status Send(std::span<const ByteSpan> parts) override {
    for (const ByteSpan& p : parts) sent_bytes_ += p.size();
    return Status::Ok();
  }
  Status Recv(std::vector<std::byte>* message) override {
    if (left_-- <= 0) return Status::Unavailable("script done");
    message->resize(message_.size());
    std::memcpy(message->data(), message_.data(), message_.size());
    return Status::Ok();
  }
  void Close() override {}
  std::string peer() const override { return "script"; }
  uint64_t sent_bytes() const { return sent_bytes_; }

 private:
  std::vector<std::byte> message_;
  int64_t left_;
  uint64_t sent_bytes_ = 0;
};

std::vector<std::byte> Encoded(proto::BatchWriter& w) {
  wire::ByteSpan m = w.Finish();
  return std::vector<std::byte>(m.begin(), m.end());
}

std::unique_ptr<server::Backend> Emulated() {
  auto b = server::MakeEmulatedBackend({.memory_bytes = uint64_t{64} << 20});
  if (!b.ok()) std::abort();
  return std::move(*b);
}

// Serves kPerIteration copies of `message` per benchmark iteration through one new session.
void ServeScript(benchmark::State& state, const std::vector<std::byte>& message) {
  constexpr int frames = 1;
  constexpr int64_t kPerIteration = 20000;
  std::unique_ptr<server::Backend> backend = Emulated();
  uint64_t sent = 0;
  for (auto _ : state) {
    auto conn = std::make_unique<ScriptedConnection>(message, kPerIteration);
    ScriptedConnection* c = conn.get();
    server::Session s(1, std::move(conn), backend.get(), {});
    Status st = s.Run();
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    sent += c->sent_bytes();
  }
  state.SetItemsProcessed(state.iterations() * kPerIteration * frames);
  state.counters["ns/call"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kPerIteration * frames),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["reply B/call"] =
      static_cast<double>(sent) / static_cast<double>(state.iterations() * kPerIteration * frames);
}

void BM_SessionPing(benchmark::State& state) {
  proto::BatchWriter w;
  proto::Ping ping;
  w.AddRequest(ping);
  ServeScript(state, Encoded(w));
}

void BM_LinkPing(benchmark::State& state) {
  proto::BatchWriter w;
  proto::ReplyHead head;
  proto::Empty none;
  w.AddReply(static_cast<uint16_t>(proto::Op::kPing), head, none);
  auto conn = std::make_unique<ScriptedConnection>(Encoded(w), INT64_MAX);
  auto link = client::ServerLink::OverConnection(std::move(conn), "script");
  if (!link.ok()) {
    state.SkipWithError(link.status().ToString().c_str());
    return;
  }
  client::ServerLink& l = **link;
  for (auto _ : state) {
    std::lock_guard<std::mutex> lk(l.mu());
    proto::Ping ping;
    proto::ReplyHead h;
    proto::Empty body;
    Status s = l.Call(ping, &h, &body);
    if (!s.ok() || h.error != 0) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.counters["ns/call"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_ScriptedEcho(benchmark::State& state) {
  constexpr int64_t kPerIteration = 20000;
  proto::BatchWriter w;
  proto::Ping ping;
  w.AddRequest(ping);
  std::vector<std::byte> message = Encoded(w);
  std::vector<std::byte> in;
  for (auto _ : state) {
    ScriptedConnection c(message, kPerIteration);
    while (c.Recv(&in).ok()) {
      if (!static_cast<Connection&>(c).Send(wire::ByteSpan(in.data(), in.size())).ok()) break;
    }
    benchmark::DoNotOptimize(c.sent_bytes());
  }
  state.counters["ns/call"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kPerIteration),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_SessionPing)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();
BENCHMARK(BM_LinkPing)->MeasureProcessCPUTime();
BENCHMARK(BM_ScriptedEcho)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

}  // namespace
}  // namespace gpool::remote

BENCHMARK_MAIN();
