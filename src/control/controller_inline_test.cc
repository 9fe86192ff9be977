// Inline bind (Controller::Submit): a submit into a cluster with nothing else pending is placed
// by a scheduling cycle inside the submit, and the job and its bind reach the store in one
// transaction; with work pending it is queued for the loop's cycle. In process, on a real SQLite
// store in a temp dir, time from a ManualClock. The store is read through a second handle on the
// file once the controller is closed: one Txn is one store revision (store.h), so "created and
// bound in one commit" is "the record's create_revision equals its mod_revision". While the
// controller runs, its commits are counted by its gpool_store_commit_seconds histogram.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/records.h"

namespace gpool::control {
namespace {

class ControllerInlineTest : public ControllerFixture {
 protected:
  ControllerInlineTest() : ControllerFixture("controller_inline_test") {}
  void AddNodes(int n, int gpus = 8) {
    for (int i = 0; i < n; ++i) {
      v1::RegisterNodeRequest r;
      r.mutable_node()->set_name("n" + std::to_string(i));
      r.mutable_node()->set_gpus(gpus);
      r.mutable_node()->set_gpu_model("H100");
      r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
      auto s = c_->RegisterNode(r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
    }
  }
  v1::Job Submit(int gpus, const std::string& tenant = "t", double duration_s = 600,
                 bool preemptible = true) {
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    r.set_duration_s(duration_s);
    r.set_preemptible(preemptible);
    auto j = c_->Submit(r);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  v1::Job Get(const std::string& id) {
    auto j = c_->GetJob(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  // Closes the controller (its store is exclusive) and opens the store as an outside reader.
  std::unique_ptr<Store> CloseAndOpenStore() {
    c_.reset();
    auto s = OpenStore(opts_.store_url);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // The job's stored record and its revisions.
  static std::pair<v1::Job, KeyValue> Stored(Store& store, const std::string& id) {
    auto kv = store.Get(keys::Job(id));
    EXPECT_TRUE(kv.ok() && kv->has_value()) << id;
    if (!kv.ok() || !kv->has_value()) return {};
    v1::Job j;
    auto s = google::protobuf::util::JsonStringToMessage((*kv)->value, &j);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return {j, **kv};
  }
  // Store commits the controller made (its gpool_store_commit_seconds histogram's count).
  double Commits() { return Metric("gpool_store_commit_seconds_count"); }
  // The value of an unlabelled sample of MetricsText (-1 when absent).
  double Metric(const std::string& name) {
    const std::string m = c_->MetricsText();
    const std::string key = "\n" + name + " ";
    size_t at = m.find(key);
    if (at == std::string::npos) return -1;
    return std::stod(m.substr(at + key.size()));
  }
};

// The whole point: an idle cluster, a 16-GPU gang, and the Submit reply is the bound job,
// committed with its record in one store transaction (one controller commit, one revision).
TEST_F(ControllerInlineTest, IdleClusterSubmitReturnsBoundInOneCommit) {
  Open();
  AddNodes(4);  // four commits (one revision each)
  const double commits = Commits();
  v1::Job j = Submit(16);
  ASSERT_EQ(j.state(), "running") << j.message() << j.pending_reason();
  ASSERT_EQ(j.allocations_size(), 2);
  EXPECT_EQ(j.attempt(), 1);
  EXPECT_GT(j.first_bind_ms(), 0);
  EXPECT_NE(j.allocations(0).node(), j.allocations(1).node());
  EXPECT_EQ(Commits(), commits + 1);
  // The loop's next cycle has nothing left to do: no commit.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Commits(), commits + 1);
  // Heartbeats hand the tasks out as for any bind.
  v1::HeartbeatRequest hb;
  hb.set_node(j.allocations(0).node());
  auto resp = c_->Heartbeat(hb);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  ASSERT_EQ(resp->tasks_size(), 1);
  EXPECT_EQ(resp->tasks(0).job_id(), j.id());
  // The bind counts as the control plane's latency (and as queueing time, as every bind).
  EXPECT_EQ(Metric("gpool_job_bind_latency_seconds_count"), 1);
  EXPECT_EQ(Metric("gpool_job_queue_seconds_count"), 1);

  auto store = CloseAndOpenStore();
  ASSERT_NE(store, nullptr);
  auto rev = store->CurrentRevision();
  ASSERT_TRUE(rev.ok());
  EXPECT_EQ(*rev, 4 + 1);  // the registrations and the submit: nothing else was written
  auto [rec, kv] = Stored(*store, j.id());
  EXPECT_EQ(rec.state(), "running");
  EXPECT_EQ(rec.allocations_size(), 2);
  EXPECT_EQ(kv.create_revision, 5);
  EXPECT_EQ(kv.mod_revision, kv.create_revision);  // created and bound in the same Txn
}

// With bind_at_submit off the same submit is queued and the loop's cycle binds it: two commits.
// (The control for the test above: what it measures is the inline path, not a side effect.)
TEST_F(ControllerInlineTest, WithoutInlineBindTheSubmitIsQueued) {
  opts_.bind_at_submit = false;
  Open();
  AddNodes(4);
  const double commits = Commits();
  v1::Job j = Submit(16);
  EXPECT_EQ(j.state(), "pending");
  EXPECT_EQ(Commits(), commits + 1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id()).state(), "running");
  EXPECT_EQ(Commits(), commits + 2);
  EXPECT_EQ(Metric("gpool_job_bind_latency_seconds_count"), 1);
  auto store = CloseAndOpenStore();
  ASSERT_NE(store, nullptr);
  auto [rec, kv] = Stored(*store, j.id());
  EXPECT_EQ(rec.state(), "running");
  EXPECT_EQ(kv.mod_revision, kv.create_revision + 1);
}

// A job submitted while another waits is not placed at submit, even when it fits and the
// policy would backfill it: it could overtake the waiting job, and that is the loop's call.
TEST_F(ControllerInlineTest, JobBehindPendingWorkIsNotBoundInline) {
  Open();
  AddNodes(2);
  v1::Job a = Submit(8, "t", 600);  // idle cluster: bound at submit
  ASSERT_EQ(a.state(), "running");
  v1::Job big = Submit(16, "t", 600);  // cannot fit until a ends: waits, saying why
  ASSERT_EQ(big.state(), "pending");
  EXPECT_FALSE(big.pending_reason().empty());  // the submit's own cycle saw it and said why
  const double commits = Commits();
  v1::Job small = Submit(1, "t", 1);  // fits now, ends long before a
  EXPECT_EQ(small.state(), "pending");
  EXPECT_TRUE(small.pending_reason().empty());  // no cycle ran for it
  EXPECT_EQ(Get(small.id()).state(), "pending");
  EXPECT_EQ(Commits(), commits + 1);  // the submit only
  // The loop's cycle decides: it backfills the short job (so only the rule above kept it from
  // being bound at submit), and the big one keeps waiting.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(small.id()).state(), "running");
  EXPECT_EQ(Get(big.id()).state(), "pending");
  // a and small were bound by the first cycle that saw them (control-plane latency); big waits.
  EXPECT_EQ(Metric("gpool_job_bind_latency_seconds_count"), 2);
  EXPECT_EQ(Metric("gpool_job_queue_seconds_count"), 2);
}

// The cycle at submit is the policy's: a tenant's cap holds, and the job that hits it comes
// back pending with the policy's reason, committed with the submit (one commit).
TEST_F(ControllerInlineTest, TenantCapHoldsAtSubmit) {
  opts_.tenant_max_gpus = {{"capped", 8}};
  Open();
  AddNodes(4);
  v1::Job a = Submit(8, "capped");
  ASSERT_EQ(a.state(), "running");
  const double commits = Commits();
  v1::Job b = Submit(8, "capped");
  EXPECT_EQ(b.state(), "pending");
  EXPECT_NE(b.pending_reason().find("8"), std::string::npos) << b.pending_reason();
  EXPECT_EQ(Commits(), commits + 1);
  EXPECT_EQ(Get(b.id()).pending_reason(), b.pending_reason());
  // Another tenant's job is not capped, but the capped job is pending, so it is queued for the
  // loop's cycle, which binds it.
  v1::Job c = Submit(8, "other");
  EXPECT_EQ(c.state(), "pending");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(c.id()).state(), "running");
  EXPECT_EQ(Get(b.id()).state(), "pending");
  auto store = CloseAndOpenStore();
  ASSERT_NE(store, nullptr);
  auto [rec, kv] = Stored(*store, b.id());
  EXPECT_EQ(rec.pending_reason(), b.pending_reason());
  EXPECT_EQ(kv.mod_revision, kv.create_revision);  // the reason came with the submit
}

// Guaranteed quotas hold at submit: a tenant under its guarantee reclaims GPUs from a tenant
// over its own; the preemption commits with the submit in one transaction.
TEST_F(ControllerInlineTest, QuotaReclaimAtSubmitIsOneCommit) {
  opts_.tenant_quotas = {{"owner", 8}};
  Open();
  AddNodes(1);
  v1::Job borrow = Submit(8, "guest");  // nobody else wants the GPUs: bound
  ASSERT_EQ(borrow.state(), "running");
  const double commits = Commits();
  v1::Job own = Submit(8, "owner");
  EXPECT_EQ(Commits(), commits + 1);
  v1::Job victim = Get(borrow.id());
  EXPECT_EQ(victim.state(), "pending");
  EXPECT_EQ(victim.preemptions(), 1);
  if (own.state() != "running") {  // the policy binds the owner once the victim's GPUs are free
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    EXPECT_EQ(Get(own.id()).state(), "running");
  }
  auto store = CloseAndOpenStore();
  ASSERT_NE(store, nullptr);
  auto [brec, bkv] = Stored(*store, borrow.id());
  auto [orec, okv] = Stored(*store, own.id());
  EXPECT_EQ(brec.preemptions(), 1);
  EXPECT_EQ(bkv.mod_revision, okv.create_revision);  // preempted by the owner's submit commit
}

// Durability: the inline commit is the only write, and a controller reopened on the store
// (as after kill -9: nothing is flushed at close) has the job running on the same GPUs.
TEST_F(ControllerInlineTest, RestartKeepsTheInlineBind) {
  Open();
  AddNodes(4);
  v1::Job j = Submit(16);
  ASSERT_EQ(j.state(), "running");
  Open();  // a fresh controller on the same store
  v1::Job back = Get(j.id());
  EXPECT_EQ(back.state(), "running");
  ASSERT_EQ(back.allocations_size(), j.allocations_size());
  for (int i = 0; i < j.allocations_size(); ++i) {
    EXPECT_EQ(back.allocations(i).node(), j.allocations(i).node());
    EXPECT_EQ(back.allocations(i).gpu_mask(), j.allocations(i).gpu_mask());
  }
  EXPECT_EQ(back.attempt(), 1);
  // Its GPUs stay taken: a second gang of the same size goes to the other two nodes.
  v1::Job k = Submit(16);
  ASSERT_EQ(k.state(), "running");
  for (const auto& a : k.allocations()) {
    for (const auto& b : j.allocations()) EXPECT_NE(a.node(), b.node());
  }
}

}  // namespace
}  // namespace gpool::control
