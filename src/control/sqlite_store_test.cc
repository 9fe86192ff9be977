// SQLite-specific behaviour: URLs, files that are not stores, exclusive ownership, persistence
// across reopen, and group commit batching. The backend-neutral semantics are in store_test.cc.
#include "control/sqlite_store.h"

#include <fmt/format.h>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "control/store.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("sqlite_store_test");
    path_ = dir_ + "/state.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Store> MustOpen(const StoreOptions& options = {}) {
    auto s = OpenStore("sqlite:" + path_, options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string dir_;
  std::string path_;
};

TEST(StoreUrlTest, MalformedUrlsNameTheProblem) {
  struct Case {
    std::string url;
    StatusCode code;
    std::string needle;
  };
  for (const Case& c : std::vector<Case>{
           {"", StatusCode::kInvalidArgument, "empty"},
           {"state.db", StatusCode::kInvalidArgument, "'state.db' has no scheme"},
           {":x", StatusCode::kInvalidArgument, "no scheme"},
           {"sqlite:", StatusCode::kInvalidArgument, "empty path"},
           {"sqlite://var/x.db", StatusCode::kInvalidArgument, "not sqlite://"},
           {"sqlite::memory:", StatusCode::kInvalidArgument, "plain file path"},
           {"mysql:db", StatusCode::kInvalidArgument, "unknown scheme 'mysql'"},
           {"etcd:localhost", StatusCode::kInvalidArgument, "etcd://HOST:PORT"},
           {"etcd://127.0.0.1:1", StatusCode::kUnavailable, "no member answered"},
       }) {
    auto s = OpenStore(c.url);
    ASSERT_FALSE(s.ok()) << c.url;
    EXPECT_EQ(s.status().code(), c.code) << c.url << ": " << s.status().ToString();
    EXPECT_NE(s.status().message().find(c.needle), std::string::npos) << s.status().message();
  }
}

TEST(StoreKeysTest, LayoutByKind) {
  EXPECT_EQ(keys::Job("j7"), "/jobs/j7");
  EXPECT_EQ(keys::Node("gpu-001"), "/nodes/gpu-001");
  EXPECT_EQ(keys::Alloc("j7", "t3"), "/allocs/j7/t3");
  EXPECT_TRUE(keys::Alloc("j7", "t3").starts_with(keys::AllocsOfJob("j7")));
  EXPECT_FALSE(keys::Alloc("j70", "t3").starts_with(keys::AllocsOfJob("j7")));
  EXPECT_EQ(keys::Tenant("ml"), "/tenants/ml");
  EXPECT_EQ(keys::Lease("leader"), "/leases/leader");
  EXPECT_TRUE(keys::CheckKeyPart("job id", "j7").ok());
  Status slash = keys::CheckKeyPart("job id", "a/b");
  EXPECT_EQ(slash.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(slash.message().find("job id 'a/b'"), std::string::npos);
  EXPECT_FALSE(keys::CheckKeyPart("node name", "").ok());
}

TEST(StoreKeysTest, PrefixEnd) {
  EXPECT_EQ(PrefixEnd("/jobs/"), "/jobs0");
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), "");
  EXPECT_EQ(PrefixEnd(""), "");
}

// Reclaim cuts the write-ahead log that deletes and rewrites left behind; the data stays.
TEST_F(SqliteStoreTest, ReclaimTruncatesTheWriteAheadLog) {
  auto store = MustOpen();
  ASSERT_NE(store, nullptr);
  const std::string big(4096, 'x');
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(store->Put(fmt::format("/k/{:03d}", i), big).ok());
  ASSERT_TRUE(store->Txn(TxnRequest().DeletePrefix("/k/1")).ok());
  const std::string wal = path_ + "-wal";
  ASSERT_GT(std::filesystem::file_size(wal), 0u);
  Status s = store->Reclaim();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(std::filesystem::file_size(wal), 0u);
  auto all = store->Range("/k/", {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->kvs.size(), 100u);
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

TEST_F(SqliteStoreTest, NonDatabaseFileIsRefusedByPath) {
  const std::string line = "this is a job list, not a database\n";
  {
    std::ofstream f(path_);
    for (int i = 0; i < 200; ++i) f << line;
  }
  auto s = OpenStore("sqlite:" + path_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path_), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("not a database"), std::string::npos)
      << s.status().ToString();
  // The file is left as it was.
  EXPECT_EQ(std::filesystem::file_size(path_), 200u * line.size());
}

TEST_F(SqliteStoreTest, ForeignSqliteDatabaseIsRefused) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = OpenStore("sqlite:" + path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find(path_ + ": a SQLite database but not a gpool store"),
            std::string::npos)
      << s.status().ToString();
}

TEST_F(SqliteStoreTest, MissingDirectoryIsNamed) {
  std::string path = dir_ + "/no/such/dir/state.db";
  auto s = OpenStore("sqlite:" + path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().ToString();
}

TEST_F(SqliteStoreTest, OneOwnerAtATime) {
  auto first = MustOpen();
  ASSERT_NE(first, nullptr);
  auto second = OpenStore("sqlite:" + path_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("already open"), std::string::npos);
  EXPECT_NE(second.status().message().find(std::to_string(getpid())), std::string::npos);
  first.reset();
  EXPECT_NE(MustOpen(), nullptr);
}

TEST_F(SqliteStoreTest, StatePersistsAcrossReopen) {
  Revision last = 0;
  {
    auto store = MustOpen();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put("/jobs/a", "1").ok());
    ASSERT_TRUE(store->Put("/jobs/a", "2").ok());
    ASSERT_TRUE(store->Put("/nodes/n", "up").ok());
    ASSERT_TRUE(store->Compact(1).ok());
    last = *store->CurrentRevision();
  }
  auto store = MustOpen();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->CurrentRevision(), last);
  auto a = store->Get("/jobs/a");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->value, "2");
  EXPECT_EQ((*a)->version, 2);
  EXPECT_FALSE(store->Watch("", 1).ok());  // the compaction point persisted too
  auto next = store->Put("/jobs/b", "3");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, last + 1);  // revisions continue, never reused
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

TEST_F(SqliteStoreTest, AutomaticCompactionKeepsRecentHistory) {
  auto store = MustOpen({.history_revisions = 5});
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(store->Put("/jobs/j" + std::to_string(i), "x").ok());
  EXPECT_FALSE(store->Watch("/jobs/", 1).ok());
  auto recent = store->Watch("/jobs/", 30 - 4);
  ASSERT_TRUE(recent.ok()) << recent.status().ToString();
  auto ev = (*recent)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->size(), 5u);
  auto all = store->Range("/jobs/", {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->kvs.size(), 30u);
  EXPECT_TRUE(store->CheckIntegrity().ok()) << store->CheckIntegrity().ToString();
}

TEST_F(SqliteStoreTest, FsyncPerTxnModeCommitsEachTxnAlone) {
  auto opened = MustOpen({.group_commit = false});
  ASSERT_NE(opened, nullptr);
  auto* store = dynamic_cast<SqliteStore*>(opened.get());
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([store, t] {
      for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE(store->Put("/jobs/" + std::to_string(t * 100 + i), "x").ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(store->commits(), 40);
}

// Holds SQLite's write lock from a second connection so the first batch leader blocks in
// BEGIN; every Txn that arrives meanwhile must then go into one second batch, one commit.
TEST_F(SqliteStoreTest, GroupCommitBatchesWaitingTxnsAndIsolatesFailedCompares) {
  auto opened = MustOpen();
  ASSERT_NE(opened, nullptr);
  auto* store = dynamic_cast<SqliteStore*>(opened.get());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("/jobs/taken", "x").ok());
  int64_t commits_before = store->commits();

  sqlite3* blocker = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &blocker), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);

  constexpr int kWaiting = 12;
  std::vector<std::optional<StatusOr<TxnResult>>> results(kWaiting + 1);
  std::vector<std::thread> threads;
  auto wait_for_queue = [store](size_t n) {
    // Bounded poll: a hang guard, not a timing assertion.
    for (int i = 0; i < 3000 && store->queued_txns() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return store->queued_txns() >= n;
  };
  threads.emplace_back([&] { results[0] = store->Txn(TxnRequest().Put("/jobs/leader", "x")); });
  ASSERT_TRUE(wait_for_queue(1));
  for (int i = 1; i <= kWaiting; ++i) {
    threads.emplace_back([&, i] {
      // Every third Txn loses its compare; it must not take the rest of the batch down.
      std::string key = i % 3 == 0 ? "/jobs/taken" : "/jobs/w" + std::to_string(i);
      results[i] = store->Txn(TxnRequest().If(Compare::Absent(key)).Put(key, "y"));
    });
  }
  bool queued = wait_for_queue(kWaiting + 1);
  ASSERT_EQ(sqlite3_exec(blocker, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(blocker);
  for (auto& th : threads) th.join();
  ASSERT_TRUE(queued);

  EXPECT_EQ(store->commits() - commits_before, 2);  // the leader alone, then everyone else
  std::set<Revision> revisions;
  for (int i = 0; i <= kWaiting; ++i) {
    ASSERT_TRUE(results[i].has_value() && results[i]->ok()) << i;
    const TxnResult& r = **results[i];
    bool should_fail = i > 0 && i % 3 == 0;
    EXPECT_EQ(r.succeeded, !should_fail) << i;
    if (r.succeeded) {
      EXPECT_TRUE(revisions.insert(r.revision).second) << "shared revision " << i;
    }
    if (i > 0 && !should_fail) {
      auto kv = store->Get("/jobs/w" + std::to_string(i));
      ASSERT_TRUE(kv.ok() && kv->has_value()) << i;
      EXPECT_EQ((*kv)->mod_revision, r.revision);
    }
  }
  auto taken = store->Get("/jobs/taken");
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->value, "x");
  EXPECT_EQ((*taken)->version, 1);
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

}  // namespace
}  // namespace gpool::control
