#include "remote/server/server.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "common/log.h"
#include "remote/lease/lease.h"
#include "remote/protocol/messages.h"

namespace gpool::remote::server {
namespace {

constexpr int kWorkerStartTimeoutMs = 30000;
constexpr unsigned kAttachTimeoutS = 30;

std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string PortOf(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(colon + 1);
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Status SendHelloReply(Connection* c, proto::ReplyHead head, proto::HelloReply body) {
  proto::BatchWriter w;
  w.AddReply(static_cast<uint16_t>(proto::Op::kHello), head, body);
  return c->Send(w.Finish());
}

}  // namespace

std::string DataAddressFor(const std::string& worker_address, const std::string& control_local,
                           const std::string& advertise) {
  std::string host = HostOf(worker_address);
  if (!advertise.empty()) {
    host = HostOf(advertise);
  } else if (IsWildcardHost(host) && !control_local.empty() && control_local != "?") {
    host = HostOf(control_local);
  }
  return host + ":" + PortOf(worker_address);
}

GpuServer::GpuServer(ServerOptions options) : o_(std::move(options)) {}
GpuServer::~GpuServer() { Stop(); }

Status GpuServer::Start() {
  if (o_.transport != "tcp" && o_.transport != "ucx") {
    return Status::InvalidArgument(fmt::format("--transport {}: want tcp or ucx", o_.transport));
  }
  if (o_.backend != "emulated" && o_.backend != "cuda") {
    return Status::InvalidArgument(fmt::format("--backend {}: want cuda or emulated", o_.backend));
  }
  GPOOL_ASSIGN_OR_RETURN(control_transport_, MakeTransport("tcp", {.max_message_bytes = 1 << 20}));
  GPOOL_ASSIGN_OR_RETURN(listener_, control_transport_->Listen(o_.listen));
  if (o_.emulated.address_hint == 0) {
    // Each server's emulated memory gets its own address range (by port), so that a client
    // aggregating several servers sees distinct device pointers.
    std::string a = listener_->address();
    uint64_t port = std::strtoull(a.substr(a.rfind(':') + 1).c_str(), nullptr, 10);
    o_.emulated.address_hint = (uint64_t{16} << 40) + (port % 1024) * (uint64_t{64} << 30);
  }
  // Compute shares are enforced across the workers through state they inherit at fork.
  GPOOL_ASSIGN_OR_RETURN(arbiter_, ShareArbiter::Create({}));
  // Workers are reaped by the kernel; the server never waits for them (and the arbiter sees a
  // dead worker's pid gone at once).
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = SA_NOCLDWAIT;
  sigaction(SIGCHLD, &sa, nullptr);
  return Status::Ok();
}

std::string GpuServer::address() const { return listener_ ? listener_->address() : ""; }

void GpuServer::Stop() {
  stop_ = true;
  if (listener_) listener_->Close();
}

Status GpuServer::Serve() {
  while (!stop_) {
    auto conn = listener_->Accept();
    if (!conn.ok()) {
      if (stop_) return Status::Ok();
      return conn.status();
    }
    Status s = HandleClient(std::move(*conn));
    if (!s.ok()) GPOOL_LOG_WARN("gpu-server: client refused: {}", s.ToString());
  }
  return Status::Ok();
}

Status GpuServer::HandleClient(std::unique_ptr<Connection> control) {
  std::string peer = control->peer();
  std::vector<std::byte> msg;
  // One thread accepts everyone: a peer that connects and never says Hello must not stall it.
  if (o_.hello_timeout_ms > 0) GPOOL_RETURN_IF_ERROR(control->SetRecvTimeout(o_.hello_timeout_ms));
  Status got = control->Recv(&msg);
  if (!got.ok()) {
    return Status::Unavailable(fmt::format("{}: no Hello within {} ms: {}", peer,
                                           o_.hello_timeout_ms, got.message()));
  }
  if (o_.hello_timeout_ms > 0) GPOOL_RETURN_IF_ERROR(control->SetRecvTimeout(0));
  proto::Hello hello;
  auto frames = proto::ParseMessage(msg);
  Status s = frames.status();
  if (s.ok() && (frames->size() != 1 || (*frames)[0].op != uint16_t(proto::Op::kHello))) {
    s = Status::InvalidArgument("first message is not a single Hello");
  }
  if (s.ok()) s = proto::DecodeBody((*frames)[0], &hello);
  proto::ReplyHead head;
  auto refuse = [&](int32_t code, std::string why) {
    head.error = code;
    head.message = why;
    (void)SendHelloReply(control.get(), head, {});
    return Status::PermissionDenied(fmt::format("{}: {}", peer, why));
  };
  if (!s.ok()) return refuse(kErrInvalidValue, s.ToString());
  if (hello.transport != o_.transport) {
    return refuse(kErrNotSupported,
                  fmt::format("this server speaks {} for data, the client asked for {}",
                              o_.transport, hello.transport.empty() ? "(none)" : hello.transport));
  }
  SessionGrant grant;
  grant.limits = o_.default_limits;
  if (o_.authorize) {
    Status a = o_.authorize(hello.token, &grant);
    if (!a.ok()) {
      std::string why = a.message();  // LeaseAuthority's own messages start "lease refused: "
      return refuse(kErrNotPermitted, why.rfind("lease refused", 0) == 0 ? why : "lease refused: " + why);
    }
    if (grant.devices.empty()) return refuse(kErrNotPermitted, "lease refused: it grants no GPU");
  }
  const SessionLimits& limits = grant.limits;

  uint64_t session = next_session_++;
  uint64_t nonce = std::random_device{}() * 0x100000000ull + std::random_device{}();
  int fds[2];
  if (pipe(fds) != 0) return refuse(kErrUnknown, std::string("pipe: ") + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return refuse(kErrUnknown, std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    RunWorker(fds[1], session, nonce, grant);
  }
  close(fds[1]);
  // The worker reports "OK <address> <devices>" or "ERR <message>".
  std::string report;
  char buf[512];
  struct pollfd pfd {fds[0], POLLIN, 0};
  for (;;) {
    int pr = poll(&pfd, 1, kWorkerStartTimeoutMs);
    if (pr <= 0) break;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    report.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (report.rfind("OK ", 0) != 0) {
    if (report.empty()) report = "ERR worker died before reporting its address";
    kill(pid, SIGKILL);
    return refuse(kErrUnknown, "session worker failed: " + report.substr(4));
  }
  proto::HelloReply reply;
  reply.session = session;
  reply.nonce = nonce;
  char addr[256];
  unsigned devices = 0;
  if (sscanf(report.c_str(), "OK %255s %u", addr, &devices) != 2) {
    return refuse(kErrUnknown, "bad worker report: " + report);
  }
  reply.data_address = DataAddressFor(addr, control->local_address(), o_.advertise);
  reply.device_count = devices;
  reply.mem_limit = limits.memory_bytes;
  GPOOL_LOG_INFO("gpu-server: session {} for {} ({}) in worker {} at {}", session, hello.client,
                 peer, pid, reply.data_address);
  Status rs = SendHelloReply(control.get(), head, reply);
  control->Close();
  return rs;
}

void GpuServer::RunWorker(int pipe_fd, uint64_t session, uint64_t nonce, SessionGrant grant) {
  const SessionLimits& limits = grant.limits;
  // Die with the server, so clients of a dead server see their connection close.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Drop every inherited descriptor (control listener, other clients) but stdio and the pipe.
  if (pipe_fd != 3) {
    dup2(pipe_fd, 3);
    close(pipe_fd);
  }
  close_range(4, ~0u, 0);
  signal(SIGCHLD, SIG_DFL);
  auto fail = [&](const std::string& why) {
    WriteAll(3, "ERR " + why);
    _exit(1);
  };
  StatusOr<std::unique_ptr<Backend>> backend =
      o_.backend == "cuda" ? MakeCudaBackend() : MakeEmulatedBackend(o_.emulated);
  if (!backend.ok()) fail(backend.status().ToString());
  auto transport = MakeTransport(o_.transport, {});
  if (!transport.ok()) fail(transport.status().ToString());
  auto listener = (*transport)->Listen(HostOf(o_.listen) + ":0");
  if (!listener.ok()) fail(listener.status().ToString());
  std::string addr = (*listener)->address();
  WriteAll(3, fmt::format("OK {} {}", addr, (*backend)->DeviceCount()));
  close(3);

  alarm(kAttachTimeoutS);  // a client that never attaches must not leave a worker behind
  std::unique_ptr<Connection> conn;
  for (;;) {
    auto c = (*listener)->Accept();
    if (!c.ok()) _exit(1);
    std::vector<std::byte> msg;
    proto::Attach at;
    auto frames = (*c)->Recv(&msg).ok() ? proto::ParseMessage(msg)
                                         : StatusOr<std::vector<proto::Frame>>(Status::Unavailable("closed"));
    if (frames.ok() && frames->size() == 1 && (*frames)[0].op == uint16_t(proto::Op::kAttach) &&
        proto::DecodeBody((*frames)[0], &at).ok() && at.session == session && at.nonce == nonce) {
      conn = std::move(*c);
      break;
    }
    GPOOL_LOG_WARN("gpu-server worker {}: refused a data connection without the session nonce",
                   session);
  }
  alarm(0);
  (*listener)->Close();
  proto::ReplyHead head;
  proto::Empty none;
  proto::BatchWriter w;
  w.AddReply(static_cast<uint16_t>(proto::Op::kAttach), head, none);
  if (!conn->Send(w.Finish()).ok()) _exit(0);

  uint32_t share_milli = static_cast<uint32_t>(std::lround(limits.compute_share * 1000));
  auto slot = arbiter_->Join(share_milli);
  if (!slot.ok()) {
    GPOOL_LOG_WARN("gpu-server: session {}: {}; its compute share is not enforced", session,
                   slot.status().ToString());
  }
  // A leased session may use only the GPUs its leases name, each within its lease's memory.
  Backend* b = backend->get();
  std::unique_ptr<LeaseGuardBackend> guard;
  if (!grant.devices.empty()) {
    guard = std::make_unique<LeaseGuardBackend>(b, grant.devices);
    b = guard.get();
  }
  Session s(session, std::move(conn), b, limits, slot.ok() ? arbiter_.get() : nullptr,
            slot.ok() ? *slot : -1);
  if (grant.expires_at != 0) {
    // The lease bounds the session: at its expiry the client is told why and the worker exits.
    s.SetDeadline({.clock = o_.lease_clock ? o_.lease_clock : UnixClock::Default(),
                   .at_nanos = grant.expires_at * int64_t{1000000000},
                   .error = kErrNotPermitted,
                   .why = fmt::format("lease for GPU {} expired at {} ({})", grant.expiring_gpu,
                                      FormatLeaseTime(grant.expires_at), grant.expires_at),
                   .on_stuck = [] { _exit(4); }});
  }
  Status st = s.Run();
  if (slot.ok()) arbiter_->Leave(*slot);
  const SessionStats& stats = s.stats();
  if (!st.ok()) GPOOL_LOG_WARN("gpu-server: session {} closed: {}", session, st.ToString());
  GPOOL_LOG_INFO(
      "gpu-server: session {} ended: {} requests, {} replies, {} launches, {:.3f} s kernel time "
      "(compute share {:.2f}, {} launches waited their turn), peak memory {} bytes",
      session, stats.requests, stats.replies, stats.launches, stats.kernel_ns / 1e9,
      limits.compute_share,
      stats.share_waits, stats.peak_memory);
  // Exit without running destructors of state inherited from the parent.
  _exit(st.ok() ? 0 : 3);
}

}  // namespace gpool::remote::server
