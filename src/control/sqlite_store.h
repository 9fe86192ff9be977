// SqliteStore: the embedded Store backend, one SQLite database file in WAL mode.
//
// Layout: table kv (current keys), table events (the change log that feeds Watch, trimmed by
// compaction), table meta (store revision, compaction point). The file carries
// application_id 'gpoo' and a schema version, so a foreign SQLite file is refused by name.
//
// Durability and group commit: synchronous=FULL in WAL mode makes each COMMIT fsync the WAL.
// Txn callers queue up; the caller at the head of the queue (the leader, as in LevelDB's write
// path) takes up to max_batch_txns queued Txns, applies each inside its own SAVEPOINT of one
// write transaction, COMMITs once, and only then acknowledges every Txn of the batch. Writers
// that arrive during the fsync form the next batch, so the number of fsyncs falls as
// concurrency rises. A failed compare or a failed op rolls back only its own SAVEPOINT; a failed
// COMMIT fails the whole batch (none of it was acknowledged, none of it is durable).
//
// Reads (Get, Range, Watch) use a small pool of separate read connections: in WAL mode they
// read the last committed snapshot and never wait for a batch's fsync.
//
// Watch is notification-driven inside this process (a condition variable signalled after each
// COMMIT, then a query of the events table). Other processes are locked out: one process owns the
// file (an flock on PATH-lock), so standby controllers need the etcd backend.
//
// Thread safety: as Store (thread-safe).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/sqlite_db.h"
#include "control/store.h"

namespace gpool::control {

class SqliteStore final : public Store {
 public:
  // Opens or creates the store at `path`. Errors name the path: a missing directory, a file
  // that is not a database or not a gpool store, a store held open by another process.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                               const StoreOptions& options);
  ~SqliteStore() override;

  StatusOr<TxnResult> Txn(const TxnRequest& request) override;
  StatusOr<std::optional<KeyValue>> Get(std::string_view key) override;
  StatusOr<RangeResult> Range(std::string_view prefix, const RangeOptions& options) override;
  StatusOr<Revision> CurrentRevision() override;
  StatusOr<std::unique_ptr<Watcher>> Watch(std::string_view prefix,
                                           Revision from_revision) override;
  Status Compact(Revision revision) override;
  Status CheckIntegrity() override;
  Status Reclaim() override;

  // Number of write transactions (fsyncs) committed since Open; for tests and benchmarks.
  int64_t commits() const { return commits_.load(); }
  // Txns waiting in the queue, the one being committed included (a gauge for /metrics).
  size_t queued_txns();

 private:
  struct Writer;
  struct WriteConn;
  struct ReadConn;
  class ReadLease;
  class SqliteWatcher;

  SqliteStore(std::string path, const StoreOptions& options, int lock_fd);
  Status Init();
  Status CreateOrCheckSchema();
  StatusOr<std::unique_ptr<ReadConn>> OpenReadConn();
  StatusOr<ReadLease> LeaseReadConn();
  void ReturnReadConn(std::unique_ptr<ReadConn> conn);

  // Applies a batch of Txns in one write transaction; fills each Writer's result.
  void CommitBatch(const std::vector<Writer*>& batch);
  // Applies one Txn at revision `rev` inside the open write transaction. Returns whether its
  // compares held; sets *changed when it wrote anything.
  StatusOr<bool> ApplyTxn(const TxnRequest& request, Revision rev, bool* changed);
  StatusOr<Revision> LookupModRevision(std::string_view key, Revision* create_rev,
                                       int64_t* version);
  Status DeleteKey(std::string_view key, Revision rev, int64_t* sub);
  Status CompactLocked(Revision revision);
  void Publish(Revision rev);

  const std::string path_;
  const StoreOptions options_;
  const int lock_fd_;

  // Txn queue; the front Writer leads the next batch.
  std::mutex queue_mu_;
  std::deque<Writer*> queue_;

  // The write connection and the revision counters it advances. Held by a batch leader, and by
  // Compact.
  std::mutex write_mu_;
  std::unique_ptr<WriteConn> write_;
  Revision last_rev_ = 0;  // guarded by write_mu_
  Revision compact_rev_ = 0;  // guarded by write_mu_

  std::mutex read_mu_;
  std::vector<std::unique_ptr<ReadConn>> idle_readers_;  // guarded by read_mu_

  // Committed revision, published after each COMMIT; watchers wait on notify_cv_.
  std::mutex notify_mu_;
  std::condition_variable notify_cv_;
  std::atomic<Revision> committed_rev_{0};
  std::atomic<Revision> published_compact_rev_{0};
  std::atomic<int64_t> commits_{0};
};

}  // namespace gpool::control
