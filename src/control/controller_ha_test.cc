// Controller high availability on a real etcd (controller_ha.cc, leader.h): one leader among
// two controllers, standbys follow the store and redirect writes, and fencing: a controller
// that lost its leader key cannot commit, even before its election thread notices.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "control/controller.h"
#include "control/etcd_test_util.h"

namespace gpool::control {
namespace {

// Polls `pred` until it holds; a hang guard (20 s), not a timing assertion.
template <class Pred>
bool Eventually(Pred pred) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

v1::SubmitJobRequest Job(const std::string& request_id) {
  v1::SubmitJobRequest r;
  r.set_client_request_id(request_id);
  r.set_tenant("t");
  r.set_gpus(1);
  r.set_duration_s(60);
  return r;
}

TEST(ControllerHaTest, OneLeaderStandbyFollowsAndDeposedLeaderCannotWrite) {
  auto cluster = EtcdTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ControllerOptions o;
  o.store_url = (*cluster)->Url();
  o.lease_ttl_s = 2;
  auto a = Controller::Open(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->SetAdvertiseAddress("127.0.0.1:1001");
  (*a)->Start();
  ASSERT_TRUE(Eventually([&] { return (*a)->leading(); }));
  auto b = Controller::Open(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  (*b)->SetAdvertiseAddress("127.0.0.1:1002");
  (*b)->Start();

  // The leader writes; the standby refuses writes, naming the leader, and follows by watch.
  auto j1 = (*a)->Submit(Job("r1"));
  ASSERT_TRUE(j1.ok()) << j1.status().ToString();
  // (Until its first campaign round the standby does not know who leads; it refuses all the same.)
  StatusOr<v1::Job> refused = Status::Unavailable("not asked yet");
  ASSERT_TRUE(Eventually([&] {
    refused = (*b)->Submit(Job("r-standby"));
    EXPECT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
    return refused.status().message().find("the leader is at 127.0.0.1:1001") != std::string::npos;
  })) << refused.status().message();
  EXPECT_FALSE((*b)->leading());
  ASSERT_TRUE(Eventually([&] { return (*b)->GetJob(j1->id()).ok(); }));

  // The leader key vanishes (as when the lease expires during a pause). The old leader has not
  // noticed yet, but its next write is fenced: refused, and nothing is written.
  auto store = OpenStore(o.store_url);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Txn(TxnRequest().Delete("/control/leader")).ok());
  auto stale = (*a)->Submit(Job("r-stale"));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(stale.status().message().find("not the leader"), std::string::npos)
      << stale.status().message();
  auto jobs = (*store)->Range(keys::kJobs, {});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->kvs.size(), 1u);
  EXPECT_EQ(jobs->kvs[0].key, keys::Job(j1->id()));

  // Someone else leads now (either controller may win the new election); it knows job 1 and
  // continues the numbering; the other one refuses writes.
  Controller* leader = nullptr;
  ASSERT_TRUE(Eventually([&] {
    leader = (*a)->leading() ? a->get() : (*b)->leading() ? b->get() : nullptr;
    return leader != nullptr;
  }));
  auto j2 = leader->Submit(Job("r2"));
  ASSERT_TRUE(j2.ok()) << j2.status().ToString();
  EXPECT_GT(j2->id(), j1->id());
  auto again = leader->Submit(Job("r1"));  // idempotency survives the change of leader
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), j1->id());
  Controller* other = leader == a->get() ? b->get() : a->get();
  EXPECT_FALSE(other->leading());
  EXPECT_EQ(other->Submit(Job("r3")).status().code(), StatusCode::kUnavailable);

  // Stopping the leader resigns: the other takes over without waiting for the lease TTL.
  leader->Stop();
  ASSERT_TRUE(Eventually([&] { return other->leading(); }));
  EXPECT_TRUE(other->GetJob(j2->id()).ok());
  other->Stop();
}

// Retention on etcd: the leader's loop archives ended jobs; the archive answers Get and a
// repeated submit on the leader, on the standby that follows it, and after a change of leader,
// which continues the numbering past archived ids.
TEST(ControllerHaTest, RetentionArchivesOnEtcdAndStandbysFollow) {
  auto cluster = EtcdTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ControllerOptions o;
  o.store_url = (*cluster)->Url();
  o.lease_ttl_s = 2;
  o.keep_finished_jobs = 0;
  o.retention_interval = std::chrono::milliseconds(20);
  auto a = Controller::Open(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->SetAdvertiseAddress("127.0.0.1:1001");
  (*a)->Start();
  ASSERT_TRUE(Eventually([&] { return (*a)->leading(); }));
  auto b = Controller::Open(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  (*b)->SetAdvertiseAddress("127.0.0.1:1002");
  (*b)->Start();

  auto j1 = (*a)->Submit(Job("r1"));  // no nodes: it stays pending until cancelled
  ASSERT_TRUE(j1.ok()) << j1.status().ToString();
  ASSERT_TRUE((*a)->Cancel(j1->id()).ok());
  auto store = OpenStore(o.store_url);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(Eventually([&] {
    auto live = (*store)->Range(keys::kJobs, {});
    auto archived = (*store)->Get(keys::ArchivedJob(j1->id()));
    return live.ok() && live->kvs.empty() && archived.ok() && archived->has_value();
  }));
  auto got = (*a)->GetJob(j1->id());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state(), "cancelled");
  auto again = (*a)->Submit(Job("r1"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id(), j1->id());
  // The standby dropped it from memory (the watched delete) and reads it from the archive.
  ASSERT_TRUE(Eventually([&] { return (*b)->ListJobs({}).jobs_size() == 0; }));
  got = (*b)->GetJob(j1->id());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state(), "cancelled");

  (*a)->Stop();
  ASSERT_TRUE(Eventually([&] { return (*b)->leading(); }));
  again = (*b)->Submit(Job("r1"));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), j1->id());
  auto j2 = (*b)->Submit(Job("r2"));
  ASSERT_TRUE(j2.ok()) << j2.status().ToString();
  EXPECT_GT(j2->id(), j1->id());
  (*b)->Stop();
}

// Inline bind on etcd (Controller::Submit): a submit into an idle cluster comes back bound, its
// record created and bound in one Txn (one revision); the Txn carries the leader fence like any
// commit, so a leader deposed before it noticed binds nothing and writes nothing.
TEST(ControllerHaTest, InlineBindIsOneFencedTxn) {
  auto cluster = EtcdTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ControllerOptions o;
  o.store_url = (*cluster)->Url();
  o.lease_ttl_s = 2;
  auto a = Controller::Open(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->SetAdvertiseAddress("127.0.0.1:1001");
  (*a)->Start();
  ASSERT_TRUE(Eventually([&] { return (*a)->leading(); }));
  for (const char* name : {"n1", "n2"}) {
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_gpus(8);
    r.mutable_node()->set_gpu_model("H100");
    ASSERT_TRUE((*a)->RegisterNode(r).ok());
  }
  v1::SubmitJobRequest gang = Job("r1");
  gang.set_gpus(16);
  auto j = (*a)->Submit(gang);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(j->state(), "running") << j->pending_reason();
  ASSERT_EQ(j->allocations_size(), 2);
  auto store = OpenStore(o.store_url);
  ASSERT_TRUE(store.ok());
  auto kv = (*store)->Get(keys::Job(j->id()));
  ASSERT_TRUE(kv.ok() && kv->has_value());
  EXPECT_EQ((*kv)->create_revision, (*kv)->mod_revision);  // created and bound in one Txn
  EXPECT_NE((*kv)->value.find("\"running\""), std::string::npos) << (*kv)->value;

  ASSERT_TRUE((*a)->Cancel(j->id()).ok());  // room again, nothing pending
  ASSERT_TRUE((*store)->Txn(TxnRequest().Delete("/control/leader")).ok());
  auto stale = (*a)->Submit(Job("r2"));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable) << stale.status().ToString();
  auto jobs = (*store)->Range(keys::kJobs, {});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->kvs.size(), 1u);  // the cancelled gang only
  EXPECT_EQ(jobs->kvs[0].key, keys::Job(j->id()));
  (*a)->Stop();
}

// Every log line from now until destruction (spdlog's default logger, which GPOOL_LOG_* use).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(10000)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string Text() const {
    std::string all;
    for (const std::string& line : sink_->last_formatted()) all += line;
    return all;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// A leader fenced off while it believed it led: its scheduling cycle's requeue of a lost node's
// job is refused by the fence. Nothing of that cycle may be logged as if it happened, and the
// error must not tell the operator to restart a controller that steps down by itself. Once it
// leads again (a new term: fresh heartbeat grace) and the node stays silent, the requeue is
// committed and logged.
TEST(ControllerHaTest, FencedLeaderLogsOnlyCommittedEvents) {
  auto cluster = EtcdTestCluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ManualClock clock(1'700'000'000'000'000'000);
  ControllerOptions o;
  o.store_url = (*cluster)->Url();
  o.lease_ttl_s = 2;
  o.clock = &clock;
  auto a = Controller::Open(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->SetAdvertiseAddress("127.0.0.1:1001");
  (*a)->Start();
  ASSERT_TRUE(Eventually([&] { return (*a)->leading(); }));
  v1::RegisterNodeRequest r;
  r.mutable_node()->set_name("n1");
  r.mutable_node()->set_gpus(8);
  r.mutable_node()->set_gpu_model("H100");
  ASSERT_TRUE((*a)->RegisterNode(r).ok());
  auto job = (*a)->Submit(Job("r1"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(Eventually([&] {
    auto j = (*a)->GetJob(job->id());
    return j.ok() && j->state() == "running";
  }));

  LogCapture log;
  auto store = OpenStore(o.store_url);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Txn(TxnRequest().Delete("/control/leader")).ok());
  clock.AdvanceSeconds(11);  // n1 is past the 10 s node timeout
  Status cycle = (*a)->ScheduleOnce();  // (or the loop's cycle gets there first)
  ASSERT_TRUE(Eventually([&] {
    return log.Text().find("no longer the leader") != std::string::npos;
  })) << log.Text();
  std::string refused = log.Text() + cycle.ToString();
  EXPECT_NE(refused.find("fenced write was refused"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("lost, job"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("restart the controller"), std::string::npos) << refused;
  auto stored = (*store)->Range(keys::Job(job->id()), {});
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->kvs.size(), 1u);
  EXPECT_NE(stored->kvs[0].value.find("running"), std::string::npos) << stored->kvs[0].value;

  ASSERT_TRUE(Eventually([&] { return (*a)->leading(); }));
  clock.AdvanceSeconds(11);
  ASSERT_TRUE(Eventually([&] {
    auto j = (*a)->GetJob(job->id());
    return j.ok() && j->state() == "pending";
  }));
  // (Logged right after the commit, so possibly just after GetJob saw it.)
  const std::string line = fmt::format("job {}: node n1 lost, job pending", job->id());
  EXPECT_TRUE(Eventually([&] { return log.Text().find(line) != std::string::npos; }))
      << log.Text();
  (*a)->Stop();
}

}  // namespace
}  // namespace gpool::control
