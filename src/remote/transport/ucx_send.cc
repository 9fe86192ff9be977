// The UCX connection's send path (ucx_internal.h names the other parts): Send and SendAll, the
// split of a message whose last part is large into a head and a contiguous tail, the small sends
// copied and left in flight (SendBuffered, with reused buffers) and their reaping, and Send's
// cheap look for a peer that went away (PeerGoneRecently).
#include "remote/transport/ucx_internal.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::ucx {
namespace {

// What ucp_tag_send_nbx takes for `iov`: one part as a plain buffer, several as an iov datatype
// (set in `param`). `iov` must outlive the send.
std::pair<void*, size_t> SendBufferOf(const std::vector<ucp_dt_iov_t>& iov,
                                      ucp_request_param_t* param) {
  if (iov.empty()) return {nullptr, 0};
  if (iov.size() == 1) return {iov[0].buffer, iov[0].length};
  param->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  param->datatype = ucp_dt_make_iov();
  return {const_cast<ucp_dt_iov_t*>(iov.data()), iov.size()};
}

// UcxConnection::Send's per-thread iov. The flag is trivially destructible, so it stays readable
// until the thread ends, after the vector itself is destroyed.
thread_local bool t_iov_gone = false;
struct IovCache {
  std::vector<ucp_dt_iov_t> v;
  ~IovCache() { t_iov_gone = true; }
};
thread_local IovCache t_iov;

// Send looks at the OOB socket for a peer that went away on every this many sends (see
// PeerGoneRecently), starting with the first, unless the socket was polled less than
// kSendPeerCheckIntervalNs ago (by CLOCK_MONOTONIC_COARSE, whose ticks are 1-4 ms apart).
constexpr uint64_t kSendPeerCheckEvery = 32;
constexpr int64_t kSendPeerCheckIntervalNs = 1'000'000;

}  // namespace

Status UcxConnection::Send(std::span<const ByteSpan> parts) {
  size_t total = 0;
  // Per thread and reused: no allocation per message (UCX reads it only until the send
  // completed or was copied, within this call). Libraries' exit handlers send after the
  // thread's thread_local objects are destroyed (cuFFT frees its buffers at exit through the
  // driver stand-in); they then use a vector of their own.
  std::vector<ucp_dt_iov_t> own;
  std::vector<ucp_dt_iov_t>& iov = t_iov_gone ? own : t_iov.v;
  iov.clear();
  for (const ByteSpan& p : parts) {
    total += p.size();
    if (!p.empty()) iov.push_back(ucp_dt_iov_t{const_cast<std::byte*>(p.data()), p.size()});
  }
  if (total > options_.max_message_bytes) {
    return Status::InvalidArgument(fmt::format(
        "message of {} bytes to {} exceeds the {} byte limit", total, peer_, options_.max_message_bytes));
  }
  if (closed_.load() || PeerGoneRecently()) return Gone();
  // Split: the parts before the last (small: headers) as a whole head, then the last part
  // (see SplitsTail).
  const bool split_tail = SplitsTail(iov);
  if (split_tail) {
    // The head is buffered (it is small); the tail goes from the caller's buffer, waited for.
    ucp_dt_iov_t last = iov.back();
    iov.pop_back();
    Status s = [&] {
      std::lock_guard<std::mutex> lock(send_mu_);
      if (ep_ == nullptr) return Gone();
      GPOOL_RETURN_IF_ERROR(ReapSends(/*max_pending_bytes=*/kMaxBufferedBytes));
      GPOOL_RETURN_IF_ERROR(SendBuffered(iov, total - last.length, kTagHead | last.length));
      return SendAndWait(last.buffer, last.length, TailSendParam(total), kTagTail);
    }();
    HandOffPendingSends();
    return s;
  }
  ucp_request_param_t param{};
  const std::pair<void*, size_t> whole = SendBufferOf(iov, &param);
  Status s = [&] {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (ep_ == nullptr) return Gone();
    GPOOL_RETURN_IF_ERROR(ReapSends(/*max_pending_bytes=*/kMaxBufferedBytes));
    if (total <= kBufferedSendMax) return SendBuffered(iov, total, kTagWhole);
    // Large messages go straight from the caller's buffers (rendezvous), so wait for them.
    return SendAndWait(whole.first, whole.second, param, kTagWhole);
  }();
  HandOffPendingSends();
  return s;
}

// Posts every message before waiting for any: a large one (or a split one's tail) is left in
// flight by rendezvous while the next is posted, so the receiver pulls one while the next is
// announced, instead of a full round trip per message (Send waits for each: a 16 MiB
// host-to-device copy, four 4 MiB chunks, napped ~6 times per chunk over shared memory at load
// where a plain ucp stream posting all four napped 0.2 times per copy; docs/benchmarks.md,
// "Remoting"). Small ones are buffered as Send buffers them. Then waits for all, in order.
Status UcxConnection::SendAll(std::span<const std::span<const ByteSpan>> messages) {
  if (messages.size() == 1) return Send(messages[0]);
  // Per message: its iov (must outlive its request) and, when left in flight, its request.
  std::vector<std::vector<ucp_dt_iov_t>> iovs(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    size_t total = 0;
    for (const ByteSpan& p : messages[i]) {
      total += p.size();
      if (!p.empty()) iovs[i].push_back(ucp_dt_iov_t{const_cast<std::byte*>(p.data()), p.size()});
    }
    if (total > options_.max_message_bytes) {
      return Status::InvalidArgument(fmt::format("message of {} bytes to {} exceeds the {} byte limit",
                                                 total, peer_, options_.max_message_bytes));
    }
  }
  if (closed_.load() || PeerGoneRecently()) return Gone();
  Status s = [&] {
    std::lock_guard<std::mutex> lock(send_mu_);
    if (ep_ == nullptr) return Gone();
    GPOOL_RETURN_IF_ERROR(ReapSends(/*max_pending_bytes=*/kMaxBufferedBytes));
    std::vector<ucs_status_ptr_t> in_flight;
    Status posted;
    for (std::vector<ucp_dt_iov_t>& iov : iovs) {
      size_t total = 0;
      for (const ucp_dt_iov_t& v : iov) total += v.length;
      ucp_request_param_t param{};
      ucs_status_ptr_t req = nullptr;
      if (SplitsTail(iov)) {
        ucp_dt_iov_t last = iov.back();
        iov.pop_back();
        posted = SendBuffered(iov, total - last.length, kTagHead | last.length);
        if (posted.ok()) {
          param = TailSendParam(total);
          req = ucp_tag_send_nbx(ep_, last.buffer, last.length, kTagTail, &param);
        }
      } else if (total <= kBufferedSendMax) {
        posted = SendBuffered(iov, total, kTagWhole);
      } else {
        auto [buffer, count] = SendBufferOf(iov, &param);
        req = ucp_tag_send_nbx(ep_, buffer, count, kTagWhole, &param);
      }
      if (UCS_PTR_IS_ERR(req)) {
        posted = Status::Unavailable(
            fmt::format("ucx send to {}: {}", peer_, UcsError(UCS_PTR_STATUS(req))));
      } else if (req != nullptr) {
        in_flight.push_back(req);
      }
      if (!posted.ok()) break;
    }
    // Every posted send is waited for, also after an error: its buffers are the caller's.
    Status waited;
    for (ucs_status_ptr_t req : in_flight) {
      ucs_status_t st = Wait(req, /*is_send=*/true);
      if (st != UCS_OK && waited.ok()) {
        waited = closed_.load() || PeerGone()
                     ? Gone()
                     : Status::Unavailable(fmt::format("ucx send to {}: {}", peer_, UcsError(st)));
      }
    }
    return posted.ok() ? waited : posted;
  }();
  HandOffPendingSends();
  return s;
}

// Copies a small message and leaves it in flight, as a socket buffer would hold it: the peer
// may not be progressing its worker yet (endpoint wire-up needs it), and a sender must not wait
// for the peer's next Recv to return. Caller holds send_mu_.
Status UcxConnection::SendBuffered(const std::vector<ucp_dt_iov_t>& iov, size_t total,
                                   ucp_tag_t tag) {
  if (pending_.empty() && total <= kImmediateSendMax) {
    // Most small sends leave at once (inline into the shared-memory FIFO or the socket): try
    // that from the caller's buffers first, which saves the copy and its allocation. Only with
    // nothing in flight, so that it cannot overtake an earlier buffered send.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    auto [buffer, count] = SendBufferOf(iov, &p);
    ucs_status_ptr_t req = ucp_tag_send_nbx(ep_, buffer, count, tag, &p);
    if (req == nullptr) return Status::Ok();
    if (UCS_PTR_IS_PTR(req)) {  // not expected with FORCE_IMM_CMPL; wait rather than leak
      ucs_status_t st = Wait(req, /*is_send=*/true);
      if (st == UCS_OK) return Status::Ok();
      return Status::Unavailable(fmt::format("ucx send to {}: {}", peer_, UcsError(st)));
    }
    if (UCS_PTR_STATUS(req) != UCS_ERR_NO_RESOURCE) {
      return Status::Unavailable(
          fmt::format("ucx send to {}: {}", peer_, UcsError(UCS_PTR_STATUS(req))));
    }
    // No room now: copy and leave it in flight below.
  }
  SendBuffer copy = TakeSendBuffer(total);
  size_t at = 0;
  for (const ucp_dt_iov_t& v : iov) {
    std::memcpy(copy.data.get() + at, v.buffer, v.length);
    at += v.length;
  }
  // FAST_CMPL: eager up to UCX_RNDV_SEND_NBR_THRESH (256 KiB by default, = kBufferedSendMax)
  // instead of rendezvous from ~8-64 KiB: the bytes are a private copy already, so zero-copy
  // gains nothing, while rendezvous makes the send wait for the receiver's reply and, over UCX
  // tcp, for the sender's progress to push it (the helper thread, contending with the caller
  // for the worker). 64 KiB copies over UCX tcp on the loaded host: ~130-200 involuntary
  // context switches per 64 messages -> ~5, raw and session CPU per byte 1.5-3x lower
  // (docs/benchmarks.md, "Remoting").
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
  ucs_status_ptr_t req = ucp_tag_send_nbx(ep_, copy.data.get(), copy.size, tag, &p);
  if (UCS_PTR_IS_ERR(req)) {
    ReturnSendBuffer(std::move(copy));
    return Status::Unavailable(
        fmt::format("ucx send to {}: {}", peer_, UcsError(UCS_PTR_STATUS(req))));
  }
  if (req == nullptr) {
    ReturnSendBuffer(std::move(copy));
  } else {
    pending_bytes_ += copy.size;
    pending_.push_back(PendingSend{req, std::move(copy)});
    has_pending_.store(true);
  }
  return Status::Ok();
}

// A buffer for SendBuffered's copy: a spare one that fits, else a new one, uninitialised (the
// copy overwrites it). Allocating and zero-filling 64 KiB per send, which glibc then handed
// back to the kernel, cost page faults and a memset per message: ~25% of all the CPU samples
// of 64 KiB device-to-host copies over shared memory. Caller holds send_mu_.
UcxConnection::SendBuffer UcxConnection::TakeSendBuffer(size_t size) {
  for (size_t i = spare_.size(); i-- > 0;) {
    if (spare_[i].capacity >= size) {
      SendBuffer b = std::move(spare_[i]);
      spare_.erase(spare_.begin() + static_cast<ptrdiff_t>(i));
      spare_bytes_ -= b.capacity;
      b.size = size;
      return b;
    }
  }
  SendBuffer b;
  b.capacity = std::max<size_t>((size + 4095) & ~size_t{4095}, 4096);
  b.data = std::make_unique_for_overwrite<std::byte[]>(b.capacity);
  b.size = size;
  return b;
}

// Keeps a buffer whose send completed for the next copies, up to kMaxSpareBytes per
// connection. Caller holds send_mu_.
void UcxConnection::ReturnSendBuffer(SendBuffer b) {
  if (spare_bytes_ + b.capacity > kMaxSpareBytes) return;
  spare_bytes_ += b.capacity;
  spare_.push_back(std::move(b));
}

// Whether a message goes split: head (the parts before the last, small: headers), then its
// last part as its own contiguous message, so that the receiver takes the bulk bytes straight
// into place (RecvSplit, RecvPlaced). Large messages go split because UCX's zero-copy
// rendezvous does not take iov datatypes. Smaller ones (<= kBufferedSendMax) go split from
// split_tail_min_: the tail is then sent eager straight from the caller's buffer and waited for
// (TailSendParam), which saves the sender's copy (SendBuffered) and the receiver's copy out of
// a whole message. Over shared memory that pays from 64 KiB: 64 KiB host-to-device copies
// went from 0.86-0.98x of the raw stream (sent whole) to 1.09-1.15x (session 17; reps 21,
// alternating binaries, docs/benchmarks.md "Remoting"). Over UCX tcp it does not: splitting
// 64 KiB copies took them from 0.96-1.03x to 0.88-0.90x (session 18; session 8 measured the
// same with a buffered tail, 0.87x), so other transports split from 128 KiB. (InfiniBand
// verbs is not measured here: it takes the other transports' threshold.)
bool UcxConnection::SplitsTail(const std::vector<ucp_dt_iov_t>& iov) const {
  return iov.size() >= 2 && iov.back().length >= split_tail_min_;
}

// A split tail's send: eager for one of a small message (FAST_CMPL: UCX sends eager up to
// UCX_RNDV_SEND_NBR_THRESH, 256 KiB by default, = kBufferedSendMax; without it, rendezvous
// from ~8 KiB, whose handshake costs a round trip per message), rendezvous (zero-copy) for a
// large one. Either way from the caller's buffer, so the caller waits for it to have left.
ucp_request_param_t UcxConnection::TailSendParam(size_t total) {
  ucp_request_param_t p{};
  if (total <= kBufferedSendMax) p.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
  return p;
}

// Sends straight from the caller's buffer (rendezvous for large ones) and waits until it has
// left. Caller holds send_mu_.
Status UcxConnection::SendAndWait(void* buffer, size_t count, ucp_request_param_t param,
                                  ucp_tag_t tag) {
  ucs_status_ptr_t req = ucp_tag_send_nbx(ep_, buffer, count, tag, &param);
  ucs_status_t st = Wait(req, /*is_send=*/true);
  if (st != UCS_OK) {
    return closed_.load() || PeerGone() ? Gone()
                                        : Status::Unavailable(fmt::format(
                                              "ucx send to {}: {}", peer_, UcsError(st)));
  }
  return Status::Ok();
}

// PeerGone for Send's fast path, which must not cost a syscall per message (a poll() is
// ~1 us here, half a raw shared-memory round trip): the OOB socket is polled on every
// kSendPeerCheckEvery-th send only, and only if nothing polled it in the last
// kSendPeerCheckIntervalNs; in between, only what a receive or a wait found out counts. (Every
// 32nd send alone still cost a round trip stream over shared memory a poll per 16 round trips
// at each end, ~1 us each on the critical path: ~0.06 us per round trip of ~1.5.) A send to a
// peer that died may therefore succeed (it went into a dead FIFO or socket, as a TCP send
// into the socket buffer does), and the sender's next wait or receive, or one of its sends
// a few milliseconds later, reports the loss.
bool UcxConnection::PeerGoneRecently() {
  if (peer_failed_.load(std::memory_order_relaxed)) return true;
  // A load and a store, not an atomic add (a locked instruction on the send's path): senders
  // racing may count one send once, which only moves the next poll by a send.
  const uint64_t n = sends_.load(std::memory_order_relaxed);
  sends_.store(n + 1, std::memory_order_relaxed);
  if (n % kSendPeerCheckEvery != 0) return false;
  // (The first send polls too: last_oob_poll_ns_ starts at 0, long before now.)
  if (CoarseNowNanos() - last_oob_poll_ns_.load(std::memory_order_relaxed) <
      kSendPeerCheckIntervalNs) {
    return false;
  }
  return PeerGone();
}

// Called after a send, without send_mu_: a buffered send left in flight with nobody waiting
// needs the helper's progress.
void UcxConnection::HandOffPendingSends() {
  if (has_pending_.load() && waiters_.load() == 0) NotifyHelper();
}

// Frees the buffered sends that completed; stops at one that failed (its error is for the next
// Send to report). Never blocks on send_mu_: a sender holding it is progressing anyway.
void UcxConnection::ReapCompleted() {
  std::unique_lock<std::mutex> lock(send_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  while (!pending_.empty() && ucp_request_check_status(pending_.front().request) == UCS_OK) {
    ucp_request_free(pending_.front().request);
    pending_bytes_ -= pending_.front().data.size;
    ReturnSendBuffer(std::move(pending_.front().data));
    pending_.pop_front();
  }
  has_pending_.store(!pending_.empty());
}

// Frees completed buffered sends; waits for the oldest while more than `max_pending_bytes` are
// in flight. A buffered send that failed fails this call. Caller holds send_mu_.
Status UcxConnection::ReapSends(size_t max_pending_bytes) {
  // Nothing in flight (most sends: small ones leave at once): has_pending_ is false already,
  // as every change to pending_ under send_mu_ sets it; a seq_cst store here cost a full
  // barrier on every send's path to the wire.
  if (pending_.empty()) return Status::Ok();
  std::optional<Foreground> fg;
  Spin spin;
  Status result;
  while (!pending_.empty()) {
    PendingSend& front = pending_.front();
    ucs_status_t st = ucp_request_check_status(front.request);
    if (st == UCS_INPROGRESS) {
      if (pending_bytes_ <= max_pending_bytes) break;
      if (!fg) fg.emplace(this);
      if (Progress() != 0) {
        spin = {};
        continue;
      }
      if (closed_.load() || (spin.Spun() && PeerGone())) {
        result = Gone();
        break;
      }
      Idle(spin, [&] {
        return closed_.load() || ucp_request_check_status(front.request) != UCS_INPROGRESS;
      });
      continue;
    }
    ucp_request_free(front.request);
    pending_bytes_ -= front.data.size;
    ReturnSendBuffer(std::move(front.data));
    pending_.pop_front();
    if (st != UCS_OK) {
      result = closed_.load() || PeerGone()
                   ? Gone()
                   : Status::Unavailable(fmt::format("ucx send to {}: {}", peer_, UcsError(st)));
      break;
    }
  }
  has_pending_.store(!pending_.empty());
  return result;
}

}  // namespace gpool::remote::ucx
