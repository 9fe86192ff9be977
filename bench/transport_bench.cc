// Transport speed against raw peers measured in the same run:
//   RawTcp*      a plain blocking-socket loop (TCP_NODELAY, fixed-size messages, no framing);
//   RawUcp*      a plain ucp tag loop between two workers in this process (UCX_TLS as set);
//   Conn*        gpool Connections: tcp (no striping, and striped over 2 extra streams) and ucx.
// PingPong/<bytes>: one round trip per iteration (a message each way), reported as time/iter.
// Stream/<bytes>: one message one way plus a 1-byte ack, reported as bytes_per_second.
// Run: build-rbase/bench/transport_bench [--benchmark_filter=...]; UCX variants take UCX_TLS from
// the GPOOL_BENCH_UCX_TLS environment variable (default "tcp"; try "posix,sysv,self").
#include <benchmark/benchmark.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "remote/transport/socket.h"
#include "remote/transport/transport.h"

namespace gpool::remote {
namespace {

std::string UcxTls() {
  const char* v = std::getenv("GPOOL_BENCH_UCX_TLS");
  return v != nullptr ? v : "tcp";
}

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "transport_bench: %s\n", s.ToString().c_str());
    std::abort();
  }
}

// ---- raw TCP -------------------------------------------------------------------------------

struct RawTcpPair {
  net::Fd client, server;
  RawTcpPair() {
    auto l = net::ListenTcp("127.0.0.1:0");
    Check(l.status());
    std::string addr = net::LocalAddress(l->get());
    std::thread t([&] { server = std::move(*net::AcceptTcp(l->get())); });
    auto c = net::ConnectTcp(addr);
    Check(c.status());
    client = std::move(*c);
    t.join();
  }
};

// Echo (reply_bytes == 0) or ack with reply_bytes bytes after each `request_bytes` message.
void RawServer(int fd, size_t request_bytes, size_t reply_bytes, std::atomic<bool>* stop) {
  std::vector<char> buf(request_bytes);
  while (!stop->load()) {
    if (!net::ReadAll(fd, buf.data(), buf.size(), "client").ok()) return;
    size_t n = reply_bytes == 0 ? request_bytes : reply_bytes;
    if (!net::WriteAll(fd, buf.data(), n, "client").ok()) return;
  }
}

void RunRawTcp(benchmark::State& state, bool stream) {
  size_t bytes = static_cast<size_t>(state.range(0));
  size_t reply = stream ? 1 : 0;
  RawTcpPair p;
  std::atomic<bool> stop{false};
  std::thread server(RawServer, p.server.get(), bytes, reply, &stop);
  std::vector<char> buf(bytes, 'x');
  for (auto _ : state) {
    Check(net::WriteAll(p.client.get(), buf.data(), bytes, "server"));
    Check(net::ReadAll(p.client.get(), buf.data(), stream ? 1 : bytes, "server"));
  }
  stop = true;
  ::shutdown(p.client.get(), SHUT_RDWR);
  server.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * (stream ? 1 : 2)));
}

void BM_RawTcpPingPong(benchmark::State& s) { RunRawTcp(s, false); }
void BM_RawTcpStream(benchmark::State& s) { RunRawTcp(s, true); }

// ---- raw ucp -------------------------------------------------------------------------------

struct RawUcp {
  ucp_context_h ctx = nullptr;
  ucp_worker_h w[2] = {nullptr, nullptr};
  ucp_ep_h ep[2] = {nullptr, nullptr};  // ep[i] sends from worker i to the other

  RawUcp() {
    ucp_config_t* cfg = nullptr;
    ucp_config_read(nullptr, nullptr, &cfg);
    ucp_config_modify(cfg, "TLS", UcxTls().c_str());
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    if (ucp_init(&p, cfg, &ctx) != UCS_OK) std::abort();
    ucp_config_release(cfg);
    ucp_address_t* addr[2];
    size_t len[2];
    for (int i = 0; i < 2; ++i) {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;
      if (ucp_worker_create(ctx, &wp, &w[i]) != UCS_OK) std::abort();
      ucp_worker_get_address(w[i], &addr[i], &len[i]);
    }
    for (int i = 0; i < 2; ++i) {
      ucp_ep_params_t ep_params{};
      ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep_params.address = addr[1 - i];
      if (ucp_ep_create(w[i], &ep_params, &ep[i]) != UCS_OK) std::abort();
    }
    for (int i = 0; i < 2; ++i) ucp_worker_release_address(w[i], addr[i]);
  }
  ~RawUcp() {
    for (int i = 0; i < 2; ++i) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep[i], &p);
      if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w[i]);
        ucp_request_free(r);
      }
    }
    for (auto* x : w) ucp_worker_destroy(x);
    ucp_cleanup(ctx);
  }
  void Wait(int i, void* r) {
    if (r == nullptr) return;
    if (UCS_PTR_IS_ERR(r)) std::abort();
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w[i]);
    ucp_request_free(r);
  }
};

// Each side runs in its own thread, progressing its own worker, as two processes would.
void RunRawUcp(benchmark::State& state, bool stream) {
  size_t bytes = static_cast<size_t>(state.range(0));
  RawUcp u;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> target{-1};
  std::thread server([&] {
    std::vector<char> buf(bytes);
    ucp_request_param_t p{};
    int64_t done = 0;
    for (;;) {
      void* r = ucp_tag_recv_nbx(u.w[1], buf.data(), bytes, 1, ~0ull, &p);
      while (ucp_request_check_status(r) == UCS_INPROGRESS) {
        ucp_worker_progress(u.w[1]);
        if (stop.load() && done >= target.load()) {
          ucp_request_cancel(u.w[1], r);
        }
      }
      bool cancelled = ucp_request_check_status(r) != UCS_OK;
      ucp_request_free(r);
      if (cancelled) return;
      ++done;
      u.Wait(1, ucp_tag_send_nbx(u.ep[1], buf.data(), stream ? 1 : bytes, 2, &p));
    }
  });
  std::vector<char> buf(bytes, 'x');
  ucp_request_param_t p{};
  int64_t n = 0;
  for (auto _ : state) {
    u.Wait(0, ucp_tag_send_nbx(u.ep[0], buf.data(), bytes, 1, &p));
    u.Wait(0, ucp_tag_recv_nbx(u.w[0], buf.data(), bytes, 2, ~0ull, &p));
    ++n;
  }
  target = n;
  stop = true;
  server.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * (stream ? 1 : 2)));
  state.SetLabel("UCX_TLS=" + UcxTls());
}

void BM_RawUcpPingPong(benchmark::State& s) { RunRawUcp(s, false); }
void BM_RawUcpStream(benchmark::State& s) { RunRawUcp(s, true); }

// ---- gpool Connections -----------------------------------------------------------------------

void RunConn(benchmark::State& state, const std::string& name, int data_streams, bool stream) {
  size_t bytes = static_cast<size_t>(state.range(0));
  TransportOptions o;
  o.tcp_data_streams = data_streams;
  o.ucx_tls = UcxTls();
  auto t = MakeTransport(name, o);
  Check(t.status());
  auto l = (*t)->Listen("127.0.0.1:0");
  Check(l.status());
  std::unique_ptr<Connection> server;
  std::thread accept([&] { server = std::move(*(*l)->Accept()); });
  auto c = (*t)->Connect((*l)->address());
  Check(c.status());
  std::unique_ptr<Connection> client = std::move(*c);
  accept.join();
  std::thread echo([&] {
    std::vector<std::byte> m;
    std::byte ack[1] = {};
    while (server->Recv(&m).ok()) {
      Status s = stream ? server->Send(ByteSpan(ack, 1)) : server->Send(ByteSpan(m));
      if (!s.ok()) return;
    }
  });
  std::vector<std::byte> msg(bytes, std::byte{'x'}), reply;
  for (auto _ : state) {
    Check(client->Send(ByteSpan(msg)));
    Check(client->Recv(&reply));
  }
  client->Close();
  echo.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes * (stream ? 1 : 2)));
  if (name == "ucx") state.SetLabel("UCX_TLS=" + UcxTls());
}

void BM_ConnTcpPingPong(benchmark::State& s) { RunConn(s, "tcp", 0, false); }
void BM_ConnUcxPingPong(benchmark::State& s) { RunConn(s, "ucx", 0, false); }
void BM_ConnTcpStream(benchmark::State& s) { RunConn(s, "tcp", 0, true); }
void BM_ConnTcpStripedStream(benchmark::State& s) { RunConn(s, "tcp", 2, true); }
void BM_ConnUcxStream(benchmark::State& s) { RunConn(s, "ucx", 0, true); }

void PingSizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {8, 1024, 65536}) b->Arg(n);
  b->UseRealTime();
}
void StreamSizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{64} << 10, int64_t{1} << 20, int64_t{16} << 20, int64_t{256} << 20})
    b->Arg(n);
  b->UseRealTime();
}

BENCHMARK(BM_RawTcpPingPong)->Apply(PingSizes);
BENCHMARK(BM_ConnTcpPingPong)->Apply(PingSizes);
BENCHMARK(BM_RawUcpPingPong)->Apply(PingSizes);
BENCHMARK(BM_ConnUcxPingPong)->Apply(PingSizes);
BENCHMARK(BM_RawTcpStream)->Apply(StreamSizes);
BENCHMARK(BM_ConnTcpStream)->Apply(StreamSizes);
BENCHMARK(BM_ConnTcpStripedStream)->Apply(StreamSizes);
BENCHMARK(BM_RawUcpStream)->Apply(StreamSizes);
BENCHMARK(BM_ConnUcxStream)->Apply(StreamSizes);

}  // namespace
}  // namespace gpool::remote

BENCHMARK_MAIN();
