// Retention tests: finished jobs leave the live state beyond the count or age bound and stay
// readable from the store's archive (Get, history list, idempotent submit, cancel), across a
// restart; active jobs never leave; the archive keeps its own bound; ids are never reused. In
// process on a real SQLite store; time is a ManualClock.
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/store.h"

namespace gpool::control {
namespace {

class RetentionTest : public ControllerFixture {
 protected:
  RetentionTest() : ControllerFixture("controller_retention_test") {}
  void SetUp() override {
    ControllerFixture::SetUp();
    opts_.keep_finished_jobs = -1;                      // each test sets the bound it tests
    opts_.keep_finished_for = std::chrono::milliseconds(0);
  }
  void AddNode(const std::string& name, int gpus = 8) {
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_gpus(gpus);
    r.mutable_node()->set_gpu_model("H100");
    r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
    auto s = c_->RegisterNode(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  v1::Job Submit(int gpus, const std::string& tenant = "t", const std::string& request_id = "") {
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    r.set_duration_s(60);
    r.set_client_request_id(request_id);
    auto j = c_->Submit(r);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  // Binds pending jobs, then reports task 0 of `id` (first attempt) finished from its host.
  void Finish(const std::string& id, const std::string& node = "n0") {
    v1::HeartbeatRequest r;
    r.set_node(node);
    v1::TaskRef* done = r.add_finished();
    done->set_job_id(id);
    done->set_task(0);
    done->set_attempt(1);
    auto s = c_->Heartbeat(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_EQ(Get(id).state(), "finished");
  }
  void Schedule() {
    Status s = c_->ScheduleOnce();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void Retain() {
    Status s = c_->RetainOnce();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  v1::Job Get(const std::string& id) {
    auto j = c_->GetJob(id);
    EXPECT_TRUE(j.ok()) << id << ": " << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  std::set<std::string> LiveIds() {
    std::set<std::string> out;
    v1::ListJobsResponse all = c_->ListJobs({});
    for (const auto& j : all.jobs()) out.insert(j.id());
    return out;
  }
  std::set<std::string> ArchivedIds(const std::string& tenant = "") {
    v1::ListJobsRequest r;
    r.set_history(true);
    r.set_tenant(tenant);
    auto l = c_->ListArchivedJobs(r);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    std::set<std::string> out;
    if (l.ok()) {
      for (const auto& j : l->jobs()) out.insert(j.id());
    }
    return out;
  }
};

TEST_F(RetentionTest, CountBoundArchivesTheEarliestEndedAndActiveJobsStay) {
  opts_.keep_finished_jobs = 2;
  Open();
  AddNode("n0");
  std::vector<v1::Job> run;
  for (int i = 0; i < 5; ++i) run.push_back(Submit(1));
  Schedule();
  v1::Job pending = Submit(8);  // 5 of 8 GPUs held: it waits
  Schedule();
  ASSERT_EQ(Get(pending.id()).state(), "pending");
  // Ended in the order 3, 0, cancelled 4, 1; job 2 keeps running.
  for (int i : {3, 0}) {
    clock_.AdvanceSeconds(1);
    Finish(run[i].id());
  }
  clock_.AdvanceSeconds(1);
  ASSERT_TRUE(c_->Cancel(run[4].id()).ok());
  clock_.AdvanceSeconds(1);
  Finish(run[1].id());
  Retain();
  // Four ended, two kept: the two that ended first (3 and 0) left the live state.
  EXPECT_EQ(LiveIds(), (std::set<std::string>{run[1].id(), run[2].id(), run[4].id(),
                                              pending.id()}));
  EXPECT_EQ(ArchivedIds(), (std::set<std::string>{run[0].id(), run[3].id()}));
  v1::Job archived = Get(run[3].id());  // Get falls back to the archive
  EXPECT_EQ(archived.state(), "finished");
  EXPECT_EQ(archived.tenant(), "t");
  EXPECT_GT(archived.end_ms(), 0);
  // A pass with nothing beyond the bound changes nothing; active jobs are never archived.
  Retain();
  EXPECT_EQ(LiveIds().size(), 4u);
  EXPECT_EQ(Get(run[2].id()).state(), "running");
  // Cancelling an archived job is a no-op that answers the job as it ended.
  auto c = c_->Cancel(run[0].id());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->state(), "finished");
  EXPECT_EQ(c_->GetJob("j99999999").status().code(), StatusCode::kNotFound);

  // A restart keeps the archive and the live state apart, and never reuses an id.
  Open();
  EXPECT_EQ(LiveIds().size(), 4u);
  EXPECT_EQ(ArchivedIds(), (std::set<std::string>{run[0].id(), run[3].id()}));
  EXPECT_EQ(Get(run[0].id()).state(), "finished");
  v1::Job next = Submit(1);
  EXPECT_GT(next.id(), pending.id());
}

TEST_F(RetentionTest, AgeBoundArchivesOnlyJobsEndedLongEnoughAgo) {
  opts_.keep_finished_for = std::chrono::milliseconds(60'000);
  Open();
  AddNode("n0");
  v1::Job a = Submit(1), b = Submit(1), running = Submit(1);
  Schedule();
  v1::Job pending = Submit(8);
  Finish(a.id());
  clock_.AdvanceSeconds(30);
  Finish(b.id());
  clock_.AdvanceSeconds(31);  // a ended 61 s ago, b 31 s ago
  Retain();
  EXPECT_EQ(ArchivedIds(), std::set<std::string>{a.id()});
  EXPECT_EQ(LiveIds(), (std::set<std::string>{b.id(), running.id(), pending.id()}));
  clock_.AdvanceSeconds(3600);  // however long they wait or run, active jobs stay
  Retain();
  EXPECT_EQ(ArchivedIds(), (std::set<std::string>{a.id(), b.id()}));
  EXPECT_EQ(LiveIds(), (std::set<std::string>{running.id(), pending.id()}));
  EXPECT_EQ(Get(running.id()).state(), "running");
  EXPECT_EQ(Get(pending.id()).state(), "pending");
}

TEST_F(RetentionTest, OffKeepsEveryJobLive) {
  Open();  // both bounds off (SetUp)
  AddNode("n0");
  v1::Job a = Submit(1);
  Schedule();
  Finish(a.id());
  clock_.AdvanceSeconds(365 * 86400);
  Retain();
  EXPECT_EQ(LiveIds(), std::set<std::string>{a.id()});
  EXPECT_TRUE(ArchivedIds().empty());
}

// A request id whose job was archived answers that job: never a second one, also after a
// restart. Once the archive's bound dropped the job, the id is free again (documented).
TEST_F(RetentionTest, IdempotentSubmitFindsArchivedJobs) {
  opts_.keep_finished_jobs = 0;
  opts_.archive_max_jobs = 2;
  Open();
  AddNode("n0");
  std::vector<v1::Job> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(Submit(1, "t", fmt::format("req-{}", i)));
  Schedule();
  for (const v1::Job& j : jobs) Finish(j.id());
  Retain();
  ASSERT_TRUE(LiveIds().empty());
  ASSERT_EQ(ArchivedIds().size(), 4u);  // the archive's bound applies at the next pass

  v1::Job again = Submit(1, "t", "req-1");
  EXPECT_EQ(again.id(), jobs[1].id());
  EXPECT_EQ(again.state(), "finished");
  EXPECT_TRUE(LiveIds().empty()) << "a repeated submit created a job";

  // The archive's own bound: the earliest-submitted archived jobs go.
  Retain();
  EXPECT_EQ(ArchivedIds(), (std::set<std::string>{jobs[2].id(), jobs[3].id()}));
  EXPECT_EQ(c_->GetJob(jobs[0].id()).status().code(), StatusCode::kNotFound);
  Open();  // restart: archive and its request index survive, the bound still holds
  EXPECT_EQ(ArchivedIds().size(), 2u);
  EXPECT_EQ(Submit(1, "t", "req-3").id(), jobs[3].id());
  EXPECT_TRUE(LiveIds().empty());
  v1::Job fresh = Submit(1, "t", "req-0");  // its job left the archive: a new job
  EXPECT_GT(fresh.id(), jobs[3].id());
  EXPECT_EQ(LiveIds(), std::set<std::string>{fresh.id()});
}

TEST_F(RetentionTest, HistoryListFiltersByTenantAndStateAndLimits) {
  opts_.keep_finished_jobs = 0;
  Open();
  AddNode("n0");
  v1::Job a1 = Submit(1, "a"), a2 = Submit(1, "a"), b1 = Submit(1, "b");
  Schedule();
  Finish(a1.id());
  Finish(b1.id());
  ASSERT_TRUE(c_->Cancel(a2.id()).ok());
  Retain();
  EXPECT_EQ(ArchivedIds("a"), (std::set<std::string>{a1.id(), a2.id()}));
  EXPECT_EQ(ArchivedIds("b"), std::set<std::string>{b1.id()});
  v1::ListJobsRequest r;
  r.set_history(true);
  r.set_state("cancelled");
  auto l = c_->ListArchivedJobs(r);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->jobs_size(), 1);
  EXPECT_EQ(l->jobs(0).id(), a2.id());
  r.clear_state();
  r.set_limit(2);  // the newest two
  l = c_->ListArchivedJobs(r);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->jobs_size(), 2);
  EXPECT_EQ(l->jobs(0).id(), a2.id());
  EXPECT_EQ(l->jobs(1).id(), b1.id());
  r.set_limit(-1);
  EXPECT_EQ(c_->ListArchivedJobs(r).status().code(), StatusCode::kInvalidArgument);
}

// Many jobs through several passes (each pass archives at most 1000): the live state holds only
// the kept ones, and every id stays readable.
TEST_F(RetentionTest, BacklogDrainsOverPasses) {
  opts_.keep_finished_jobs = 10;
  Open();
  AddNode("n0");
  std::vector<std::string> ids;
  for (int i = 0; i < 1205; ++i) {
    v1::Job j = Submit(1);
    ASSERT_TRUE(c_->Cancel(j.id()).ok());
    ids.push_back(j.id());
  }
  Retain();
  EXPECT_EQ(LiveIds().size(), 205u);
  Retain();
  EXPECT_EQ(LiveIds().size(), 10u);
  EXPECT_EQ(ArchivedIds().size(), 1000u);  // the history list's default limit
  for (const std::string& id : {ids.front(), ids[600], ids.back()}) {
    EXPECT_EQ(Get(id).state(), "cancelled") << id;
  }
}

}  // namespace
}  // namespace gpool::control
