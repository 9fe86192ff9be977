#include "control/leader.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.h"

namespace gpool::control {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

LeaderElection::LeaderElection(EtcdStore* store, const LeaderOptions& options, Callback on_change)
    : store_(store), options_(options), on_change_(std::move(on_change)) {}

LeaderElection::~LeaderElection() { Stop(); }

void LeaderElection::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElection::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaderElection::LostLeadership() {
  lost_ = true;
  cv_.notify_all();
}

std::string LeaderElection::leader() const {
  std::lock_guard<std::mutex> l(mu_);
  return leader_;
}

void LeaderElection::StepDown(const std::string& why) {
  if (!leading_.exchange(false)) return;
  fence_ = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    leader_.clear();
  }
  GPOOL_LOG_WARN("controller {}: no longer the leader: {}", options_.id, why);
  on_change_(false, 0);
}

void LeaderElection::Campaign() {
  const auto ttl = std::chrono::seconds(options_.ttl_s);
  auto t0 = Clock::now();
  if (lease_ == 0 || t0 >= lease_expiry_) {
    auto lease = store_->GrantLease(options_.ttl_s);
    if (!lease.ok()) {
      GPOOL_LOG_WARN("controller {}: lease grant: {}", options_.id, lease.status().ToString());
      return;
    }
    lease_ = *lease;
    lease_expiry_ = t0 + ttl;
  } else if (t0 >= lease_expiry_ - ttl * 2 / 3) {
    // A standby keeps its lease alive (cheap: no raft write) so that it can take over with one Txn.
    auto left = store_->KeepAlive(lease_);
    if (!left.ok() || *left <= 0) {
      lease_ = 0;
      return;
    }
    lease_expiry_ = t0 + std::chrono::seconds(*left);
  }
  KeyValue holder;
  auto won = store_->CreateWithLease(options_.key, options_.id, lease_, &holder);
  if (!won.ok()) {
    GPOOL_LOG_WARN("controller {}: campaign: {}", options_.id, won.status().ToString());
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    leader_ = holder.value;
  }
  if (!*won) return;
  lost_ = false;
  fence_ = holder.mod_revision;
  leading_ = true;
  GPOOL_LOG_INFO("controller {}: leading (fence revision {})", options_.id, holder.mod_revision);
  on_change_(true, holder.mod_revision);
}

void LeaderElection::Renew() {
  auto t0 = Clock::now();
  auto left = store_->KeepAlive(lease_);
  if (left.ok() && *left > 0) {
    lease_expiry_ = t0 + std::chrono::seconds(*left);
  } else if (left.ok()) {
    lease_ = 0;
    StepDown("the lease expired");
    return;
  } else if (Clock::now() >= lease_expiry_) {
    StepDown(fmt::format("could not renew the lease before it expires: {}", left.status().ToString()));
    return;
  }
  auto kv = store_->Get(options_.key);
  if (kv.ok() && (!kv->has_value() || (*kv)->mod_revision != fence_.load())) {
    StepDown("the leader key was deleted or taken over");
  }
}

void LeaderElection::Run() {
  const auto ttl = milliseconds(options_.ttl_s * 1000);
  const auto poll = std::min(ttl / 4, milliseconds(250));
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
    }
    if (lost_.exchange(false) && leading_) {
      // The controller saw a fenced commit refused, or could not tell whether one committed.
      // Drop the lease too: if the key is still ours, that frees it for the next election
      // (this candidate included) instead of leaving it held by a lease we keep alive.
      StepDown("a fenced write was refused or its outcome is unknown");
      if (lease_ != 0 && store_->RevokeLease(lease_).ok()) lease_ = 0;
    }
    if (leading_) {
      Renew();
    } else {
      Campaign();
    }
    // A leader renews every ttl/3, sooner when its last renewal failed.
    auto wait = leading_ ? (Clock::now() + ttl / 3 < lease_expiry_ ? ttl / 3 : milliseconds(100))
                         : poll;
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, wait, [this] { return stop_ || lost_.load(); });
  }
  if (lease_ != 0) {
    // Resign: deleting the lease deletes the key, so a standby need not wait for the TTL.
    Status s = store_->RevokeLease(lease_);
    if (!s.ok()) GPOOL_LOG_WARN("controller {}: revoke lease: {}", options_.id, s.ToString());
    lease_ = 0;
  }
  StepDown("stopping");
}

}  // namespace gpool::control
