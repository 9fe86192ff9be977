// Store: the controller's durable state as keys with revisions.
//
// The controller keeps nodes, jobs, allocations, tenants and leases here. The interface is a
// small subset of etcd v3's KV model so that one test suite (store_test.cc) can run on both
// backends: SQLite in WAL mode embedded by default (sqlite_store.h), etcd later.
//
//   - Keys are bytes laid out by kind ("/jobs/<id>", see keys:: below); values are opaque bytes
//     (the controller stores JSON or protobuf).
//   - Every committed change advances one store-wide revision. All changes of one Txn share one
//     revision. Each key remembers the revision that created it, the revision that last modified
//     it and its version (number of puts since creation), as in etcd.
//   - Txn: all compares hold => all ops applied atomically; any compare fails => nothing applied
//     and TxnResult::succeeded is false (that is not an error). There is no "else" branch: read
//     again and retry.
//   - Watch(prefix, from_revision) yields the ordered changes under a prefix, starting from a
//     past revision if the history still holds it (Compact drops history).
//
// Durability: Txn returns only after its changes are durable (fsync'd). After a crash or kill -9,
// reopening recovers every acknowledged Txn, each applied exactly once.
//
// Thread safety: a Store is thread-safe. Txn, Get, Range, Watch and Compact may be called from any
// number of threads at once; concurrent Txns are batched into one durable commit (group commit).
// A Watcher is used by one thread at a time and must be destroyed before its Store.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool::control {

// Store-wide revision. 0 means "before any write"; the first committed change is revision 1.
using Revision = int64_t;

struct KeyValue {
  std::string key;
  std::string value;
  Revision create_revision = 0;
  Revision mod_revision = 0;
  int64_t version = 0;  // puts since creation; 1 after the first put
};

// A condition on one key, evaluated when the Txn is applied. Only mod-revision equality is
// offered because that is what compare-and-swap needs; mod_revision 0 means "key is absent"
// (etcd uses the same convention).
struct Compare {
  std::string key;
  Revision mod_revision = 0;

  static Compare Absent(std::string key) { return {std::move(key), 0}; }
  static Compare ModRevisionIs(std::string key, Revision rev) { return {std::move(key), rev}; }
};

struct Op {
  enum class Type { kPut, kDelete, kDeletePrefix };
  Type type = Type::kPut;
  std::string key;  // for kDeletePrefix: the prefix ("" deletes every key)
  std::string value;
};

// The request of one transaction. Built fluently:
//   TxnRequest().If(Compare::Absent(k)).Put(k, v)
// A key may be written at most once per Txn, and a Put may not fall under a DeletePrefix of the
// same Txn (etcd rejects both; so do we, with InvalidArgument).
struct TxnRequest {
  std::vector<Compare> compares;
  std::vector<Op> ops;

  TxnRequest& If(Compare c) {
    compares.push_back(std::move(c));
    return *this;
  }
  TxnRequest& Put(std::string key, std::string value) {
    ops.push_back({Op::Type::kPut, std::move(key), std::move(value)});
    return *this;
  }
  TxnRequest& Delete(std::string key) {
    ops.push_back({Op::Type::kDelete, std::move(key), {}});
    return *this;
  }
  TxnRequest& DeletePrefix(std::string prefix) {
    ops.push_back({Op::Type::kDeletePrefix, std::move(prefix), {}});
    return *this;
  }
};

struct TxnResult {
  bool succeeded = false;  // false: a compare failed and nothing was applied
  // The revision the Txn's changes were committed at; when it changed nothing (failed compare,
  // deletes of absent keys) the store revision it was evaluated against.
  Revision revision = 0;
};

struct RangeOptions {
  int64_t limit = 0;  // at most this many keys; 0 = no limit
};

struct RangeResult {
  std::vector<KeyValue> kvs;  // sorted by key (bytewise)
  bool more = false;          // limit cut the result short
  Revision revision = 0;      // the store revision the read saw (a consistent snapshot)
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  // For kDelete: key, and mod_revision = the revision of the delete; value empty, version 0.
  KeyValue kv;
};

// An ordered stream of changes under one prefix. Events come in (revision, position in Txn)
// order with no gaps and no repeats. A large Txn's events may be split over two Next calls.
class Watcher {
 public:
  virtual ~Watcher() = default;
  // Waits up to `timeout` for events; returns an empty vector on timeout. FailedPrecondition
  // when the watch fell behind a compaction (the events it needs are gone): re-list with Range
  // and watch again from RangeResult::revision + 1.
  virtual StatusOr<std::vector<WatchEvent>> Next(std::chrono::milliseconds timeout) = 0;
};

struct StoreOptions {
  // Batch concurrent Txns into one transaction and one fsync. false = one fsync per Txn (the
  // baseline the benchmark compares against).
  bool group_commit = true;
  // Most Txns in one batch; bounds the latency a batch adds to its first writer.
  int max_batch_txns = 512;
  // Largest value accepted, in bytes (etcd's default request limit is 1.5 MiB).
  size_t max_value_bytes = 1 << 20;
  // Watch history kept, in revisions; older events are compacted away automatically once the
  // history exceeds twice this. 0 = keep all history until Compact is called.
  Revision history_revisions = 100000;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual StatusOr<TxnResult> Txn(const TxnRequest& request) = 0;
  virtual StatusOr<std::optional<KeyValue>> Get(std::string_view key) = 0;
  // Every key starting with `prefix` ("" = every key).
  virtual StatusOr<RangeResult> Range(std::string_view prefix, const RangeOptions& options) = 0;
  virtual StatusOr<Revision> CurrentRevision() = 0;
  // from_revision 0: changes after the current revision; otherwise changes at revisions
  // >= from_revision (history permitting).
  virtual StatusOr<std::unique_ptr<Watcher>> Watch(std::string_view prefix,
                                                   Revision from_revision) = 0;
  // Drops watch history at revisions <= `revision` (current keys are kept).
  virtual Status Compact(Revision revision) = 0;
  // Checks the backend's own integrity and the store's invariants (revision counters agree with
  // the data). For tests and `gpool` diagnostics; may be slow.
  virtual Status CheckIntegrity() = 0;
  // Gives back disk that deleted records and old history hold, cheaply enough to call every few
  // thousand deletes (not per change): SQLite truncates its write-ahead log (freed pages stay in
  // the file and are reused, so the file stops growing at its peak); etcd compacts revisions
  // older than StoreOptions::history_revisions (its backend reuses the freed space; shrinking
  // the file is `etcdctl defrag`, an operator's call because it blocks the member).
  virtual Status Reclaim() = 0;

  // Convenience: an unconditional single put; returns the revision it was committed at.
  StatusOr<Revision> Put(std::string key, std::string value);
};

// Checks a Txn against the rules above (empty keys, negative revisions, a key written twice, a
// put under a delete-prefix of the same Txn, values over options.max_value_bytes): InvalidArgument
// naming the compare/op index and key. Shared by the backends so they refuse the same Txns.
Status ValidateTxnRequest(const TxnRequest& request, const StoreOptions& options);

// Opens a store by URL:
//   sqlite:PATH        SQLite database file at PATH (created if missing), WAL mode
//   etcd://HOST:PORT[,HOST:PORT...]   etcd v3 cluster members (etcd_store.h)
// A malformed URL gets InvalidArgument naming what was wrong.
StatusOr<std::unique_ptr<Store>> OpenStore(std::string_view url, const StoreOptions& options = {});

// The smallest key greater than every key with this prefix, "" when there is none (etcd's
// range_end convention). Shared by backends.
std::string PrefixEnd(std::string_view prefix);

// Key layout, by kind. Ids and names must not contain '/' (CheckKeyPart).
namespace keys {
inline constexpr std::string_view kJobs = "/jobs/";
inline constexpr std::string_view kNodes = "/nodes/";
inline constexpr std::string_view kAllocs = "/allocs/";
inline constexpr std::string_view kTenants = "/tenants/";
inline constexpr std::string_view kLeases = "/leases/";
// Finished jobs that left the controller's live state (retention): the job record under
// kArchiveJobs + id, the owner of a client_request_id under kArchiveRequests + hex(request id),
// and the archive's size and highest job number under kArchiveMeta.
inline constexpr std::string_view kArchiveJobs = "/archive/jobs/";
inline constexpr std::string_view kArchiveRequests = "/archive/requests/";
inline constexpr std::string_view kArchiveMeta = "/archive/meta";

std::string Job(std::string_view id);
std::string Node(std::string_view name);
std::string Alloc(std::string_view job, std::string_view task);
std::string AllocsOfJob(std::string_view job);  // prefix of one job's allocations
std::string Tenant(std::string_view name);
std::string Lease(std::string_view id);
std::string ArchivedJob(std::string_view id);
// Request ids may hold any byte ('/' included: tenant scoping), so the key carries them in hex.
std::string ArchivedRequest(std::string_view client_request_id);
// InvalidArgument unless `part` is non-empty and has no '/' or NUL; names `what` in the message.
Status CheckKeyPart(std::string_view what, std::string_view part);
}  // namespace keys

}  // namespace gpool::control
