#include "control/sqlite_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace gpool::control {
namespace {

constexpr int64_t kApplicationId = 0x67706f6f;  // 'gpoo' in the database header
constexpr int64_t kSchemaVersion = 1;
constexpr int kEventPut = 0;
constexpr int kEventDelete = 1;
constexpr int64_t kSqliteWatchBatch = 1000;  // events returned by one Watcher::Next at most
constexpr size_t kMaxIdleReaders = 8;

constexpr const char* kSchema = R"sql(
BEGIN IMMEDIATE;
CREATE TABLE kv(key BLOB PRIMARY KEY, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
                mod_rev INTEGER NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE events(rev INTEGER NOT NULL, sub INTEGER NOT NULL, type INTEGER NOT NULL,
                    key BLOB NOT NULL, value BLOB NOT NULL, create_rev INTEGER NOT NULL,
                    version INTEGER NOT NULL, PRIMARY KEY(rev, sub)) WITHOUT ROWID;
CREATE TABLE meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES('revision', 0), ('compact_revision', 0);
PRAGMA application_id = 1735421807;
PRAGMA user_version = 1;
COMMIT;
)sql";
static_assert(kApplicationId == 1735421807);

constexpr const char* kMetaSql =
    "SELECT (SELECT value FROM meta WHERE name = 'revision'), "
    "(SELECT value FROM meta WHERE name = 'compact_revision')";

std::string QuoteKey(std::string_view key) {
  // Keys are bytes; show them readably in messages without dumping binary.
  std::string out;
  for (char c : key.substr(0, 200)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  if (key.size() > 200) out += "...";
  return fmt::format("'{}'", out);
}

}  // namespace

struct SqliteStore::Writer {
  const TxnRequest* request = nullptr;
  std::optional<StatusOr<TxnResult>> result;
  bool done = false;  // guarded by queue_mu_
  std::condition_variable cv;
};

struct SqliteStore::WriteConn {
  Connection conn;  // declared first: destroyed after the statements
  Statement begin, commit, rollback, savepoint, release, rollback_to;
  Statement lookup, upsert, del, keys_bounded, keys_unbounded, event, set_meta, compact;
};

struct SqliteStore::ReadConn {
  Connection conn;
  Statement begin, end;
  Statement meta, get, range_bounded, range_unbounded, events_bounded, events_unbounded;
  bool healthy = true;
};

// Borrows a read connection from the pool for one read; gives it back when destroyed.
class SqliteStore::ReadLease {
 public:
  ReadLease(SqliteStore* store, std::unique_ptr<ReadConn> conn)
      : store_(store), conn_(std::move(conn)) {}
  ReadLease(ReadLease&& other) noexcept
      : store_(other.store_), conn_(std::move(other.conn_)) {}
  ReadLease& operator=(ReadLease&&) = delete;
  ~ReadLease() {
    if (conn_ != nullptr) store_->ReturnReadConn(std::move(conn_));
  }
  ReadConn& operator*() { return *conn_; }
  ReadConn* operator->() { return conn_.get(); }

 private:
  SqliteStore* store_;
  std::unique_ptr<ReadConn> conn_;
};

namespace {

// One read transaction (a consistent snapshot) on a read connection. Statements used inside must
// be Reset before it ends.
class Snapshot {
 public:
  explicit Snapshot(Statement* begin, Statement* end, bool* healthy)
      : end_(end), healthy_(healthy) {
    begin->Reset();
    status_ = begin->Run();
  }
  ~Snapshot() {
    if (!status_.ok()) return;
    end_->Reset();
    // A read transaction that fails to end would poison the connection; drop it from the pool.
    if (!end_->Run().ok()) *healthy_ = false;
  }
  const Status& status() const { return status_; }

 private:
  Statement* end_;
  bool* healthy_;
  Status status_;
};

KeyValue ReadKv(const Statement& st) {
  return KeyValue{.key = st.ColumnBlob(0),
                  .value = st.ColumnBlob(1),
                  .create_revision = st.ColumnInt(2),
                  .mod_revision = st.ColumnInt(3),
                  .version = st.ColumnInt(4)};
}

}  // namespace

StatusOr<std::unique_ptr<Store>> SqliteStore::Open(const std::string& path,
                                                   const StoreOptions& options) {
  if (sqlite3_threadsafe() == 0) {
    return Status::FailedPrecondition("libsqlite3 was built without thread support");
  }
  // One process owns a store: the in-memory revision counter and watch notifications assume it.
  // flock is released by the kernel when the owner dies, even by kill -9.
  std::string lock_path = path + "-lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError(
        fmt::format("{}: cannot create lock file {}: {}", path, lock_path, std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char pid[32] = {};
    ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Status::FailedPrecondition(
          fmt::format("{}: store is already open (process {} holds {})", path,
                      n > 0 ? std::string(pid, n) : "?", lock_path));
    }
    return Status::IoError(fmt::format("{}: flock {}: {}", path, lock_path, std::strerror(err)));
  }
  std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    // The pid is only for the message above; a failure here does not matter for correctness.
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(path, options, fd));
  GPOOL_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

SqliteStore::SqliteStore(std::string path, const StoreOptions& options, int lock_fd)
    : path_(std::move(path)), options_(options), lock_fd_(lock_fd) {}

SqliteStore::~SqliteStore() {
  // Close the database before releasing the lock so a successor never sees it half-closed.
  write_.reset();
  idle_readers_.clear();
  ::close(lock_fd_);
}

Status SqliteStore::Init() {
  auto w = std::make_unique<WriteConn>();
  GPOOL_ASSIGN_OR_RETURN(w->conn, Connection::Open(path_, /*create=*/true));
  // The first statement reads the header: a file that is not a database fails here, by name.
  GPOOL_ASSIGN_OR_RETURN(std::string mode, w->conn.QueryText("PRAGMA journal_mode=WAL"));
  if (mode != "wal") {
    return Status::FailedPrecondition(
        fmt::format("{}: cannot use WAL mode (journal_mode is '{}')", path_, mode));
  }
  // FULL: every COMMIT fsyncs the WAL, so an acknowledged Txn survives power loss, not only a
  // process crash.
  GPOOL_RETURN_IF_ERROR(w->conn.Exec("PRAGMA synchronous=FULL"));
  write_ = std::move(w);
  GPOOL_RETURN_IF_ERROR(CreateOrCheckSchema());

  Connection& c = write_->conn;
  auto prep = [&c](Statement* st, std::string_view sql) -> Status {
    GPOOL_ASSIGN_OR_RETURN(*st, c.Prepare(sql));
    return Status::Ok();
  };
  WriteConn& wc = *write_;
  GPOOL_RETURN_IF_ERROR(prep(&wc.begin, "BEGIN IMMEDIATE"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.commit, "COMMIT"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.rollback, "ROLLBACK"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.savepoint, "SAVEPOINT txn"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.release, "RELEASE txn"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.rollback_to, "ROLLBACK TO txn"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.lookup, "SELECT mod_rev, create_rev, version FROM kv WHERE key = ?1"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.upsert, "INSERT OR REPLACE INTO kv VALUES(?1, ?2, ?3, ?4, ?5)"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.del, "DELETE FROM kv WHERE key = ?1"));
  GPOOL_RETURN_IF_ERROR(
      prep(&wc.keys_bounded, "SELECT key FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.keys_unbounded, "SELECT key FROM kv WHERE key >= ?1 ORDER BY key"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.event, "INSERT INTO events VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.set_meta, "UPDATE meta SET value = ?2 WHERE name = ?1"));
  GPOOL_RETURN_IF_ERROR(prep(&wc.compact, "DELETE FROM events WHERE rev <= ?1"));

  GPOOL_ASSIGN_OR_RETURN(Statement meta, c.Prepare(kMetaSql));
  GPOOL_ASSIGN_OR_RETURN(bool row, meta.Step());
  if (!row) return Status::Internal(fmt::format("{}: meta table is empty", path_));
  last_rev_ = meta.ColumnInt(0);
  compact_rev_ = meta.ColumnInt(1);
  committed_rev_ = last_rev_;
  published_compact_rev_ = compact_rev_;

  // Open one reader now so that a broken file or permissions problem shows at Open.
  GPOOL_ASSIGN_OR_RETURN(auto reader, OpenReadConn());
  ReturnReadConn(std::move(reader));
  return Status::Ok();
}

Status SqliteStore::CreateOrCheckSchema() {
  Connection& c = write_->conn;
  GPOOL_ASSIGN_OR_RETURN(std::string app_id, c.QueryText("PRAGMA application_id"));
  GPOOL_ASSIGN_OR_RETURN(std::string version, c.QueryText("PRAGMA user_version"));
  GPOOL_ASSIGN_OR_RETURN(std::string tables, c.QueryText("SELECT count(*) FROM sqlite_schema"));
  if (app_id == std::to_string(kApplicationId)) {
    if (version != std::to_string(kSchemaVersion)) {
      return Status::FailedPrecondition(fmt::format(
          "{}: gpool store schema version {} is not supported (this build reads version {})",
          path_, version, kSchemaVersion));
    }
    return Status::Ok();
  }
  if (app_id != "0" || tables != "0") {
    return Status::FailedPrecondition(fmt::format(
        "{}: a SQLite database but not a gpool store (application_id {}, {} tables)", path_,
        app_id, tables));
  }
  Status s = c.Exec(kSchema);
  if (!s.ok()) {
    (void)c.Exec("ROLLBACK");
    return s;
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<SqliteStore::ReadConn>> SqliteStore::OpenReadConn() {
  auto r = std::make_unique<ReadConn>();
  GPOOL_ASSIGN_OR_RETURN(r->conn, Connection::Open(path_, /*create=*/false));
  GPOOL_RETURN_IF_ERROR(r->conn.Exec("PRAGMA query_only=1"));
  Connection& c = r->conn;
  auto prep = [&c](Statement* st, std::string_view sql) -> Status {
    GPOOL_ASSIGN_OR_RETURN(*st, c.Prepare(sql));
    return Status::Ok();
  };
  constexpr const char* kCols = "key, value, create_rev, mod_rev, version";
  GPOOL_RETURN_IF_ERROR(prep(&r->begin, "BEGIN"));
  GPOOL_RETURN_IF_ERROR(prep(&r->end, "COMMIT"));
  GPOOL_RETURN_IF_ERROR(prep(&r->meta, kMetaSql));
  GPOOL_RETURN_IF_ERROR(prep(&r->get, fmt::format("SELECT {} FROM kv WHERE key = ?1", kCols)));
  GPOOL_RETURN_IF_ERROR(prep(
      &r->range_bounded,
      fmt::format("SELECT {} FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT ?3", kCols)));
  GPOOL_RETURN_IF_ERROR(prep(
      &r->range_unbounded,
      fmt::format("SELECT {} FROM kv WHERE key >= ?1 ORDER BY key LIMIT ?3", kCols)));
  constexpr const char* kEventCols = "key, value, create_rev, rev, version, type, sub";
  GPOOL_RETURN_IF_ERROR(prep(&r->events_bounded,
                             fmt::format("SELECT {} FROM events WHERE (rev, sub) > (?1, ?2) AND "
                                         "key >= ?3 AND key < ?4 ORDER BY rev, sub LIMIT ?5",
                                         kEventCols)));
  GPOOL_RETURN_IF_ERROR(prep(&r->events_unbounded,
                             fmt::format("SELECT {} FROM events WHERE (rev, sub) > (?1, ?2) AND "
                                         "key >= ?3 ORDER BY rev, sub LIMIT ?5",
                                         kEventCols)));
  return r;
}

StatusOr<SqliteStore::ReadLease> SqliteStore::LeaseReadConn() {
  {
    std::lock_guard<std::mutex> g(read_mu_);
    if (!idle_readers_.empty()) {
      std::unique_ptr<ReadConn> c = std::move(idle_readers_.back());
      idle_readers_.pop_back();
      return ReadLease(this, std::move(c));
    }
  }
  GPOOL_ASSIGN_OR_RETURN(auto c, OpenReadConn());
  return ReadLease(this, std::move(c));
}

void SqliteStore::ReturnReadConn(std::unique_ptr<ReadConn> conn) {
  if (!conn->healthy) return;
  std::lock_guard<std::mutex> g(read_mu_);
  if (idle_readers_.size() < kMaxIdleReaders) idle_readers_.push_back(std::move(conn));
}

StatusOr<TxnResult> SqliteStore::Txn(const TxnRequest& request) {
  GPOOL_RETURN_IF_ERROR(ValidateTxnRequest(request, options_));
  Writer w;
  w.request = &request;
  std::unique_lock<std::mutex> lk(queue_mu_);
  queue_.push_back(&w);
  while (!w.done && queue_.front() != &w) w.cv.wait(lk);
  if (w.done) return std::move(*w.result);

  // This thread leads: take the queued Txns (up to the batch limit) and commit them together.
  size_t limit = options_.group_commit ? static_cast<size_t>(std::max(1, options_.max_batch_txns))
                                       : 1;
  std::vector<Writer*> batch(queue_.begin(),
                             queue_.begin() + static_cast<long>(std::min(limit, queue_.size())));
  lk.unlock();
  CommitBatch(batch);
  lk.lock();
  for (Writer* b : batch) {
    queue_.pop_front();
    b->done = true;
    if (b != &w) b->cv.notify_one();
  }
  if (!queue_.empty()) queue_.front()->cv.notify_one();
  return std::move(*w.result);
}

size_t SqliteStore::queued_txns() {
  std::lock_guard<std::mutex> g(queue_mu_);
  return queue_.size();
}

void SqliteStore::CommitBatch(const std::vector<Writer*>& batch) {
  std::lock_guard<std::mutex> g(write_mu_);
  WriteConn& c = *write_;
  auto fail_all = [&batch](const Status& s) {
    for (Writer* w : batch) w->result = s;
  };
  auto exec = [](Statement& st) {
    st.Reset();
    return st.Run();
  };
  auto abort_batch = [&](const Status& s) {
    (void)exec(c.rollback);  // best effort: the batch is failed either way
    fail_all(s);
  };
  if (Status s = exec(c.begin); !s.ok()) return fail_all(s);

  Revision rev = last_rev_;
  for (Writer* w : batch) {
    if (Status s = exec(c.savepoint); !s.ok()) return abort_batch(s);
    bool changed = false;
    StatusOr<bool> held = ApplyTxn(*w->request, rev + 1, &changed);
    if (!held.ok()) {
      // Undo only this Txn; the rest of the batch goes on.
      if (Status s = exec(c.rollback_to); !s.ok()) return abort_batch(s);
      if (Status s = exec(c.release); !s.ok()) return abort_batch(s);
      w->result = held.status();
      continue;
    }
    if (Status s = exec(c.release); !s.ok()) return abort_batch(s);
    if (changed) ++rev;
    w->result = TxnResult{.succeeded = *held, .revision = rev};
  }
  Revision new_compact = compact_rev_;
  if (rev != last_rev_) {
    c.set_meta.Reset();
    c.set_meta.BindText(1, "revision");
    c.set_meta.BindInt(2, rev);
    if (Status s = c.set_meta.Run(); !s.ok()) return abort_batch(s);
    Revision keep = options_.history_revisions;
    if (keep > 0 && rev - compact_rev_ > 2 * keep) {
      new_compact = rev - keep;
      if (Status s = CompactLocked(new_compact); !s.ok()) return abort_batch(s);
    }
  }
  if (Status s = exec(c.commit); !s.ok()) {
    return abort_batch(Status(s.code(), fmt::format("commit of a batch of {} txns failed, none "
                                                    "acknowledged: {}",
                                                    batch.size(), s.message())));
  }
  commits_.fetch_add(1);
  last_rev_ = rev;
  compact_rev_ = new_compact;
  published_compact_rev_ = new_compact;
  Publish(rev);
}

StatusOr<Revision> SqliteStore::LookupModRevision(std::string_view key, Revision* create_rev,
                                                  int64_t* version) {
  Statement& st = write_->lookup;
  st.Reset();
  st.BindBlob(1, key);
  GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
  Revision mod = 0;
  if (row) {
    mod = st.ColumnInt(0);
    if (create_rev != nullptr) *create_rev = st.ColumnInt(1);
    if (version != nullptr) *version = st.ColumnInt(2);
  }
  st.Reset();
  return mod;
}

StatusOr<bool> SqliteStore::ApplyTxn(const TxnRequest& request, Revision rev, bool* changed) {
  for (const Compare& cmp : request.compares) {
    GPOOL_ASSIGN_OR_RETURN(Revision mod, LookupModRevision(cmp.key, nullptr, nullptr));
    if (mod != cmp.mod_revision) return false;
  }
  WriteConn& c = *write_;
  int64_t sub = 0;
  for (const Op& op : request.ops) {
    switch (op.type) {
      case Op::Type::kPut: {
        Revision create = 0;
        int64_t version = 0;
        GPOOL_ASSIGN_OR_RETURN(Revision mod, LookupModRevision(op.key, &create, &version));
        if (mod == 0) {
          create = rev;
          version = 0;
        }
        ++version;
        c.upsert.Reset();
        c.upsert.BindBlob(1, op.key);
        c.upsert.BindBlob(2, op.value);
        c.upsert.BindInt(3, create);
        c.upsert.BindInt(4, rev);
        c.upsert.BindInt(5, version);
        GPOOL_RETURN_IF_ERROR(c.upsert.Run());
        c.event.Reset();
        c.event.BindInt(1, rev);
        c.event.BindInt(2, sub++);
        c.event.BindInt(3, kEventPut);
        c.event.BindBlob(4, op.key);
        c.event.BindBlob(5, op.value);
        c.event.BindInt(6, create);
        c.event.BindInt(7, version);
        GPOOL_RETURN_IF_ERROR(c.event.Run());
        break;
      }
      case Op::Type::kDelete:
        GPOOL_RETURN_IF_ERROR(DeleteKey(op.key, rev, &sub));
        break;
      case Op::Type::kDeletePrefix: {
        std::string end = PrefixEnd(op.key);
        Statement& st = end.empty() ? c.keys_unbounded : c.keys_bounded;
        st.Reset();
        st.BindBlob(1, op.key);
        if (!end.empty()) st.BindBlob(2, end);
        std::vector<std::string> doomed;
        for (;;) {
          GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
          if (!row) break;
          doomed.push_back(st.ColumnBlob(0));
        }
        st.Reset();
        for (const std::string& key : doomed) GPOOL_RETURN_IF_ERROR(DeleteKey(key, rev, &sub));
        break;
      }
    }
  }
  *changed = sub > 0;
  return true;
}

Status SqliteStore::DeleteKey(std::string_view key, Revision rev, int64_t* sub) {
  GPOOL_ASSIGN_OR_RETURN(Revision mod, LookupModRevision(key, nullptr, nullptr));
  if (mod == 0) return Status::Ok();  // deleting an absent key changes nothing, as in etcd
  WriteConn& c = *write_;
  c.del.Reset();
  c.del.BindBlob(1, key);
  GPOOL_RETURN_IF_ERROR(c.del.Run());
  c.event.Reset();
  c.event.BindInt(1, rev);
  c.event.BindInt(2, (*sub)++);
  c.event.BindInt(3, kEventDelete);
  c.event.BindBlob(4, key);
  c.event.BindBlob(5, "");
  c.event.BindInt(6, 0);
  c.event.BindInt(7, 0);
  return c.event.Run();
}

Status SqliteStore::CompactLocked(Revision revision) {
  WriteConn& c = *write_;
  c.compact.Reset();
  c.compact.BindInt(1, revision);
  GPOOL_RETURN_IF_ERROR(c.compact.Run());
  c.set_meta.Reset();
  c.set_meta.BindText(1, "compact_revision");
  c.set_meta.BindInt(2, revision);
  return c.set_meta.Run();
}

void SqliteStore::Publish(Revision rev) {
  {
    std::lock_guard<std::mutex> g(notify_mu_);
    committed_rev_ = rev;
  }
  notify_cv_.notify_all();
}

Status SqliteStore::Compact(Revision revision) {
  std::lock_guard<std::mutex> g(write_mu_);
  if (revision > last_rev_) {
    return Status::FailedPrecondition(fmt::format(
        "{}: cannot compact to revision {}: the store is at revision {}", path_, revision,
        last_rev_));
  }
  if (revision <= compact_rev_) return Status::Ok();  // already compacted that far
  WriteConn& c = *write_;
  c.begin.Reset();
  GPOOL_RETURN_IF_ERROR(c.begin.Run());
  Status s = CompactLocked(revision);
  if (s.ok()) {
    c.commit.Reset();
    s = c.commit.Run();
  }
  if (!s.ok()) {
    c.rollback.Reset();
    (void)c.rollback.Run();
    return s;
  }
  compact_rev_ = revision;
  published_compact_rev_ = revision;
  return Status::Ok();
}

Status SqliteStore::Reclaim() {
  // Deleted rows and compacted history free pages inside the file, which later writes reuse;
  // what grows besides is the write-ahead log (SQLite's automatic checkpoints copy it back but
  // never shrink it). TRUNCATE checkpoints it and cuts it to zero bytes; it waits for readers
  // of older snapshots, which the store's reads are (short).
  std::lock_guard<std::mutex> g(write_mu_);
  // Its row says "busy" when a reader held an old snapshot: then the log is cut next time.
  return write_->conn.Exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

StatusOr<std::optional<KeyValue>> SqliteStore::Get(std::string_view key) {
  GPOOL_ASSIGN_OR_RETURN(ReadLease r, LeaseReadConn());
  Statement& st = r->get;
  st.Reset();
  st.BindBlob(1, key);
  GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
  std::optional<KeyValue> kv;
  if (row) kv = ReadKv(st);
  st.Reset();
  return kv;
}

StatusOr<RangeResult> SqliteStore::Range(std::string_view prefix, const RangeOptions& options) {
  if (options.limit < 0) {
    return Status::InvalidArgument(fmt::format("range limit {} is negative", options.limit));
  }
  GPOOL_ASSIGN_OR_RETURN(ReadLease r, LeaseReadConn());
  Snapshot snap(&r->begin, &r->end, &r->healthy);
  GPOOL_RETURN_IF_ERROR(snap.status());
  RangeResult out;
  r->meta.Reset();
  GPOOL_ASSIGN_OR_RETURN(bool row, r->meta.Step());
  out.revision = row ? r->meta.ColumnInt(0) : 0;
  r->meta.Reset();

  std::string end = PrefixEnd(prefix);
  Statement& st = end.empty() ? r->range_unbounded : r->range_bounded;
  st.Reset();
  st.BindBlob(1, prefix);
  if (!end.empty()) st.BindBlob(2, end);
  st.BindInt(3, options.limit > 0 ? options.limit + 1 : -1);  // one more, to tell `more`
  for (;;) {
    StatusOr<bool> next = st.Step();
    if (!next.ok()) {
      st.Reset();
      return next.status();
    }
    if (!*next) break;
    out.kvs.push_back(ReadKv(st));
  }
  st.Reset();
  if (options.limit > 0 && static_cast<int64_t>(out.kvs.size()) > options.limit) {
    out.kvs.pop_back();
    out.more = true;
  }
  return out;
}

StatusOr<Revision> SqliteStore::CurrentRevision() { return committed_rev_.load(); }

// Reads the events table from a (revision, position) cursor; waits on the store's commit
// notification when there is nothing new.
class SqliteStore::SqliteWatcher final : public Watcher {
 public:
  SqliteWatcher(SqliteStore* store, std::string_view prefix, Revision from)
      : store_(store), prefix_(prefix), end_(PrefixEnd(prefix)), rev_(from) {}

  StatusOr<std::vector<WatchEvent>> Next(std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::vector<WatchEvent> events;
      Revision snapshot_rev = 0;
      GPOOL_RETURN_IF_ERROR(Read(&events, &snapshot_rev));
      if (!events.empty()) {
        const KeyValue& last = events.back().kv;
        if (static_cast<int64_t>(events.size()) < kSqliteWatchBatch) {
          rev_ = snapshot_rev + 1;  // everything up to the snapshot has been delivered
          sub_ = -1;
        } else {
          rev_ = last.mod_revision;
          sub_ = last_sub_;
        }
        return events;
      }
      if (snapshot_rev + 1 > rev_) {
        rev_ = snapshot_rev + 1;
        sub_ = -1;
      }
      std::unique_lock<std::mutex> lk(store_->notify_mu_);
      if (!store_->notify_cv_.wait_until(lk, deadline,
                                         [&] { return store_->committed_rev_.load() >= rev_; })) {
        return events;  // timed out: empty
      }
    }
  }

 private:
  Status Read(std::vector<WatchEvent>* events, Revision* snapshot_rev) {
    GPOOL_ASSIGN_OR_RETURN(ReadLease r, store_->LeaseReadConn());
    Snapshot snap(&r->begin, &r->end, &r->healthy);
    GPOOL_RETURN_IF_ERROR(snap.status());
    r->meta.Reset();
    GPOOL_ASSIGN_OR_RETURN(bool row, r->meta.Step());
    *snapshot_rev = row ? r->meta.ColumnInt(0) : 0;
    Revision compacted = row ? r->meta.ColumnInt(1) : 0;
    r->meta.Reset();
    if (compacted >= rev_) {
      return Status::FailedPrecondition(fmt::format(
          "{}: watch on {} needs revision {}, but history up to revision {} has been compacted; "
          "re-list and watch from a newer revision",
          store_->path_, QuoteKey(prefix_), rev_, compacted));
    }
    Statement& st = end_.empty() ? r->events_unbounded : r->events_bounded;
    st.Reset();
    st.BindInt(1, rev_);
    st.BindInt(2, sub_);
    st.BindBlob(3, prefix_);
    if (!end_.empty()) st.BindBlob(4, end_);
    st.BindInt(5, kSqliteWatchBatch);
    for (;;) {
      StatusOr<bool> next = st.Step();
      if (!next.ok()) {
        st.Reset();
        return next.status();
      }
      if (!*next) break;
      WatchEvent ev;
      ev.kv = ReadKv(st);
      ev.type = st.ColumnInt(5) == kEventDelete ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
      last_sub_ = st.ColumnInt(6);
      events->push_back(std::move(ev));
    }
    st.Reset();
    return Status::Ok();
  }

  SqliteStore* store_;
  std::string prefix_;
  std::string end_;
  // Cursor: the next events are those after (rev_, sub_); sub_ -1 means all of revision rev_.
  Revision rev_;
  int64_t sub_ = -1;
  int64_t last_sub_ = -1;
};

StatusOr<std::unique_ptr<Watcher>> SqliteStore::Watch(std::string_view prefix,
                                                      Revision from_revision) {
  if (from_revision < 0) {
    return Status::InvalidArgument(
        fmt::format("watch on {}: negative from_revision {}", QuoteKey(prefix), from_revision));
  }
  Revision from = from_revision == 0 ? committed_rev_.load() + 1 : from_revision;
  Revision compacted = published_compact_rev_.load();
  if (from <= compacted) {
    return Status::FailedPrecondition(fmt::format(
        "{}: cannot watch {} from revision {}: history up to revision {} has been compacted",
        path_, QuoteKey(prefix), from, compacted));
  }
  return std::unique_ptr<Watcher>(new SqliteWatcher(this, prefix, from));
}

Status SqliteStore::CheckIntegrity() {
  GPOOL_ASSIGN_OR_RETURN(ReadLease r, LeaseReadConn());
  Connection& c = r->conn;
  {
    GPOOL_ASSIGN_OR_RETURN(Statement st, c.Prepare("PRAGMA integrity_check(20)"));
    std::vector<std::string> problems;
    for (;;) {
      GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      if (st.ColumnText(0) != "ok") problems.emplace_back(st.ColumnText(0));
    }
    if (!problems.empty()) {
      return Status::FailedPrecondition(fmt::format("{}: integrity_check: {}", path_,
                                                    fmt::join(problems, "; ")));
    }
  }
  Snapshot snap(&r->begin, &r->end, &r->healthy);
  GPOOL_RETURN_IF_ERROR(snap.status());
  GPOOL_ASSIGN_OR_RETURN(Statement st, c.Prepare(fmt::format(
      "SELECT m.revision, m.compact, "
      "(SELECT coalesce(max(mod_rev), 0) FROM kv), "
      "(SELECT coalesce(max(rev), 0) FROM events), "
      "(SELECT coalesce(min(rev), 0) FROM events), "
      "(SELECT count(*) FROM kv WHERE version < 1 OR create_rev < 1 OR create_rev > mod_rev), "
      "(SELECT count(*) FROM kv WHERE mod_rev > m.compact AND NOT EXISTS (SELECT 1 FROM events e "
      "   WHERE e.rev = kv.mod_rev AND e.key = kv.key AND e.type = {})) "
      "FROM (SELECT (SELECT value FROM meta WHERE name = 'revision') AS revision, "
      "             (SELECT value FROM meta WHERE name = 'compact_revision') AS compact) AS m",
      kEventPut)));
  GPOOL_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Status::Internal(fmt::format("{}: integrity query returned no row", path_));
  Revision rev = st.ColumnInt(0), compact = st.ColumnInt(1), max_mod = st.ColumnInt(2),
           max_event = st.ColumnInt(3), min_event = st.ColumnInt(4);
  int64_t bad_kv = st.ColumnInt(5), unlogged = st.ColumnInt(6);
  st.Reset();
  auto fail = [this](std::string what) {
    return Status::FailedPrecondition(fmt::format("{}: store invariant broken: {}", path_, what));
  };
  if (max_mod > rev) return fail(fmt::format("a key has mod revision {} > store revision {}", max_mod, rev));
  if (max_event > rev) {
    return fail(fmt::format("an event has revision {} > store revision {}", max_event, rev));
  }
  if (rev > compact && max_event != rev) {
    return fail(fmt::format("store revision {} has no event (latest event {})", rev, max_event));
  }
  if (min_event != 0 && min_event <= compact) {
    return fail(fmt::format("event at revision {} survived compaction to {}", min_event, compact));
  }
  if (bad_kv != 0) return fail(fmt::format("{} keys have bad version/create revision", bad_kv));
  if (unlogged != 0) return fail(fmt::format("{} keys have no put event at their mod revision", unlogged));
  return Status::Ok();
}

}  // namespace gpool::control
