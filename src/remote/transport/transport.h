// Transports for CUDA remoting: reliable, ordered, message-oriented connections.
//
// Two implementations sit behind this interface: TCP (framing, TCP_NODELAY, extra connections for
// bulk data) and UCX ucp (RDMA verbs on InfiniBand, shared memory on one host, TCP elsewhere;
// UCX_TLS selects). The protocol and runtime above never know which one they use, and one shared
// test suite runs over every implementation.
//
// A message is sent as a gather list of parts and arrives whole, as one contiguous buffer.
// Thread safety: a Connection may be used by one sender thread and one receiver thread at the same
// time; Close() may be called from any thread and unblocks both. Listener::Accept is
// single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool::remote {

using ByteSpan = std::span<const std::byte>;

// A message sent in 2+ parts whose last part is large travels with that part marked as its tail,
// so that a receiver can choose where the tail lands after seeing the head (RecvPlaced). Large:
// TCP, at least kTailMinBytes; UCX, at least 64 KiB (in a message of up to 256 KiB both halves
// go as buffered sends). Other messages arrive whole.
inline constexpr size_t kTailMinBytes = 16 << 10;

// Chooses where a message's tail is received (Connection::RecvPlaced). Called on the receiving
// thread, once per message that arrives with a tail, after its head and before its tail.
class TailPlacer {
 public:
  virtual ~TailPlacer() = default;
  // `head` is the message without its last `tail_len` bytes. Returns a buffer of exactly
  // tail_len bytes to receive the tail into, or an empty span to receive the message whole.
  virtual std::span<std::byte> Place(std::span<const std::byte> head, size_t tail_len) = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;
  // Sends one message made of `parts` concatenated. Returns Unavailable once the peer is gone.
  virtual Status Send(std::span<const ByteSpan> parts) = 0;
  Status Send(ByteSpan message) { return Send(std::span<const ByteSpan>(&message, 1)); }
  // Sends `messages` (each a gather list) in order, as Send on each would, and returns once all
  // have left (their buffers may be reused). A transport may keep several in flight together:
  // UCX sends large ones by zero-copy rendezvous, which costs a round trip per message when each
  // waits for the previous one. The default sends them one by one.
  virtual Status SendAll(std::span<const std::span<const ByteSpan>> messages) {
    for (std::span<const ByteSpan> m : messages) GPOOL_RETURN_IF_ERROR(Send(m));
    return Status::Ok();
  }
  // Blocks until one whole message arrives and stores it in *message (resized to fit; the
  // buffer's capacity is reused). Returns Unavailable when the peer closed or died.
  virtual Status Recv(std::vector<std::byte>* message) = 0;
  // Receives one message like Recv, but when `tail` is non-empty and the message has at least
  // tail.size() bytes, its last tail.size() bytes are written straight into `tail`, the rest into
  // *head, and *split is set (zero-copy receive of a reply's bulk data into its destination).
  // Otherwise the whole message goes to *head and *split is false. The default implementation
  // never splits.
  virtual Status RecvSplit(std::vector<std::byte>* head, std::span<std::byte> /*tail*/,
                           bool* split) {
    *split = false;
    return Recv(head);
  }
  // Receives one message like Recv; when it arrives with a tail (see kTailMinBytes) and
  // placer.Place accepts it, *head holds the message without its tail, the tail went straight
  // where Place said, and *placed is its length. Otherwise *head holds the whole message and
  // *placed is 0. The default implementation never places.
  virtual Status RecvPlaced(std::vector<std::byte>* head, TailPlacer& /*placer*/, size_t* placed) {
    *placed = 0;
    return Recv(head);
  }
  // Whether RecvSplit costs this transport more for a message sent with a head than for one
  // that is only the tail's bytes: UCX sends a large split message as two (the head, then the
  // tail, whose receive the receiver posts once it has the head) and receives a small one whole
  // and copies its tail out; TCP reads a tail straight from its stream either way. The session
  // answers reads with their bytes alone (bare replies, proto::kBareReplyMinBytes) only where
  // this is true: over TCP they gained nothing and measured slower (docs/benchmarks.md,
  // "Remoting", bare replies).
  virtual bool HeadCostsARecv() const { return false; }
  // Whether SendAll of several small messages costs less than a Send of each: TCP writes them
  // with one sendmsg; UCX posts one send per message either way. The session gathers its replies
  // to a run of small reads only where this is true.
  virtual bool SendAllGathers() const { return false; }
  // Closes both directions; pending and later calls return Unavailable.
  virtual void Close() = 0;
  // The peer's address for error messages ("127.0.0.1:5000").
  virtual std::string peer() const = 0;
  // This end's address as the peer reached it ("10.0.0.5:7000", getsockname), or "" where the
  // transport has none. A server bound to 0.0.0.0 tells clients where to go next from it.
  virtual std::string local_address() const { return ""; }
  // Bounds every later receive to `timeout_ms` (0: no bound), so a peer that goes silent cannot
  // block a caller forever; a receive that times out fails (Unavailable) and the connection is
  // then unusable. TCP bounds its control stream only (meant for small handshake messages).
  virtual Status SetRecvTimeout(int timeout_ms) {
    (void)timeout_ms;
    return Status::Unimplemented("this transport has no receive timeout");
  }
  // For a process that forked while holding this connection and leaves it to the other process:
  // closes this process's descriptors without shutting the connection down (Close, and the
  // destructor, shut it down for both processes). Afterwards this object is closed here only.
  // Call with no other thread using the connection.
  virtual Status AbandonAfterFork() {
    return Status::Unimplemented("this transport's connections cannot be handed over at fork");
  }
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Blocks until a client connects, or returns Unavailable after Close().
  virtual StatusOr<std::unique_ptr<Connection>> Accept() = 0;
  virtual void Close() = 0;
  // In a forked child that must not touch its parent's listener: closes this process's
  // descriptors without waking or closing the parent's Accept (Close would do both).
  virtual Status AbandonAfterFork() {
    return Status::Unimplemented("this transport's listeners cannot be left at fork");
  }
  // The bound address, with the real port when 0 was asked for.
  virtual std::string address() const = 0;
};

// Dead-peer detection on TCP sockets: every socket of a TCP transport connection (control and
// data streams, both ends) and the UCX transport's bootstrap socket, which stays open as its
// liveness channel. Without it a crashed client host or a network split holds a GPU server worker
// (and its GPU memory) forever, and a client waiting for a reply from an unreachable server
// waits forever. With the defaults, a peer whose host stopped answering is given up ~30 s after
// the last thing heard from it: an idle connection probes after 10 s, every 5 s; data left
// unacknowledged (or a receive window that stays shut: a stopped reader) for 30 s ends it. The
// call waiting on it fails with Unavailable "... connection timed out". Limits: a live host whose
// process is stopped (SIGSTOP, a debugger) still acknowledges probes, so an idle wait on it lasts;
// a send to it fails after user_timeout_ms once its receive buffer is full; and a peer that
// legitimately does not read for longer than user_timeout_ms while data waits (a server busy in
// one long call while the client pushes more) is cut off too: raise it (0: the kernel's default,
// ~15 min of retransmissions and no zero-window limit) for such workloads. See docs/remoting.md.
struct TcpLivenessOptions {
  int keepalive_idle_s = 10;      // SO_KEEPALIVE with TCP_KEEPIDLE; 0: no keepalive
  int keepalive_interval_s = 5;   // TCP_KEEPINTVL
  int keepalive_count = 4;        // TCP_KEEPCNT (with a user timeout, Linux goes by that instead)
  int user_timeout_ms = 30000;    // TCP_USER_TIMEOUT; 0: the kernel's default
};

struct TransportOptions {
  // Max message size accepted on receive; larger frames are a protocol error that closes the
  // connection (a malformed peer must not make us allocate without bound). Send refuses larger
  // messages too, since the peer is expected to run with the same limit.
  size_t max_message_bytes = size_t{1} << 30;
  // TCP only: extra data streams a connecting client opens beside the control stream. Messages of
  // at least stripe_min_bytes are striped over all streams, one sending thread each, so one
  // connection is not capped by one socket's copy path. The listener accepts what the client
  // asks for (up to kMaxTcpDataStreams). 0 disables striping.
  int tcp_data_streams = 2;
  size_t stripe_min_bytes = size_t{4} << 20;
  // How long Connect and Accept wait for a peer's handshake before giving up on it.
  int handshake_timeout_ms = 5000;
  // UCX only: the UCX_TLS value for this transport's context ("tcp", "posix,sysv,self", "rc,ud");
  // empty leaves UCX's own choice (the UCX_TLS environment variable, else all).
  std::string ucx_tls;
  // Both transports' TCP sockets (see TcpLivenessOptions). UCX also gets the same keepalive for
  // its own tcp transport's sockets (UCX_TCP_KEEPIDLE/KEEPINTVL/KEEPCNT) and, where its error
  // handling mode is PEER (tcp and InfiniBand transports only), ucp keepalive rounds every
  // ucx_keepalive_interval_ms (UCX_KEEPALIVE_INTERVAL; 0 leaves UCX's 20 s). Set in code through
  // ucp_config_modify: the user's environment need not say anything.
  TcpLivenessOptions liveness;
  int ucx_keepalive_interval_ms = 10000;
};

inline constexpr int kMaxTcpDataStreams = 16;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;  // "tcp", "ucx"
  // `address` is "HOST:PORT"; port 0 picks a free one.
  virtual StatusOr<std::unique_ptr<Listener>> Listen(std::string_view address) = 0;
  virtual StatusOr<std::unique_ptr<Connection>> Connect(std::string_view address) = 0;
};

// "tcp" or "ucx". Unknown names are InvalidArgument.
StatusOr<std::unique_ptr<Transport>> MakeTransport(std::string_view name,
                                                   const TransportOptions& options);

}  // namespace gpool::remote
