#include "remote/transport/tcp_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "remote/transport/socket.h"

namespace gpool::remote {
namespace {

using net::Fd;

constexpr uint32_t kMagic = 0x31545047;  // "GPT1"
constexpr uint64_t kStripedBit = uint64_t{1} << 63;
constexpr uint64_t kTailBit = uint64_t{1} << 62;  // a u64 tail length follows the header word
constexpr uint64_t kLengthBits = kTailBit - 1;
constexpr uint8_t kKindControl = 0;
constexpr uint8_t kKindData = 1;

// Fixed-layout handshake records; encoded explicitly so the wire never depends on struct padding.
struct Hello {
  uint32_t magic = kMagic;
  uint8_t kind = kKindControl;
  uint8_t index = 0;
  uint16_t data_streams = 0;
  uint64_t token = 0;
};
constexpr size_t kHelloSize = 16;

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

Status SendHello(int fd, const Hello& h, std::string_view peer) {
  uint8_t b[kHelloSize];
  PutLe(b, h.magic, 4);
  b[4] = h.kind;
  b[5] = h.index;
  PutLe(b + 6, h.data_streams, 2);
  PutLe(b + 8, h.token, 8);
  return net::WriteAll(fd, b, sizeof(b), peer);
}

StatusOr<Hello> RecvHello(int fd, std::string_view peer) {
  uint8_t b[kHelloSize];
  GPOOL_RETURN_IF_ERROR(net::ReadAll(fd, b, sizeof(b), peer));
  Hello h;
  h.magic = static_cast<uint32_t>(GetLe(b, 4));
  h.kind = b[4];
  h.index = b[5];
  h.data_streams = static_cast<uint16_t>(GetLe(b + 6, 2));
  h.token = GetLe(b + 8, 8);
  if (h.magic != kMagic) {
    return Status::InvalidArgument(
        fmt::format("{}: bad handshake magic 0x{:08x} (not a gpool tcp peer?)", peer, h.magic));
  }
  if (h.kind > kKindData || h.data_streams > kMaxTcpDataStreams) {
    return Status::InvalidArgument(fmt::format("{}: bad handshake (kind {}, {} data streams)",
                                               peer, h.kind, h.data_streams));
  }
  return h;
}

class TcpConnection final : public Connection {
 public:
  TcpConnection(Fd control, std::vector<Fd> data, const TransportOptions& options)
      : control_(std::move(control)), data_(std::move(data)), options_(options) {
    peer_ = net::PeerAddress(control_.get());
  }
  ~TcpConnection() override { Close(); }

  Status Send(std::span<const ByteSpan> parts) override {
    size_t total = 0;
    for (const ByteSpan& p : parts) total += p.size();
    if (total > options_.max_message_bytes) {
      return Status::InvalidArgument(fmt::format("message of {} bytes to {} exceeds the {} byte limit",
                                                 total, peer_, options_.max_message_bytes));
    }
    if (closed_.load()) return Closed();
    const bool striped = !data_.empty() && total >= options_.stripe_min_bytes;
    uint8_t header[16];
    const size_t header_len = Header(parts, total, striped, header);
    size_t control_len = striped ? total / (data_.size() + 1) : total;
    if (!striped && parts.size() <= 3) {
      // The common small message: header and parts in one sendmsg, no allocation.
      iovec v[4];
      size_t n = 0;
      v[n++] = iovec{header, header_len};
      for (const ByteSpan& p : parts) {
        if (!p.empty()) v[n++] = iovec{const_cast<std::byte*>(p.data()), p.size()};
      }
      return Fail(net::WriteAll(control_.get(), std::span<iovec>(v, n), peer_));
    }

    std::vector<iovec> iov;
    iov.reserve(parts.size() + 1);
    iov.push_back(iovec{header, header_len});
    std::vector<iovec> body = net::SliceParts(parts, 0, control_len);
    iov.insert(iov.end(), body.begin(), body.end());
    if (!striped) return Fail(net::WriteAll(control_.get(), iov, peer_));

    // One thread per extra stream; the calling thread writes the control slice.
    std::vector<Status> results(data_.size());
    std::vector<std::thread> threads;
    threads.reserve(data_.size());
    for (size_t i = 0; i < data_.size(); ++i) {
      auto [off, len] = Slice(total, i + 1);
      threads.emplace_back([&, i, off = off, len = len] {
        std::vector<iovec> v = net::SliceParts(parts, off, len);
        results[i] = net::WriteAll(data_[i].get(), v, peer_);
      });
    }
    Status s = net::WriteAll(control_.get(), iov, peer_);
    for (auto& t : threads) t.join();
    for (const Status& r : results) {
      if (s.ok() && !r.ok()) s = r;
    }
    return Fail(s);
  }

  bool SendAllGathers() const override { return true; }

  // Unstriped messages go out together: their headers and parts in one gather list, so a run of
  // small messages (a server's replies to a run of small reads) costs one sendmsg, not one each.
  // A striped one flushes what is gathered and goes by Send, its slices on the data streams.
  Status SendAll(std::span<const std::span<const ByteSpan>> messages) override {
    if (messages.size() == 1) return Send(messages[0]);
    if (closed_.load()) return Closed();
    std::vector<std::array<uint8_t, 16>> headers(messages.size());
    std::vector<iovec> iov;
    auto flush = [&]() -> Status {
      if (iov.empty()) return Status::Ok();
      Status s = net::WriteAll(control_.get(), iov, peer_);
      iov.clear();
      return Fail(s);
    };
    for (size_t i = 0; i < messages.size(); ++i) {
      std::span<const ByteSpan> parts = messages[i];
      size_t total = 0;
      for (const ByteSpan& p : parts) total += p.size();
      if (total > options_.max_message_bytes) {
        GPOOL_RETURN_IF_ERROR(flush());
        return Status::InvalidArgument(fmt::format("message of {} bytes to {} exceeds the {} byte limit",
                                                   total, peer_, options_.max_message_bytes));
      }
      if (!data_.empty() && total >= options_.stripe_min_bytes) {
        GPOOL_RETURN_IF_ERROR(flush());
        GPOOL_RETURN_IF_ERROR(Send(parts));
        continue;
      }
      const size_t header_len = Header(parts, total, /*striped=*/false, headers[i].data());
      iov.push_back(iovec{headers[i].data(), header_len});
      for (const ByteSpan& p : parts) {
        if (!p.empty()) iov.push_back(iovec{const_cast<std::byte*>(p.data()), p.size()});
      }
    }
    return flush();
  }

  Status Recv(std::vector<std::byte>* message) override {
    size_t placed;
    return Receive(message, {}, nullptr, &placed);
  }

  Status RecvSplit(std::vector<std::byte>* message, std::span<std::byte> tail,
                   bool* split) override {
    size_t placed = 0;
    Status s = Receive(message, tail, nullptr, &placed);
    *split = placed != 0;
    return s;
  }

  Status RecvPlaced(std::vector<std::byte>* message, TailPlacer& placer,
                    size_t* placed) override {
    return Receive(message, {}, &placer, placed);
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    // shutdown (not close) wakes threads blocked in recv/send on these fds without letting the fd
    // number be reused under them; the fds are closed by the destructor.
    ::shutdown(control_.get(), SHUT_RDWR);
    for (Fd& d : data_) ::shutdown(d.get(), SHUT_RDWR);
  }

  Status AbandonAfterFork() override {
    closed_.store(true);  // the destructor's Close now shuts nothing down
    control_.Reset();
    for (Fd& d : data_) d.Reset();
    return Status::Ok();
  }

  std::string peer() const override { return peer_; }
  std::string local_address() const override { return net::LocalAddress(control_.get()); }
  Status SetRecvTimeout(int timeout_ms) override {
    return net::SetTimeouts(control_.get(), timeout_ms);
  }

 private:
  // Writes the frame header of a message of `parts` (`total` bytes) into `header` (16 bytes of
  // room) and returns its length: 8 bytes, or 16 when its last part is marked as its tail.
  static size_t Header(std::span<const ByteSpan> parts, size_t total, bool striped, uint8_t* header) {
    const size_t tail_len =
        parts.size() >= 2 && parts.back().size() >= kTailMinBytes ? parts.back().size() : 0;
    PutLe(header, total | (striped ? kStripedBit : 0) | (tail_len ? kTailBit : 0), 8);
    PutLe(header + 8, tail_len, 8);
    return tail_len ? 16 : 8;
  }

  // Byte range of slice `i` of a striped message of `total` bytes.
  std::pair<size_t, size_t> Slice(size_t total, size_t i) const {
    size_t n = data_.size() + 1;
    size_t begin = total / n * i;
    size_t end = i + 1 == n ? total : total / n * (i + 1);
    return {begin, end - begin};
  }

  // Receives one frame. Without a placer, the message's last tail.size() bytes go into a
  // non-empty `tail` when the message is that long (RecvSplit). With a placer (RecvPlaced), a
  // frame sent with a tail asks it where the tail goes once the head is in. *placed: how many
  // bytes went outside *message. Receiver thread only.
  Status Receive(std::vector<std::byte>* message, std::span<std::byte> tail, TailPlacer* placer,
                 size_t* placed) {
    *placed = 0;
    if (closed_.load()) return Closed();
    uint8_t header[8];
    Status s = ReadControl(header, sizeof(header));
    if (!s.ok()) return Fail(s);
    uint64_t word = GetLe(header, 8);
    const bool striped = (word & kStripedBit) != 0;
    const uint64_t total = word & kLengthBits;
    bulk_ = total >= kTailMinBytes;
    uint64_t marked_tail = 0;
    if (word & kTailBit) {
      s = ReadControl(header, sizeof(header));
      if (!s.ok()) return Fail(s);
      marked_tail = GetLe(header, 8);
    }
    if (total > options_.max_message_bytes) {
      Close();
      return Status::InvalidArgument(
          fmt::format("frame of {} bytes from {} exceeds the {} byte limit; connection closed",
                      total, peer_, options_.max_message_bytes));
    }
    if (marked_tail > total) {
      Close();
      return Status::InvalidArgument(fmt::format(
          "frame of {} bytes from {} claims a {} byte tail; connection closed", total, peer_,
          marked_tail));
    }
    if (striped && data_.empty()) {
      Close();
      return Status::InvalidArgument(
          fmt::format("striped frame from {} on a connection without data streams", peer_));
    }
    size_t head_len = total;
    size_t done = 0;  // bytes of the message already read (into *message)
    if (placer != nullptr) {
      // The head must be read before the placer can look at it: all of it precedes the tail on
      // the control stream unless striping spread the head itself (a head over 1/streams of the
      // message; then the message is received whole).
      const size_t candidate = total - marked_tail;
      if (marked_tail != 0 && (!striped || candidate <= Slice(total, 0).second)) {
        message->resize(candidate);
        s = ReadControl(message->data(), candidate);
        if (!s.ok()) return Fail(s);
        done = candidate;
        std::span<std::byte> where = placer->Place(*message, marked_tail);
        if (where.size() == marked_tail) {
          tail = where;
          head_len = candidate;
        }
      }
    } else if (!tail.empty() && total >= tail.size()) {
      head_len = total - tail.size();
    } else {
      tail = {};
    }
    if (head_len == total) tail = {};
    *placed = total - head_len;
    message->resize(head_len);
    // Reads bytes [off, off+len) of the message from `fd`: the part before head_len into
    // *message, the rest into `tail`.
    auto read_range = [&, base = message->data()](int fd, size_t off, size_t len) {
      auto read = [&](void* p, size_t n) {
        return fd == control_.get() ? ReadControl(p, n) : net::ReadAll(fd, p, n, peer_);
      };
      size_t in_head = off < head_len ? std::min(len, head_len - off) : 0;
      Status r = read(base + off, in_head);
      if (r.ok() && len > in_head) r = read(tail.data() + (off + in_head - head_len), len - in_head);
      return r;
    };
    if (!striped) return Fail(read_range(control_.get(), done, total - done));

    std::vector<Status> results(data_.size());
    std::vector<std::thread> threads;
    threads.reserve(data_.size());
    for (size_t i = 0; i < data_.size(); ++i) {
      auto [off, len] = Slice(total, i + 1);
      threads.emplace_back([&, i, off = off, len = len] {
        results[i] = read_range(data_[i].get(), off, len);
      });
    }
    auto [off0, len0] = Slice(total, 0);
    s = read_range(control_.get(), off0 + done, len0 - done);
    for (auto& t : threads) t.join();
    for (const Status& r : results) {
      if (s.ok() && !r.ok()) s = r;
    }
    return Fail(s);
  }

  // Reads exactly `n` bytes from the control stream: first what an earlier recv read ahead, then
  // straight into `dst` with one recvmsg per arrival whose second iovec reads ahead into rbuf_,
  // so that a small message (header and body) usually costs one syscall and the next header
  // comes with the end of the current body. The bytes read ahead are copied once more; so after a
  // large message (likely followed by another: a bulk stream) the read-ahead is kept small, else
  // every large payload was received into rbuf_ with its header and copied out in full (measured:
  // 64 KiB messages were memcpy'd byte for byte on the receiving side). Receiver thread only.
  Status ReadControl(void* dst, size_t n) {
    auto* out = static_cast<std::byte*>(dst);
    size_t have = std::min(n, rend_ - rpos_);
    if (have > 0) std::memcpy(out, rbuf_.data() + rpos_, have);
    rpos_ += have;
    out += have;
    n -= have;
    if (n == 0) return Status::Ok();
    if (rbuf_.empty()) rbuf_.resize(kReadBuffer);
    rpos_ = rend_ = 0;
    const size_t ahead = bulk_ ? kBulkReadAhead : kReadBuffer;
    while (n > 0) {
      iovec v[2] = {{out, n}, {rbuf_.data(), ahead}};
      msghdr msg{};
      msg.msg_iov = v;
      msg.msg_iovlen = 2;
      ssize_t got = ::recvmsg(control_.get(), &msg, 0);
      if (got == 0) return Status::Unavailable(fmt::format("{} closed the connection", peer_));
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          return Status::Unavailable(fmt::format("receive from {} timed out", peer_));
        }
        return Status::Unavailable(fmt::format("receive from {}: {}", peer_, net::SocketError(errno)));
      }
      size_t take = std::min(n, static_cast<size_t>(got));
      out += take;
      n -= take;
      rend_ = static_cast<size_t>(got) - take;
    }
    return Status::Ok();
  }

  Status Closed() const {
    return Status::Unavailable(fmt::format("connection to {} is closed", peer_));
  }

  // Any transport error leaves the stream at an unknown frame boundary: close for good.
  Status Fail(Status s) {
    if (s.ok()) return s;
    bool was_closed = closed_.load();
    Close();
    return was_closed ? Closed() : s;
  }

  Fd control_;
  std::vector<Fd> data_;
  TransportOptions options_;
  std::string peer_;
  std::atomic<bool> closed_{false};
  static constexpr size_t kReadBuffer = 64 << 10;
  // Read-ahead after a message of at least kTailMinBytes: room for the next frame's header and a
  // reply's or request's head, little of a following bulk payload.
  static constexpr size_t kBulkReadAhead = 1 << 10;
  std::vector<std::byte> rbuf_;  // control-stream bytes read ahead: [rpos_, rend_) unread
  size_t rpos_ = 0, rend_ = 0;
  bool bulk_ = false;  // the last message received was at least kTailMinBytes
};

class TcpListener final : public Listener {
 public:
  TcpListener(std::unique_ptr<net::WakeableListenSocket> socket, const TransportOptions& options)
      : socket_(std::move(socket)), options_(options) {}

  StatusOr<std::unique_ptr<Connection>> Accept() override {
    for (;;) {
      // Handed over once its 16-byte hello is in: Handshake's reads never wait on a silent peer.
      GPOOL_ASSIGN_OR_RETURN(Fd sock, socket_->AcceptArrived([](std::span<const std::byte>) {
        return kHelloSize;
      }, options_.handshake_timeout_ms));
      StatusOr<std::unique_ptr<Connection>> conn = Handshake(std::move(sock));
      // A bad handshake is the client's problem, not the listener's: keep accepting.
      if (conn.ok() && *conn != nullptr) return conn;
    }
  }

  void Close() override { socket_->Close(); }
  Status AbandonAfterFork() override {
    socket_->AbandonAfterFork();
    pending_.clear();  // other clients' half-done handshakes: the parent's (Fd closes, no shutdown)
    return Status::Ok();
  }
  std::string address() const override { return socket_->address(); }

 private:
  struct Pending {
    Fd control;
    std::vector<Fd> data;  // indexed by stream; invalid until it arrives
    size_t arrived = 0;
  };

  // Returns a connection when `sock` completes one, nullptr when more sockets are awaited.
  StatusOr<std::unique_ptr<Connection>> Handshake(Fd sock) {
    std::string peer = net::PeerAddress(sock.get());
    GPOOL_RETURN_IF_ERROR(net::SetLiveness(sock.get(), options_.liveness));
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(sock.get(), options_.handshake_timeout_ms));
    GPOOL_ASSIGN_OR_RETURN(Hello h, RecvHello(sock.get(), peer));
    if (h.kind == kKindControl) {
      uint64_t token = rng_();
      uint8_t reply[16];
      PutLe(reply, kMagic, 4);
      PutLe(reply + 4, 0, 4);
      PutLe(reply + 8, token, 8);
      GPOOL_RETURN_IF_ERROR(net::WriteAll(sock.get(), reply, sizeof(reply), peer));
      GPOOL_RETURN_IF_ERROR(net::SetTimeouts(sock.get(), 0));
      if (h.data_streams == 0) {
        return std::unique_ptr<Connection>(
            new TcpConnection(std::move(sock), {}, options_));
      }
      // Bound the table: a client that never sends its data sockets must not grow it forever.
      if (pending_.size() >= 64) pending_.erase(pending_.begin());
      Pending p;
      p.control = std::move(sock);
      p.data.resize(h.data_streams);
      pending_[token] = std::move(p);
      return std::unique_ptr<Connection>();
    }
    auto it = pending_.find(h.token);
    if (it == pending_.end() || h.index >= it->second.data.size() ||
        it->second.data[h.index].valid()) {
      return Status::InvalidArgument(fmt::format("{}: data stream for unknown token", peer));
    }
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(sock.get(), 0));
    it->second.data[h.index] = std::move(sock);
    if (++it->second.arrived < it->second.data.size()) return std::unique_ptr<Connection>();
    Pending p = std::move(it->second);
    pending_.erase(it);
    return std::unique_ptr<Connection>(
        new TcpConnection(std::move(p.control), std::move(p.data), options_));
  }

  std::unique_ptr<net::WakeableListenSocket> socket_;
  TransportOptions options_;
  std::map<uint64_t, Pending> pending_;
  std::mt19937_64 rng_{std::random_device{}()};
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportOptions& options) : options_(options) {}
  std::string_view name() const override { return "tcp"; }

  StatusOr<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    GPOOL_ASSIGN_OR_RETURN(auto socket, net::WakeableListenSocket::Listen(address));
    return std::unique_ptr<Listener>(new TcpListener(std::move(socket), options_));
  }

  StatusOr<std::unique_ptr<Connection>> Connect(std::string_view address) override {
    int streams = std::clamp(options_.tcp_data_streams, 0, kMaxTcpDataStreams);
    GPOOL_ASSIGN_OR_RETURN(Fd control, net::ConnectTcp(address));
    GPOOL_RETURN_IF_ERROR(net::SetLiveness(control.get(), options_.liveness));
    std::string peer(address);
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(control.get(), options_.handshake_timeout_ms));
    Hello h;
    h.kind = kKindControl;
    h.data_streams = static_cast<uint16_t>(streams);
    GPOOL_RETURN_IF_ERROR(SendHello(control.get(), h, peer));
    uint8_t reply[16];
    Status s = net::ReadAll(control.get(), reply, sizeof(reply), peer);
    if (!s.ok()) return Status::Unavailable("tcp handshake: " + s.message());
    if (GetLe(reply, 4) != kMagic) {
      return Status::InvalidArgument(fmt::format("{}: not a gpool tcp listener", peer));
    }
    uint64_t token = GetLe(reply + 8, 8);
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(control.get(), 0));
    std::vector<Fd> data;
    for (int i = 0; i < streams; ++i) {
      GPOOL_ASSIGN_OR_RETURN(Fd d, net::ConnectTcp(address));
      GPOOL_RETURN_IF_ERROR(net::SetLiveness(d.get(), options_.liveness));
      Hello dh;
      dh.kind = kKindData;
      dh.index = static_cast<uint8_t>(i);
      dh.data_streams = static_cast<uint16_t>(streams);
      dh.token = token;
      GPOOL_RETURN_IF_ERROR(SendHello(d.get(), dh, peer));
      data.push_back(std::move(d));
    }
    return std::unique_ptr<Connection>(
        new TcpConnection(std::move(control), std::move(data), options_));
  }

 private:
  TransportOptions options_;
};

}  // namespace

std::unique_ptr<Transport> MakeTcpTransport(const TransportOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace gpool::remote
