// The UCX connection's receive path (ucx_internal.h names the other parts): Recv, RecvSplit and
// RecvPlaced over one loop (Receive) that probes for a whole message or a split one's head and
// receives it into the caller's buffers, a split message's tail straight into place
// (RecvHeadAndTail), and drains what a peer that went away had sent.
#include "remote/transport/ucx_internal.h"

#include <chrono>
#include <cstring>
#include <span>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::ucx {
namespace {

// A receive probes for its message on every this many empty polls even if no progress did
// anything meanwhile (see Receive).
constexpr uint32_t kProbeEveryPolls = 16;

}  // namespace

Status UcxConnection::Recv(std::vector<std::byte>* message) {
  bool split;
  return RecvSplit(message, {}, &split);
}

Status UcxConnection::RecvSplit(std::vector<std::byte>* message, std::span<std::byte> tail,
                                bool* split) {
  return Receive(message, tail, nullptr, split);
}

Status UcxConnection::RecvPlaced(std::vector<std::byte>* message, TailPlacer& placer,
                                 size_t* placed) {
  bool split = false;
  Status s = Receive(message, {}, &placer, &split);
  *placed = split ? placed_ : 0;
  return s;
}

// RecvSplit (into `tail`) or RecvPlaced (`placer` non-null: `tail` is empty and a split
// message's tail goes where the placer says, its length in placed_).
Status UcxConnection::Receive(std::vector<std::byte>* message, std::span<std::byte> tail,
                              TailPlacer* placer, bool* split) {
  *split = false;
  Foreground fg(this);
  Spin spin;
  Clock::time_point gone_since{};
  // A message reaches the unexpected queue that the probe looks at only in some thread's
  // progress that did something, which counts progress_epoch_ (Progress()): while it stands
  // still, an empty poll skips the probe (a UCX lock and a queue look, ~20% of an empty
  // poll's time, and half an empty poll is added to every receive's latency on average).
  // Every kProbeEveryPolls-th poll probes anyway, for a message that came in through a
  // progress made elsewhere (closing an endpoint).
  uint64_t probed_epoch = progress_epoch_.load(std::memory_order_relaxed) - 1;
  uint32_t polls = 0;
  for (;;) {
    if (closed_.load()) return Gone();
    const uint64_t epoch = progress_epoch_.load(std::memory_order_relaxed);
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = nullptr;
    if (epoch != probed_epoch || ++polls % kProbeEveryPolls == 0) {
      probed_epoch = epoch;
      msg = ucp_tag_probe_nb(worker_, kTagWhole, kProbeMask, /*remove=*/1, &info);
    }
    if (msg != nullptr && (info.sender_tag & ~kLengthMask) == kTagHead) {
      return RecvHeadAndTail(msg, info, message, tail, placer, split);
    }
    if (msg != nullptr) {
      if (info.length > options_.max_message_bytes) {
        // The matched message stays with the worker and dies with it.
        Close();
        return Status::InvalidArgument(fmt::format(
            "message of {} bytes from {} exceeds the {} byte limit; connection closed",
            info.length, peer_, options_.max_message_bytes));
      }
      *split = !tail.empty() && info.length >= tail.size();
      message->resize(*split ? info.length - tail.size() : info.length);
      ucp_request_param_t param{};
      ucs_status_ptr_t req;
      ucp_dt_iov_t iov[2];  // must outlive the request (Wait below)
      // A small split one is received whole and its tail copied out: an iov receive of an
      // eager message cost ~10x the raw stream's CPU per byte for 64 KiB device-to-host
      // replies over shared memory (docs/benchmarks.md, "Remoting"), a 64 KiB memcpy far less.
      // Into rx_whole_, never shrunk: resizing *message from its head to the whole message
      // zero-filled the tail's bytes first, a third pass over each one in the receiver.
      const bool small = *split && !message->empty() && info.length <= kBufferedSendMax;
      if (small && rx_whole_.size() < info.length) rx_whole_.resize(info.length);
      if (*split && message->empty()) {
        // All of it into `tail`: contiguous, so UCX may use its zero-copy rendezvous.
        req = ucp_tag_msg_recv_nbx(worker_, tail.data(), tail.size(), msg, &param);
      } else if (*split && !small) {  // (small ones take the last branch)
        // Scatter: the head into *message, the rest straight into `tail`.
        iov[0] = {message->data(), message->size()};
        iov[1] = {tail.data(), tail.size()};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype = ucp_dt_make_iov();
        req = ucp_tag_msg_recv_nbx(worker_, iov, 2, msg, &param);
      } else if (small) {
        req = ucp_tag_msg_recv_nbx(worker_, rx_whole_.data(), info.length, msg, &param);
      } else {
        req = ucp_tag_msg_recv_nbx(worker_, message->data(), message->size(), msg, &param);
      }
      ucs_status_t st = Wait(req, /*is_send=*/false, small ? &rx_whole_ : message);
      if (st != UCS_OK) {
        return closed_.load() ? Gone()
                              : Status::Unavailable(
                                    fmt::format("ucx receive from {}: {}", peer_, UcsError(st)));
      }
      if (small) {
        const size_t keep = info.length - tail.size();  // = message->size()
        std::memcpy(message->data(), rx_whole_.data(), keep);
        std::memcpy(tail.data(), rx_whole_.data() + keep, tail.size());
      }
      return Status::Ok();
    }
    if (Progress() != 0) {
      spin = {};
      continue;
    }
    auto ready = [&] {
      ucp_tag_recv_info_t i{};
      return closed_.load() ||
             ucp_tag_probe_nb(worker_, kTagWhole, kProbeMask, /*remove=*/0, &i) != nullptr;
    };
    if (gone_since != Clock::time_point{} || (spin.Spun() && PeerGone())) {
      // Drain: what the peer sent (and flushed) before it went may still be in flight here.
      auto now = Clock::now();
      if (gone_since == Clock::time_point{}) gone_since = now;
      if (now - gone_since > std::chrono::milliseconds(100)) return Gone();
      Idle(spin, ready, std::chrono::milliseconds(10), /*watch_oob=*/false);
      continue;
    }
    // Frees buffered sends that completed (our progress above may have finished them): while
    // one is listed, Idle sleeps at most kInFlightSleep, so a receiver left idle after a burst
    // of sends (a session after its replies, an echo after a stream) woke every 50 us for as
    // long as it waited, ~1-6 wake-ups per 64 KiB copy step of whichever connection was busy
    // (docs/benchmarks.md, "Remoting"). Never in a send's wait, which holds send_mu_.
    if (has_pending_.load(std::memory_order_relaxed)) ReapCompleted();
    Idle(spin, ready);
  }
}

// Receives a split message: the head `msg` (already probed), then its tail, contiguous, into
// `tail` when that is exactly the tail's size (the zero-copy case RecvSplit exists for), else
// after the head in *message (then split as RecvSplit promises, with one copy).
Status UcxConnection::RecvHeadAndTail(ucp_tag_message_h msg, const ucp_tag_recv_info_t& info,
                                      std::vector<std::byte>* message,
                                      std::span<std::byte> tail, TailPlacer* placer,
                                      bool* split) {
  const size_t head_len = info.length;
  const size_t tail_len = info.sender_tag & kLengthMask;
  if (head_len + tail_len > options_.max_message_bytes) {
    Close();
    return Status::InvalidArgument(fmt::format(
        "message of {} bytes from {} exceeds the {} byte limit; connection closed",
        head_len + tail_len, peer_, options_.max_message_bytes));
  }
  bool direct = !tail.empty() && tail.size() == tail_len;
  message->resize(direct || placer != nullptr ? head_len : head_len + tail_len);
  ucp_request_param_t param{};
  ucs_status_t st =
      Wait(ucp_tag_msg_recv_nbx(worker_, message->data(), head_len, msg, &param), false, message);
  if (st == UCS_OK && placer != nullptr) {
    tail = placer->Place(*message, tail_len);
    direct = tail.size() == tail_len;
    if (direct) placed_ = tail_len;
    if (!direct) message->resize(head_len + tail_len);
    tail = direct ? tail : std::span<std::byte>();
  }
  if (st == UCS_OK) {
    std::byte* into = direct ? tail.data() : message->data() + head_len;
    ucp_request_param_t tp{};
    st = Wait(ucp_tag_recv_nbx(worker_, into, tail_len, kTagTail, ~ucp_tag_t{0}, &tp), false,
              direct ? nullptr : message);
  }
  if (st != UCS_OK) {
    return closed_.load() ? Gone()
                          : Status::Unavailable(
                                fmt::format("ucx receive from {}: {}", peer_, UcsError(st)));
  }
  *split = direct;
  if (!direct && !tail.empty() && message->size() >= tail.size()) {
    size_t keep = message->size() - tail.size();
    std::memcpy(tail.data(), message->data() + keep, tail.size());
    message->resize(keep);
    *split = true;
  }
  return Status::Ok();
}

}  // namespace gpool::remote::ucx
