// Thin POSIX socket helpers shared by the TCP transport and the UCX transport's bootstrap.
//
// Every function returns a Status naming the address or peer on failure. Sends use MSG_NOSIGNAL
// so a dead peer gives EPIPE (Unavailable), never SIGPIPE. Thread-compatible: an fd may be read by
// one thread and written by another; Shutdown() from a third thread unblocks both.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/transport/transport.h"

namespace gpool::remote::net {

// Splits "HOST:PORT" or "[V6HOST]:PORT". The port must be 0..65535.
Status SplitHostPort(std::string_view address, std::string* host, uint16_t* port);

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// Binds and listens on `address` (port 0 picks one). SO_REUSEADDR is set.
StatusOr<Fd> ListenTcp(std::string_view address);
// Connects to `address` with TCP_NODELAY set.
StatusOr<Fd> ConnectTcp(std::string_view address);
// Accepts one connection and sets TCP_NODELAY on it.
StatusOr<Fd> AcceptTcp(int listen_fd);
// Sets TCP_NODELAY (Nagle would hold small requests back waiting for an ACK).
Status SetNoDelay(int fd);
// Applies `o` (SO_KEEPALIVE, TCP_KEEPIDLE/KEEPINTVL/KEEPCNT, TCP_USER_TIMEOUT) to a TCP socket.
Status SetLiveness(int fd, const TcpLivenessOptions& o);
// strerror(err), explained for ETIMEDOUT (what keepalive and TCP_USER_TIMEOUT end a call with).
std::string SocketError(int err);
// Sets SO_RCVTIMEO/SO_SNDTIMEO; 0 clears them.
Status SetTimeouts(int fd, int timeout_ms);

// A listening TCP socket whose blocking Accept() another thread can end with Close(): the TCP
// and UCX listeners both accept their (bootstrap) sockets through it. Accept is single-threaded;
// Close may be called from any thread, any number of times.
// The size of a peer's first handshake message, judged from what of it has arrived (`peeked`,
// possibly nothing): a fixed size, or a header's length field. Once the header says the message
// is bad, return peeked.size(): the handshake then reads it and reports what is wrong.
using FirstMessageSize = std::function<size_t(std::span<const std::byte> peeked)>;

class WakeableListenSocket {
 public:
  static StatusOr<std::unique_ptr<WakeableListenSocket>> Listen(std::string_view address);
  ~WakeableListenSocket() { Close(); }
  // Blocks until a connection is accepted (TCP_NODELAY set), or returns Unavailable once closed.
  // A client that went away between poll and accept is skipped.
  StatusOr<Fd> Accept();
  // Like Accept, but hands a connection over only once its peer's first handshake message
  // (`size` says how long it is) is whole in the socket's receive buffer, so that the caller's
  // blocking handshake reads it without waiting. A client that connects and then says nothing,
  // or sends slowly (a port scan, a stalled host), no longer holds up every client behind it for
  // the handshake timeout: connections wait here side by side (poll, with SO_RCVLOWAT set to the
  // bytes still missing, so a partial message costs no busy loop) until theirs has arrived, for
  // at most `timeout_ms` (then they are closed; 0 or less: no bound), at most kMaxWaiting of them
  // (a new one pushes the oldest out). A peer that hangs up (or shuts down its sending side)
  // before its message is whole is dropped. Single-threaded, like Accept.
  StatusOr<Fd> AcceptArrived(const FirstMessageSize& size, int timeout_ms);
  static constexpr size_t kMaxWaiting = 256;
  void Close();
  // In a forked child: closes this process's copies of the descriptors, without the wake-up
  // Close sends (it would reach the parent's Accept through the shared pipe).
  void AbandonAfterFork();
  bool closed() const { return closed_.load(); }
  const std::string& address() const { return address_; }
  size_t waiting() const { return waiting_.size(); }  // connections AcceptArrived holds

 private:
  struct Waiting {
    Fd fd;
    std::chrono::steady_clock::time_point deadline;
    size_t need = 0;  // the first message's size as last judged
  };
  WakeableListenSocket(Fd fd, Fd wake_read, Fd wake_write);
  // After a failed accept (out of descriptors: EMFILE, ENFILE; or memory): waits
  // kAcceptBackOffMs, or until closed (Unavailable). The connection stays queued and the listening
  // socket readable, so retrying at once spun a core until a descriptor was freed.
  Status BackOff();
  static constexpr int kAcceptBackOffMs = 50;
  // Waits for the listening socket, the wake-up pipe and `watch`; Unavailable once closed.
  // Returns whether a connection can be accepted.
  StatusOr<bool> Wait(std::span<pollfd> watch, int timeout_ms);
  enum class Arrival { kWaiting, kComplete, kGone };
  // `revents`: what poll said of w.fd.
  Arrival Look(Waiting& w, const FirstMessageSize& size, short revents);
  Fd fd_, wake_read_, wake_write_;
  std::string address_;
  std::atomic<bool> closed_{false};
  std::deque<Waiting> waiting_;
};

// "127.0.0.1:5000" for the socket's local or remote end; "?" when unknown.
std::string LocalAddress(int fd);
std::string PeerAddress(int fd);

// Writes every byte of `iov` (handles partial writes; the array is modified). EPIPE/ECONNRESET
// and EOF map to Unavailable naming `peer`.
Status WriteAll(int fd, std::span<iovec> iov, std::string_view peer);
Status WriteAll(int fd, const void* data, size_t size, std::string_view peer);
// Reads exactly `size` bytes. *got_any (optional) tells whether any byte arrived before EOF.
Status ReadAll(int fd, void* data, size_t size, std::string_view peer, bool* got_any = nullptr);

// The iovecs covering bytes [offset, offset+length) of the concatenation of `parts`.
std::vector<iovec> SliceParts(std::span<const ByteSpan> parts, size_t offset, size_t length);

}  // namespace gpool::remote::net
