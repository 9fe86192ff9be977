#include "control/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace gpool::control {
namespace {

using SteadyClock = std::chrono::steady_clock;

// httplib's whole Server behaviour runs on connections the gate handed over complete, so its
// own thread pool has nothing to do: accepted sockets go to the gate on the listening thread.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// One request's bytes (already complete) as httplib's Stream; the response is collected.
class MemoryStream : public httplib::Stream {
 public:
  MemoryStream(std::string_view in, const std::string& peer, int port)
      : in_(in), peer_(peer), port_(port) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);  // 0 at the end: httplib reads no further than the framing
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip.clear();
    port = 0;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

  size_t consumed() const { return pos_; }
  std::string& out() { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
  const std::string& peer_;
  int port_;
};

const char* Reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Best effort: the socket is non-blocking and about to be closed.
void SendAndForget(int fd, const std::string& bytes) {
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// Closes after what was sent: with unread input in its buffer, close() would send a reset, and
// the client's kernel would drop our last response (often the error saying why) unread. What has
// arrived is discarded first; input arriving later can still cause a reset (no lingering close).
void CloseGracefully(int fd) {
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  while (::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
  ::close(fd);
}

}  // namespace

struct HttpServer::Conn {
  enum class State { kReading, kServing, kWriting };
  int fd = -1;
  std::string peer;
  int port = 0;
  State state = State::kReading;
  std::string in;   // received, not yet answered
  size_t request_size = 0;  // kServing: the complete request at the front of `in`
  std::string out;  // kWriting: the response
  size_t out_off = 0;
  bool eof = false;          // the client shut down its sending side
  bool close_after = false;  // close once `out` is written
  size_t served = 0;
  SteadyClock::time_point deadline;
  uint64_t order = 0;  // admission order: the oldest of a peer is evicted first
};

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  new_task_queue = [] { return new InlineQueue(); };
  set_payload_max_length(limits_.max_body_bytes);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  gate_ = std::thread([this] { GateLoop(); });
  for (size_t i = 0; i < std::max<size_t>(1, limits_.workers); ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void HttpServer::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  Wake();
  work_cv_.notify_all();
  if (gate_.joinable()) gate_.join();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  for (int fd : accepted_) ::close(fd);
  accepted_.clear();
  ready_.clear();
  served_.clear();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

int HttpServer::Bind(const std::string& host, int port) {
  int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  // listen() again on a listening socket only changes its backlog.
  if (bound > 0 && ::listen(svr_sock_, kListenBacklog) != 0) return -1;
  return bound;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stopping_) {
      accepted_.push_back(sock);
      sock = INVALID_SOCKET;
    }
  }
  if (sock != INVALID_SOCKET) {
    ::close(sock);
    return false;
  }
  Wake();
  return true;
}

HttpServer::Framing HttpServer::Frame(std::string_view buf, const HttpLimits& limits) {
  Framing f;
  size_t end = buf.substr(0, limits.max_head_bytes).find("\r\n\r\n");
  if (end == std::string_view::npos || end + 4 > limits.max_head_bytes) {
    if (buf.size() < limits.max_head_bytes) return f;  // more may come
    f.kind = Framing::Kind::kRefuse;
    f.status = 431;
    f.why = fmt::format("request head (request line and headers) over {} bytes",
                        limits.max_head_bytes);
    return f;
  }
  const size_t head = end + 4;
  std::string_view lines = buf.substr(0, end + 2);
  size_t pos = lines.find("\r\n") + 2;  // after the request line (httplib parses it)
  std::optional<uint64_t> length;
  while (pos < lines.size()) {
    size_t eol = lines.find("\r\n", pos);
    std::string_view line = lines.substr(pos, eol - pos);
    pos = eol + 2;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // httplib skips it too
    std::string_view name = line.substr(0, colon);
    std::string_view value = Trim(line.substr(colon + 1));
    if (EqualsNoCase(name, "Transfer-Encoding")) {
      f.kind = Framing::Kind::kRefuse;
      f.status = 411;
      f.why = "Transfer-Encoding request bodies are not accepted: send Content-Length";
      return f;
    }
    if (!EqualsNoCase(name, "Content-Length")) continue;
    uint64_t v = 0;
    bool ok = !value.empty() && value.size() <= 18 &&
              std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
    for (char c : value) v = v * 10 + static_cast<uint64_t>(c - '0');
    if (!ok || (length && *length != v)) {
      f.kind = Framing::Kind::kRefuse;
      f.status = 400;
      f.why = ok ? "conflicting Content-Length headers"
                 : fmt::format("Content-Length: want a decimal byte count, got '{}'",
                               std::string(value.substr(0, 32)));
      return f;
    }
    length = v;
  }
  const uint64_t body = length.value_or(0);
  if (body > limits.max_body_bytes) {
    f.kind = Framing::Kind::kRefuse;
    f.status = 413;
    f.why = fmt::format("request body of {} bytes over the {} byte limit", body,
                        limits.max_body_bytes);
    return f;
  }
  if (buf.size() < head + body) return f;
  f.kind = Framing::Kind::kComplete;
  f.size = head + body;
  return f;
}

std::string HttpServer::ErrorResponse(int status, const std::string& why) {
  // `why` may quote the client's bytes: invalid UTF-8 is replaced, not thrown on (dump's
  // default would throw, and on the gate thread that ends the process).
  std::string body =
      nlohmann::json({{"error", why}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n{}\r\n{}",
      status, Reason(status), body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
}

std::string HttpServer::Serve(std::string_view request, const std::string& peer, int port,
                              bool last, bool* keep_open) {
  MemoryStream strm(request, peer, port);
  bool connection_closed = false;
  bool ok = process_request(strm, last, connection_closed, nullptr);
  // A request httplib read differently from the framing (fewer bytes) leaves the connection out
  // of step with the client: close it rather than parse the rest as a new request.
  *keep_open = ok && !connection_closed && !last && strm.consumed() == request.size();
  return std::move(strm.out());
}

std::string HttpServer::HandleBytes(std::string_view input, const std::string& peer) {
  std::string out;
  size_t served = 0;
  while (!input.empty()) {
    Framing f = Frame(input, limits_);
    if (f.kind == Framing::Kind::kNeedMore) break;
    if (f.kind == Framing::Kind::kRefuse) {
      out += ErrorResponse(f.status, f.why);
      break;
    }
    bool keep = false;
    out += Serve(input.substr(0, f.size), peer, 1, ++served >= limits_.keep_alive_max, &keep);
    input.remove_prefix(f.size);
    if (!keep) break;
  }
  return out;
}

void HttpServer::WorkerLoop() {
  for (;;) {
    Conn* c = nullptr;
    {
      std::unique_lock<std::mutex> l(mu_);
      work_cv_.wait(l, [this] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = ready_.front();
      ready_.pop_front();
    }
    // The gate does not touch a connection while it is kServing.
    bool last = c->eof || c->served + 1 >= limits_.keep_alive_max;
    bool keep = false;
    c->out = Serve(std::string_view(c->in).substr(0, c->request_size), c->peer, c->port, last,
                   &keep);
    c->in.erase(0, c->request_size);
    c->out_off = 0;
    c->close_after = !keep;
    ++c->served;
    {
      std::lock_guard<std::mutex> l(mu_);
      served_.push_back(c);
    }
    Wake();
  }
}

void HttpServer::GateLoop() {
  const auto timeout = limits_.request_timeout;
  auto last_warning = SteadyClock::time_point{};
  size_t refused_since_warning = 0;
  auto warn = [&](const std::string& what) {
    ++refused_since_warning;
    auto now = SteadyClock::now();
    if (now - last_warning < std::chrono::seconds(10)) return;  // one line per 10 s at most
    GPOOL_LOG_WARN("http: {} ({} refused or closed in the last 10 s)", what,
                   refused_since_warning);
    last_warning = now;
    refused_since_warning = 0;
  };
  auto close_conn = [&](Conn* c) {
    auto it = per_peer_.find(c->peer);
    if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
    int fd = c->fd;
    CloseGracefully(fd);
    conns_.erase(fd);  // destroys c
  };
  auto refuse_new = [&](int fd, const std::string& why) {
    SendAndForget(fd, ErrorResponse(503, why));
    CloseGracefully(fd);
    warn(why);
  };
  auto start_writing = [&](Conn* c, std::string out, bool close_after) {
    c->state = Conn::State::kWriting;
    c->out = std::move(out);
    c->out_off = 0;
    c->close_after = close_after;
    c->deadline = SteadyClock::now() + timeout;
  };
  // A connection in kReading: dispatch the request at the front of `in` if it is complete.
  auto advance = [&](Conn* c) {
    Framing f = Frame(c->in, limits_);
    if (f.kind == Framing::Kind::kComplete) {
      c->state = Conn::State::kServing;
      c->request_size = f.size;
      {
        std::lock_guard<std::mutex> l(mu_);
        ready_.push_back(c);
      }
      work_cv_.notify_one();
    } else if (f.kind == Framing::Kind::kRefuse) {
      start_writing(c, ErrorResponse(f.status, f.why), true);
    } else if (c->eof) {
      close_conn(c);
      return false;
    }
    return true;
  };
  // Writes what the socket takes; false when the connection was closed.
  auto write_some = [&](Conn* c) {
    while (c->out_off < c->out.size()) {
      ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c->out_off += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;
      } else {
        close_conn(c);
        return false;
      }
    }
    if (c->close_after) {
      close_conn(c);
      return false;
    }
    c->state = Conn::State::kReading;
    c->out.clear();
    c->deadline = SteadyClock::now() + timeout;
    return advance(c);  // a pipelined request may be buffered already
  };
  auto admit = [&](int fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "";
    int port = 0;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        port = ntohs(a->sin_port);
      } else if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        port = ntohs(a->sin6_port);
      }
    }
    std::string peer = ip;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto pp = per_peer_.find(peer);
    if (pp != per_peer_.end() && pp->second >= limits_.max_connections_per_peer) {
      // Make room by closing the peer's oldest connection still waiting for a request: an idle
      // keep-alive one or a stalled one. A peer whose connections are all being answered (or
      // written to) has none to give, and the new one is refused.
      Conn* victim = nullptr;
      for (auto& [vfd, v] : conns_) {
        if (v->peer == peer && v->state == Conn::State::kReading &&
            (victim == nullptr || v->order < victim->order)) {
          victim = v.get();
        }
      }
      std::string why = fmt::format(
          "{} has {} connections open, the most one peer may have "
          "(--http-max-connections-per-peer)",
          peer, limits_.max_connections_per_peer);
      if (victim == nullptr) return refuse_new(fd, why);
      if (!victim->in.empty()) SendAndForget(victim->fd, ErrorResponse(503, why));
      warn(why + "; closed its oldest waiting connection");
      close_conn(victim);
    }
    if (conns_.size() >= limits_.max_connections) {
      return refuse_new(fd, fmt::format("{} connections open, the most the server takes "
                                        "(--http-max-connections)",
                                        limits_.max_connections));
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = peer;
    c->port = port;
    c->order = next_order_++;
    c->deadline = SteadyClock::now() + timeout;
    ++per_peer_[peer];
    conns_[fd] = std::move(c);
  };

  std::vector<pollfd> pfds;
  std::vector<Conn*> polled;
  for (;;) {
    std::vector<int> accepted;
    std::vector<Conn*> served;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      accepted.swap(accepted_);
      served.swap(served_);
    }
    for (int fd : accepted) admit(fd);
    for (Conn* c : served) {
      start_writing(c, std::move(c->out), c->close_after);
      write_some(c);
    }

    // Deadlines, and the poll set.
    auto now = SteadyClock::now();
    auto next = now + std::chrono::seconds(1);
    std::vector<Conn*> expired;
    pfds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    polled.assign(1, nullptr);
    for (auto& [fd, c] : conns_) {
      if (c->state == Conn::State::kServing) continue;
      if (c->deadline <= now) {
        expired.push_back(c.get());
        continue;
      }
      next = std::min(next, c->deadline);
      pfds.push_back(pollfd{fd, static_cast<short>(c->state == Conn::State::kReading ? POLLIN : POLLOUT), 0});
      polled.push_back(c.get());
    }
    for (Conn* c : expired) {
      if (c->state == Conn::State::kReading && !c->in.empty()) {
        std::string why = fmt::format("request from {} not complete within {} ms "
                                      "(--http-request-timeout-ms)",
                                      c->peer, timeout.count());
        SendAndForget(c->fd, ErrorResponse(408, why));
        warn(why);
      }
      close_conn(c);
    }
    if (!expired.empty()) continue;  // the poll set named closed sockets

    int wait_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count()) + 1;
    int n = ::poll(pfds.data(), pfds.size(), wait_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      GPOOL_LOG_ERROR("http: poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (pfds[0].revents != 0) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof(v));
    }
    for (size_t i = 1; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      Conn* c = polled[i];
      if (c->state == Conn::State::kWriting) {
        write_some(c);
        continue;
      }
      // kReading: take what arrived, up to one request's worth beyond what is buffered.
      const size_t cap = limits_.max_head_bytes + limits_.max_body_bytes;
      bool closed = false;
      char buf[16384];
      while (c->in.size() < cap && !c->eof) {
        ssize_t r = ::recv(c->fd, buf, std::min(sizeof(buf), cap - c->in.size()), 0);
        if (r > 0) {
          c->in.append(buf, static_cast<size_t>(r));
        } else if (r == 0) {
          c->eof = true;
        } else if (errno == EINTR) {
          continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
          break;
        } else {
          close_conn(c);
          closed = true;
          break;
        }
      }
      if (!closed) advance(c);
    }
  }
}

}  // namespace gpool::control
