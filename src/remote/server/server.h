// The GPU server: accepts clients on a TCP control port, checks each one's lease, and serves each
// session in a worker process of its own.
//
// Handshake: the server forks a worker for every accepted control connection at once, so that
// clients never queue behind one another's handshake (a slow or silent peer, a CUDA context that
// takes a second to create). In the worker - a fresh process holding only its own connection -
// the client sends Hello (version, lease token, wanted data transport); the worker checks the
// token, creates its backend (its own CUDA context) and a listener on the wanted transport (tcp or
// ucx), answers HelloReply with that address and a nonce, and closes the control connection; the
// client connects to it and proves itself with Attach(nonce). A refused client's worker exits
// after saying why. A lease's limits hold across all of its sessions, and the leases of one GPU
// cannot reserve more memory than it has (LeaseLedger, ShareArbiter: state shared with the
// workers, created before any fork): a worker admits its session there once its backend can say
// how much memory each GPU has, and refuses a lease that would overcommit the GPU.
// The worker serves the session and exits when the client goes away, so the
// operating system frees all of the session's GPU memory (process exit is the only sure way).
// Workers die with the server (PR_SET_PDEATHSIG), so a client of a dead server sees its
// connection close, never a hang. Forking before any transport or CUDA state of the session
// exists avoids sharing UCX or CUDA contexts across fork. Limit: every connection costs a fork
// before its lease is checked (a flood of connections is a flood of short-lived processes, each
// gone within hello_timeout_ms).
// Thread safety: Serve() forks a worker per client, so it must run in a process with no other
// thread that might hold a lock (allocator, logger) at that moment: the worker would inherit it
// held and hang. The CLI's gpu-server is single-threaded; tests fork a server process first.
// Stop() may be called from a signal handler or another thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "remote/protocol/messages.h"
#include "remote/server/backend.h"
#include "remote/server/lease_guard.h"
#include "remote/server/session.h"
#include "remote/server/share_arbiter.h"
#include "remote/transport/transport.h"

namespace gpool::remote::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // control address (TCP)
  std::string transport = "tcp";       // data transport of sessions: tcp or ucx
  std::string backend = "emulated";    // emulated or cuda
  EmulatedOptions emulated;
  // Checks a Hello's lease tokens and fills what they grant: the devices the session may use,
  // each with its lease's limits (enforced by LeaseGuardBackend), and the session-wide limits
  // (pre-set to default_limits). Null means --insecure: every device, default_limits.
  std::function<Status(const std::string& tokens, SessionGrant* grant)> authorize;
  SessionLimits default_limits;  // applied when authorize is null or leaves them unset
  // HOST:PORT clients reach this server at (gpu-server --advertise); its host is what clients are
  // told to connect to for data. Empty: the address each client reached the control port at.
  std::string advertise;
  // How long a new control connection may take to send its Hello; a silent peer's worker exits
  // then and its connection closes.
  int hello_timeout_ms = 5000;
  // The Unix-epoch clock a session's lease expiry is read from (null: UnixClock::Default()).
  const Clock* lease_clock = nullptr;
};

// The data address a client is told to connect to, for a worker listening on `worker_address`
// (HOST:PORT): the port is the worker's; the host is --advertise's when given, else the address
// the client reached the control port at (`control_local`, getsockname of the accepted socket)
// when the worker listens on a wildcard (0.0.0.0, ::), else the worker's own.
std::string DataAddressFor(const std::string& worker_address, const std::string& control_local,
                           const std::string& advertise);

class GpuServer {
 public:
  explicit GpuServer(ServerOptions options);
  ~GpuServer();
  // Binds the control port. After this, address() is valid.
  Status Start();
  std::string address() const;
  // Accepts clients until Stop(). Returns the accept error, if any.
  Status Serve();
  void Stop();

 private:
  // The worker process of one client, from its Hello to the end of its session.
  [[noreturn]] void RunSession(std::unique_ptr<Connection> control, uint64_t session,
                               pid_t server_pid);
  // Reads and checks the client's Hello; a refused client is told why (and the error returned).
  StatusOr<SessionGrant> ReadHello(Connection* control, proto::Hello* hello);
  Status Refuse(Connection* control, int32_t code, std::string why);

  ServerOptions o_;
  std::unique_ptr<Transport> control_transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<ShareArbiter> arbiter_;  // shared with the workers (created before any fork)
  std::unique_ptr<LeaseLedger> ledger_;    // the same: memory per lease and per GPU
  std::atomic<bool> stop_{false};
  uint64_t next_session_ = 1;
};

}  // namespace gpool::remote::server
