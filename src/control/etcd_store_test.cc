// EtcdStore specifics beyond the shared suite (store_test.cc): URL and endpoint parsing, the
// JSON gateway's encodings, failover between members of a real three-member cluster, leases.
#include "control/etcd_store.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <thread>

#include "control/etcd_test_util.h"

namespace gpool::control {
namespace {

using std::chrono::milliseconds;

TEST(EtcdClientTest, Base64RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n : {0, 1, 2, 3, 4, 5, 255, 256}) {
    std::string in = all.substr(0, n);
    auto out = Base64Decode(Base64Encode(in));
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, in) << n;
  }
  EXPECT_EQ(Base64Encode("a"), "YQ==");
  EXPECT_EQ(Base64Encode("ab"), "YWI=");
  EXPECT_FALSE(Base64Decode("Y!==").ok());
}

TEST(EtcdClientTest, EndpointListsAreParsedOrRefusedByName) {
  auto ok = ParseEtcdEndpoints("127.0.0.1:2379,etcd-b:12379");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].host, "etcd-b");
  EXPECT_EQ((*ok)[1].port, 12379);
  struct Case {
    const char* list;
    const char* needle;
  };
  for (const Case& c : {Case{"", "endpoint 1 ''"}, Case{"a:1,", "endpoint 2 ''"},
                        Case{"host", "want HOST:PORT"}, Case{"h:0", "bad port '0'"},
                        Case{"h:99999", "bad port"}, Case{"h:12x", "bad port '12x'"}}) {
    auto r = ParseEtcdEndpoints(c.list);
    ASSERT_FALSE(r.ok()) << c.list;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
}

TEST(EtcdStoreTest, BadUrlsAndDeadClustersFailByName) {
  auto bad = OpenStore("etcd://h:1,nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'nope'"), std::string::npos) << bad.status().message();
  EXPECT_EQ(OpenStore("etcd:").status().code(), StatusCode::kInvalidArgument);

  int port = PickFreePort();  // nothing listens there
  auto dead = OpenStore("etcd://127.0.0.1:" + std::to_string(port));
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(dead.status().message().find(std::to_string(port)), std::string::npos)
      << dead.status().message();
}

// Reclaim compacts what lies beyond history_revisions (etcd does not on its own): a watch from
// before it is refused, current keys stay; with nothing new to drop it does nothing.
TEST(EtcdStoreTest, ReclaimCompactsBeyondTheKeptHistory) {
  auto cluster = EtcdTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  StoreOptions o;
  o.history_revisions = 5;
  auto s = OpenStore((*cluster)->Url(), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& store = **s;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store.Put(fmt::format("/k/{}", i % 3), "v").ok());
  {
    auto w = store.Watch("/k/", 1);  // the whole history is still there
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto ev = (*w)->Next(std::chrono::milliseconds(2000));
    ASSERT_TRUE(ev.ok()) << ev.status().ToString();
    EXPECT_FALSE(ev->empty());
  }
  ASSERT_TRUE(store.Reclaim().ok());
  auto w = store.Watch("/k/", 1);
  StatusCode code = w.ok() ? StatusCode::kOk : w.status().code();
  if (w.ok()) {
    auto ev = (*w)->Next(std::chrono::milliseconds(2000));
    code = ev.ok() ? StatusCode::kOk : ev.status().code();
  }
  EXPECT_EQ(code, StatusCode::kFailedPrecondition);
  auto kept = store.Watch("/k/", 16);  // within the last 5 revisions
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  auto all = store.Range("/k/", {});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->kvs.size(), 3u);
  EXPECT_TRUE(store.Reclaim().ok());  // nothing new beyond the bound
}

class EtcdClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = EtcdTestCluster::Start({.members = 3});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    auto s = OpenStore(cluster_->Url());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  void TearDown() override {
    store_.reset();
    cluster_.reset();
  }
  EtcdStore& etcd() { return *static_cast<EtcdStore*>(store_.get()); }

  std::unique_ptr<EtcdTestCluster> cluster_;
  std::unique_ptr<Store> store_;
};

TEST_F(EtcdClusterTest, SurvivesLosingAMemberWithoutLosingWatchEvents) {
  auto w = store_->Watch("/jobs/", 0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  constexpr int kBefore = 5, kAfter = 5;
  for (int i = 0; i < kBefore; ++i) ASSERT_TRUE(store_->Put("/jobs/a" + std::to_string(i), "x").ok());

  // Kill the member the client (and the watch) talk to; the other two keep a quorum.
  int first = static_cast<int>(etcd().client().preferred());
  cluster_->Kill(first);
  int unavailable = 0;
  for (int i = 0; i < kAfter; ++i) {
    // If the raft leader died, writes fail with Unavailable (outcome unknown) until a new one is
    // elected: retry, made safe by creating only when absent.
    std::string key = "/jobs/b" + std::to_string(i);
    for (;;) {
      auto r = store_->Txn(TxnRequest().If(Compare::Absent(key)).Put(key, "y"));
      if (r.ok()) break;
      ASSERT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
      ASSERT_LT(++unavailable, 100) << r.status().ToString();
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  EXPECT_NE(static_cast<int>(etcd().client().preferred()), first);

  // Every event exactly once, in order, across the reconnect.
  std::vector<WatchEvent> ev;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ev.size() < kBefore + kAfter && std::chrono::steady_clock::now() < give_up) {
    auto b = (*w)->Next(milliseconds(200));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ev.insert(ev.end(), b->begin(), b->end());
  }
  ASSERT_EQ(ev.size(), static_cast<size_t>(kBefore + kAfter));
  for (size_t i = 1; i < ev.size(); ++i) EXPECT_EQ(ev[i].kv.mod_revision, ev[i - 1].kv.mod_revision + 1);
  EXPECT_EQ(ev.back().kv.key, "/jobs/b4");
  auto extra = (*w)->Next(milliseconds(300));
  ASSERT_TRUE(extra.ok());
  EXPECT_TRUE(extra->empty());

  // The member comes back, catches up, and all three agree (CheckIntegrity compares hashes).
  ASSERT_TRUE(cluster_->Restart(first).ok());
  Status integrity = store_->CheckIntegrity();
  EXPECT_TRUE(integrity.ok()) << integrity.ToString();
  EXPECT_EQ(store_->Range("/jobs/", {})->kvs.size(), static_cast<size_t>(kBefore + kAfter));
}

TEST_F(EtcdClusterTest, LeasedKeysAreHeldOnceAndVanishWithTheirLease) {
  auto lease = etcd().GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  KeyValue holder;
  auto won = etcd().CreateWithLease("/control/leader", "c1", *lease, &holder);
  ASSERT_TRUE(won.ok()) << won.status().ToString();
  EXPECT_TRUE(*won);
  EXPECT_EQ(holder.value, "c1");
  EXPECT_EQ(holder.mod_revision, *store_->CurrentRevision());

  auto other = etcd().GrantLease(2);
  ASSERT_TRUE(other.ok());
  KeyValue seen;
  auto lost = etcd().CreateWithLease("/control/leader", "c2", *other, &seen);
  ASSERT_TRUE(lost.ok());
  EXPECT_FALSE(*lost);
  EXPECT_EQ(seen.value, "c1");  // the loser learns who holds it
  EXPECT_EQ(seen.mod_revision, holder.mod_revision);

  auto ttl = etcd().KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GT(*ttl, 0);
  // A write fenced on the holder's revision commits while the key lives...
  EXPECT_TRUE(store_->Txn(TxnRequest().If(Compare::ModRevisionIs("/control/leader", holder.mod_revision))
                              .Put("/jobs/x", "1"))->succeeded);
  // ...and never once the lease is gone.
  ASSERT_TRUE(etcd().RevokeLease(*lease).ok());
  EXPECT_FALSE(store_->Get("/control/leader")->has_value());
  EXPECT_FALSE(store_->Txn(TxnRequest().If(Compare::ModRevisionIs("/control/leader", holder.mod_revision))
                               .Put("/jobs/y", "1"))->succeeded);
  EXPECT_FALSE(store_->Get("/jobs/y")->has_value());
  auto after = etcd().KeepAlive(*lease);
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_LE(*after, 0);
}

}  // namespace
}  // namespace gpool::control
