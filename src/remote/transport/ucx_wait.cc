// The UCX connection's waiting (ucx_internal.h names the other parts; "Waiting" there says how
// it works): Wait (progress until one request completes, aborting it when the connection
// closes or the peer goes), the helper thread that progresses the worker while no call waits
// (ProgressLoop, NotifyHelper), and GetUcxWaitCounters. Idle, the sleep every wait loop takes,
// is inline in ucx_internal.h.
#include "remote/transport/ucx_internal.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

namespace gpool::remote::ucx {
namespace {

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
// How long after the last waiting call the helper thread takes over progress (see "Waiting").
constexpr auto kHelperDelay = std::chrono::milliseconds(20);
// How often a parked helper looks again while a call waits (and progresses) itself: it then
// takes over at most this long after the last wait ended plus kHelperDelay. It is not woken when
// a wait ends (that cost a futex wake and a helper wake-up per ~8 round trips), unless a send is
// left in flight (Foreground).
constexpr auto kHelperRecheck = std::chrono::milliseconds(100);

}  // namespace

// Progresses until `req` completes. If the connection closes or the peer goes meanwhile, a
// send forces the endpoint closed (completing its requests with an error) and a receive is
// cancelled; a receive that still won't finish is abandoned with its buffer parked in
// graveyard_ so UCX never writes into freed memory.
ucs_status_t UcxConnection::Wait(ucs_status_ptr_t req, bool is_send,
                                 std::vector<std::byte>* buffer) {
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

void UcxConnection::NotifyHelper() {
  g_helper_notifies.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(pt_mu_);
  pt_cv_.notify_one();
}

// The helper thread: see "Waiting" in ucx_internal.h.
void UcxConnection::ProgressLoop() {
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

}  // namespace gpool::remote::ucx

namespace gpool::remote {

UcxWaitCounters GetUcxWaitCounters() {
  return {.sleeps = ucx::g_sleeps.load(),
          .kicked = ucx::g_kicked.load(),
          .timeouts = ucx::g_timeouts.load(),
          .yields = ucx::g_yields.load(),
          .yields_switched = ucx::g_yields_switched.load(),
          .oob_polls = ucx::g_oob_polls.load(),
          .helper_runs = ucx::g_helper_runs.load(),
          .helper_notifies = ucx::g_helper_notifies.load()};
}

}  // namespace gpool::remote
