// The shared Store test suite: every backend must pass it unchanged. It is parameterized over
// store URLs: SQLite in a fresh directory, and a real single-member etcd started per test on free
// loopback ports (EtcdTestCluster), so that revisions start at 0 each time.
#include "control/store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "control/etcd_test_util.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

using std::chrono::milliseconds;

struct StoreBackend {
  std::string name;
  std::string scheme;  // "sqlite" (a fresh temporary directory) or "etcd" (a fresh etcd)
  StoreOptions options;
};

class StoreTest : public ::testing::TestWithParam<StoreBackend> {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("store_test");
    std::string url;
    if (GetParam().scheme == "sqlite") {
      url = "sqlite:" + dir_ + "/state.db";
    } else {
      ASSERT_EQ(GetParam().scheme, "etcd") << "no URL recipe for backend " << GetParam().name;
      auto cluster = EtcdTestCluster::Start({});
      ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
      etcd_ = std::move(*cluster);
      url = etcd_->Url();
    }
    auto s = OpenStore(url, GetParam().options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    if (store_ != nullptr) {
      Status integrity = store_->CheckIntegrity();
      EXPECT_TRUE(integrity.ok()) << integrity.ToString();
    }
    store_.reset();
    etcd_.reset();
    std::filesystem::remove_all(dir_);
  }

  KeyValue MustGet(const std::string& key) {
    auto kv = store_->Get(key);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    EXPECT_TRUE(kv.ok() && kv->has_value()) << "missing key " << key;
    return kv.ok() && kv->has_value() ? **kv : KeyValue{};
  }
  bool Exists(const std::string& key) {
    auto kv = store_->Get(key);
    EXPECT_TRUE(kv.ok()) << kv.status().ToString();
    return kv.ok() && kv->has_value();
  }
  TxnResult MustTxn(const TxnRequest& req) {
    auto r = store_->Txn(req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : TxnResult{};
  }
  std::vector<std::string> Keys(std::string_view prefix) {
    auto r = store_->Range(prefix, {});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<std::string> out;
    if (r.ok()) {
      for (const KeyValue& kv : r->kvs) out.push_back(kv.key);
    }
    return out;
  }
  // Collects events until `count` arrived or a generous deadline passes (a hang guard, not a
  // timing assertion).
  std::vector<WatchEvent> Collect(Watcher& w, size_t count) {
    std::vector<WatchEvent> all;
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (all.size() < count && std::chrono::steady_clock::now() < give_up) {
      auto batch = w.Next(milliseconds(200));
      EXPECT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch.ok()) break;
      all.insert(all.end(), batch->begin(), batch->end());
    }
    return all;
  }

  std::string dir_;
  std::unique_ptr<EtcdTestCluster> etcd_;  // declared before store_: destroyed after it
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, PutThenGetTracksRevisionsAndVersions) {
  EXPECT_EQ(*store_->CurrentRevision(), 0);
  EXPECT_FALSE(store_->Get("/jobs/a")->has_value());

  auto r1 = store_->Put("/jobs/a", "v1");
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  auto r2 = store_->Put("/jobs/b", "w");
  auto r3 = store_->Put("/jobs/a", "v2");
  ASSERT_TRUE(r2.ok() && r3.ok());
  EXPECT_LT(*r1, *r2);
  EXPECT_LT(*r2, *r3);
  EXPECT_EQ(*store_->CurrentRevision(), *r3);

  KeyValue a = MustGet("/jobs/a");
  EXPECT_EQ(a.value, "v2");
  EXPECT_EQ(a.create_revision, *r1);
  EXPECT_EQ(a.mod_revision, *r3);
  EXPECT_EQ(a.version, 2);
  KeyValue b = MustGet("/jobs/b");
  EXPECT_EQ(b.create_revision, *r2);
  EXPECT_EQ(b.version, 1);
}

TEST_P(StoreTest, KeysAndValuesAreBytes) {
  std::string key("/bin/\0\xff\x01", 8);
  std::string value("\0\0\xfe payload \xff", 13);
  ASSERT_TRUE(store_->Put(key, value).ok());
  ASSERT_TRUE(store_->Put("/empty", "").ok());
  EXPECT_EQ(MustGet(key).value, value);
  KeyValue empty = MustGet("/empty");  // an empty value is present, not absent
  EXPECT_EQ(empty.value, "");
  EXPECT_EQ(empty.version, 1);
}

TEST_P(StoreTest, RangeReturnsExactlyThePrefixSorted) {
  for (const char* k : {"/nodes/n2", "/jobs/b", "/jobs/a", "/jobs2/x", "/jobs", "/nodes/n1"}) {
    ASSERT_TRUE(store_->Put(k, std::string("v") + k).ok());
  }
  EXPECT_EQ(Keys("/jobs/"), (std::vector<std::string>{"/jobs/a", "/jobs/b"}));
  EXPECT_EQ(Keys("/nodes/"), (std::vector<std::string>{"/nodes/n1", "/nodes/n2"}));
  EXPECT_EQ(Keys("/tenants/"), std::vector<std::string>{});
  EXPECT_EQ(Keys("").size(), 6u);

  auto r = store_->Range("/jobs/", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kvs[1].value, "v/jobs/b");
  EXPECT_EQ(r->revision, *store_->CurrentRevision());
  EXPECT_FALSE(r->more);

  auto limited = store_->Range("", {.limit = 4});
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->kvs.size(), 4u);
  EXPECT_TRUE(limited->more);
  EXPECT_EQ(limited->kvs[0].key, "/jobs");  // bytewise order: "/jobs" < "/jobs/" < "/jobs2"
  EXPECT_EQ(limited->kvs[3].key, "/jobs2/x");
  EXPECT_FALSE(store_->Range("", {.limit = -1}).ok());
}

TEST_P(StoreTest, RangeHandlesPrefixesEndingInFF) {
  std::string p("/x\xff", 3);
  ASSERT_TRUE(store_->Put(p + "a", "1").ok());
  ASSERT_TRUE(store_->Put(p + "\xff", "2").ok());
  ASSERT_TRUE(store_->Put("/y", "3").ok());
  EXPECT_EQ(Keys(p).size(), 2u);
  EXPECT_EQ(Keys(std::string("\xff", 1)).size(), 0u);
}

TEST_P(StoreTest, DeleteAndDeletePrefix) {
  for (const char* k : {"/allocs/j1/t0", "/allocs/j1/t1", "/allocs/j10/t0", "/jobs/j1"}) {
    ASSERT_TRUE(store_->Put(k, "x").ok());
  }
  Revision before = *store_->CurrentRevision();
  // Deleting an absent key succeeds and changes nothing.
  TxnResult none = MustTxn(TxnRequest().Delete("/jobs/nope"));
  EXPECT_TRUE(none.succeeded);
  EXPECT_EQ(none.revision, before);
  EXPECT_EQ(*store_->CurrentRevision(), before);

  TxnResult gone = MustTxn(TxnRequest().DeletePrefix(keys::AllocsOfJob("j1")).Delete("/jobs/j1"));
  EXPECT_TRUE(gone.succeeded);
  EXPECT_EQ(gone.revision, before + 1);  // one revision for the whole Txn
  EXPECT_EQ(Keys("/allocs/"), std::vector<std::string>{"/allocs/j10/t0"});
  EXPECT_FALSE(Exists("/jobs/j1"));

  // A re-created key starts a new life: new create revision, version 1.
  auto again = store_->Put("/jobs/j1", "y");
  ASSERT_TRUE(again.ok());
  KeyValue kv = MustGet("/jobs/j1");
  EXPECT_EQ(kv.create_revision, *again);
  EXPECT_EQ(kv.version, 1);
}

TEST_P(StoreTest, CompareAbsentCreatesOnce) {
  TxnRequest create = TxnRequest().If(Compare::Absent("/jobs/j1")).Put("/jobs/j1", "first");
  TxnResult first = MustTxn(create);
  EXPECT_TRUE(first.succeeded);
  TxnRequest again = TxnRequest().If(Compare::Absent("/jobs/j1")).Put("/jobs/j1", "second");
  TxnResult second = MustTxn(again);
  EXPECT_FALSE(second.succeeded);
  EXPECT_EQ(second.revision, first.revision);  // a failed compare does not advance the store
  EXPECT_EQ(MustGet("/jobs/j1").value, "first");
}

TEST_P(StoreTest, CompareModRevisionIsCompareAndSwap) {
  auto r1 = store_->Put("/tenants/t", "quota=4");
  ASSERT_TRUE(r1.ok());
  TxnResult ok = MustTxn(
      TxnRequest().If(Compare::ModRevisionIs("/tenants/t", *r1)).Put("/tenants/t", "quota=8"));
  EXPECT_TRUE(ok.succeeded);
  TxnResult stale = MustTxn(
      TxnRequest().If(Compare::ModRevisionIs("/tenants/t", *r1)).Put("/tenants/t", "quota=2"));
  EXPECT_FALSE(stale.succeeded);
  EXPECT_EQ(MustGet("/tenants/t").value, "quota=8");
  // mod_revision 0 on a present key fails like Absent.
  EXPECT_FALSE(MustTxn(TxnRequest().If(Compare::Absent("/tenants/t")).Delete("/tenants/t")).succeeded);
  EXPECT_TRUE(Exists("/tenants/t"));
}

TEST_P(StoreTest, TxnIsAllOrNothing) {
  ASSERT_TRUE(store_->Put("/nodes/n1", "free").ok());
  Revision n1 = MustGet("/nodes/n1").mod_revision;
  // Bind a job: the node must be unchanged, the job and allocation are written together.
  TxnResult bind = MustTxn(TxnRequest()
                               .If(Compare::ModRevisionIs("/nodes/n1", n1))
                               .If(Compare::Absent("/allocs/j1/t0"))
                               .Put("/nodes/n1", "busy")
                               .Put("/allocs/j1/t0", "n1")
                               .Put("/jobs/j1", "running"));
  ASSERT_TRUE(bind.succeeded);
  for (const char* k : {"/nodes/n1", "/allocs/j1/t0", "/jobs/j1"}) {
    EXPECT_EQ(MustGet(k).mod_revision, bind.revision) << k;
  }
  // One of two compares fails: none of the ops apply.
  TxnResult fail = MustTxn(TxnRequest()
                               .If(Compare::Absent("/jobs/j2"))
                               .If(Compare::Absent("/allocs/j1/t0"))
                               .Put("/jobs/j2", "running")
                               .Delete("/nodes/n1"));
  EXPECT_FALSE(fail.succeeded);
  EXPECT_FALSE(Exists("/jobs/j2"));
  EXPECT_TRUE(Exists("/nodes/n1"));
  EXPECT_EQ(*store_->CurrentRevision(), bind.revision);
}

TEST_P(StoreTest, BadTxnsAreRejectedByName) {
  ASSERT_TRUE(store_->Put("/jobs/a", "x").ok());
  Revision before = *store_->CurrentRevision();
  struct Case {
    TxnRequest req;
    std::string needle;
  };
  std::vector<Case> cases;
  cases.push_back({TxnRequest().Put("/jobs/k", "1").Put("/jobs/k", "2"), "'/jobs/k' written twice"});
  cases.push_back({TxnRequest().Put("/jobs/k", "1").Delete("/jobs/k"), "written twice"});
  cases.push_back({TxnRequest().DeletePrefix("/jobs/").Put("/jobs/z", "1"), "falls under"});
  cases.push_back({TxnRequest().Put("", "1"), "op 0: empty key"});
  cases.push_back({TxnRequest().If(Compare{"", 0}).Put("/a", "1"), "compare 0: empty key"});
  cases.push_back({TxnRequest().If(Compare{"/a", -3}), "negative mod_revision"});
  cases.push_back({TxnRequest().Put("/big", std::string(GetParam().options.max_value_bytes + 1, 'x')),
                   "more than the limit"});
  for (const Case& c : cases) {
    auto r = store_->Txn(c.req);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(*store_->CurrentRevision(), before);
  EXPECT_EQ(Keys("/jobs/"), std::vector<std::string>{"/jobs/a"});
}

TEST_P(StoreTest, ReadOnlyTxnChecksWithoutWriting) {
  auto r = store_->Put("/leases/leader", "c1");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(MustTxn(TxnRequest().If(Compare::ModRevisionIs("/leases/leader", *r))).succeeded);
  EXPECT_FALSE(MustTxn(TxnRequest().If(Compare::Absent("/leases/leader"))).succeeded);
  EXPECT_EQ(*store_->CurrentRevision(), *r);
}

TEST_P(StoreTest, WatchReplaysHistoryInOrder) {
  ASSERT_TRUE(store_->Put("/jobs/a", "1").ok());                         // rev 1
  ASSERT_TRUE(store_->Put("/nodes/n", "up").ok());                       // rev 2 (other prefix)
  TxnResult t = MustTxn(TxnRequest().Put("/jobs/b", "2").Put("/jobs/c", "3"));  // rev 3
  ASSERT_TRUE(MustTxn(TxnRequest().Delete("/jobs/a")).succeeded);        // rev 4

  auto w = store_->Watch("/jobs/", 1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<WatchEvent> ev = Collect(**w, 4);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].kv.key, "/jobs/a");
  EXPECT_EQ(ev[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(ev[0].kv.value, "1");
  EXPECT_EQ(ev[1].kv.key, "/jobs/b");  // the Txn's ops in order, sharing one revision
  EXPECT_EQ(ev[2].kv.key, "/jobs/c");
  EXPECT_EQ(ev[1].kv.mod_revision, t.revision);
  EXPECT_EQ(ev[2].kv.mod_revision, t.revision);
  EXPECT_EQ(ev[3].kv.key, "/jobs/a");
  EXPECT_EQ(ev[3].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(ev[3].kv.mod_revision, *store_->CurrentRevision());
  // Nothing more, and no repeats.
  auto more = (*w)->Next(milliseconds(0));
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->empty());

  // Starting mid-history skips earlier revisions.
  auto w3 = store_->Watch("/jobs/", t.revision);
  ASSERT_TRUE(w3.ok());
  EXPECT_EQ(Collect(**w3, 3).size(), 3u);
}

TEST_P(StoreTest, WatchFromNowWakesOnLaterWrites) {
  ASSERT_TRUE(store_->Put("/jobs/old", "x").ok());
  auto w = store_->Watch("/jobs/", 0);
  ASSERT_TRUE(w.ok());
  auto nothing = (*w)->Next(milliseconds(10));
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->empty());

  std::thread writer([this] {
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(store_->Put("/nodes/n" + std::to_string(i), "x").ok());  // filtered out
      ASSERT_TRUE(store_->Put("/jobs/new" + std::to_string(i), "x").ok());
    }
  });
  std::vector<WatchEvent> ev = Collect(**w, 5);
  writer.join();
  ASSERT_EQ(ev.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ev[i].kv.key, "/jobs/new" + std::to_string(i));
}

TEST_P(StoreTest, CompactionDropsHistoryNotKeys) {
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(store_->Put("/jobs/j" + std::to_string(i), "x").ok());
  Revision rev = *store_->CurrentRevision();
  auto future = store_->Compact(rev + 1);
  EXPECT_EQ(future.code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->Compact(3).ok());
  EXPECT_TRUE(store_->Compact(2).ok());  // already compacted that far: no-op

  auto too_old = store_->Watch("/jobs/", 3);
  ASSERT_FALSE(too_old.ok());
  EXPECT_EQ(too_old.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(too_old.status().message().find("compacted"), std::string::npos);
  auto ok = store_->Watch("/jobs/", 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(Collect(**ok, 3).size(), 3u);
  EXPECT_EQ(Keys("/jobs/").size(), 6u);

  // A watcher that falls behind a compaction learns so on its next call that has anything to
  // say. etcd's watch stream may not have delivered (or even opened) by the time of the first
  // call, which then returns no events; it must never return the compacted events themselves.
  auto behind = store_->Watch("/jobs/", rev);
  ASSERT_TRUE(behind.ok());
  ASSERT_TRUE(store_->Put("/jobs/later", "x").ok());
  ASSERT_TRUE(store_->Compact(*store_->CurrentRevision()).ok());
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // hang guard
  StatusOr<std::vector<WatchEvent>> lost = std::vector<WatchEvent>{};
  while (lost.ok() && lost->empty() && std::chrono::steady_clock::now() < give_up) {
    lost = (*behind)->Next(milliseconds(200));
  }
  ASSERT_FALSE(lost.ok()) << "delivered " << lost->size() << " compacted events";
  EXPECT_EQ(lost.status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, ConcurrentWritersAllAcknowledgedWritesPresent) {
  constexpr int kThreads = 8, kPerThread = 25;
  std::vector<std::vector<TxnResult>> acks(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string key = keys::Job(std::to_string(t) + "-" + std::to_string(i));
        auto r = store_->Txn(TxnRequest().If(Compare::Absent(key)).Put(key, "spec"));
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        ASSERT_TRUE(r->succeeded);
        acks[t].push_back(*r);
      }
    });
  }
  for (auto& th : threads) th.join();

  std::set<Revision> revisions;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(acks[t].size(), static_cast<size_t>(kPerThread));
    for (int i = 0; i < kPerThread; ++i) {
      KeyValue kv = MustGet(keys::Job(std::to_string(t) + "-" + std::to_string(i)));
      EXPECT_EQ(kv.mod_revision, acks[t][i].revision);
      revisions.insert(acks[t][i].revision);
      if (i > 0) {
        EXPECT_LT(acks[t][i - 1].revision, acks[t][i].revision);  // per-thread order
      }
    }
  }
  // Every Txn got its own revision, and together they are exactly 1..N.
  EXPECT_EQ(revisions.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(*revisions.begin(), 1);
  EXPECT_EQ(*revisions.rbegin(), *store_->CurrentRevision());

  // The change log agrees: one event per Txn, in revision order, no gaps.
  auto w = store_->Watch("/jobs/", 1);
  ASSERT_TRUE(w.ok());
  std::vector<WatchEvent> ev = Collect(**w, kThreads * kPerThread);
  ASSERT_EQ(ev.size(), static_cast<size_t>(kThreads * kPerThread));
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].kv.mod_revision, static_cast<Revision>(i + 1));
}

TEST_P(StoreTest, CompareAndSwapCounterLosesNoUpdates) {
  constexpr int kThreads = 6, kIncrements = 15;
  ASSERT_TRUE(store_->Put("/counters/c", "0").ok());
  std::atomic<int> swaps{0}, retries{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        for (;;) {
          auto cur = store_->Get("/counters/c");
          ASSERT_TRUE(cur.ok() && cur->has_value());
          int n = std::stoi((*cur)->value);
          auto r = store_->Txn(TxnRequest()
                                   .If(Compare::ModRevisionIs("/counters/c", (*cur)->mod_revision))
                                   .Put("/counters/c", std::to_string(n + 1)));
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          if (r->succeeded) break;
          retries.fetch_add(1);
        }
        swaps.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(swaps.load(), kThreads * kIncrements);
  KeyValue c = MustGet("/counters/c");
  EXPECT_EQ(c.value, std::to_string(kThreads * kIncrements));
  EXPECT_EQ(c.version, 1 + kThreads * kIncrements);  // one put per successful swap, no more
}

std::string BackendName(const ::testing::TestParamInfo<StoreBackend>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreTest,
    ::testing::Values(StoreBackend{"sqlite", "sqlite", StoreOptions{}},
                      StoreBackend{"sqlite_fsync_per_txn", "sqlite",
                                   StoreOptions{.group_commit = false}},
                      StoreBackend{"sqlite_small_batches", "sqlite",
                                   StoreOptions{.max_batch_txns = 2, .max_value_bytes = 4096}},
                      StoreBackend{"etcd", "etcd", StoreOptions{}}),
    BackendName);

}  // namespace
}  // namespace gpool::control
