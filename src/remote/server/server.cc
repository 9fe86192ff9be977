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
  if (o_.emulated.va_hint == 0) {
    // The same for the address space cuMemAddressReserve hands out: a window per port in
    // [96 TiB, 112 TiB), apart from the device memory ranges above ([16, 80) TiB) and from the
    // emulated CUDA driver's device memory ([80, 96) TiB) and reservations ([112, 120) TiB), so
    // that a client aggregating servers of both backends sees no clash either. A window larger
    // than 32 GiB may overlap the next port's; the client refuses an overlap it is handed.
    std::string a = listener_->address();
    uint64_t port = std::strtoull(a.substr(a.rfind(':') + 1).c_str(), nullptr, 10);
    o_.emulated.va_hint = (uint64_t{96} << 40) + (port % 512) * (uint64_t{32} << 30);
  }
  if (o_.emulated.uuid_seed == 0) {
    // Distinct emulated GPU UUIDs per server (FNV-1a of the bound address), stable across its
    // sessions.
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : listener_->address()) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    o_.emulated.uuid_seed = h;
  }
  // Compute shares are enforced across the workers through state they inherit at fork.
  GPOOL_ASSIGN_OR_RETURN(arbiter_, ShareArbiter::Create({}));
  // So are memory limits per lease and per GPU.
  GPOOL_ASSIGN_OR_RETURN(ledger_, LeaseLedger::Create());
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
  const pid_t server_pid = getpid();
  while (!stop_) {
    auto conn = listener_->Accept();
    if (!conn.ok()) {
      if (stop_) return Status::Ok();
      return conn.status();
    }
    // Every client gets its own process at once: its Hello, lease check and worker start (a CUDA
    // context takes ~0.1-1 s) run beside other clients', never ahead of them in one queue. Fork
    // here, single-threaded, before any transport or CUDA state of the session exists.
    const uint64_t session = next_session_++;
    pid_t pid = fork();
    if (pid == 0) RunSession(std::move(*conn), session, server_pid);
    if (pid < 0) {
      GPOOL_LOG_WARN("gpu-server: client {} refused: fork: {}", (*conn)->peer(),
                     std::strerror(errno));
      continue;  // the connection closes
    }
    // The child owns the connection now; this process only drops its descriptors.
    Status a = (*conn)->AbandonAfterFork();
    if (!a.ok()) return a;
  }
  return Status::Ok();
}

StatusOr<SessionGrant> GpuServer::ReadHello(Connection* control, proto::Hello* hello) {
  const std::string peer = control->peer();
  std::vector<std::byte> msg;
  // A peer that connects and never says Hello must not keep its worker forever.
  if (o_.hello_timeout_ms > 0) GPOOL_RETURN_IF_ERROR(control->SetRecvTimeout(o_.hello_timeout_ms));
  Status got = control->Recv(&msg);
  if (!got.ok()) {
    return Status::Unavailable(fmt::format("{}: no Hello within {} ms: {}", peer,
                                           o_.hello_timeout_ms, got.message()));
  }
  if (o_.hello_timeout_ms > 0) GPOOL_RETURN_IF_ERROR(control->SetRecvTimeout(0));
  auto frames = proto::ParseMessage(msg);
  Status s = frames.status();
  if (s.ok() && (frames->size() != 1 || (*frames)[0].op != uint16_t(proto::Op::kHello))) {
    s = Status::InvalidArgument("first message is not a single Hello");
  }
  if (s.ok()) s = proto::DecodeBody((*frames)[0], hello);
  if (!s.ok()) return Refuse(control, kErrInvalidValue, s.ToString());
  if (hello->transport != o_.transport) {
    return Refuse(control, kErrNotSupported,
                  fmt::format("this server speaks {} for data, the client asked for {}",
                              o_.transport, hello->transport.empty() ? "(none)" : hello->transport));
  }
  SessionGrant grant;
  grant.limits = o_.default_limits;
  if (o_.authorize) {
    Status a = o_.authorize(hello->token, &grant);
    if (!a.ok()) {
      std::string why = a.message();  // LeaseAuthority's own messages start "lease refused: "
      return Refuse(control, kErrNotPermitted,
                    why.rfind("lease refused", 0) == 0 ? why : "lease refused: " + why);
    }
    if (grant.devices.empty()) {
      return Refuse(control, kErrNotPermitted, "lease refused: it grants no GPU");
    }
  }
  return grant;
}

Status GpuServer::Refuse(Connection* control, int32_t code, std::string why) {
  proto::ReplyHead head;
  head.error = code;
  head.message = why;
  (void)SendHelloReply(control, head, {});
  return Status::PermissionDenied(fmt::format("{}: {}", control->peer(), why));
}

void GpuServer::RunSession(std::unique_ptr<Connection> control, uint64_t session,
                           pid_t server_pid) {
  // Die with the server, so clients of a dead server see their connection close (and a server
  // that died before this line took effect is noticed here).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != server_pid) _exit(1);
  signal(SIGCHLD, SIG_DFL);
  // The server's listener is its own (Close here would stop its Accept). The server holds no other
  // client's descriptors: each session process takes its own connection and the server drops it.
  (void)listener_->AbandonAfterFork();
  auto fail = [&](const Status& why) {
    GPOOL_LOG_WARN("gpu-server: client refused: {}", why.ToString());
    _exit(2);
  };
  proto::Hello hello;
  StatusOr<SessionGrant> grant = ReadHello(control.get(), &hello);
  if (!grant.ok()) fail(grant.status());
  const SessionLimits& limits = grant->limits;
  StatusOr<std::unique_ptr<Backend>> backend =
      o_.backend == "cuda" ? MakeCudaBackend() : MakeEmulatedBackend(o_.emulated);
  auto cannot_start = [&](const Status& why) {
    fail(Refuse(control.get(), kErrUnknown, "session worker failed: " + why.ToString()));
  };
  if (!backend.ok()) cannot_start(backend.status());
  auto transport = MakeTransport(o_.transport, {});
  if (!transport.ok()) cannot_start(transport.status());
  auto listener = (*transport)->Listen(HostOf(o_.listen) + ":0");
  if (!listener.ok()) cannot_start(listener.status());
  // Admission: every device the session may use is claimed in the ledger under its lease (an
  // --insecure session: every device, no limit of its own), with the GPU's memory as the backend
  // reports it. A lease that would overcommit its GPU is refused here, before anything is sent.
  const std::string server_name = o_.advertise.empty() ? control->local_address() : o_.advertise;
  const bool every_device = grant->devices.empty();
  std::vector<DeviceGrant> grants = OneGrantPerDevice(std::move(grant->devices));
  if (every_device) {
    for (int d = 0; d < (*backend)->DeviceCount(); ++d) {
      grants.push_back({.device = static_cast<uint32_t>(d),
                        .compute_share = limits.compute_share,
                        .gpu = fmt::format("{}/{}", server_name, d)});
    }
  }
  std::vector<uint64_t> totals(static_cast<size_t>(std::max((*backend)->DeviceCount(), 0)), 0);
  for (size_t d = 0; d < totals.size(); ++d) {
    uint64_t free = 0;
    if (!(*backend)->MemGetInfo(static_cast<uint32_t>(d), &free, &totals[d]).ok()) totals[d] = 0;
  }
  StatusOr<int> entry = ledger_->Join(LedgerClaims(grants, totals));
  if (!entry.ok()) {
    fail(Refuse(control.get(), kErrNotPermitted,
                entry.status().code() == StatusCode::kPermissionDenied
                    ? "lease refused: " + entry.status().message()
                    : "session refused: " + entry.status().message()));
  }
  // From here on a worker that ends says so to the ledger (one that dies is reaped there).
  auto quit = [&](int code) {
    ledger_->Leave(*entry);
    _exit(code);
  };

  const uint64_t nonce = std::random_device{}() * 0x100000000ull + std::random_device{}();
  proto::HelloReply reply;
  reply.session = session;
  reply.nonce = nonce;
  reply.data_address =
      DataAddressFor((*listener)->address(), control->local_address(), o_.advertise);
  reply.device_count = (*backend)->DeviceCount();
  reply.mem_limit = limits.memory_bytes;
  GPOOL_LOG_INFO("gpu-server: session {} for {} ({}) in worker {} at {}", session, hello.client,
                 control->peer(), getpid(), reply.data_address);
  if (!SendHelloReply(control.get(), proto::ReplyHead{}, reply).ok()) quit(0);
  control->Close();
  control.reset();

  alarm(kAttachTimeoutS);  // a client that never attaches must not leave a worker behind
  std::unique_ptr<Connection> conn;
  for (;;) {
    auto c = (*listener)->Accept();
    if (!c.ok()) quit(1);
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
  if (!conn->Send(w.Finish()).ok()) quit(0);

  // A lease's compute share is its group's, shared by all its sessions on that device.
  uint32_t share_milli = static_cast<uint32_t>(std::lround(limits.compute_share * 1000));
  std::vector<ShareGroup> groups;
  for (const DeviceGrant& g : grants) {
    if (g.lease_id.empty()) continue;
    groups.push_back({.device = g.device,
                      .lease_id = g.lease_id,
                      .share_milli = static_cast<uint32_t>(std::lround(g.compute_share * 1000))});
  }
  auto slot = arbiter_->Join(share_milli, groups);
  if (!slot.ok()) {
    GPOOL_LOG_WARN("gpu-server: session {}: {}; its compute share is not enforced", session,
                   slot.status().ToString());
  }
  // A leased session may use only the GPUs its leases name, each within its lease's memory
  // (counted for the lease across its sessions); every session's allocations count against
  // its GPU's memory.
  LeaseGuardBackend guard(backend->get(), std::move(grants), ledger_.get(), *entry,
                          every_device);
  Session s(session, std::move(conn), &guard, limits, slot.ok() ? arbiter_.get() : nullptr,
            slot.ok() ? *slot : -1);
  if (grant->expires_at != 0) {
    // The lease bounds the session: at its expiry the client is told why and the worker exits.
    s.SetDeadline({.clock = o_.lease_clock ? o_.lease_clock : UnixClock::Default(),
                   .at_nanos = grant->expires_at * int64_t{1000000000},
                   .error = kErrNotPermitted,
                   .why = fmt::format("lease for GPU {} expired at {} ({})", grant->expiring_gpu,
                                      FormatLeaseTime(grant->expires_at), grant->expires_at),
                   .on_stuck = [] { _exit(4); }});  // (the ledger reaps it)
  }
  Status st = s.Run();
  if (slot.ok()) arbiter_->Leave(*slot);
  ledger_->Leave(*entry);
  const SessionStats& stats = s.stats();
  if (!st.ok()) GPOOL_LOG_WARN("gpu-server: session {} closed: {}", session, st.ToString());
  GPOOL_LOG_INFO(
      "gpu-server: session {} ended: {} requests, {} replies, {} launches, {:.3f} s kernel time "
      "(compute share {:.2f}, {} launches waited their turn), peak memory {} bytes",
      session, stats.requests, stats.replies, stats.launches, stats.kernel_ns / 1e9,
      limits.compute_share,
      stats.share_waits, stats.peak_memory);
  GPOOL_LOG_INFO("gpu-server: session {} replies by op: {}", session, stats.RepliesByOp());
  GPOOL_LOG_INFO("gpu-server: session {} read replies sent bare: {}", session, stats.bare_replies);
  GPOOL_LOG_INFO("gpu-server: session {} replies went out in {} sends", session, stats.sends);
  GPOOL_LOG_INFO("gpu-server: session {} modules: {} registered at the end, peak {}", session,
                 stats.modules, stats.peak_modules);
  // Exit without running destructors of state inherited from the parent.
  _exit(st.ok() ? 0 : 3);
}

}  // namespace gpool::remote::server
