// Controller unit tests: validation, the sched::JobSpec shape of the API, lost and flapping
// nodes, recovery, commit pipeline under concurrency, watch and leases. In process, on a real
// SQLite store in a temp dir; time is a ManualClock, so nothing here sleeps.
#include "control/controller.h"

#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/controller_test_util.h"
#include "control/job_spec.h"
#include "control/store_test_util.h"
#include "remote/lease/lease.h"

namespace gpool::control {
namespace {

class ControllerTest : public ControllerFixture {
 protected:
  ControllerTest() : ControllerFixture("controller_test") {}
  void SetUp() override {
    ControllerFixture::SetUp();
    opts_.node_settle = std::chrono::milliseconds(3000);
  }
  void AddNode(const std::string& name, int gpus = 8, const std::string& model = "H100",
               const std::string& gpu_server = "") {
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_gpus(gpus);
    r.mutable_node()->set_gpu_model(model);
    r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
    r.mutable_node()->set_cpu_milli(64000);
    r.mutable_node()->set_memory_bytes(512ull << 30);
    r.mutable_node()->set_gpu_server(gpu_server);
    auto s = c_->RegisterNode(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  v1::HeartbeatResponse Beat(const std::string& node, std::vector<v1::TaskRef> finished = {}) {
    v1::HeartbeatRequest r;
    r.set_node(node);
    for (auto& f : finished) *r.add_finished() = f;
    auto s = c_->Heartbeat(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::HeartbeatResponse();
  }
  // Advances the clock `seconds` s with one heartbeat from `node` each second.
  void BeatFor(int seconds, const std::string& node) {
    for (int i = 0; i < seconds; ++i) {
      clock_.AdvanceSeconds(1);
      Beat(node);
    }
  }
  // A heartbeat's report that task 0 of `job_id` finished its first attempt.
  static v1::TaskRef Done(const std::string& job_id) {
    v1::TaskRef done;
    done.set_job_id(job_id);
    done.set_task(0);
    done.set_attempt(1);
    return done;
  }
  v1::Job Submit(int gpus, const std::string& tenant = "t", int milli = 0) {
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    r.set_gpu_milli(milli);
    r.set_duration_s(60);
    auto j = c_->Submit(r);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  v1::Job Get(const std::string& id) { return *c_->GetJob(id); }
  void Schedule() {
    Status s = c_->ScheduleOnce();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // No (node, GPU) held by two running whole-GPU jobs; fractions add up to at most 1000.
  void ExpectNoDoubleAllocation() {
    std::map<std::pair<std::string, int>, int> milli;
    v1::ListJobsResponse all = c_->ListJobs({});
    for (const auto& j : all.jobs()) {
      if (j.state() != "running") continue;
      for (const auto& a : j.allocations()) {
        for (int g = 0; g < 16; ++g) {
          if (a.gpu_mask() >> g & 1) milli[{a.node(), g}] += a.gpu_milli() ? a.gpu_milli() : 1000;
        }
      }
    }
    for (const auto& [k, m] : milli) {
      EXPECT_LE(m, 1000) << "GPU " << k.first << "/" << k.second << " over-allocated";
    }
  }

};

TEST_F(ControllerTest, MalformedSubmitsNameTheField) {
  Open();
  AddNode("n0");
  struct Case {
    std::function<void(v1::SubmitJobRequest*)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](auto* r) { r->set_gpus(0); }, "gpus"},
      {[](auto* r) { r->set_gpus(12); }, "gpus"},
      {[](auto* r) { r->set_tenant("a/b"); }, "tenant"},
      {[](auto* r) { r->set_tenant(""); }, "tenant"},
      {[](auto* r) { r->set_gpu_milli(1500); }, "gpu_milli"},
      {[](auto* r) { r->set_gpus(2); r->set_gpu_milli(500); }, "gpus"},
      {[](auto* r) { r->set_gpu_memory_bytes(1 << 30); }, "gpu_memory_bytes"},
      {[](auto* r) { r->set_locality("rack"); }, "locality"},
      {[](auto* r) { r->set_gpus(16); r->set_locality("node"); r->set_locality_required(true); },
       "locality"},
      {[](auto* r) { r->set_kind("batch"); }, "kind"},
      {[](auto* r) { r->set_gpu_model("Z9000"); }, "gpu_model"},
      {[](auto* r) { r->set_duration_s(-1); }, "duration_s"},
      {[](auto* r) { r->set_min_runtime_s(-5); }, "min_runtime_s"},
      {[](auto* r) { r->set_priority(5000); }, "priority"},
      {[](auto* r) { r->add_command(std::string(70000, 'x')); }, "command"},
      {[](auto* r) { r->set_client_request_id(std::string(200, 'r')); }, "client_request_id"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::SubmitJobRequest r;
    r.set_tenant("t");
    r.set_gpus(1);
    cases[i].mutate(&r);
    auto j = c_->Submit(r);
    ASSERT_FALSE(j.ok()) << "case " << i << " accepted";
    EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument) << i;
    EXPECT_NE(j.status().message().find(cases[i].field), std::string::npos)
        << "case " << i << ": " << j.status().message();
  }
  EXPECT_TRUE(c_->ListJobs({}).jobs().empty());  // nothing half-created
  v1::RegisterNodeRequest bad;
  bad.mutable_node()->set_name("n1");
  bad.mutable_node()->set_gpus(17);
  bad.mutable_node()->set_gpu_model("H100");
  auto r = c_->RegisterNode(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node.gpus"), std::string::npos);
  bad.mutable_node()->set_gpus(8);
  bad.mutable_node()->set_gpu_server("nohost");
  r = c_->RegisterNode(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node.gpu_server"), std::string::npos);
}

TEST_F(ControllerTest, FractionalJobsShareOneGpu) {
  Open();
  AddNode("n0", 1);
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    v1::SubmitJobRequest r;
    r.set_tenant("t");
    r.set_gpus(1);
    r.set_gpu_milli(250);
    r.set_gpu_memory_bytes(10ull << 30);
    r.set_kind("inference");
    r.set_duration_s(60);  // as the fifth: equal work, so age orders them (least_work_first)
    auto j = c_->Submit(r);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(j->gpu_milli(), 250);
    EXPECT_EQ(j->kind(), "inference");
    ids.push_back(j->id());
  }
  v1::Job fifth = Submit(1, "t", 250);  // the GPU is full: it waits
  Schedule();
  for (const auto& id : ids) {
    v1::Job j = Get(id);
    ASSERT_EQ(j.state(), "running") << id << " " << j.message();
    ASSERT_EQ(j.allocations_size(), 1);
    EXPECT_EQ(j.allocations(0).gpu_mask(), 1u);
    EXPECT_EQ(j.allocations(0).gpu_milli(), 250);
    EXPECT_EQ(j.allocations(0).gpu_memory_bytes(), 10ull << 30);
  }
  EXPECT_EQ(Get(fifth.id()).state(), "pending");
  ExpectNoDoubleAllocation();
  v1::HeartbeatResponse hb = Beat("n0");
  ASSERT_EQ(hb.tasks_size(), 4);
  EXPECT_EQ(hb.tasks(0).gpu_milli(), 250);
  EXPECT_EQ(hb.tasks(0).attempt(), 1);
  EXPECT_EQ(hb.tasks(0).tenant(), "t");
}

TEST_F(ControllerTest, ModelConstraintAndRequiredLocality) {
  Open();
  for (int i = 0; i < 4; ++i) AddNode(fmt::format("a{:02d}", i), 8, "A100");
  for (int i = 0; i < 32; ++i) AddNode(fmt::format("h{:02d}", i), 8, "H100");
  v1::SubmitJobRequest r;
  r.set_tenant("t");
  r.set_gpus(8);
  r.set_gpu_model("H100");
  auto j = c_->Submit(r);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  // A 16-node-leaf gang that must stay in one leaf: nodes sort a00..a03, h00..h31, so leaves
  // are [a00..h11], [h12..h27], [h28..h31].
  r.set_gpu_model("");
  r.set_gpus(128);
  r.set_locality("leaf");
  r.set_locality_required(true);
  auto gang = c_->Submit(r);
  ASSERT_TRUE(gang.ok()) << gang.status().ToString();
  EXPECT_EQ(gang->num_tasks(), 16);
  Schedule();
  v1::Job one = Get(j->id());
  ASSERT_EQ(one.state(), "running");
  EXPECT_EQ(one.allocations(0).node()[0], 'h');
  v1::Job g = Get(gang->id());
  ASSERT_EQ(g.state(), "running") << g.message();
  std::set<std::string> nodes;
  for (const auto& a : g.allocations()) nodes.insert(a.node());
  ASSERT_EQ(nodes.size(), 16u);
  // All 16 in the middle leaf (the only leaf with 16 free nodes once h-job took one of leaf 0
  // ... or leaf 0 itself if the 8-GPU job went elsewhere): one leaf either way.
  bool leaf0 = *nodes.begin() >= "a00" && *nodes.rbegin() <= "h11";
  bool leaf1 = *nodes.begin() >= "h12" && *nodes.rbegin() <= "h27";
  EXPECT_TRUE(leaf0 || leaf1) << *nodes.begin() << ".." << *nodes.rbegin();
  ExpectNoDoubleAllocation();
}

TEST_F(ControllerTest, LostNodeRequeuesAndIgnoresStaleReports) {
  Open();
  AddNode("n0");
  v1::Job j = Submit(8);
  Schedule();
  ASSERT_EQ(Get(j.id()).state(), "running");
  ASSERT_EQ(Get(j.id()).allocations(0).node(), "n0");
  AddNode("n1");
  // n0 goes silent past the timeout; n1 keeps heartbeating.
  for (int i = 0; i < 6; ++i) {
    clock_.AdvanceSeconds(1);
    Beat("n1");
  }
  Schedule();
  v1::Job after = Get(j.id());
  EXPECT_EQ(after.requeues(), 1);
  // Requeued and, in the same cycle, bound again on the healthy node.
  ASSERT_EQ(after.state(), "running") << after.message();
  EXPECT_EQ(after.allocations(0).node(), "n1");
  EXPECT_EQ(after.attempt(), 2);
  // n0 comes back and reports the task of attempt 1 as finished: ignored.
  v1::TaskRef stale;
  stale.set_job_id(j.id());
  stale.set_task(0);
  stale.set_attempt(1);
  v1::HeartbeatResponse hb = Beat("n0", {stale});
  EXPECT_EQ(hb.tasks_size(), 0);  // n0 holds nothing now: the agent stops the old task
  EXPECT_EQ(Get(j.id()).state(), "running");
  // n0 is settling: a new job does not go there yet, even though n1 is full.
  v1::Job k = Submit(8);
  Schedule();
  EXPECT_EQ(Get(k.id()).state(), "pending");
  auto nodes = c_->ListNodes();
  EXPECT_EQ(nodes.nodes(0).state(), "settling");
  clock_.AdvanceSeconds(3.5);
  Beat("n0");
  Beat("n1");
  Schedule();
  EXPECT_EQ(Get(k.id()).state(), "running");
  EXPECT_EQ(Get(k.id()).allocations(0).node(), "n0");
  // The current attempt's report finishes the job.
  v1::TaskRef done;
  done.set_job_id(j.id());
  done.set_task(0);
  done.set_attempt(2);
  Beat("n1", {done});
  EXPECT_EQ(Get(j.id()).state(), "finished");
  std::string metrics = c_->MetricsText();
  // j was bound by the first cycle that saw it; k waited for n0 to settle: queueing, not
  // the control plane's latency.
  EXPECT_NE(metrics.find("gpool_job_bind_latency_seconds_count 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpool_job_queue_seconds_count 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpool_tenant_gpus{tenant=\"t\"} 8"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpool_jobs{state=\"finished\"} 1"), std::string::npos) << metrics;
}

// Bind latency runs from the accepted submit to the committed bind, at sub-millisecond
// resolution; a job that waited for room counts only in the queueing histogram.
TEST_F(ControllerTest, BindLatencyIsSubMillisecondAndQueueingIsApart) {
  opts_.bind_at_submit = false;  // time passes between the submit and the loop's cycle
  Open();
  AddNode("n0");
  v1::Job a = Submit(8);
  clock_.AdvanceSeconds(0.0003);
  Schedule();
  ASSERT_EQ(Get(a.id()).state(), "running");
  std::string m = c_->MetricsText();
  EXPECT_NE(m.find("gpool_job_bind_latency_seconds_bucket{le=\"0.00025\"} 0"), std::string::npos)
      << m;
  EXPECT_NE(m.find("gpool_job_bind_latency_seconds_bucket{le=\"0.0005\"} 1"), std::string::npos)
      << m;
  // b finds no room, waits 10 s for a to finish, then binds.
  v1::Job b = Submit(8);
  Schedule();
  ASSERT_EQ(Get(b.id()).state(), "pending");
  BeatFor(10, "n0");
  Beat("n0", {Done(a.id())});
  Schedule();
  ASSERT_EQ(Get(b.id()).state(), "running");
  m = c_->MetricsText();
  EXPECT_NE(m.find("gpool_job_bind_latency_seconds_count 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpool_job_queue_seconds_count 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpool_job_queue_seconds_bucket{le=\"1\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("gpool_job_queue_seconds_bucket{le=\"60\"} 2\n"), std::string::npos) << m;
}

TEST_F(ControllerTest, LostNodeFailPolicy) {
  opts_.lost_node_policy = LostNodePolicy::kFail;
  Open();
  AddNode("n0");
  AddNode("n1");
  v1::Job j = Submit(8);
  Schedule();
  std::string node = Get(j.id()).allocations(0).node();
  std::string other = node == "n0" ? "n1" : "n0";
  for (int i = 0; i < 6; ++i) {
    clock_.AdvanceSeconds(1);
    Beat(other);
  }
  Schedule();
  v1::Job after = Get(j.id());
  EXPECT_EQ(after.state(), "failed");
  EXPECT_NE(after.message().find(node), std::string::npos) << after.message();
  EXPECT_EQ(c_->MetricsText().find("gpool_nodes{state=\"down\"} 1") != std::string::npos, true);
}

TEST_F(ControllerTest, FlappingNodeDoesNotThrashOrDoubleAllocate) {
  Open();
  AddNode("flappy");
  AddNode("steady");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(Submit(4).id());
  Schedule();
  ExpectNoDoubleAllocation();
  // 10 flaps: flappy is silent for 6 s (lost), then heartbeats for 2 s (settling), again and
  // again. A scheduling cycle runs every simulated second.
  for (int flap = 0; flap < 10; ++flap) {
    for (int s = 0; s < 6; ++s) {
      clock_.AdvanceSeconds(1);
      Beat("steady");
      Schedule();
      ExpectNoDoubleAllocation();
    }
    for (int s = 0; s < 2; ++s) {
      clock_.AdvanceSeconds(1);
      Beat("flappy");
      Beat("steady");
      Schedule();
      ExpectNoDoubleAllocation();
    }
  }
  // Jobs that were on flappy moved once; never back, because it never settled.
  int requeues = 0, running = 0;
  for (const auto& id : ids) {
    v1::Job j = Get(id);
    EXPECT_LE(j.requeues(), 1) << id;
    requeues += j.requeues();
    if (j.state() == "running") {
      ++running;
      EXPECT_EQ(j.allocations(0).node(), "steady");
    }
  }
  EXPECT_EQ(running, 2);  // steady holds 8 GPUs: two 4-GPU jobs; the third waits
  EXPECT_LE(requeues, 2);
}

TEST_F(ControllerTest, RecoveryKeepsJobsAndAllocations) {
  Open();
  AddNode("n0");
  v1::Job a = Submit(8);
  v1::Job b = Submit(8);
  Schedule();
  v1::Job ra = Get(a.id());
  ASSERT_EQ(ra.state(), "running");
  Open();  // a new controller on the same store
  EXPECT_EQ(Get(a.id()).allocations(0).gpu_mask(), ra.allocations(0).gpu_mask());
  EXPECT_EQ(Get(a.id()).state(), "running");
  EXPECT_EQ(Get(b.id()).state(), "pending");
  Schedule();
  EXPECT_EQ(Get(b.id()).state(), "pending");  // nothing allocated twice
  v1::Job c = Submit(1);
  EXPECT_GT(c.id(), b.id());
}

TEST_F(ControllerTest, ConcurrentSubmitsAreAllDurableAndUnique) {
  Open();
  constexpr int kThreads = 20, kPerThread = 50;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        v1::SubmitJobRequest r;
        r.set_tenant(fmt::format("t{}", t % 4));
        r.set_gpus(1);
        r.set_client_request_id(fmt::format("req-{}-{}", t, i));
        auto j = c_->Submit(r);
        if (j.ok()) ids[t].push_back(j->id());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : ids) {
    EXPECT_EQ(v.size(), static_cast<size_t>(kPerThread));
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  // Group commit: far fewer store commits than submits is the point, but not asserted (timing).
  Open();
  auto jobs = c_->ListJobs({});
  std::set<std::string> recovered;
  for (const auto& j : jobs.jobs()) recovered.insert(j.id());
  EXPECT_EQ(recovered, all);
  // Idempotency survives the restart.
  v1::SubmitJobRequest again;
  again.set_tenant("t0");
  again.set_gpus(1);
  again.set_client_request_id("req-0-0");
  EXPECT_EQ(c_->Submit(again)->id(), ids[0][0]);
}

TEST_F(ControllerTest, WatchDeliversCommittedChangesInOrder) {
  opts_.bind_at_submit = false;  // a submit's commit, then the cycle's (ControllerInlineTest: one)
  Open();
  AddNode("n0");
  v1::Job before = Submit(1, "a");
  v1::WatchJobsRequest f;
  f.set_tenant("a");
  uint64_t cursor = 0;
  auto snap = c_->SnapshotJobs(f, &cursor);
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].id(), before.id());
  v1::Job other = Submit(1, "b");  // filtered out
  v1::Job mine = Submit(2, "a");
  Schedule();
  std::vector<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < 3 && seen.size() < 3; ++i) {
    auto ev = c_->WaitJobEvents(f, &cursor, std::chrono::milliseconds(100));
    ASSERT_TRUE(ev.ok());
    for (const auto& j : *ev) seen.emplace_back(j.id(), j.state());
  }
  std::vector<std::pair<std::string, std::string>> want = {
      {mine.id(), "pending"}, {before.id(), "running"}, {mine.id(), "running"}};
  EXPECT_EQ(seen, want);
  (void)other;
}

TEST_F(ControllerTest, LeasesAreSignedPerGpu) {
  opts_.lease_key = std::string(32, 'k');
  Open();
  AddNode("n0", 8, "H100", "10.0.0.5:7000");
  AddNode("n1", 8, "H100");  // no GPU server
  v1::Job j = Submit(2);
  Schedule();
  v1::Job run = Get(j.id());
  ASSERT_EQ(run.state(), "running");
  v1::IssueLeasesRequest req;
  req.set_job_id(j.id());
  req.set_ttl_s(600);
  auto r = c_->IssueLeases(req);
  if (run.allocations(0).node() == "n1") {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    return;
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->leases_size(), 2);
  auto auth = remote::LeaseAuthority::Create(std::string(32, 'k'));
  ASSERT_TRUE(auth.ok());
  for (const auto& l : r->leases()) {
    auto lease = auth->Verify(l.token(), l.gpu(), clock_);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ(lease->job, j.id());
    EXPECT_EQ(lease->tenant, "t");
    EXPECT_EQ(l.gpu().rfind("10.0.0.5:7000/", 0), 0u);
  }
  // Not running: refused.
  v1::Job pending = Submit(8);
  pending = Submit(8);
  req.set_job_id(pending.id());
  Schedule();
  if (Get(pending.id()).state() == "pending") {
    EXPECT_EQ(c_->IssueLeases(req).status().code(), StatusCode::kFailedPrecondition);
  }
}

TEST_F(ControllerTest, LeasesNeedAKey) {
  Open();
  v1::IssueLeasesRequest req;
  req.set_job_id("j00000001");
  auto r = c_->IssueLeases(req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lease key"), std::string::npos);
}

TEST(JobSpecYaml, ParsesEveryField) {
  auto r = ParseJobSpecYaml(R"(tenant: research
gpu_fraction: 0.25
gpu_memory: 20GiB
gpu_model: "A100|H100"
locality: leaf
locality_required: true
preemptible: false
min_runtime: 10m
kind: inference
priority: 3
duration: 2h
request_id: abc
cpus: 2.5
memory: 64GiB
command: [python, serve.py]
)", "job.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tenant(), "research");
  EXPECT_EQ(r->gpus(), 1);
  EXPECT_EQ(r->gpu_milli(), 250);
  EXPECT_EQ(r->gpu_memory_bytes(), 20ull << 30);
  EXPECT_EQ(r->gpu_model(), "A100|H100");
  EXPECT_EQ(r->locality(), "leaf");
  EXPECT_TRUE(r->locality_required());
  ASSERT_TRUE(r->has_preemptible());
  EXPECT_FALSE(r->preemptible());
  EXPECT_EQ(r->min_runtime_s(), 600);
  EXPECT_EQ(r->kind(), "inference");
  EXPECT_EQ(r->priority(), 3);
  EXPECT_EQ(r->duration_s(), 7200);
  EXPECT_EQ(r->client_request_id(), "abc");
  EXPECT_EQ(r->cpu_milli(), 2500);
  EXPECT_EQ(r->memory_bytes(), 64ull << 30);
  ASSERT_EQ(r->command_size(), 2);
}

TEST(JobSpecYaml, ErrorsNameFileLineAndKey) {
  auto r = ParseJobSpecYaml("tenant: a\ngpus: 8\ngpuz: 2\n", "job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job.yaml:3: gpuz"), std::string::npos)
      << r.status().message();
  r = ParseJobSpecYaml("tenant: a\ngpus: eight\n", "job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job.yaml:2: gpus"), std::string::npos)
      << r.status().message();
  r = ParseJobSpecYaml("tenant: a\n", "job.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpus: required"), std::string::npos);
  r = ParseJobSpecYaml("gpus: 1\nmin_runtime: soon\n", "j.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("j.yaml:2: min_runtime"), std::string::npos);
  r = ParseJobSpecYaml("gpus: 1\ncpus: -2\n", "j.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("j.yaml:2: cpus"), std::string::npos) << r.status().message();
  r = ParseJobSpecYaml("gpus: 1\nmemory: lots\n", "j.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("j.yaml:2: memory"), std::string::npos) << r.status().message();
}

// Per-task CPU and memory requests reach the scheduler: a task fits only where the node has
// them free (AddNode: 64 CPUs, 512 GiB), and they are kept in the job record.
TEST_F(ControllerTest, CpuAndMemoryRequestsArePlacedAgainstNodes) {
  Open();
  AddNode("n1");
  auto submit = [&](int64_t cpu_milli, uint64_t mem) {
    v1::SubmitJobRequest r;
    r.set_tenant("t");
    r.set_gpus(1);
    r.set_cpu_milli(cpu_milli);
    r.set_memory_bytes(mem);
    return c_->Submit(r);
  };
  auto bad = submit(-1, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cpu_milli"), std::string::npos) << bad.status().message();
  // Alone on an empty node, a task asking more memory than the node has stays pending.
  auto mem = submit(1000, 600ull << 30);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->memory_bytes(), 600ull << 30);
  Schedule();
  EXPECT_EQ(Get(mem->id()).state(), "pending");
  ASSERT_TRUE(c_->Cancel(mem->id()).ok());
  auto big = submit(48000, 0);              // 48 of the node's 64 CPUs
  auto small = submit(8000, 100ull << 30);  // fits next to it: 56 CPUs
  auto second = submit(32000, 0);           // does not: 8 CPUs left
  ASSERT_TRUE(big.ok() && second.ok() && small.ok());
  EXPECT_EQ(big->cpu_milli(), 48000);
  Schedule();
  EXPECT_EQ(Get(big->id()).state(), "running");
  EXPECT_EQ(Get(small->id()).state(), "running");
  EXPECT_EQ(Get(second->id()).state(), "pending");
  Open();  // durable, and still placed by CPU after a restart (the running ones hold theirs)
  EXPECT_EQ(Get(big->id()).cpu_milli(), 48000);
  Schedule();
  EXPECT_EQ(Get(second->id()).state(), "pending");
}

// Fair share counts a job that ran and finished between two scheduling cycles. Tenant a's
// 8-GPU job runs 4 s on the only node and finishes with no cycle in between; then a and b each
// submit an 8-GPU job, a first. a's 4 s of use put b ahead. (Charged only from the jobs running
// at a cycle, a's finished job would count nothing and the older job, a's, would go first.)
TEST_F(ControllerTest, FairShareChargesAJobThatEndedBetweenCycles) {
  opts_.bind_at_submit = false;  // a2 and b1 meet in one cycle (else a2 binds at its submit)
  Open();
  AddNode("n0");
  v1::Job a1 = Submit(8, "a");
  Schedule();
  ASSERT_EQ(Get(a1.id()).state(), "running");
  BeatFor(4, "n0");
  Beat("n0", {Done(a1.id())});
  ASSERT_EQ(Get(a1.id()).state(), "finished");
  v1::Job a2 = Submit(8, "a");
  clock_.AdvanceSeconds(1);
  Beat("n0");
  v1::Job b1 = Submit(8, "b");
  Schedule();
  EXPECT_EQ(Get(b1.id()).state(), "running");
  EXPECT_EQ(Get(a2.id()).state(), "pending");
}

// The ledger keeps usage by queue index: a tenant keeps its index when the jobs that made it
// appear first are gone. b's job runs 4 s, charged to b; then b's and c's jobs are gone, and a's
// job comes first in the job table: numbered afresh, a would take b's index and b's usage.
TEST_F(ControllerTest, FairShareUsageStaysWithItsTenant) {
  Open();
  AddNode("n0");
  v1::Job b1 = Submit(8, "b");
  Schedule();
  ASSERT_EQ(Get(b1.id()).state(), "running");
  BeatFor(4, "n0");
  v1::Job c1 = Submit(8, "c");
  Schedule();  // a cycle (c1 pends): b1's 4 s are charged to b
  ASSERT_EQ(Get(c1.id()).state(), "pending");
  Beat("n0", {Done(b1.id())});
  ASSERT_EQ(Get(b1.id()).state(), "finished");
  ASSERT_TRUE(c_->Cancel(c1.id()).ok());
  v1::Job a1 = Submit(8, "a");
  v1::Job b2 = Submit(8, "b");
  clock_.AdvanceSeconds(1);
  Beat("n0");
  Schedule();
  EXPECT_EQ(Get(a1.id()).state(), "running") << "b used the GPUs for 4 s, a never did";
  EXPECT_EQ(Get(b2.id()).state(), "pending");
}
}  // namespace
}  // namespace gpool::control
