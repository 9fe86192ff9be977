// LeaderElection: one leader among the controllers sharing an etcd store.
//
// Protocol: each candidate holds an etcd lease of `ttl` seconds and tries to create `key`
// (value: its advertised address) attached to that lease, only if the key is absent. The one
// that creates it leads; its *fence* is the key's mod revision. The leader refreshes the lease
// every ttl/3; if it dies or pauses, etcd deletes the key when the lease expires and a standby
// (polling every min(ttl/4, 250 ms)) creates it.
//
// Fencing, not timing, keeps an old leader from writing: the controller adds
// Compare::ModRevisionIs(key, fence) to every write Txn, so once the key is gone or recreated
// by another leader, the old leader's writes fail atomically, whatever its clock or a SIGSTOP
// did. The old leader also steps down by itself when a keepalive reports the lease expired,
// when it finds the key changed, or when it cannot renew before its local estimate of the expiry
// (measured from before the last successful renewal was sent, so it errs early).
//
// Failover time ~ ttl (lease expiry) + the standby's poll interval + the new leader's recovery.
// etcd rounds TTLs up to its minimum (1.5 election timeouts; 2 s with etcd's defaults).
//
// Thread safety: thread-safe. The callback runs on the election thread, never concurrently with
// itself; it may call leading()/fence()/leader() but not Stop().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "control/etcd_store.h"

namespace gpool::control {

struct LeaderOptions {
  std::string key = "/control/leader";
  std::string id;      // this candidate's advertised address, the key's value when it leads
  int64_t ttl_s = 2;   // lease TTL in seconds
};

class LeaderElection {
 public:
  // Called on every change: (true, fence) when this candidate starts leading, (false, 0) when it
  // stops.
  using Callback = std::function<void(bool leading, Revision fence)>;

  LeaderElection(EtcdStore* store, const LeaderOptions& options, Callback on_change);
  ~LeaderElection();

  void Start();
  // Stops campaigning; a leader resigns (revokes its lease, so a standby takes over at once).
  void Stop();
  // Called by the controller when a fenced write was refused: step down now.
  void LostLeadership();

  bool leading() const { return leading_.load(); }
  Revision fence() const { return fence_.load(); }
  const std::string& key() const { return options_.key; }
  // The current leader's address as last seen ("" when unknown).
  std::string leader() const;

 private:
  void Run();
  void Campaign();  // one standby round
  void Renew();     // one leader round
  void StepDown(const std::string& why);

  EtcdStore* const store_;
  const LeaderOptions options_;
  const Callback on_change_;

  std::atomic<bool> leading_{false};
  std::atomic<Revision> fence_{0};
  std::atomic<bool> lost_{false};
  int64_t lease_ = 0;  // election thread only
  std::chrono::steady_clock::time_point lease_expiry_;  // election thread only (local estimate)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // mu_
  std::string leader_;  // mu_
  std::thread thread_;
};

}  // namespace gpool::control
