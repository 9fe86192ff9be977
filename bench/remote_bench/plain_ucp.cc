// remote_bench's plain ucp peers (bench/remote_bench/internal.h lists the files): no gpool code,
// only ucp calls (bench/plain_ucx.h), the UCX floors gpool's UCX figures are held to. The tag
// ping-pong echo is the round trip's peer; the bulk stream (server and the driver's client) is
// the copies' second peer. Both are --interleaved only; the servers run in spawned processes.
// Apart from peers.cc because nothing here may use gpool's transport: it is the floor.
#include <unistd.h>

#include <cstdint>

#include "remote_bench/internal.h"

namespace gpool::remote::remote_bench {
namespace {

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

}  // namespace

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
PlainStreamClient* PlainStreamClient::Get() {
  static PlainStreamClient* c = [] {
    auto* p = new PlainStreamClient;
    auto fd = net::ConnectTcp(g.plain_ucx_stream);
    if (!fd.ok() || !p->u.Init() || !p->u.Wire(fd->get())) return static_cast<PlainStreamClient*>(nullptr);
    p->fd = std::move(*fd);
    return p;
  }();
  return c;
}

bool PlainStreamClient::Run(std::byte* buf, size_t total, size_t size, bool d2h) {
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

}  // namespace gpool::remote::remote_bench
