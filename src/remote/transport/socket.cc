#include "remote/transport/socket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <memory>

#include <fmt/format.h>

namespace gpool::remote::net {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string FormatSockaddr(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  }
  return "?";
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

StatusOr<AddrInfoPtr> Resolve(std::string_view address, bool passive) {
  std::string host;
  uint16_t port = 0;
  GPOOL_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_str.c_str(), &hints, &res);
  if (rc != 0) {
    return Status::InvalidArgument(
        fmt::format("cannot resolve '{}': {}", address, gai_strerror(rc)));
  }
  return AddrInfoPtr(res);
}

}  // namespace

Status SplitHostPort(std::string_view address, std::string* host, uint16_t* port) {
  std::string_view h, p;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return Status::InvalidArgument(fmt::format("bad address '{}': want [HOST]:PORT", address));
    }
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("bad address '{}': want HOST:PORT", address));
    }
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || value > 65535) {
    return Status::InvalidArgument(fmt::format("bad port in address '{}'", address));
  }
  *host = std::string(h);
  *port = static_cast<uint16_t>(value);
  return Status::Ok();
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Status::IoError("setsockopt(TCP_NODELAY): " + Errno(errno));
  }
  return Status::Ok();
}

Status SetLiveness(int fd, const TcpLivenessOptions& o) {
  auto set = [&](int level, int name, int value, const char* what) -> Status {
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
      return Status::IoError(fmt::format("setsockopt({}, {}): {}", what, value, Errno(errno)));
    }
    return Status::Ok();
  };
  if (o.keepalive_idle_s > 0) {
    GPOOL_RETURN_IF_ERROR(set(SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE"));
    GPOOL_RETURN_IF_ERROR(set(IPPROTO_TCP, TCP_KEEPIDLE, o.keepalive_idle_s, "TCP_KEEPIDLE"));
    GPOOL_RETURN_IF_ERROR(
        set(IPPROTO_TCP, TCP_KEEPINTVL, std::max(1, o.keepalive_interval_s), "TCP_KEEPINTVL"));
    GPOOL_RETURN_IF_ERROR(set(IPPROTO_TCP, TCP_KEEPCNT, std::max(1, o.keepalive_count), "TCP_KEEPCNT"));
  }
  if (o.user_timeout_ms > 0) {
    GPOOL_RETURN_IF_ERROR(set(IPPROTO_TCP, TCP_USER_TIMEOUT, o.user_timeout_ms, "TCP_USER_TIMEOUT"));
  }
  return Status::Ok();
}

std::string SocketError(int err) {
  if (err == ETIMEDOUT) {
    return "connection timed out: the peer stopped acknowledging (its host is down or "
           "unreachable, or it stopped reading; TCP keepalive / TCP_USER_TIMEOUT gave up on it)";
  }
  return Errno(err);
}

Status SetTimeouts(int fd, int timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return Status::IoError("setsockopt(SO_RCVTIMEO): " + Errno(errno));
  }
  return Status::Ok();
}

StatusOr<Fd> ListenTcp(std::string_view address) {
  GPOOL_ASSIGN_OR_RETURN(AddrInfoPtr res, Resolve(address, /*passive=*/true));
  std::string last_error = "no addresses";
  for (addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = Errno(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last_error = Errno(errno);
      continue;
    }
    return fd;
  }
  return Status::Unavailable(fmt::format("cannot listen on {}: {}", address, last_error));
}

StatusOr<Fd> ConnectTcp(std::string_view address) {
  GPOOL_ASSIGN_OR_RETURN(AddrInfoPtr res, Resolve(address, /*passive=*/false));
  std::string last_error = "no addresses";
  for (addrinfo* a = res.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_error = Errno(errno);
      continue;
    }
    int rc;
    do {
      rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      last_error = Errno(errno);
      continue;
    }
    GPOOL_RETURN_IF_ERROR(SetNoDelay(fd.get()));
    return fd;
  }
  return Status::Unavailable(fmt::format("cannot connect to {}: {}", address, last_error));
}

StatusOr<Fd> AcceptTcp(int listen_fd) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Fd owned(fd);
      GPOOL_RETURN_IF_ERROR(SetNoDelay(fd));
      return owned;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return Status::Unavailable("accept: " + Errno(errno));
  }
}

WakeableListenSocket::WakeableListenSocket(Fd fd, Fd wake_read, Fd wake_write)
    : fd_(std::move(fd)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      address_(LocalAddress(fd_.get())) {}

StatusOr<std::unique_ptr<WakeableListenSocket>> WakeableListenSocket::Listen(
    std::string_view address) {
  GPOOL_ASSIGN_OR_RETURN(Fd fd, ListenTcp(address));
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Status::IoError("pipe: " + Errno(errno));
  return std::unique_ptr<WakeableListenSocket>(
      new WakeableListenSocket(std::move(fd), Fd(pipefd[0]), Fd(pipefd[1])));
}

StatusOr<bool> WakeableListenSocket::Wait(std::span<pollfd> watch, int timeout_ms) {
  std::vector<pollfd> fds = {{fd_.get(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
  fds.insert(fds.end(), watch.begin(), watch.end());
  for (;;) {
    if (closed_.load()) return Status::Unavailable(fmt::format("listener {} closed", address_));
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Status::IoError(fmt::format("poll on {}: {}", address_, Errno(errno)));
    if (fds[1].revents != 0 || closed_.load()) {
      return Status::Unavailable(fmt::format("listener {} closed", address_));
    }
    for (size_t i = 0; i < watch.size(); ++i) watch[i].revents = fds[i + 2].revents;
    return (fds[0].revents & POLLIN) != 0;
  }
}

StatusOr<Fd> WakeableListenSocket::Accept() {
  for (;;) {
    GPOOL_ASSIGN_OR_RETURN(bool incoming, Wait({}, -1));
    if (!incoming) continue;
    StatusOr<Fd> sock = AcceptTcp(fd_.get());
    if (sock.ok()) return sock;
    GPOOL_RETURN_IF_ERROR(BackOff());
  }
}

Status WakeableListenSocket::BackOff() {
  pollfd wake{wake_read_.get(), POLLIN, 0};
  while (::poll(&wake, 1, kAcceptBackOffMs) < 0 && errno == EINTR) {
  }
  if (wake.revents != 0 || closed_.load()) {
    return Status::Unavailable(fmt::format("listener {} closed", address_));
  }
  return Status::Ok();
}

WakeableListenSocket::Arrival WakeableListenSocket::Look(Waiting& w, const FirstMessageSize& size,
                                                         short revents) {
  std::vector<std::byte> buf(w.need);
  ssize_t n = ::recv(w.fd.get(), buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return Arrival::kGone;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Arrival::kWaiting
                                                                               : Arrival::kGone;
  const size_t need = size(std::span<const std::byte>(buf.data(), static_cast<size_t>(n)));
  if (static_cast<size_t>(n) >= need) {
    int one = 1;  // back to the default, or later blocking reads would wait for `need` bytes
    return setsockopt(w.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one) == 0 ? Arrival::kComplete
                                                                                : Arrival::kGone;
  }
  // The peer hung up (or the socket failed) before its message was whole: it never will be, and
  // the socket stays readable (EOF) whatever SO_RCVLOWAT says, so waiting on would spin.
  if (revents & (POLLRDHUP | POLLHUP | POLLERR)) return Arrival::kGone;
  w.need = need;
  int lowat = static_cast<int>(std::min<size_t>(need, INT_MAX));
  return setsockopt(w.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0 ? Arrival::kWaiting
                                                                                   : Arrival::kGone;
}

StatusOr<Fd> WakeableListenSocket::AcceptArrived(const FirstMessageSize& size, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  for (;;) {
    const auto now = Clock::now();
    std::erase_if(waiting_, [&](const Waiting& w) { return w.deadline <= now; });
    std::vector<pollfd> watch;
    int wait_ms = -1;
    for (const Waiting& w : waiting_) {
      watch.push_back({w.fd.get(), POLLIN | POLLRDHUP, 0});
      if (w.deadline == Clock::time_point::max()) continue;  // no bound
      auto left = std::chrono::ceil<std::chrono::milliseconds>(w.deadline - now).count();
      wait_ms = wait_ms < 0 ? static_cast<int>(left) : std::min(wait_ms, static_cast<int>(left));
    }
    GPOOL_ASSIGN_OR_RETURN(bool incoming, Wait(watch, wait_ms));
    // Oldest first; `watch` and waiting_ stay index-aligned until one is taken out.
    std::vector<size_t> gone;
    for (size_t i = 0; i < watch.size(); ++i) {
      if (watch[i].revents == 0) continue;
      Arrival a = Look(waiting_[i], size, watch[i].revents);
      if (a == Arrival::kGone) gone.push_back(i);
      if (a != Arrival::kComplete) continue;
      Fd ready = std::move(waiting_[i].fd);
      waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
      for (size_t k = gone.size(); k-- > 0;) {
        waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(gone[k]));
      }
      return ready;
    }
    for (size_t k = gone.size(); k-- > 0;) {
      waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(gone[k]));
    }
    if (!incoming) continue;
    StatusOr<Fd> sock = AcceptTcp(fd_.get());
    if (!sock.ok()) {
      GPOOL_RETURN_IF_ERROR(BackOff());
      continue;
    }
    if (waiting_.size() >= kMaxWaiting) waiting_.pop_front();
    // timeout_ms <= 0: no bound (as SetTimeouts' 0), not "closed at once".
    const auto deadline = timeout_ms > 0 ? Clock::now() + std::chrono::milliseconds(timeout_ms)
                                         : Clock::time_point::max();
    Waiting w{.fd = std::move(*sock), .deadline = deadline,
              .need = std::max<size_t>(size({}), 1)};
    int lowat = static_cast<int>(std::min<size_t>(w.need, INT_MAX));
    if (setsockopt(w.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) != 0) continue;
    waiting_.push_back(std::move(w));
  }
}

void WakeableListenSocket::Close() {
  if (closed_.exchange(true)) return;
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_write_.get(), &b, 1);
}

void WakeableListenSocket::AbandonAfterFork() {
  closed_.store(true);
  waiting_.clear();  // other clients' connections: the parent's (closing our copies ends nothing)
  fd_.Reset();
  wake_read_.Reset();
  wake_write_.Reset();
}

std::string LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return FormatSockaddr(ss);
}

std::string PeerAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return FormatSockaddr(ss);
}

Status WriteAll(int fd, std::span<iovec> iov, std::string_view peer) {
  size_t first = 0;
  while (first < iov.size()) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status::Unavailable(fmt::format("send to {} timed out", peer));
      }
      return Status::Unavailable(fmt::format("send to {}: {}", peer, SocketError(errno)));
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0 && first < iov.size()) {
      size_t take = std::min(left, iov[first].iov_len);
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
      iov[first].iov_len -= take;
      left -= take;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return Status::Ok();
}

Status WriteAll(int fd, const void* data, size_t size, std::string_view peer) {
  iovec v{const_cast<void*>(data), size};
  return WriteAll(fd, std::span<iovec>(&v, 1), peer);
}

Status ReadAll(int fd, void* data, size_t size, std::string_view peer, bool* got_any) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  if (got_any != nullptr) *got_any = false;
  while (done < size) {
    ssize_t n = ::recv(fd, p + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      if (got_any != nullptr) *got_any = true;
      continue;
    }
    if (n == 0) {
      return Status::Unavailable(
          done == 0 ? fmt::format("{} closed the connection", peer)
                    : fmt::format("{} closed the connection mid-message ({} of {} bytes)", peer,
                                  done, size));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return Status::Unavailable(fmt::format("receive from {} timed out", peer));
    }
    return Status::Unavailable(fmt::format("receive from {}: {}", peer, SocketError(errno)));
  }
  return Status::Ok();
}

std::vector<iovec> SliceParts(std::span<const ByteSpan> parts, size_t offset, size_t length) {
  std::vector<iovec> out;
  for (const ByteSpan& part : parts) {
    if (length == 0) break;
    if (offset >= part.size()) {
      offset -= part.size();
      continue;
    }
    size_t take = std::min(part.size() - offset, length);
    out.push_back(iovec{const_cast<std::byte*>(part.data() + offset), take});
    length -= take;
    offset = 0;
  }
  return out;
}

}  // namespace gpool::remote::net
