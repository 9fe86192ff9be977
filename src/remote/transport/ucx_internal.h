// Internal to the UCX transport (ucx_transport.h says what it does and why): what its sources
// share, in gpool::remote::ucx. UcxConnection is declared here and defined along its seams:
//   ucx_connection.cc  bootstrap (worker, address swap over the TCP socket, endpoint), that
//                      socket as the liveness channel (PeerGone, Gone), Close and teardown;
//   ucx_send.cc        Send, SendAll and the buffered sends (copies left in flight, reaping);
//   ucx_recv.cc        Recv, RecvSplit, RecvPlaced (whole and split messages);
//   ucx_wait.cc        waiting for one request (Wait), the helper thread, the wait counters.
// ucx_transport.cc holds the ucp context and its configuration, the listener and the transport.
// The idle step of every wait loop (Idle) and Progress are defined here, inline: they run on
// every poll of every wait, so each caller compiles them in as when they were one file.
// Not part of the public transport interface (transport.h, ucx_transport.h).
#pragma once

#include <poll.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "remote/transport/socket.h"
#include "remote/transport/transport.h"
#include "remote/transport/ucx_transport.h"

namespace gpool::remote::ucx {

using net::Fd;
using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC_COARSE in nanoseconds: a few ns against ~21 ns for steady_clock on the build VM,
// at the kernel tick's resolution (1-4 ms), for the helper thread's hand-over times (tens of ms),
// which every wait that ends records, at both ends of a round trip.
inline int64_t CoarseNowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

inline constexpr uint32_t kMagic = 0x31555047;  // "GPU1"
inline constexpr uint32_t kMaxAddressBytes = 1 << 16;
// Tags (one worker per connection, so they only say what a UCX message is, in the top byte):
// a whole message; or the head of a split one, whose low bits carry the length of its tail, sent
// next as its own contiguous message. A message whose last part is large is split so that the
// bulk bytes travel contiguous at both ends: UCX's zero-copy rendezvous (CMA on shared memory,
// RDMA on verbs) does not take iov datatypes, and a 2-part iov send or receive of 16 MiB moved
// at ~1/10 the speed of a contiguous one over shared memory (docs/benchmarks.md, "Remoting").
inline constexpr int kKindShift = 56;
inline constexpr ucp_tag_t kTagWhole = ucp_tag_t{0x10} << kKindShift;
inline constexpr ucp_tag_t kTagHead = ucp_tag_t{0x11} << kKindShift;
inline constexpr ucp_tag_t kTagTail = ucp_tag_t{0x20} << kKindShift;
// Probes match a whole message or a head, never a tail.
inline constexpr ucp_tag_t kProbeMask = ucp_tag_t{0xFE} << kKindShift;
inline constexpr ucp_tag_t kLengthMask = (ucp_tag_t{1} << kKindShift) - 1;
// The smallest last part sent as its own tail (see UcxConnection::SplitsTail): over shared
// memory, and over every other transport.
inline constexpr size_t kSplitTailMinShm = size_t{64} << 10;
inline constexpr size_t kSplitTailMinOther = size_t{128} << 10;

inline std::string UcsError(ucs_status_t s) { return ucs_status_string(s); }

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
inline constexpr auto kSpinTime = std::chrono::microseconds(200);
inline constexpr auto kSpinBeforeYield = std::chrono::microseconds(2);
// ...except while this thread shares its CPU with another runnable thread (t_cpu_shared: its
// last yield took at least kYieldSwitched, so something else ran meanwhile; a yield with nothing
// else to run is one syscall, ~1-1.5 us on the build VM). Then it yields on every empty poll,
// as the plain loop does: when both ends of a round trip share one CPU, the peer can only answer
// once this thread yields, and the 2 us spin at both ends made such a round trip 15.1 us against
// 9.5 us for the plain loop (shared memory, build VM; now 10.5 us against 9.9), while on two
// CPUs the spin makes it 0.45 us against 1.43 us (bench/ucx_rt_bench.cc, docs/benchmarks.md
// "Remoting"). A yield that returns at once (nothing else ran) ends the shared state. Only
// speed depends on this guess; a wrong one costs a syscall per poll, or a 2 us spin.
inline constexpr auto kYieldSwitched = std::chrono::microseconds(4);
// While a wait only polls (its first kSpinBeforeYield), it reads the clock on every this many
// idle steps over shared memory (see Idle), on every one elsewhere.
inline constexpr uint32_t kPollsPerClockReadShm = 8;
// Hidden: an inline thread-local lands in the dynamic symbol table of every shared library that
// links this transport (gpool's libcuda.so.1 stand-in exports the real driver's names only).
[[gnu::visibility("hidden")]] inline thread_local bool t_cpu_shared = false;
// Longest sleep while a send of this connection is in flight: a sender waiting for room (a full
// shared-memory FIFO, a full socket, the fragments of an active-message rendezvous) gets no event
// when the receiver makes room, so it must look again soon.
inline constexpr auto kInFlightSleep = std::chrono::microseconds(50);
// Longest single sleep: a safety net only (every wake-up source is an fd in the poll set).
inline constexpr auto kMaxSleep = std::chrono::milliseconds(100);

// The wait counters GetUcxWaitCounters reports (ucx_transport.h).
inline std::atomic<uint64_t> g_sleeps{0};
inline std::atomic<uint64_t> g_kicked{0};
inline std::atomic<uint64_t> g_timeouts{0};
inline std::atomic<uint64_t> g_yields{0};
inline std::atomic<uint64_t> g_yields_switched{0};
inline std::atomic<uint64_t> g_oob_polls{0};
inline std::atomic<uint64_t> g_helper_runs{0};
inline std::atomic<uint64_t> g_helper_notifies{0};

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

// The size of the bootstrap's address message (ucx_connection.cc) from its first bytes, for
// net::FirstMessageSize.
size_t BlobSize(std::span<const std::byte> peeked);

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<Context> ctx, Fd oob, const TransportOptions& options);
  ~UcxConnection() override;

  // Creates the worker, swaps addresses over the OOB socket and creates the endpoint.
  Status Start();

  Status Send(std::span<const ByteSpan> parts) override;
  Status SendAll(std::span<const std::span<const ByteSpan>> messages) override;
  Status Recv(std::vector<std::byte>* message) override;
  Status RecvSplit(std::vector<std::byte>* message, std::span<std::byte> tail,
                   bool* split) override;
  Status RecvPlaced(std::vector<std::byte>* message, TailPlacer& placer,
                    size_t* placed) override;
  Status Receive(std::vector<std::byte>* message, std::span<std::byte> tail, TailPlacer* placer,
                 bool* split);
  void Close() override;

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

  // Send path (ucx_send.cc).
  Status SendBuffered(const std::vector<ucp_dt_iov_t>& iov, size_t total, ucp_tag_t tag);
  SendBuffer TakeSendBuffer(size_t size);
  void ReturnSendBuffer(SendBuffer b);
  bool SplitsTail(const std::vector<ucp_dt_iov_t>& iov) const;
  static ucp_request_param_t TailSendParam(size_t total);
  Status SendAndWait(void* buffer, size_t count, ucp_request_param_t param, ucp_tag_t tag);
  bool PeerGoneRecently();
  void HandOffPendingSends();
  void ReapCompleted();
  Status ReapSends(size_t max_pending_bytes);

  // Receive path (ucx_recv.cc).
  Status RecvHeadAndTail(ucp_tag_message_h msg, const ucp_tag_recv_info_t& info,
                         std::vector<std::byte>* message, std::span<std::byte> tail,
                         TailPlacer* placer, bool* split);

  // Bootstrap, liveness and teardown (ucx_connection.cc).
  std::string EndpointInfo() const;
  bool PeerGone();
  Status Gone() const;
  void CloseEndpoint();

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

  // Defined in ucx_wait.cc.
  ucs_status_t Wait(ucs_status_ptr_t req, bool is_send, std::vector<std::byte>* buffer = nullptr);
  void NotifyHelper();
  void ProgressLoop();
  // One idle step of a wait loop (defined below the class).
  template <class Ready>
  void Idle(Spin& spin, Ready&& ready, std::chrono::microseconds timeout = kMaxSleep,
            bool watch_oob = true);

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

// One idle step of a wait loop, after a progress that did nothing and a check that found the
// wait not over: returns at once while spinning, else sleeps (see "Waiting" in the class) for
// at most `timeout`. `ready` (the wait's condition) is checked again once this thread counts as a
// sleeper, so a completion made meanwhile by another thread's progress is never slept through.
template <class Ready>
void UcxConnection::Idle(Spin& spin, Ready&& ready, std::chrono::microseconds timeout,
                         bool watch_oob) {
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

}  // namespace gpool::remote::ucx
