#include "remote/transport/ucx_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"
#include "remote/transport/socket.h"

namespace gpool::remote {
namespace {

using net::Fd;
using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC_COARSE in nanoseconds: a few ns against ~21 ns for steady_clock on the build VM,
// at the kernel tick's resolution (1-4 ms), for the helper thread's hand-over times (tens of ms),
// which every wait that ends records, at both ends of a round trip.
int64_t CoarseNowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

constexpr uint32_t kMagic = 0x31555047;  // "GPU1"
constexpr uint32_t kMaxAddressBytes = 1 << 16;
// Tags (one worker per connection, so they only say what a UCX message is, in the top byte):
// a whole message; or the head of a split one, whose low bits carry the length of its tail, sent
// next as its own contiguous message. A message whose last part is large is split so that the
// bulk bytes travel contiguous at both ends: UCX's zero-copy rendezvous (CMA on shared memory,
// RDMA on verbs) does not take iov datatypes, and a 2-part iov send or receive of 16 MiB moved
// at ~1/10 the speed of a contiguous one over shared memory (docs/benchmarks.md, "Remoting").
constexpr int kKindShift = 56;
constexpr ucp_tag_t kTagWhole = ucp_tag_t{0x10} << kKindShift;
constexpr ucp_tag_t kTagHead = ucp_tag_t{0x11} << kKindShift;
constexpr ucp_tag_t kTagTail = ucp_tag_t{0x20} << kKindShift;
constexpr ucp_tag_t kProbeMask = ucp_tag_t{0xFE} << kKindShift;  // whole or head, never a tail
constexpr ucp_tag_t kLengthMask = (ucp_tag_t{1} << kKindShift) - 1;
// The smallest last part sent as its own tail (see UcxConnection::SplitsTail): over shared
// memory, and over every other transport.
constexpr size_t kSplitTailMinShm = size_t{64} << 10;
constexpr size_t kSplitTailMinOther = size_t{128} << 10;

std::string UcsError(ucs_status_t s) { return ucs_status_string(s); }

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

// How long a wait keeps polling the worker after its last progress before it sleeps on the
// worker's event fd. A round trip answered within it costs no wake-up at either end; an idle
// connection costs this much CPU once, then nothing. Only its first kSpinBeforeYield polls
// without pause; after that every empty poll yields the CPU, as the plain ucp ping-pong the
// benchmarks compare with does. On a loaded machine the peer often shares this thread's core,
// and a spin that did not yield kept it off for up to 100 us: the gpool echo over shared memory
// took 147-284 us per round trip against 16-38 us for the plain loop in the same run, and 18-37
// us once it yielded after 3 us (docs/benchmarks.md, "Remoting"). A yield with nothing else
// runnable returns at once (a syscall, ~1 us here). (An earlier version that yielded after 32
// empty polls was slow on the quiet host because each call then also woke the helper thread,
// which the yield handed the core to; that wake-up is gone.)
constexpr auto kSpinTime = std::chrono::microseconds(200);
constexpr auto kSpinBeforeYield = std::chrono::microseconds(2);
// ...except while this thread shares its CPU with another runnable thread (t_cpu_shared: its
// last yield took at least kYieldSwitched, so something else ran meanwhile; a yield with nothing
// else to run is one syscall, ~1-1.5 us on the build VM). Then it yields on every empty poll,
// as the plain loop does: when both ends of a round trip share one CPU, the peer can only answer
// once this thread yields, and the 2 us spin at both ends made such a round trip 15.1 us against
// 9.5 us for the plain loop (shared memory, build VM; now 10.5 us against 9.9), while on two
// CPUs the spin makes it 0.45 us against 1.43 us (bench/ucx_rt_bench.cc, docs/benchmarks.md
// "Remoting"). A yield that returns at once (nothing else ran) ends the shared state. Only
// speed depends on this guess; a wrong one costs a syscall per poll, or a 2 us spin.
constexpr auto kYieldSwitched = std::chrono::microseconds(4);
// While a wait only polls (its first kSpinBeforeYield), it reads the clock on every this many
// idle steps over shared memory (see Idle), on every one elsewhere.
constexpr uint32_t kPollsPerClockReadShm = 8;
thread_local bool t_cpu_shared = false;

// UcxConnection::Send's per-thread iov. The flag is trivially destructible, so it stays readable
// until the thread ends, after the vector itself is destroyed.
thread_local bool t_iov_gone = false;
struct IovCache {
  std::vector<ucp_dt_iov_t> v;
  ~IovCache() { t_iov_gone = true; }
};
thread_local IovCache t_iov;

// How long a thread waiting for its own large send (a rendezvous: the receiver pulls the bytes, or
// UCX tcp pushes fragments as the socket drains) polls, yielding the CPU on every empty poll,
// before it sleeps. Such a wait gets no wake-up event over shared memory or tcp when the send
// completes or the socket has room, so a sleeping sender only looked again after kInFlightSleep:
// a 4 MiB chunk over shared memory napped ~3 times (12 sleeps, ~2,400 yields per 16 MiB copy)
// and over UCX tcp the socket drained during each nap, where the plain ucp stream, which polls
// until done, never sleeps (docs/benchmarks.md, "Remoting"). A yield hands the CPU to any other
// runnable thread, so this costs the waiting thread's CPU (blocked in cudaMemcpy anyway), not the
// receiver's.
constexpr auto kSendSpinTime = std::chrono::microseconds(5000);
// Longest sleep while a send of this connection is in flight: a sender waiting for room (a full
// shared-memory FIFO, a full socket, the fragments of an active-message rendezvous) gets no event
// when the receiver makes room, so it must look again soon.
constexpr auto kInFlightSleep = std::chrono::microseconds(50);
// Longest single sleep: a safety net only (every wake-up source is an fd in the poll set).
constexpr auto kMaxSleep = std::chrono::milliseconds(100);
// How long after the last waiting call the helper thread takes over progress (see "Waiting").
constexpr auto kHelperDelay = std::chrono::milliseconds(20);
// How often a parked helper looks again while a call waits (and progresses) itself: it then
// takes over at most this long after the last wait ended plus kHelperDelay. It is not woken when
// a wait ends (that cost a futex wake and a helper wake-up per ~8 round trips), unless a send is
// left in flight (Foreground).
constexpr auto kHelperRecheck = std::chrono::milliseconds(100);
// Send looks at the OOB socket for a peer that went away on every this many sends (see
// PeerGoneRecently), starting with the first, unless the socket was polled less than
// kSendPeerCheckIntervalNs ago (by CLOCK_MONOTONIC_COARSE, whose ticks are 1-4 ms apart).
constexpr uint64_t kSendPeerCheckEvery = 32;
constexpr int64_t kSendPeerCheckIntervalNs = 1'000'000;
// A receive probes for its message on every this many empty polls even if no progress did
// anything meanwhile (see Receive).
constexpr uint32_t kProbeEveryPolls = 16;

std::atomic<uint64_t> g_sleeps{0};
std::atomic<uint64_t> g_kicked{0};
std::atomic<uint64_t> g_timeouts{0};
std::atomic<uint64_t> g_yields{0};
std::atomic<uint64_t> g_yields_switched{0};
std::atomic<uint64_t> g_oob_polls{0};
std::atomic<uint64_t> g_helper_runs{0};
std::atomic<uint64_t> g_helper_notifies{0};

// Owns the ucp context; shared by the transport and every connection made from it.
struct Context {
  ucp_context_h handle = nullptr;
  // UCP_ERR_HANDLING_MODE_PEER makes UCX drop every transport that can't detect a dead peer, so
  // it is only asked for when all configured transports can (otherwise shared memory would be
  // silently replaced by tcp, or no transport would be left).
  bool peer_error_mode = false;
  // UCP_FEATURE_WAKEUP is on: workers have an event fd to sleep on (else waits sleep-poll).
  bool wakeup = false;
  ~Context() {
    if (handle != nullptr) ucp_cleanup(handle);
  }
};

Status SendBlob(int fd, const void* data, uint32_t size, std::string_view peer) {
  uint32_t header[2] = {kMagic, size};
  GPOOL_RETURN_IF_ERROR(net::WriteAll(fd, header, sizeof(header), peer));
  return net::WriteAll(fd, data, size, peer);
}

StatusOr<std::vector<std::byte>> RecvBlob(int fd, std::string_view peer) {
  uint32_t header[2];
  GPOOL_RETURN_IF_ERROR(net::ReadAll(fd, header, sizeof(header), peer));
  if (header[0] != kMagic) {
    return Status::InvalidArgument(
        fmt::format("{}: bad ucx handshake magic 0x{:08x} (not a gpool ucx peer?)", peer, header[0]));
  }
  if (header[1] == 0 || header[1] > kMaxAddressBytes) {
    return Status::InvalidArgument(fmt::format("{}: bad ucx address length {}", peer, header[1]));
  }
  std::vector<std::byte> blob(header[1]);
  GPOOL_RETURN_IF_ERROR(net::ReadAll(fd, blob.data(), blob.size(), peer));
  return blob;
}

// The size of SendBlob's message from its first bytes (net::FirstMessageSize).
size_t BlobSize(std::span<const std::byte> peeked) {
  uint32_t header[2];
  if (peeked.size() < sizeof header) return sizeof header;
  std::memcpy(header, peeked.data(), sizeof header);
  if (header[0] != kMagic || header[1] == 0 || header[1] > kMaxAddressBytes) {
    return peeked.size();  // bad: RecvBlob reads it and says what is wrong
  }
  return sizeof header + header[1];
}

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<Context> ctx, Fd oob, const TransportOptions& options)
      : ctx_(std::move(ctx)),
        oob_(std::move(oob)),
        options_(options),
        peer_error_mode_(ctx_->peer_error_mode) {
    peer_ = net::PeerAddress(oob_.get());
  }

  ~UcxConnection() override {
    Close();
    {
      std::lock_guard<std::mutex> lk(pt_mu_);
      stop_progress_.store(true);
    }
    pt_cv_.notify_all();
    Kick();
    if (progress_thread_.joinable()) progress_thread_.join();
    if (ep_ != nullptr) CloseEndpoint();
    // The forced close completed every buffered send (with an error if it never left).
    for (PendingSend& p : pending_) {
      auto deadline = Clock::now() + std::chrono::milliseconds(200);
      while (ucp_request_check_status(p.request) == UCS_INPROGRESS && Clock::now() < deadline) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(p.request);
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
  }

  // Creates the worker, swaps addresses over the OOB socket and creates the endpoint.
  Status Start() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    ucs_status_t st = ucp_worker_create(ctx_->handle, &wp, &worker_);
    if (st != UCS_OK) return Status::Internal("ucp_worker_create: " + UcsError(st));
    wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (wake_.get() < 0) return Status::Internal(fmt::format("eventfd: {}", std::strerror(errno)));
    if (ctx_->wakeup) {
      st = ucp_worker_get_efd(worker_, &efd_);
      if (st != UCS_OK) return Status::Internal("ucp_worker_get_efd: " + UcsError(st));
    }
    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    st = ucp_worker_get_address(worker_, &addr, &addr_len);
    if (st != UCS_OK) return Status::Internal("ucp_worker_get_address: " + UcsError(st));
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(oob_.get(), options_.handshake_timeout_ms));
    Status sent = SendBlob(oob_.get(), addr, static_cast<uint32_t>(addr_len), peer_);
    ucp_worker_release_address(worker_, addr);
    GPOOL_RETURN_IF_ERROR(sent);
    GPOOL_ASSIGN_OR_RETURN(std::vector<std::byte> remote, RecvBlob(oob_.get(), peer_));
    GPOOL_RETURN_IF_ERROR(net::SetTimeouts(oob_.get(), 0));

    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    if (peer_error_mode_) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) {
        static_cast<UcxConnection*>(arg)->peer_failed_.store(true);
      };
      ep.err_handler.arg = this;
    }
    st = ucp_ep_create(worker_, &ep, &ep_);
    if (st != UCS_OK) {
      ep_ = nullptr;
      return Status::Unavailable(fmt::format("ucp_ep_create to {}: {}", peer_, UcsError(st)));
    }
    am_transport_ = UcxAmTransport(EndpointInfo());
    split_tail_min_ = IsSharedMemoryTransport(am_transport_) ? kSplitTailMinShm : kSplitTailMinOther;
    polls_per_clock_read_ = IsSharedMemoryTransport(am_transport_) ? kPollsPerClockReadShm : 1;
    progress_thread_ = std::thread([this] { ProgressLoop(); });
    return Status::Ok();
  }

  Status Send(std::span<const ByteSpan> parts) override {
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
  Status SendAll(std::span<const std::span<const ByteSpan>> messages) override {
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

  Status Recv(std::vector<std::byte>* message) override {
    bool split;
    return RecvSplit(message, {}, &split);
  }

  Status RecvSplit(std::vector<std::byte>* message, std::span<std::byte> tail,
                   bool* split) override {
    return Receive(message, tail, nullptr, split);
  }

  Status RecvPlaced(std::vector<std::byte>* message, TailPlacer& placer,
                    size_t* placed) override {
    bool split = false;
    Status s = Receive(message, {}, &placer, &split);
    *placed = split ? placed_ : 0;
    return s;
  }

  // RecvSplit (into `tail`) or RecvPlaced (`placer` non-null: `tail` is empty and a split
  // message's tail goes where the placer says, its length in placed_).
  Status Receive(std::vector<std::byte>* message, std::span<std::byte> tail, TailPlacer* placer,
                 bool* split) {
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

  void Close() override {
    if (closed_.exchange(true)) return;
    // Push out what Send already handed to UCX, so a "send, then close" reaches the peer.
    if (!PeerGone()) {
      ucp_request_param_t param{};
      ucs_status_ptr_t req = ucp_worker_flush_nbx(worker_, &param);
      if (UCS_PTR_IS_PTR(req)) {
        auto deadline = Clock::now() + std::chrono::seconds(2);
        while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline &&
               !PeerGone()) {
          if (ucp_worker_progress(worker_) == 0) sched_yield();
        }
        if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(worker_, req);
        ucp_request_free(req);
      }
    }
    ::shutdown(oob_.get(), SHUT_RDWR);  // tells the peer (and wakes our sleepers watching it)
    Kick();
  }

  std::string peer() const override { return peer_; }
  const std::string& am_transport() const { return am_transport_; }
  bool HeadCostsARecv() const override { return true; }

 private:
  // SendBuffered's copy of a message (see TakeSendBuffer).
  struct SendBuffer {
    std::unique_ptr<std::byte[]> data;
    size_t capacity = 0;
    size_t size = 0;  // bytes in use
  };

  // Copies a small message and leaves it in flight, as a socket buffer would hold it: the peer
  // may not be progressing its worker yet (endpoint wire-up needs it), and a sender must not wait
  // for the peer's next Recv to return. Caller holds send_mu_.
  Status SendBuffered(const std::vector<ucp_dt_iov_t>& iov, size_t total, ucp_tag_t tag) {
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
  SendBuffer TakeSendBuffer(size_t size) {
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
  void ReturnSendBuffer(SendBuffer b) {
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
  bool SplitsTail(const std::vector<ucp_dt_iov_t>& iov) const {
    return iov.size() >= 2 && iov.back().length >= split_tail_min_;
  }
  // A split tail's send: eager for one of a small message (FAST_CMPL: UCX sends eager up to
  // UCX_RNDV_SEND_NBR_THRESH, 256 KiB by default, = kBufferedSendMax; without it, rendezvous
  // from ~8 KiB, whose handshake costs a round trip per message), rendezvous (zero-copy) for a
  // large one. Either way from the caller's buffer, so the caller waits for it to have left.
  static ucp_request_param_t TailSendParam(size_t total) {
    ucp_request_param_t p{};
    if (total <= kBufferedSendMax) p.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
    return p;
  }
  // ucp_ep_print_info's text for this endpoint (its lanes and protocol thresholds).
  std::string EndpointInfo() const {
    char* text = nullptr;
    size_t length = 0;
    FILE* f = ::open_memstream(&text, &length);
    if (f == nullptr) return "";
    ucp_ep_print_info(ep_, f);
    std::fclose(f);
    std::string info(text, length);
    std::free(text);
    return info;
  }
  // Sends straight from the caller's buffer (rendezvous for large ones) and waits until it has
  // left. Caller holds send_mu_.
  Status SendAndWait(void* buffer, size_t count, ucp_request_param_t param, ucp_tag_t tag) {
    ucs_status_ptr_t req = ucp_tag_send_nbx(ep_, buffer, count, tag, &param);
    ucs_status_t st = Wait(req, /*is_send=*/true);
    if (st != UCS_OK) {
      return closed_.load() || PeerGone() ? Gone()
                                          : Status::Unavailable(fmt::format(
                                                "ucx send to {}: {}", peer_, UcsError(st)));
    }
    return Status::Ok();
  }
  // Receives a split message: the head `msg` (already probed), then its tail, contiguous, into
  // `tail` when that is exactly the tail's size (the zero-copy case RecvSplit exists for), else
  // after the head in *message (then split as RecvSplit promises, with one copy).
  Status RecvHeadAndTail(ucp_tag_message_h msg, const ucp_tag_recv_info_t& info,
                         std::vector<std::byte>* message, std::span<std::byte> tail,
                         TailPlacer* placer, bool* split) {
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

  // True once the peer closed or died: EOF or error on the idle OOB socket, or a UCX error.
  bool PeerGone() {
    if (peer_failed_.load()) return true;
    pollfd p{oob_.get(), POLLIN, 0};
    g_oob_polls.fetch_add(1, std::memory_order_relaxed);
    last_oob_poll_ns_.store(CoarseNowNanos(), std::memory_order_relaxed);
    if (::poll(&p, 1, 0) <= 0) return false;
    char b;
    ssize_t n = ::recv(oob_.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (n < 0) oob_errno_.store(errno);  // ETIMEDOUT: keepalive gave up on the peer's host
      peer_failed_.store(true);
      return true;
    }
    return false;
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
  bool PeerGoneRecently() {
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

  Status Gone() const {
    if (closed_.load()) return Status::Unavailable(fmt::format("connection to {} is closed", peer_));
    if (int e = oob_errno_.load(); e != 0) {
      return Status::Unavailable(fmt::format("{}: {}", peer_, net::SocketError(e)));
    }
    return Status::Unavailable(fmt::format("{} closed the connection", peer_));
  }

  // Progresses until `req` completes. If the connection closes or the peer goes meanwhile, a
  // send forces the endpoint closed (completing its requests with an error) and a receive is
  // cancelled; a receive that still won't finish is abandoned with its buffer parked in
  // graveyard_ so UCX never writes into freed memory.
  ucs_status_t Wait(ucs_status_ptr_t req, bool is_send, std::vector<std::byte>* buffer = nullptr) {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    Foreground fg(this);
    struct SendWaiting {
      std::atomic<int>* n;
      ~SendWaiting() {
        if (n != nullptr) n->fetch_sub(1);
      }
    } send_waiting{is_send ? &sends_waiting_ : nullptr};
    if (is_send) sends_waiting_.fetch_add(1);
    Spin spin{.limit = is_send ? kSendSpinTime : kSpinTime};
    bool aborting = false;
    Clock::time_point abort_deadline{};
    ucs_status_t st;
    auto ready = [&] {
      return (!aborting && closed_.load()) || ucp_request_check_status(req) != UCS_INPROGRESS;
    };
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
      if (Progress() != 0) {
        spin.Restart();
        continue;
      }
      if (!aborting && (closed_.load() || (spin.Spun() && PeerGone()))) {
        aborting = true;
        abort_deadline = Clock::now() + std::chrono::seconds(1);
        if (is_send) {
          CloseEndpoint();
        } else {
          ucp_request_cancel(worker_, req);
        }
      }
      if (aborting && Clock::now() > abort_deadline) {
        if (buffer != nullptr) {
          std::lock_guard<std::mutex> lock(graveyard_mu_);
          graveyard_.push_back(std::move(*buffer));
          buffer->clear();
        }
        // The request is left to the worker, which releases it when destroyed.
        return UCS_ERR_CANCELED;
      }
      if (aborting) {
        Idle(spin, ready, std::chrono::milliseconds(10), /*watch_oob=*/false);
      } else {
        Idle(spin, ready);
      }
    }
    ucp_request_free(req);
    return st;
  }

  // ---- Waiting ----
  // UCX moves data only inside ucp_worker_progress. A thread that waits (Recv, a send that must
  // complete, Close) progresses the worker itself: it polls for kSpinTime after the last progress,
  // then arms the worker and sleeps in poll() on the worker's event fd, the wake eventfd and the
  // OOB socket (peer gone, Close). Nothing sleeps on a timer, so a message wakes its receiver at
  // once and an idle connection costs no CPU. Several threads may wait on one worker (a sender
  // and a receiver): one thread's progress can complete another's request or consume the event
  // it sleeps on, so a thread whose progress did something kicks the sleepers (Progress()).
  //
  // Between calls nobody waits, yet buffered sends, the peer's rendezvous reads and endpoint
  // wire-up still need progress: the helper thread (ProgressLoop) then sleeps on the event fd
  // in the same way. It takes over when a send is left in flight with no waiter, or once no call
  // has waited for kHelperDelay; it stays parked while calls come and go (looking again every
  // kHelperRecheck, never woken by a wait that ends), so a steady stream of round trips costs no
  // helper wake-ups beyond ~10 per second.

  // Spin state of one wait loop.
  struct Spin {
    Clock::time_point since{};
    Clock::time_point last{};  // the last idle step's clock reading (one clock read per step)
    std::chrono::microseconds limit = kSpinTime;  // how long it polls before it sleeps
    uint32_t polls = 0;      // idle steps since `since` (see Idle)
    bool yielding = false;   // past kSpinBeforeYield: every idle step yields
    // Whether the wait had spun `limit` as of its last idle step.
    bool Spun() const { return since != Clock::time_point{} && last - since >= limit; }
    // After a progress that did something: polling starts over (same limit).
    void Restart() {
      since = last = Clock::time_point{};
      polls = 0;
      yielding = false;
    }
  };

  // Marks a waiting call for the helper thread, which stays parked while one is in progress.
  class Foreground {
   public:
    explicit Foreground(UcxConnection* c) : c_(c) { c_->waiters_.fetch_add(1); }
    // Wakes the helper only when the last waiter leaves a buffered send in flight (it must be
    // progressed now); otherwise the parked helper looks again by itself. (Notifying it whenever
    // the last waiter left cost a futex wake and a helper wake-up on ~1 round trip in 8, since it
    // found the next call already waiting and parked again.) Pairs with HandOffPendingSends:
    // both sides write, then read the other's flag, all seq_cst, so one of them notifies.
    ~Foreground() {
      c_->last_foreground_ns_.store(CoarseNowNanos(), std::memory_order_relaxed);
      if (c_->waiters_.fetch_sub(1) == 1 && c_->has_pending_.load()) c_->NotifyHelper();
    }
    Foreground(const Foreground&) = delete;
    Foreground& operator=(const Foreground&) = delete;

   private:
    UcxConnection* c_;
  };

  unsigned Progress() {
    unsigned n = ucp_worker_progress(worker_);
    if (n != 0) {
      // A load and a store, not a locked add: two threads whose progress both did something at
      // once may count once, and a receive that probed in between then finds its message at its
      // next kProbeEveryPolls-th poll instead of at once.
      progress_epoch_.store(progress_epoch_.load(std::memory_order_relaxed) + 1,
                            std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (sleepers_.load() > 0) Kick();
    }
    return n;
  }

  void Kick() {
    if (wake_.get() < 0) return;
    uint64_t one = 1;
    ssize_t n = ::write(wake_.get(), &one, sizeof one);
    (void)n;  // EAGAIN only when the counter is saturated: the sleepers are woken anyway
  }

  void NotifyHelper() {
    g_helper_notifies.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(pt_mu_);
    pt_cv_.notify_one();
  }

  // One idle step of a wait loop, after a progress that did nothing and a check that found the
  // wait not over: returns at once while spinning, else sleeps (see above) for at most
  // `timeout`. `ready` (the wait's condition) is checked again once this thread counts as a
  // sleeper, so a completion made meanwhile by another thread's progress is never slept through.
  template <class Ready>
  void Idle(Spin& spin, Ready&& ready, std::chrono::microseconds timeout = kMaxSleep,
            bool watch_oob = true) {
    // In the first kSpinBeforeYield, which only polls, the clock is read on every
    // polls_per_clock_read_-th idle step only: over shared memory a read (~21 ns on the build
    // VM) was a quarter of an empty poll, and half an empty poll is added to every receive's
    // latency on average. Elsewhere a poll is a socket read (~1 us), eight of which made the
    // no-yield spin ~8 us instead of 2 and 1 MiB device-to-host copies over UCX tcp ~4% slower
    // (0.96-0.99 against 0.98-1.09 of the raw stream, five alternating runs each).
    if (spin.since != Clock::time_point{} && !spin.yielding && !t_cpu_shared &&
        ++spin.polls % polls_per_clock_read_ != 0) {
      return;
    }
    const auto now = Clock::now();
    spin.last = now;
    if (spin.since == Clock::time_point{}) spin.since = now;
    if (now - spin.since < spin.limit) {
      // Past the first few microseconds, or at once while this thread shares its CPU, let a
      // runnable peer (or the thread we wait for) have this CPU: on an oversubscribed machine
      // that is what ends the wait soonest.
      if (t_cpu_shared || now - spin.since >= kSpinBeforeYield) {
        spin.yielding = true;
        g_yields.fetch_add(1, std::memory_order_relaxed);
        sched_yield();
        const auto after = Clock::now();
        t_cpu_shared = after - now >= kYieldSwitched;
        if (t_cpu_shared) g_yields_switched.fetch_add(1, std::memory_order_relaxed);
        spin.last = after;
      }
      return;
    }
    if (efd_ < 0) {  // no wake-up support in this UCX context: sleep-poll
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      return;
    }
    if (has_pending_.load() || sends_waiting_.load() > 0) {
      timeout = std::min<std::chrono::microseconds>(timeout, kInFlightSleep);
    }
    sleepers_.fetch_add(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!ready() && ucp_worker_arm(worker_) == UCS_OK) {
      pollfd p[3] = {{efd_, POLLIN, 0}, {wake_.get(), POLLIN, 0}, {-1, POLLIN, 0}};
      if (watch_oob && !closed_.load() && !peer_failed_.load()) p[2].fd = oob_.get();
      timespec ts{static_cast<time_t>(timeout.count() / 1000000),
                  static_cast<long>(timeout.count() % 1000000) * 1000};
      g_sleeps.fetch_add(1, std::memory_order_relaxed);
      int n = ::ppoll(p, 3, &ts, nullptr);
      if (n == 0) g_timeouts.fetch_add(1, std::memory_order_relaxed);
      if (n > 0 && (p[1].revents & POLLIN) != 0) {
        g_kicked.fetch_add(1, std::memory_order_relaxed);
        // Only the last sleeper drains the kick, so that none of the others misses it.
        if (sleepers_.load() == 1) {
          uint64_t v;
          ssize_t r = ::read(wake_.get(), &v, sizeof v);
          (void)r;
        }
      }
    }
    sleepers_.fetch_sub(1);
    // Spin again after a wake-up: the rest often follows at once.
    spin.Restart();
    spin.since = spin.last = Clock::now();
  }

  // The helper thread: see "Waiting" above.
  void ProgressLoop() {
    std::unique_lock<std::mutex> lk(pt_mu_);
    while (!stop_progress_.load()) {
      // Parked: woken by a send left in flight with nobody waiting (HandOffPendingSends), by
      // stop, or by its own timer, which finds out whether calls still come and go.
      if (waiters_.load() > 0) {
        pt_cv_.wait_for(lk, kHelperRecheck);
        continue;
      }
      auto quiet = std::chrono::nanoseconds(CoarseNowNanos() - last_foreground_ns_.load());
      if (!has_pending_.load() && quiet < kHelperDelay) {
        pt_cv_.wait_for(lk, kHelperDelay - quiet);
        continue;
      }
      lk.unlock();
      g_helper_runs.fetch_add(1, std::memory_order_relaxed);
      Spin spin;
      while (!stop_progress_.load() && waiters_.load() == 0) {
        if (Progress() != 0) {
          spin = {};
          continue;
        }
        ReapCompleted();
        Idle(spin, [&] { return stop_progress_.load() || waiters_.load() != 0; });
      }
      lk.lock();
    }
  }

  // Called after a send, without send_mu_: a buffered send left in flight with nobody waiting
  // needs the helper's progress.
  void HandOffPendingSends() {
    if (has_pending_.load() && waiters_.load() == 0) NotifyHelper();
  }

  // Frees the buffered sends that completed; stops at one that failed (its error is for the next
  // Send to report). Never blocks on send_mu_: a sender holding it is progressing anyway.
  void ReapCompleted() {
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
  Status ReapSends(size_t max_pending_bytes) {
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

  // Closes the endpoint: forced (outstanding sends complete with an error) where both ends use
  // peer error handling, which UCX requires for that; else flushing, given up after 1 s.
  void CloseEndpoint() {
    if (ep_ == nullptr) return;
    ucp_request_param_t param{};
    if (peer_error_mode_) {
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
    ep_ = nullptr;
    if (UCS_PTR_IS_PTR(req)) {
      auto deadline = Clock::now() + std::chrono::seconds(1);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(req);
    }
  }

  std::shared_ptr<Context> ctx_;
  Fd oob_;
  std::atomic<int> oob_errno_{0};  // the liveness socket's error, once it failed
  TransportOptions options_;
  std::string peer_;
  const bool peer_error_mode_;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;  // guarded by send_mu_ once running
  std::string am_transport_;   // set by Start: UcxAmTransport of the endpoint
  size_t split_tail_min_ = kSplitTailMinOther;  // set by Start (see SplitsTail)
  uint32_t polls_per_clock_read_ = 1;             // set by Start (see Idle)
  std::mutex send_mu_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> peer_failed_{false};
  struct PendingSend {
    void* request;
    SendBuffer data;
  };
  static constexpr size_t kMaxSpareBytes = 2 << 20;
  std::vector<SendBuffer> spare_;  // guarded by send_mu_
  size_t spare_bytes_ = 0;
  static constexpr size_t kBufferedSendMax = 256 << 10;
  // Sends this small are first tried in place (SendBuffered); larger ones rarely leave at once
  // (rendezvous, or several FIFO fragments), so the try would be wasted.
  static constexpr size_t kImmediateSendMax = 8 << 10;
  size_t placed_ = 0;  // receiver thread: the tail length RecvPlaced's last placement took
  std::vector<std::byte> rx_whole_;  // receiver thread: small split messages, received whole
  static constexpr size_t kMaxBufferedBytes = 8 << 20;
  std::deque<PendingSend> pending_;  // guarded by send_mu_
  size_t pending_bytes_ = 0;
  std::atomic<bool> has_pending_{false};  // pending_ is non-empty (readable without send_mu_)
  // Waiting (see "Waiting" above).
  int efd_ = -1;  // the worker's event fd (owned by the worker); -1 without wake-up support
  Fd wake_;       // eventfd: kicks sleepers
  std::atomic<int> sleepers_{0};  // threads in Idle's poll (or about to be)
  std::atomic<int> waiters_{0};   // calls waiting (Foreground)
  std::atomic<int> sends_waiting_{0};  // calls waiting for a send to complete
  std::atomic<int64_t> last_foreground_ns_{CoarseNowNanos()};  // when the last wait ended
  std::atomic<uint64_t> progress_epoch_{0};  // Progress() calls that did something (Receive)
  std::atomic<uint64_t> sends_{0};  // Send calls, for PeerGoneRecently
  std::atomic<int64_t> last_oob_poll_ns_{0};  // CoarseNowNanos() of PeerGone's last poll
  std::mutex pt_mu_;  // with pt_cv_, parks the helper thread
  std::condition_variable pt_cv_;
  std::thread progress_thread_;
  std::atomic<bool> stop_progress_{false};
  std::mutex graveyard_mu_;
  std::vector<std::vector<std::byte>> graveyard_;
};

class UcxListener final : public Listener {
 public:
  UcxListener(std::shared_ptr<Context> ctx, std::unique_ptr<net::WakeableListenSocket> socket,
              const TransportOptions& options)
      : ctx_(std::move(ctx)), socket_(std::move(socket)), options_(options) {}

  StatusOr<std::unique_ptr<Connection>> Accept() override {
    for (;;) {
      // Handed over once the client's address blob is in (it sends it before it reads ours), so
      // Start's read never waits on a silent peer while other clients queue.
      GPOOL_ASSIGN_OR_RETURN(Fd sock, socket_->AcceptArrived(BlobSize, options_.handshake_timeout_ms));
      // The bootstrap socket stays open as the liveness channel: keepalive makes a dead host
      // show up on it (TcpLivenessOptions).
      if (!net::SetLiveness(sock.get(), options_.liveness).ok()) continue;
      auto conn = std::make_unique<UcxConnection>(ctx_, std::move(sock), options_);
      // A client that fails its handshake is dropped; the listener keeps going.
      if (conn->Start().ok()) return std::unique_ptr<Connection>(std::move(conn));
    }
  }

  void Close() override { socket_->Close(); }
  // A session process forked from the server: drops its copies of the listening socket and of
  // the connections AcceptArrived holds (other clients', whose bootstrap sockets are their
  // liveness channels: a copy kept here would hide their session's death from them).
  Status AbandonAfterFork() override {
    socket_->AbandonAfterFork();
    return Status::Ok();
  }
  std::string address() const override { return socket_->address(); }

 private:
  std::shared_ptr<Context> ctx_;
  std::unique_ptr<net::WakeableListenSocket> socket_;
  TransportOptions options_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<Context> ctx, const TransportOptions& options)
      : ctx_(std::move(ctx)), options_(options) {}
  std::string_view name() const override { return "ucx"; }

  StatusOr<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    GPOOL_ASSIGN_OR_RETURN(auto socket, net::WakeableListenSocket::Listen(address));
    return std::unique_ptr<Listener>(new UcxListener(ctx_, std::move(socket), options_));
  }

  StatusOr<std::unique_ptr<Connection>> Connect(std::string_view address) override {
    GPOOL_ASSIGN_OR_RETURN(Fd fd, net::ConnectTcp(address));
    GPOOL_RETURN_IF_ERROR(net::SetLiveness(fd.get(), options_.liveness));
    auto conn = std::make_unique<UcxConnection>(ctx_, std::move(fd), options_);
    Status s = conn->Start();
    if (!s.ok()) return Status(s.code(), fmt::format("ucx connect to {}: {}", address, s.message()));
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  std::shared_ptr<Context> ctx_;
  TransportOptions options_;
};

// True when UCX_TLS (the option, else the environment) lists only transports with peer failure
// detection: tcp and the InfiniBand verbs ones. "all"/unset includes shared memory: false.
bool AllTransportsDetectPeerFailure(const std::string& option) {
  std::string tls = option;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env != nullptr ? env : "";
  }
  if (tls.empty() || tls.front() == '^') return false;
  for (std::string_view t : Split(tls, ',')) {
    bool ok = t == "tcp" || t.starts_with("rc") || t.starts_with("ud") || t.starts_with("dc") ||
              t == "ib";
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string UcxAmTransport(std::string_view ep_info) {
  for (std::string_view line : Split(ep_info, '\n')) {
    const size_t lane = line.find("lane[");
    const size_t arrow = line.find("->");
    if (lane == std::string_view::npos || arrow == std::string_view::npos || arrow < lane) continue;
    bool am = false;
    for (std::string_view word : Split(line.substr(arrow + 2), ' ')) am = am || word == "am";
    if (!am) continue;
    // "lane[0]:  1:sysv/memory.0 md[1]": the resource number, then "transport/device".
    std::string_view rest = line.substr(lane, arrow - lane);
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return "";
    rest = Trim(rest.substr(colon + 1));
    const size_t name = rest.find(':');
    const size_t slash = rest.find('/');
    if (name == std::string_view::npos || slash == std::string_view::npos || slash < name) return "";
    return std::string(rest.substr(name + 1, slash - name - 1));
  }
  return "";
}

bool IsSharedMemoryTransport(std::string_view transport) {
  return transport == "posix" || transport == "sysv" || transport == "xpmem";
}

std::string UcxConnectionAmTransport(const Connection& connection) {
  const auto* ucx = dynamic_cast<const UcxConnection*>(&connection);
  return ucx != nullptr ? ucx->am_transport() : "";
}

UcxWaitCounters GetUcxWaitCounters() {
  return {.sleeps = g_sleeps.load(),
          .kicked = g_kicked.load(),
          .timeouts = g_timeouts.load(),
          .yields = g_yields.load(),
          .yields_switched = g_yields_switched.load(),
          .oob_polls = g_oob_polls.load(),
          .helper_runs = g_helper_runs.load(),
          .helper_notifies = g_helper_notifies.load()};
}

StatusOr<std::unique_ptr<Transport>> MakeUcxTransport(const TransportOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::Internal("ucp_config_read: " + UcsError(st));
  if (!options.ucx_tls.empty()) {
    st = ucp_config_modify(config, "TLS", options.ucx_tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status::InvalidArgument(
          fmt::format("UCX_TLS '{}' rejected: {}", options.ucx_tls, UcsError(st)));
    }
  }
  // Keepalive for UCX's own tcp sockets and ucp endpoints (TransportOptions::liveness,
  // ucx_keepalive_interval_ms). KEEPALIVE_INTERVAL is ucp's own (UCX_KEEPALIVE_INTERVAL); the
  // others are the tcp transport's UCX_TCP_KEEP*: ucp_config_modify keeps names it does not
  // know and hands them to each transport's configuration, whose fields lack the "TCP_" prefix
  // (with it, UCX 1.13 silently applies nothing: remote_liveness_test reads the sockets back).
  std::vector<std::pair<std::string, std::string>> keepalive;
  const TcpLivenessOptions& live = options.liveness;
  if (live.keepalive_idle_s > 0) {
    // UCX keeps times in its tick clock and truncates them back to whole seconds for the
    // socket (measured: "7s" gave 6 s now and then); half a second more gives the seconds asked.
    keepalive.push_back({"KEEPIDLE", fmt::format("{}ms", live.keepalive_idle_s * 1000 + 500)});
    keepalive.push_back(
        {"KEEPINTVL", fmt::format("{}ms", std::max(1, live.keepalive_interval_s) * 1000 + 500)});
    keepalive.push_back({"KEEPCNT", fmt::format("{}", std::max(1, live.keepalive_count))});
  }
  if (options.ucx_keepalive_interval_ms > 0) {
    keepalive.push_back({"KEEPALIVE_INTERVAL", fmt::format("{}ms", options.ucx_keepalive_interval_ms)});
  }
  for (const auto& [name, value] : keepalive) {
    st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status::InvalidArgument(
          fmt::format("UCX_{}={} rejected: {}", name, value, UcsError(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  auto ctx = std::make_shared<Context>();
  ctx->peer_error_mode = AllTransportsDetectPeerFailure(options.ucx_tls);
  ctx->wakeup = true;
  st = ucp_init(&params, config, &ctx->handle);
  if (st != UCS_OK) {
    // Transports without event support: fall back to sleep-polling waits.
    params.features = UCP_FEATURE_TAG;
    ctx->wakeup = false;
    ctx->handle = nullptr;
    st = ucp_init(&params, config, &ctx->handle);
  }
  ucp_config_release(config);
  if (st != UCS_OK) {
    ctx->handle = nullptr;
    return Status::Unavailable(fmt::format("ucp_init (UCX_TLS={}): {}",
                                           options.ucx_tls.empty() ? "default" : options.ucx_tls,
                                           UcsError(st)));
  }
  return std::unique_ptr<Transport>(new UcxTransport(std::move(ctx), options));
}

}  // namespace gpool::remote
