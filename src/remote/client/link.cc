#include "remote/client/link.h"

#include <poll.h>
#include <pthread.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gpool::remote::client {

ServerLink::~ServerLink() {
  if (pump_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      pump_stop_ = true;
    }
    timer_armed_.store(false);
    ArmTimer(/*now=*/true);
    pump_.join();
  }
  if (timer_fd_ >= 0) close(timer_fd_);
  if (conn_) {
    std::lock_guard<std::mutex> lk(mu_);
    (void)Flush();
    conn_->Close();
  }
}

StatusOr<std::unique_ptr<ServerLink>> ServerLink::Connect(const LinkOptions& o) {
  std::unique_ptr<ServerLink> link(new ServerLink());
  link->address_ = o.address;
  // Control handshake over TCP; the server answers with its session worker's data address.
  GPOOL_ASSIGN_OR_RETURN(auto tcp, MakeTransport("tcp", {.max_message_bytes = 1 << 20}));
  auto control = tcp->Connect(o.address);
  if (!control.ok()) {
    return Status::Unavailable(fmt::format("GPU server {} unreachable: {}", o.address,
                                           control.status().message()));
  }
  proto::Hello hello{.token = o.token, .client = o.client_name, .transport = o.transport};
  proto::BatchWriter w;
  w.AddRequest(hello);
  GPOOL_RETURN_IF_ERROR((*control)->Send(w.Finish()));
  std::vector<std::byte> msg;
  Status rs = (*control)->Recv(&msg);
  if (!rs.ok()) {
    return Status::Unavailable(fmt::format("GPU server {} closed the handshake: {}", o.address,
                                           rs.message()));
  }
  (*control)->Close();
  GPOOL_ASSIGN_OR_RETURN(auto frames, proto::ParseMessage(msg));
  if (frames.size() != 1 || frames[0].op != (uint16_t(proto::Op::kHello) | proto::kReply)) {
    return Status::InvalidArgument(fmt::format("GPU server {}: unexpected handshake reply", o.address));
  }
  proto::ReplyHead head;
  GPOOL_RETURN_IF_ERROR(proto::DecodeReply(frames[0], &head, &link->hello_));
  if (head.error != 0) {
    return Status::PermissionDenied(fmt::format("GPU server {} refused the session: {}", o.address,
                                                head.message));
  }
  // Data connection to the session's own worker.
  GPOOL_ASSIGN_OR_RETURN(link->transport_, MakeTransport(o.transport, {}));
  auto data = link->transport_->Connect(link->hello_.data_address);
  if (!data.ok()) {
    return Status::Unavailable(fmt::format("GPU server {}: session worker at {} unreachable: {}",
                                           o.address, link->hello_.data_address,
                                           data.status().message()));
  }
  link->conn_ = std::move(*data);
  proto::Attach at{.session = link->hello_.session, .nonce = link->hello_.nonce};
  proto::Empty none;
  Status as = link->Call(at, &head, &none);
  if (!as.ok()) return as;
  if (head.error != 0) {
    return Status::PermissionDenied(fmt::format("GPU server {}: attach refused: {}", o.address,
                                                head.message));
  }
  GPOOL_RETURN_IF_ERROR(link->StartPump());
  return link;
}

StatusOr<std::unique_ptr<ServerLink>> ServerLink::OverConnection(std::unique_ptr<Connection> conn,
                                                                 std::string address) {
  std::unique_ptr<ServerLink> link(new ServerLink());
  link->address_ = std::move(address);
  link->conn_ = std::move(conn);
  GPOOL_RETURN_IF_ERROR(link->StartPump());
  return link;
}

Status ServerLink::BrokenStatus() {
  if (!broken_flag_.load(std::memory_order_relaxed)) return Status::Ok();
  std::lock_guard<std::mutex> lk(state_mu_);
  return broken_;
}

Status ServerLink::Broken(Status s) {
  std::lock_guard<std::mutex> lk(state_mu_);
  if (broken_.ok()) {
    broken_ = Status::Unavailable(fmt::format("lost the GPU server {} ({})", address_, s.message()));
    broken_flag_.store(true);
    conn_->Close();
    // Nothing more will arrive: pending reads are dropped (their buffers stay as they were).
    pending_.clear();
    PendingChanged();
  }
  return broken_;
}

Status ServerLink::CheckSessionEnd(const std::vector<proto::Frame>& frames) {
  if (frames.size() != 1 ||
      frames[0].op != (static_cast<uint16_t>(proto::Op::kSessionEnd) | proto::kReply)) {
    return Status::Ok();
  }
  proto::ReplyHead h;
  proto::SessionEnd body;
  Status d = proto::DecodeReply(frames[0], &h, &body);
  if (!d.ok()) return Check(d);
  std::lock_guard<std::mutex> lk(state_mu_);
  if (broken_.ok()) {
    broken_ = Status::PermissionDenied(
        fmt::format("GPU server {} ended the session: {}", address_, h.message));
    broken_flag_.store(true);
    conn_->Close();
    pending_.clear();
    PendingChanged();
  }
  return broken_;
}

Status ServerLink::Flush() {
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  if (batch_.empty()) return Status::Ok();
  Status s = conn_->Send(batch_.Finish());
  batch_.Reset();
  NextBatch();
  queued_.store(false, std::memory_order_relaxed);
  if (reads_queued_) ReadsSent();
  return Check(s);
}

void ServerLink::ReadsSent() {
  const bool wake = async_reads_queued_;
  reads_queued_ = async_reads_queued_ = false;
  queued_read_bytes_ = 0;
  // A synchronous read is received by its caller right away: no need for the pump.
  if (wake) ArmTimer();
}

void ServerLink::ArmTimer(bool now) {
  if (timer_armed_.exchange(true)) return;
  itimerspec t{};
  // The pump's tick is below 1 s (kMaxPumpTick), so it fits tv_nsec.
  t.it_value.tv_nsec = now ? 1 : pump_tick_us_.load(std::memory_order_relaxed) * 1000;
  // Cannot fail with a valid fd and value; the pump would then only act at a later arming.
  (void)timerfd_settime(timer_fd_, 0, &t, nullptr);
  timer_arms_.fetch_add(1, std::memory_order_relaxed);
}

bool ServerLink::ReadsUnattended() {
  if (!FrontReadSent() || broken_flag_.load()) return false;
  // A caller that holds read_mu_ receives every pending read before it lets go (try_lock: the
  // lock order is read_mu_ before state_mu_).
  if (!read_mu_.try_lock()) return false;
  read_mu_.unlock();
  return true;
}

void ServerLink::TakeAsyncFailure(proto::ReplyHead* head) {
  // The caller holds read_mu_ (as does DrainReadsLocked, its only other writer) or mu_ with no
  // read pending, when no drain runs and the last one's writes are visible (ReadReply): nothing
  // to take is seen without state_mu_ (this runs once per reply, after it arrived).
  if (async_failure_.async_error == 0) return;
  std::lock_guard<std::mutex> lk(state_mu_);
  // The earlier failure is the one to report; a later one in this reply is dropped, as CUDA
  // reports one sticky error.
  head->async_error = async_failure_.async_error;
  head->async_message = std::move(async_failure_.async_message);
  async_failure_ = proto::ReplyHead{};
}

// Copies a read's bytes where it goes: rows `pitch` apart when spread, else contiguous.
void ServerLink::Land(const PendingRead& p, std::span<const std::byte> data) {
  if (p.width != 0 && p.pitch != p.width) {
    for (size_t off = 0, row = 0; off < p.len; off += p.width, ++row) {
      std::memcpy(p.dst + row * p.pitch, data.data() + off, p.width);
    }
  } else {
    std::memcpy(p.dst, data.data(), p.len);
  }
}

Status ServerLink::DrainReadsLocked(bool sent_only) {
  // Nothing pending (a synchronous call's usual case): no state_mu_ (see pending_size_).
  if (pending_size_.load(std::memory_order_relaxed) == 0) return Status::Ok();
  for (;;) {
    PendingRead p;
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      if (pending_.empty() || (sent_only && !FrontReadSent())) return Status::Ok();
      p = pending_.front();
    }
    GPOOL_RETURN_IF_ERROR(BrokenStatus());
    const uint16_t kOp = p.op;
    // Rows that land `pitch` apart are spread from the message buffer; anything else contiguous
    // is received straight into the program's buffer when large: the reply's blob is its tail.
    const bool spread = p.width != 0 && p.pitch != p.width;
    bool split = false;
    std::span<std::byte> tail = !spread && p.len >= proto::kBareReplyMinBytes
                                    ? std::span<std::byte>(p.dst, p.len)
                                    : std::span<std::byte>();
    GPOOL_RETURN_IF_ERROR(Check(conn_->RecvSplit(&drain_in_, tail, &split)));
    CountReply();
    // A bare reply (proto::kBareReplyMinBytes): exactly the read's bytes, a success with nothing
    // deferred to report. Received into place (split, no head), or whole when spread.
    if (p.op == static_cast<uint16_t>(proto::Op::kMemcpyD2H) && p.len >= proto::kBareReplyMinBytes &&
        (split ? drain_in_.empty() : drain_in_.size() == p.len)) {
      if (!split) Land(p, drain_in_);
      std::lock_guard<std::mutex> lk(state_mu_);
      if (!pending_.empty()) pending_.pop_front();
      PendingChanged();
      continue;
    }
    std::vector<proto::Frame>& frames = drain_frames_;
    GPOOL_RETURN_IF_ERROR(Check(proto::ParseMessage(drain_in_, &frames, split ? p.len : 0)));
    if (!split) GPOOL_RETURN_IF_ERROR(CheckSessionEnd(frames));
    if (frames.size() != 1 || frames[0].op != (kOp | proto::kReply)) {
      return Check(Status::InvalidArgument(fmt::format(
          "expected one reply to {}, got {} frame(s) starting with op {}", proto::OpName(kOp),
          frames.size(), frames.empty() ? 0 : frames[0].op)));
    }
    proto::ReplyHead h;
    proto::Data d;
    if (split) {
      // The frame ends in the blob's length prefix; its bytes already sit in p.dst.
      GPOOL_RETURN_IF_ERROR(Check(proto::DecodeReplyDetached(frames[0], &h, &d)));
    } else {
      GPOOL_RETURN_IF_ERROR(Check(proto::DecodeReply(frames[0], &h, &d)));
      if (h.error == 0 && d.data.size() == p.len) Land(p, d.data);
    }
    if (h.error == 0 && h.async_error == 0 && !split && d.data.size() != p.len) {
      h.error = 999;
      h.message = fmt::format("device-to-host chunk of {} bytes came back with {}", p.len,
                              d.data.size());
    }
    std::lock_guard<std::mutex> lk(state_mu_);
    if (h.async_error != 0 && async_failure_.async_error == 0) {
      async_failure_.async_error = h.async_error;
      async_failure_.async_message = std::move(h.async_message);
    }
    if (h.error != 0) {
      if (p.result != nullptr) {
        if (p.result->error == 0) *p.result = std::move(h);
      } else if (async_failure_.async_error == 0) {
        async_failure_.async_error = h.error;
        async_failure_.async_message =
            (p.op == static_cast<uint16_t>(proto::Op::kMemcpy2D) ? "cudaMemcpy2DAsync"
                                                                  : "cudaMemcpyAsync") +
            std::string(" (device to host): ") + h.message;
      }
    }
    if (!pending_.empty()) pending_.pop_front();
    PendingChanged();
  }
}

Status ServerLink::StartPump() {
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (timer_fd_ < 0) {
    return Status::Internal(fmt::format("GPU server {}: timerfd_create for the link's pump: {}",
                                        address_, std::strerror(errno)));
  }
  pump_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "gpool-pump");  // for per-thread counts (remote_bench)
    PumpLoop();
  });
  return Status::Ok();
}

// Waits for the timer (no timeout) while nothing waits; once it fires, looks at what waits and
// acts one tick after each look: a batch still unsent since the look (same generation) is sent;
// the oldest sent read, still the oldest and still unattended, is received with every other sent
// one. A caller receiving, or holding mu_ while it works, is left alone (try_lock): it sends and
// receives itself, and may be blocked in a send that only our receiving of replies can unblock
// (hence sent reads are looked at whatever mu_). The tick backs off while the program does the
// work itself (NextPumpTick): then a look finds something new in flight nearly every time, and a
// pump ticking at kFlushTick woke once per ms for nothing.
void ServerLink::PumpLoop() {
  using Clock = std::chrono::steady_clock;
  uint64_t gen = UINT64_MAX, front = 0;  // what the last look saw waiting (front 0: no read)
  Clock::time_point looked;
  std::chrono::microseconds tick = kFlushTick;
  for (;;) {
    const bool ticking = gen != UINT64_MAX || front != 0;
    pollfd p{timer_fd_, POLLIN, 0};
    if (ticking) {
      auto left =
          std::chrono::duration_cast<std::chrono::nanoseconds>(looked + tick - Clock::now());
      timespec ts{0, std::max<long>(0, static_cast<long>(left.count()))};
      (void)ppoll(&p, 1, &ts, nullptr);
    } else {
      pump_sleeping_.store(true);
      (void)ppoll(&p, 1, nullptr, nullptr);
      pump_sleeping_.store(false);
    }
    pump_wakes_.fetch_add(1);
    if (p.revents & POLLIN) {
      uint64_t expirations;
      (void)!read(timer_fd_, &expirations, sizeof expirations);
    }
    std::unique_lock<std::mutex> lk(state_mu_);
    if (pump_stop_) return;
    // The timer fired early (armed before a look that started ticking): the tick still comes.
    if (ticking && Clock::now() < looked + tick) continue;
    // seq_cst, before the look below: a caller that queues after this arms the timer again
    // (MarkQueued, ReadsSent), one that queued before is seen by the look.
    timer_armed_.store(false);
    bool acted = false;
    // Sent reads are received before the batch is sent: a send can block until the server
    // receives, and the server may be blocked sending those reads' replies (see
    // LandReadsBeforeBulkSend).
    if (front != 0 && FrontReadSent() && pending_.front().seq == front && !broken_flag_.load()) {
      lk.unlock();
      if (read_mu_.try_lock()) {
        (void)DrainReadsLocked(/*sent_only=*/true);  // a failure marks the link broken
        read_mu_.unlock();
        acted = true;
      }
      lk.lock();
    }
    lk.unlock();
    if (gen != UINT64_MAX && queued_.load() && mu_.try_lock()) {
      if (!batch_.empty() && batch_gen_.load() == gen) {
        (void)Flush();
        pump_flushes_.fetch_add(1);
        acted = true;
      }
      mu_.unlock();
    }
    lk.lock();
    // Look: what waits now is acted on one tick from now. While ticking, callers need not arm
    // the timer (this thread looks again within a tick anyway), so they are told it is armed.
    gen = queued_.load() ? batch_gen_.load() : UINT64_MAX;
    front = ReadsUnattended() ? pending_.front().seq : 0;
    looked = Clock::now();
    const bool waiting = gen != UINT64_MAX || front != 0;
    // Not acting on what the last look saw means the program moved it; an arming whose work is
    // all gone by now means the same. A first look after an arming that finds work keeps the tick.
    tick = NextPumpTick(tick, acted, /*program_did_it=*/ticking || !waiting);
    pump_tick_us_.store(tick.count(), std::memory_order_relaxed);
    if (waiting) timer_armed_.store(true);
  }
}

Status ServerLink::ReadFrame(uint16_t op) {
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  GPOOL_RETURN_IF_ERROR(Check(conn_->Recv(&in_)));
  CountReply();
  GPOOL_RETURN_IF_ERROR(Check(proto::ParseMessage(in_, &frames_)));
  GPOOL_RETURN_IF_ERROR(CheckSessionEnd(frames_));
  if (frames_.size() != 1 || frames_[0].op != (op | proto::kReply)) {
    return Check(Status::InvalidArgument(
        fmt::format("expected one reply to {}, got {} frame(s) starting with op {}",
                    proto::OpName(op), frames_.size(), frames_[0].op)));
  }
  frame_ = frames_[0];
  return Status::Ok();
}

Status ServerLink::CopyToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream) {
  // Small copies are copied into the batch (many of them share one send); from 16 KiB on the data
  // goes as its own gather part, uncopied: a 64 KiB copy filled the batch and was sent at once
  // anyway, so copying it bought nothing (measured: 1.36x the raw transport's CPU per byte).
  constexpr size_t kInline = 16 << 10;
  size_t n = src.size();
  if (n > proto::kCopyChunkBytes) return CopyChunksToDevice(dst, src, stream);
  proto::MemcpyH2D m{.dst = dst, .stream = stream};
  if (n <= kInline) {
    m.data = src;
    return Post(m);
  }
  return PostWithTail(m, src);
}

Status ServerLink::CopyChunksToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream) {
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  GPOOL_RETURN_IF_ERROR(LandReadsBeforeBulkSend());
  if (batch_.frames() >= proto::kMaxFramesPerMessage - 1) GPOOL_RETURN_IF_ERROR(Flush());
  const size_t n = src.size();
  for (size_t off = 0; off < n;) {
    // Up to kChunksInFlight chunks per SendAll; the first carries whatever the batch holds.
    size_t k = 0;
    for (; k < kChunksInFlight && off < n; ++k, off += proto::kCopyChunkBytes) {
      size_t len = std::min(proto::kCopyChunkBytes, n - off);
      proto::MemcpyH2D m{.dst = dst + off, .stream = stream};
      proto::BatchWriter& w = k == 0 ? batch_ : chunk_heads_[k];
      if (k != 0) w.Reset();
      w.AddRequestWithTail(m, src.subspan(off, len));
      chunk_parts_[k][0] = w.Finish();
      chunk_parts_[k][1] = src.subspan(off, len);
      chunk_msgs_[k] = std::span<const wire::ByteSpan>(chunk_parts_[k], 2);
    }
    Status s = conn_->SendAll(std::span<const std::span<const wire::ByteSpan>>(chunk_msgs_, k));
    batch_.Reset();
    NextBatch();
    queued_.store(false, std::memory_order_relaxed);
    if (reads_queued_) ReadsSent();
    GPOOL_RETURN_IF_ERROR(Check(s));
  }
  return Status::Ok();
}

Status ServerLink::CopyFromDevice(std::byte* dst, uint64_t src, size_t n, uint64_t stream,
                                  proto::ReplyHead* head, bool async) {
  *head = proto::ReplyHead{};
  if (n == 0) return Status::Ok();
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  size_t chunks = (n + proto::kCopyChunkBytes - 1) / proto::kCopyChunkBytes;
  for (size_t i = 0; i < chunks; ++i) {
    size_t off = i * proto::kCopyChunkBytes;
    size_t len = std::min(proto::kCopyChunkBytes, n - off);
    {
      // Registered before its request can leave, so every reader knows the replies ahead of its
      // own; with the generation of the batch that carries the request.
      std::lock_guard<std::mutex> lk(state_mu_);
      pending_.push_back(
          PendingRead{dst + off, len, async ? nullptr : head, batch_gen_.load(), ++read_seq_});
      PendingChanged();
    }
    proto::MemcpyD2H m{.src = src + off, .size = len, .stream = stream};
    batch_.AddRequest(m);
    reads_queued_ = true;
    async_reads_queued_ |= async;
    queued_read_bytes_ += len;
    if (batch_.bytes() >= kFlushBytes || batch_.frames() >= proto::kMaxFramesPerMessage - 1) {
      GPOOL_RETURN_IF_ERROR(Flush());
    }
  }
  return FinishReads(head, async, stream);
}

Status ServerLink::FinishReads(proto::ReplyHead* head, bool async, uint64_t stream) {
  last_read_ = LastRead{.added = batch_.added(), .stream = stream, .failed = false};
  if (async) {
    // Small asynchronous reads stay queued, so that a burst of them shares one send (the next
    // synchronizing call, a full chunk's worth of reads, or the pump sends it); a chunk's worth
    // goes at once, as the copy should start.
    if (queued_read_bytes_ >= proto::kCopyChunkBytes) return Flush();
    MarkQueued();
    return Status::Ok();
  }
  GPOOL_RETURN_IF_ERROR(Flush());
  std::lock_guard<std::mutex> r(read_mu_);
  GPOOL_RETURN_IF_ERROR(DrainReadsLocked());
  TakeAsyncFailure(head);
  last_read_.failed = head->error != 0 || head->async_error != 0;
  return Status::Ok();
}

Status ServerLink::CopyToDevice2D(uint64_t dst, size_t dpitch, const std::byte* src, size_t spitch,
                                  size_t width, size_t height, uint64_t stream) {
  if (width == 0 || height == 0) return Status::Ok();
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  if (dpitch == width && spitch == width) {
    return CopyToDevice(dst, wire::ByteSpan(src, width * height), stream);
  }
  if (width > proto::kCopyChunkBytes) {  // each row is a large copy of its own
    for (size_t r = 0; r < height; ++r) {
      GPOOL_RETURN_IF_ERROR(CopyToDevice(dst + r * dpitch, wire::ByteSpan(src + r * spitch, width),
                                         stream));
    }
    return Status::Ok();
  }
  constexpr size_t kInline = 16 << 10;  // as CopyToDevice: smaller ones are copied into the batch
  const size_t rows = proto::kCopyChunkBytes / width;
  for (size_t r0 = 0; r0 < height; r0 += rows) {
    const size_t h = std::min(rows, height - r0);
    wire::ByteSpan packed;
    if (spitch == width) {
      packed = wire::ByteSpan(src + r0 * spitch, width * h);
    } else {
      pack2d_.resize(width * h);
      for (size_t r = 0; r < h; ++r) {
        std::memcpy(pack2d_.data() + r * width, src + (r0 + r) * spitch, width);
      }
      packed = wire::ByteSpan(pack2d_.data(), width * h);
    }
    if (dpitch == width) {  // contiguous on the device: a 1-D copy, received in place
      GPOOL_RETURN_IF_ERROR(CopyToDevice(dst + r0 * dpitch, packed, stream));
      continue;
    }
    proto::Memcpy2DAsync m;
    m.kind = static_cast<uint8_t>(proto::CopyKind::kHostToDevice);
    m.dst = dst + r0 * dpitch;
    m.dpitch = dpitch;
    m.spitch = width;
    m.width = width;
    m.height = h;
    m.stream = stream;
    if (packed.size() <= kInline) {
      m.data = packed;
      GPOOL_RETURN_IF_ERROR(Post(m));
    } else {
      GPOOL_RETURN_IF_ERROR(PostWithTail(m, packed));  // sent before pack2d_ is reused
    }
  }
  return Status::Ok();
}

Status ServerLink::CopyFromDevice2D(std::byte* dst, size_t dpitch, uint64_t src, size_t spitch,
                                    size_t width, size_t height, uint64_t stream,
                                    proto::ReplyHead* head, bool async) {
  *head = proto::ReplyHead{};
  if (width == 0 || height == 0) return Status::Ok();
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  if (dpitch == width && spitch == width) {
    return CopyFromDevice(dst, src, width * height, stream, head, async);
  }
  if (width > proto::kCopyChunkBytes) {  // each row is a large copy of its own
    for (size_t r = 0; r < height; ++r) {
      GPOOL_RETURN_IF_ERROR(
          CopyFromDevice(dst + r * dpitch, src + r * spitch, width, stream, head, async));
      if (head->error != 0 || head->async_error != 0) return Status::Ok();
    }
    return Status::Ok();
  }
  const size_t rows = proto::kCopyChunkBytes / width;
  for (size_t r0 = 0; r0 < height; r0 += rows) {
    const size_t h = std::min(rows, height - r0);
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      PendingRead p{dst + r0 * dpitch, width * h, async ? nullptr : head, batch_gen_.load(),
                    ++read_seq_};
      p.op = static_cast<uint16_t>(proto::Op::kMemcpy2D);
      p.width = width;
      p.pitch = dpitch;
      pending_.push_back(p);
      PendingChanged();
    }
    proto::Memcpy2D m;
    m.kind = static_cast<uint8_t>(proto::CopyKind::kDeviceToHost);
    m.dpitch = width;  // rows come back packed
    m.src = src + r0 * spitch;
    m.spitch = spitch;
    m.width = width;
    m.height = h;
    m.stream = stream;
    batch_.AddRequest(m);
    reads_queued_ = true;
    async_reads_queued_ |= async;
    queued_read_bytes_ += width * h;
    if (batch_.bytes() >= kFlushBytes || batch_.frames() >= proto::kMaxFramesPerMessage - 1) {
      GPOOL_RETURN_IF_ERROR(Flush());
    }
  }
  return FinishReads(head, async, stream);
}

template <class Msg>
Status ServerLink::StreamRequest(uint32_t device, uint64_t stream, proto::ReplyHead* head) {
  *head = proto::ReplyHead{};
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  bool answered_by_reads = last_read_.added != 0 && last_read_.added == batch_.added() &&
                           !last_read_.failed && last_read_.stream == stream &&
                           (stream != 0 || hello_.device_count == 1);
  if (answered_by_reads) {
    // (A query too waits for the reads: asked, it would receive their replies first.)
    GPOOL_RETURN_IF_ERROR(WaitReads());
    // Any failure goes to the server, which says what the stream's state is now (a sticky error
    // stays; a bad read's argument error does not).
    std::lock_guard<std::mutex> lk(state_mu_);
    answered_by_reads = async_failure_.async_error == 0;
  }
  if (answered_by_reads) {
    syncs_elided_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  Msg q;
  q.stream = stream;
  q.device = device;
  proto::Empty none;
  return Call(q, head, &none);
}

Status ServerLink::SyncStream(uint32_t device, uint64_t stream, proto::ReplyHead* head) {
  return StreamRequest<proto::StreamSync>(device, stream, head);
}

Status ServerLink::QueryStream(uint32_t device, uint64_t stream, proto::ReplyHead* head) {
  return StreamRequest<proto::StreamQuery>(device, stream, head);
}

}  // namespace gpool::remote::client
