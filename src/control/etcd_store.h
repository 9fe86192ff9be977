// EtcdStore: the Store backend on an etcd v3 cluster (etcd://HOST:PORT[,HOST:PORT...]), for
// several controllers sharing one state (leader election: leader.h).
//
// Mapping onto etcd (through its JSON gateway, see etcd_client.h for why):
//   - Keys and values are stored as they are, laid out by kind (keys:: in store.h).
//   - Txn = one etcd Txn: Compare(MOD == r) per compare, the ops in its success branch. Each
//     Txn is one raft proposal, so multi-key updates are atomic and get one revision.
//   - Revisions: a fresh etcd cluster is at revision 1 before any write, our stores at 0, so
//     Store revision = etcd revision - 1 everywhere (kvs, watch events, compares, Compact).
//     The mapping is fixed, so every process sharing the cluster agrees on it.
//   - Watch = an etcd watch stream (POST /v3/watch, newline-delimited JSON) read by one thread
//     per Watcher; on a broken stream it reconnects to the next member from the next revision,
//     so no event is lost or repeated.
//   - Compact = etcd compaction. etcd keeps the revision it compacted at readable, the Store
//     contract drops it, so Compact(r) compacts etcd at r+1 and Watch(from <= r) is refused by a
//     read at the compacted revision. Events a Watcher already buffered that fall at or below a
//     compaction this process made are dropped with FailedPrecondition, as SQLite does.
//   - Durability: etcd acknowledges after a quorum of members fsync'd its WAL.
//
// Limits: StoreOptions::group_commit and max_batch_txns do not apply (etcd batches raft
// proposals itself); history_revisions is not enforced here: run etcd with
// --auto-compaction-mode=revision --auto-compaction-retention=N. etcd refuses Txns of more
// than --max-txn-ops ops (default 128) and requests over --max-request-bytes (1.5 MiB): the
// controller writes one op per changed job per cycle, so run etcd with --max-txn-ops 10000
// --max-request-bytes 16777216 (README, HA deployment).
//
// Thread safety: as Store (thread-safe).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "control/etcd_client.h"
#include "control/store.h"

namespace gpool::control {

class EtcdStore final : public Store {
 public:
  // `endpoints`: "host:port[,host:port...]". Fails with Unavailable naming the endpoints when
  // no member answers.
  static StatusOr<std::unique_ptr<Store>> Open(std::string_view endpoints,
                                               const StoreOptions& options);
  ~EtcdStore() override;

  StatusOr<TxnResult> Txn(const TxnRequest& request) override;
  StatusOr<std::optional<KeyValue>> Get(std::string_view key) override;
  StatusOr<RangeResult> Range(std::string_view prefix, const RangeOptions& options) override;
  StatusOr<Revision> CurrentRevision() override;
  StatusOr<std::unique_ptr<Watcher>> Watch(std::string_view prefix,
                                           Revision from_revision) override;
  Status Compact(Revision revision) override;
  Status CheckIntegrity() override;
  // Compacts revisions older than options.history_revisions (the controller calls it after
  // retention removed records, so history does not keep them); Ok when there is nothing to do.
  Status Reclaim() override;

  // ---- Leases, for leader election (leader.h) ----
  // Grants a lease of `ttl_s` seconds (etcd may round it up to its minimum); returns its id.
  StatusOr<int64_t> GrantLease(int64_t ttl_s);
  // Refreshes the lease; returns the TTL left in seconds, 0 or less when it has expired.
  StatusOr<int64_t> KeepAlive(int64_t lease);
  Status RevokeLease(int64_t lease);
  // Creates `key` = `value` attached to `lease` if `key` is absent. Returns whether it was
  // created; in both cases *holder gets the key as it now is.
  StatusOr<bool> CreateWithLease(const std::string& key, const std::string& value, int64_t lease,
                                 KeyValue* holder);

  EtcdClient& client() { return *client_; }

 private:
  class EtcdWatcher;
  EtcdStore(std::unique_ptr<EtcdClient> client, const StoreOptions& options);

  std::unique_ptr<EtcdClient> client_;
  const StoreOptions options_;
  // The highest Store revision this process compacted at (see the class comment).
  std::shared_ptr<std::atomic<Revision>> compacted_;
};

}  // namespace gpool::control
