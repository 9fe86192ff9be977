// remote_bench's spawned peers (bench/remote_bench/internal.h lists the files): the emulated
// gpu-server, the bare gpool transport echo with RawStreamer (its client: the raw streams the
// copies are held to), and the plain TCP socket echo (the round trip's floor). Each runs in a
// child process forked before any thread starts (Spawn). The plain ucp peers are in plain_ucp.cc.
// Apart from the drivers: this is the far end of every figure, the same for both drivers;
// RawStreamer sits here because it speaks the echo's protocol.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <thread>

#include "remote_bench/internal.h"

#include "remote/server/server.h"

namespace gpool::remote::remote_bench {

Servers g;

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
// 0.12 s/GB for the copy); the peer was slow, not the copy fast.
void HugeBuffer::Assign(size_t n, std::byte fill) {
  if (data != nullptr) munmap(data, size);
  size = (std::max<size_t>(n, 1) + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  (void)madvise(p, size, MADV_HUGEPAGE);
  data = static_cast<std::byte*>(p);
  std::memset(data, static_cast<int>(fill), size);
}

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

const std::string& GpuAddr(int transport) { return transport == 0 ? g.gpu_tcp : g.gpu_ucx; }
const std::string& EchoAddr(int transport) { return transport == 0 ? g.echo_tcp : g.echo_ucx; }
const char* Name(int transport) { return transport == 0 ? "tcp" : "ucx"; }

// RawStreamer (internal.h): the echo's client side of {2|3|4, n, size} above.
RawStreamer::RawStreamer(Connection* conn, size_t total_bytes, bool to_host, bool spread_out,
                         size_t chunk_bytes)
    : c(conn), total(total_bytes), chunk(std::min({total_bytes, chunk_bytes, size_t{4} << 20})),
      d2h(to_host),
      spread(spread_out) {
  buf.assign(spread ? std::max<size_t>(total, 1024) : std::max<size_t>(chunk, 1024), std::byte{0});
}

bool RawStreamer::Landed() const {
  std::byte want{spread ? uint8_t{6} : uint8_t{5}};
  return !d2h || !spread || (buf[0] == want && buf[total - 1] == want);
}

bool RawStreamer::Run() {
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

}  // namespace gpool::remote::remote_bench
