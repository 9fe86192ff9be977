// Session's deadline: a lease bounds its session (see SessionDeadline in session.h).
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "remote/server/session.h"

namespace gpool::remote::server {

Status Session::Run() {
  std::thread watchdog;
  if (deadline_.at_nanos != 0) {
    if (deadline_.clock == nullptr) return Status::InvalidArgument("session deadline without a clock");
    watchdog = std::thread([this] { WatchDeadline(); });
  }
  Status s = Serve();
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lk(watch_mu_);
      watch_stop_ = true;
    }
    watch_cv_.notify_all();
    watchdog.join();
  }
  if (ended_.load()) {
    return Status::PermissionDenied(fmt::format("session {} from {} ended: {}", id_, conn_->peer(),
                                                deadline_.why));
  }
  return s;
}

Status Session::SendLocked(std::span<const wire::ByteSpan> parts) {
  std::lock_guard<std::timed_mutex> lk(send_mu_);
  if (ended_.load(std::memory_order_relaxed)) return Status::Unavailable("session ended");
  if (gather_ends_.empty() && parts.empty()) return Status::Ok();
  ++stats_.sends;
  if (gather_ends_.empty()) return conn_->Send(parts);
  // The gathered replies precede this one: one SendAll, in order.
  gather_parts_.clear();
  gather_msgs_.clear();
  size_t begin = 0;
  for (size_t end : gather_ends_) {
    gather_parts_.push_back(wire::ByteSpan(gather_.data() + begin, end - begin));
    begin = end;
  }
  for (const wire::ByteSpan& m : gather_parts_) gather_msgs_.emplace_back(&m, 1);
  if (!parts.empty()) gather_msgs_.push_back(parts);
  gather_.clear();
  gather_ends_.clear();
  return conn_->SendAll(gather_msgs_);
}

void Session::EndSession() {
  std::unique_lock<std::timed_mutex> lk(send_mu_, std::defer_lock);
  if (!lk.try_lock_for(std::chrono::milliseconds(deadline_.grace_ms))) {
    // The session thread is stuck in a send (a client that stopped reading): end it without
    // telling the client; closing unblocks that send.
    if (ended_.exchange(true)) return;
    GPOOL_LOG_INFO("gpu-server: session {} from {}: {}; ending it (the client is not reading)",
                   id_, conn_->peer(), deadline_.why);
    conn_->Close();
    return;
  }
  if (ended_.load()) return;
  ended_.store(true);
  proto::ReplyHead head{.error = deadline_.error, .message = deadline_.why};
  proto::SessionEnd body;
  proto::BatchWriter w;
  w.AddReply(static_cast<uint16_t>(proto::Op::kSessionEnd), head, body);
  // The client may be gone already; it is ended either way.
  Status s = conn_->Send(w.Finish());
  GPOOL_LOG_INFO("gpu-server: session {} from {}: {}; ending it{}", id_, conn_->peer(),
                 deadline_.why, s.ok() ? "" : " (the client did not get the news: " + s.message() + ")");
  // Unblocks the session thread's receive (or its next send); Run then returns.
  conn_->Close();
}

void Session::WatchDeadline() {
  std::unique_lock<std::mutex> lk(watch_mu_);
  for (;;) {
    if (watch_stop_) return;
    int64_t left = deadline_.at_nanos - deadline_.clock->NowNanos();
    if (left <= 0) break;
    // Re-read the clock at least every max_sleep_ms: the clock is wall time (it may be stepped)
    // or, in tests, a ManualClock that a sleep on the steady clock knows nothing of.
    int64_t nap = std::min<int64_t>(left, int64_t{deadline_.max_sleep_ms} * 1000000);
    watch_cv_.wait_for(lk, std::chrono::nanoseconds(nap));
  }
  lk.unlock();
  EndSession();
  lk.lock();
  if (!watch_cv_.wait_for(lk, std::chrono::milliseconds(deadline_.grace_ms),
                          [&] { return watch_stop_; }) &&
      deadline_.on_stuck) {
    GPOOL_LOG_WARN("gpu-server: session {}: still busy in a backend call {} ms after its deadline",
                   id_, deadline_.grace_ms);
    deadline_.on_stuck();
  }
}

}  // namespace gpool::remote::server
