#include "remote/client/link.h"

#include <cstring>

#include <fmt/format.h>

namespace gpool::remote::client {

ServerLink::~ServerLink() {
  if (pump_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      pump_stop_ = true;
    }
    pump_cv_.notify_all();
    pump_.join();
  }
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
  link->StartPump();
  return link;
}

Status ServerLink::BrokenStatus() {
  if (!broken_flag_.load(std::memory_order_relaxed)) return Status::Ok();
  std::lock_guard<std::mutex> lk(state_mu_);
  return broken_;
}

Status ServerLink::Check(Status s) {
  if (s.ok()) return s;
  std::lock_guard<std::mutex> lk(state_mu_);
  if (broken_.ok()) {
    broken_ = Status::Unavailable(fmt::format("lost the GPU server {} ({})", address_, s.message()));
    broken_flag_.store(true);
    conn_->Close();
    // Nothing more will arrive: pending reads are dropped (their buffers stay as they were).
    pending_.clear();
  }
  return broken_;
}

Status ServerLink::Flush() {
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  if (batch_.empty()) return Status::Ok();
  Status s = conn_->Send(batch_.Finish());
  batch_.Reset();
  ++batch_gen_;
  queued_.store(false, std::memory_order_relaxed);
  if (reads_queued_) ReadsSent();
  return Check(s);
}

void ServerLink::ReadsSent() {
  reads_queued_ = false;
  queued_read_bytes_ = 0;
  // Under state_mu_: the pump checks FrontReadSent() under it before it waits.
  std::lock_guard<std::mutex> lk(state_mu_);
  pump_cv_.notify_one();
}

void ServerLink::TakeAsyncFailure(proto::ReplyHead* head) {
  std::lock_guard<std::mutex> lk(state_mu_);
  if (async_failure_.async_error == 0) return;
  // The earlier failure is the one to report; a later one in this reply is dropped, as CUDA
  // reports one sticky error.
  head->async_error = async_failure_.async_error;
  head->async_message = std::move(async_failure_.async_message);
  async_failure_ = proto::ReplyHead{};
}

Status ServerLink::DrainReadsLocked(bool sent_only) {
  for (;;) {
    PendingRead p;
    {
      std::lock_guard<std::mutex> lk(state_mu_);
      if (pending_.empty() || (sent_only && !FrontReadSent())) return Status::Ok();
      p = pending_.front();
    }
    GPOOL_RETURN_IF_ERROR(BrokenStatus());
    constexpr uint16_t kOp = static_cast<uint16_t>(proto::Op::kMemcpyD2H);
    // Large chunks are received straight into the program's buffer: the reply's blob is its tail.
    bool split = false;
    std::span<std::byte> tail = p.len >= (64 << 10) ? std::span<std::byte>(p.dst, p.len)
                                                    : std::span<std::byte>();
    GPOOL_RETURN_IF_ERROR(Check(conn_->RecvSplit(&drain_in_, tail, &split)));
    auto frames = proto::ParseMessage(drain_in_, split ? p.len : 0);
    if (!frames.ok()) return Check(frames.status());
    if (frames->size() != 1 || (*frames)[0].op != (kOp | proto::kReply)) {
      return Check(Status::InvalidArgument(fmt::format(
          "expected one reply to MemcpyD2H, got {} frame(s) starting with op {}", frames->size(),
          frames->empty() ? 0 : (*frames)[0].op)));
    }
    proto::ReplyHead h;
    proto::Data d;
    if (split) {
      // The frame ends in the blob's length prefix; its bytes already sit in p.dst.
      GPOOL_RETURN_IF_ERROR(Check(proto::DecodeReplyDetached((*frames)[0], &h, &d)));
    } else {
      GPOOL_RETURN_IF_ERROR(Check(proto::DecodeReply((*frames)[0], &h, &d)));
      if (h.error == 0 && d.data.size() == p.len) std::memcpy(p.dst, d.data.data(), p.len);
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
        async_failure_.async_message = "cudaMemcpyAsync (device to host): " + h.message;
      }
    }
    if (!pending_.empty()) pending_.pop_front();
  }
}

void ServerLink::StartPump() {
  pump_ = std::thread([this] { PumpLoop(); });
}

void ServerLink::WakePump() {
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    pump_wake_ = true;
  }
  pump_cv_.notify_one();
}

// One tick per kFlushTick while the link is busy: a batch seen non-empty at two consecutive
// ticks without being sent in between is flushed (so it waited 1-2 ticks); likewise a sent read
// still waiting at two consecutive ticks is received by the pump. After 100 idle ticks the pump sleeps until a Post or
// a pending read wakes it (see Post: the sleeping flag is set before the last look at the batch,
// under mu_, so a Post that comes after that look sees it and wakes the pump).
void ServerLink::PumpLoop() {
  uint64_t seen_gen = UINT64_MAX;  // batch generation seen non-empty at the last tick
  uint64_t seen_read = UINT64_MAX;  // oldest sent read seen waiting at the last tick
  int idle_ticks = 0;
  std::unique_lock<std::mutex> lk(state_mu_);
  while (!pump_stop_) {
    const bool reads_waiting = FrontReadSent() && !broken_flag_.load();
    if (reads_waiting && pending_.front().seq == seen_read) {
      lk.unlock();
      {
        std::lock_guard<std::mutex> r(read_mu_);
        (void)DrainReadsLocked(/*sent_only=*/true);  // a failure marks the link broken
      }
      lk.lock();
      idle_ticks = 0;
      seen_read = UINT64_MAX;
      continue;
    }
    // A read waits one tick for the program's own next call to collect it: receiving on the
    // calling thread saves a handoff per burst (measured: 64 KiB reads cost 1.3-1.4x the raw
    // stream's CPU when the pump received them).
    if (reads_waiting) {
      seen_read = pending_.front().seq;
      idle_ticks = 0;
    }
    if (idle_ticks >= 100) {
      pump_sleeping_.store(true);
      lk.unlock();
      // try_lock: a caller holding mu_ may be blocked in a send that only our draining of
      // replies can unblock; a held mu_ just means "busy, don't sleep".
      bool empty = false;
      if (mu_.try_lock()) {
        empty = batch_.empty();
        mu_.unlock();
      }
      lk.lock();
      if (empty) pump_cv_.wait(lk, [&] { return pump_stop_ || pump_wake_ || FrontReadSent(); });
      pump_sleeping_.store(false);
      pump_wake_ = false;
      idle_ticks = 0;
      continue;
    }
    pump_cv_.wait_for(lk, kFlushTick, [&] { return pump_stop_; });
    if (pump_stop_) continue;
    lk.unlock();
    bool busy = false;
    if (!queued_.load(std::memory_order_relaxed)) {
      seen_gen = UINT64_MAX;  // nothing queued: idle, whoever holds mu_
    } else if (mu_.try_lock()) {  // held: a caller is at work and sends or queues itself
      if (!batch_.empty()) {
        busy = true;
        if (seen_gen == batch_gen_) {
          (void)Flush();
          pump_flushes_.fetch_add(1);
          seen_gen = UINT64_MAX;
        } else {
          seen_gen = batch_gen_;
        }
      } else {
        seen_gen = UINT64_MAX;
      }
      mu_.unlock();
    } else {
      busy = true;
    }
    lk.lock();
    idle_ticks = busy || reads_waiting ? 0 : idle_ticks + 1;
  }
}

Status ServerLink::ReadFrame(uint16_t op) {
  GPOOL_RETURN_IF_ERROR(BrokenStatus());
  GPOOL_RETURN_IF_ERROR(Check(conn_->Recv(&in_)));
  auto frames = proto::ParseMessage(in_);
  if (!frames.ok()) return Check(frames.status());
  if (frames->size() != 1 || (*frames)[0].op != (op | proto::kReply)) {
    return Check(Status::InvalidArgument(
        fmt::format("expected one reply to {}, got {} frame(s) starting with op {}",
                    proto::OpName(op), frames->size(), (*frames)[0].op)));
  }
  frame_ = (*frames)[0];
  return Status::Ok();
}

Status ServerLink::CopyToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream) {
  // Small copies are copied into the batch (many of them share one send); from 16 KiB on the data
  // goes as its own gather part, uncopied: a 64 KiB copy filled the batch and was sent at once
  // anyway, so copying it bought nothing (measured: 1.36x the raw transport's CPU per byte).
  constexpr size_t kInline = 16 << 10;
  size_t n = src.size();
  for (size_t off = 0; off < n || (n == 0 && off == 0); off += proto::kCopyChunkBytes) {
    size_t len = std::min(proto::kCopyChunkBytes, n - off);
    proto::MemcpyH2D m{.dst = dst + off, .stream = stream};
    if (len <= kInline) {
      m.data = src.subspan(off, len);
      GPOOL_RETURN_IF_ERROR(Post(m));
    } else {
      GPOOL_RETURN_IF_ERROR(PostWithTail(m, src.subspan(off, len)));
    }
    if (n == 0) break;
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
    }
    proto::MemcpyD2H m{.src = src + off, .size = len, .stream = stream};
    batch_.AddRequest(m);
    reads_queued_ = true;
    queued_read_bytes_ += len;
    if (batch_.bytes() >= kFlushBytes || batch_.frames() >= proto::kMaxFramesPerMessage - 1) {
      GPOOL_RETURN_IF_ERROR(Flush());
    }
  }
  if (async) {
    // Small asynchronous reads stay queued, so that a burst of them shares one send (the next
    // synchronizing call, a full chunk's worth of reads, or the pump sends it); a chunk's worth
    // goes at once, as the copy should start.
    if (queued_read_bytes_ >= proto::kCopyChunkBytes) return Flush();
    queued_.store(true, std::memory_order_relaxed);
    if (pump_sleeping_.load()) WakePump();
    return Status::Ok();
  }
  GPOOL_RETURN_IF_ERROR(Flush());
  std::lock_guard<std::mutex> r(read_mu_);
  GPOOL_RETURN_IF_ERROR(DrainReadsLocked());
  TakeAsyncFailure(head);
  return Status::Ok();
}

}  // namespace gpool::remote::client
