// The controller's HTTP server: cpp-httplib's routing and request parsing behind a gate that
// keeps slow or numerous clients from taking /metrics, /api/* and the dashboard down.
//
// Why not httplib's own connection handling: it gives every connection a thread from a fixed
// pool (8 here) for the connection's whole life, and its read timeout is per recv(), so a
// client sending one header line every few seconds holds a thread indefinitely; 64 such
// clients stopped every route. cpp-httplib 0.11 (Debian 12) has no whole-request deadline and
// no per-peer cap. So this class overrides its one per-connection hook
// (process_and_close_socket) and does the socket work itself, in one poll() thread (the gate):
//   - each accepted connection is counted per peer address and in total; over
//     max_connections_per_peer the peer's oldest connection still waiting for its request is
//     closed to make room (an idle keep-alive or a stalled one; none waiting: the new one is
//     refused), over max_connections the new one gets 503;
//   - the gate reads requests without blocking; a request (head and body) must be complete
//     within request_timeout of the connection's start or of its previous response, else 408
//     and close (an idle keep-alive connection is closed silently at the same time). Heads over
//     max_head_bytes are 431, bodies over max_body_bytes 413, chunked bodies 411 (no route takes
//     a body; Content-Length only);
//   - only a complete request goes to a worker thread, which runs httplib's parser and the
//     handler over the bytes in memory and renders the response in memory; the gate writes it
//     out without blocking, within request_timeout too (a client that does not read is closed).
// A slow client therefore costs a file descriptor and a few KiB, never a thread.
//
// Limits: IPv4/IPv6 peers are told apart by address only (clients behind one NAT or proxy share
// its cap); a response waits in memory until its client read it or timed out; requests must end
// their header lines with CRLF (RFC 9112; bare LF heads never complete, then 408).
//
// Thread safety: register routes before listening (httplib's rule); Shutdown() after stop()
// returned and the listening thread was joined (the destructor does it).
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "control/http_limits.h"

namespace gpool::control {

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits = {});
  ~HttpServer() override;
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // bind_to_port (port 0: any free port), then a listen backlog of kListenBacklog instead of
  // httplib's 5, which a burst of connections overflows (the kernel then drops SYNs, and even
  // well-behaved clients wait a second or more to connect). Returns the port, or -1.
  static constexpr int kListenBacklog = 1024;
  int Bind(const std::string& host, int port);

  // Closes every connection and joins the gate and the workers. Idempotent.
  void Shutdown();

  // One connection's input, as the gate and a worker would handle it, without a socket: every
  // complete request in `input` is answered in order, an over-limit one with the gate's error
  // (then the connection would close), an incomplete tail is ignored. Returns the bytes the
  // client would read. For the fuzz target (fuzz/http_api_fuzz.cc) and tests.
  std::string HandleBytes(std::string_view input, const std::string& peer = "127.0.0.1");

 private:
  struct Conn;
  // A request's place in a buffer: complete (its total size), incomplete, or refused.
  struct Framing {
    enum class Kind { kNeedMore, kComplete, kRefuse } kind = Kind::kNeedMore;
    size_t size = 0;  // kComplete: head + body bytes
    int status = 0;   // kRefuse: the HTTP status, and why
    std::string why;
  };
  static Framing Frame(std::string_view buf, const HttpLimits& limits);
  static std::string ErrorResponse(int status, const std::string& why);

  // httplib's per-connection hook, run for each accepted socket (on the listening thread: the
  // task queue runs it inline). Hands the socket to the gate.
  bool process_and_close_socket(socket_t sock) override;

  // Runs one complete request through httplib; returns the response bytes, and whether the
  // connection may stay open.
  std::string Serve(std::string_view request, const std::string& peer, int port, bool last,
                    bool* keep_open);
  void GateLoop();
  void WorkerLoop();
  void Wake();

  const HttpLimits limits_;
  int wake_fd_ = -1;  // eventfd: new or served connections, shutdown

  std::mutex mu_;
  std::condition_variable work_cv_;
  bool stopping_ = false;
  std::vector<int> accepted_;        // mu_: sockets not yet seen by the gate
  std::deque<Conn*> ready_;          // mu_: complete requests for the workers
  std::vector<Conn*> served_;        // mu_: answered, back to the gate

  // The gate thread's own.
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::map<std::string, size_t> per_peer_;
  uint64_t next_order_ = 0;

  std::thread gate_;
  std::vector<std::thread> workers_;
};

}  // namespace gpool::control
