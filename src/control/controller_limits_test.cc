// What a job may ask and why it waits, end to end through the controller's API: tenant
// isolation (a tenant's priority never buys GPUs inside another tenant's guarantee), the
// admin's per-tenant cap (refused at submit when it could never fit, held back otherwise),
// every pending job's reason, and GPU fractions at the scheduler's unit. In process, on a real
// SQLite store; nodes register as the hollow agent's do (RegisterNode); time is a ManualClock.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "control/controller.h"
#include "control/controller_test_util.h"
#include "control/job_spec.h"
#include "control/tenant_limits.h"

namespace gpool::control {
namespace {

class LimitsTest : public ControllerFixture {
 protected:
  LimitsTest() : ControllerFixture("controller_limits_test") {}

  // `n` nodes of 8 H100s named n0..n(n-1), as `gpool agent --hollow n` registers them.
  void AddNodes(int n) {
    nodes_ = n;
    for (int i = 0; i < n; ++i) {
      v1::RegisterNodeRequest r;
      r.mutable_node()->set_name("n" + std::to_string(i));
      r.mutable_node()->set_gpus(8);
      r.mutable_node()->set_gpu_model("H100");
      r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
      r.mutable_node()->set_cpu_milli(64000);
      r.mutable_node()->set_memory_bytes(512ull << 30);
      auto s = c_->RegisterNode(r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
    }
  }
  StatusOr<v1::Job> TrySubmit(const std::string& tenant, int gpus, int priority = 0) {
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    r.set_priority(priority);
    r.set_duration_s(600);
    return c_->Submit(r);
  }
  std::string Submit(const std::string& tenant, int gpus, int priority = 0) {
    auto j = TrySubmit(tenant, gpus, priority);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? j->id() : "";
  }
  // One second, a heartbeat from every node (as the hollow agent sends them), one cycle.
  void Schedule(int cycles = 1) {
    for (int i = 0; i < cycles; ++i) {
      clock_.AdvanceSeconds(1);
      for (int n = 0; n < nodes_; ++n) {
        v1::HeartbeatRequest hb;
        hb.set_node("n" + std::to_string(n));
        auto r = c_->Heartbeat(hb);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
      }
      Status s = c_->ScheduleOnce();
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  // GPUs held by each tenant's running jobs.
  std::map<std::string, int> RunningGpus() {
    std::map<std::string, int> gpus;
    const v1::ListJobsResponse all = c_->ListJobs({});
    for (const auto& j : all.jobs()) {
      if (j.state() == "running") gpus[j.tenant()] += j.gpus();
    }
    return gpus;
  }
  v1::Job Get(const std::string& id) {
    auto j = c_->GetJob(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }

  int nodes_ = 0;
};

// The repro: quotas a=16 and b=16 on 8 nodes (64 GPUs); b's 8 jobs of 8 GPUs at
// priority 0 run, then a submits 8 more at priority 1000. a may take back its own guarantee
// (2 jobs) by reclaim from b, which borrowed 48; its priority buys nothing more, and b keeps
// everything beyond a's 16 (before the fix a's priority preempted all of b's jobs: a 64, b 0).
TEST_F(LimitsTest, PriorityDoesNotBuyGpusInsideAnotherTenantsGuarantee) {
  opts_.tenant_quotas = {{"a", 16}, {"b", 16}};
  Open();
  AddNodes(8);
  for (int i = 0; i < 8; ++i) Submit("b", 8, 0);
  Schedule();
  ASSERT_EQ(RunningGpus()["b"], 64);
  std::vector<std::string> a_jobs;
  for (int i = 0; i < 8; ++i) a_jobs.push_back(Submit("a", 8, 1000));
  Schedule(5);
  std::map<std::string, int> gpus = RunningGpus();
  EXPECT_EQ(gpus["a"], 16) << "a's guarantee, reclaimed; no more for its priority";
  EXPECT_EQ(gpus["b"], 48) << "b keeps what a's guarantee does not claim";
  int reclaimed = 0;
  const v1::ListJobsResponse all = c_->ListJobs({});
  for (const auto& j : all.jobs()) {
    if (j.tenant() != "b" || j.preemptions() == 0) continue;
    ++reclaimed;
    EXPECT_NE(j.message().find("preempted (reclaim)"), std::string::npos) << j.message();
  }
  EXPECT_EQ(reclaimed, 2);
  // a's jobs beyond its guarantee wait, and say so: the first holds the reservation (nodes are
  // kept for it as b's jobs end), the others wait for idle GPUs.
  int past = 0, reserved = 0;
  for (const auto& id : a_jobs) {
    v1::Job j = Get(id);
    if (j.state() != "pending") continue;
    if (j.pending_reason().find("next to start") != std::string::npos) {
      ++reserved;
    } else {
      EXPECT_NE(j.pending_reason().find("tenant a past its guarantee of 16 GPUs"), std::string::npos)
          << j.pending_reason();
      ++past;
    }
  }
  EXPECT_EQ(reserved, 1);
  EXPECT_EQ(past, 5);
}

// Both tenants' jobs arrive before a cycle: a's priority 1000 does not order them ahead of b's
// priority 0. Each tenant's guarantee is served first, then fair share splits the rest evenly
// (equal weights, equal demand). Before the fix a's 8 jobs went first and took all 64 GPUs.
TEST_F(LimitsTest, PriorityDoesNotOrderJobsAcrossTenants) {
  opts_.tenant_quotas = {{"a", 16}, {"b", 16}};
  opts_.bind_at_submit = false;  // all 16 queued before one cycle (else b's first 8 bind at submit)
  Open();
  AddNodes(8);
  for (int i = 0; i < 8; ++i) Submit("b", 8, 0);
  for (int i = 0; i < 8; ++i) Submit("a", 8, 1000);
  Schedule(3);
  std::map<std::string, int> gpus = RunningGpus();
  EXPECT_EQ(gpus["a"], 32);
  EXPECT_EQ(gpus["b"], 32);
}

// The admin's cap (--max-gpus): a job asking more than the tenant may ever hold is refused at
// submit, naming the cap; jobs within it wait while the tenant's running jobs fill it, saying
// so, though GPUs are free; other tenants are not held back.
TEST_F(LimitsTest, TenantCapRefusesWhatCanNeverFitAndHoldsBackTheRest) {
  opts_.tenant_quotas = {{"a", 8}};
  opts_.tenant_max_gpus = {{"a", 16}};
  Open();
  AddNodes(8);
  auto big = TrySubmit("a", 24);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("tenant a may ever hold"), std::string::npos)
      << big.status().message();
  EXPECT_NE(big.status().message().find("16"), std::string::npos) << big.status().message();
  std::string a1 = Submit("a", 8), a2 = Submit("a", 8), a3 = Submit("a", 8);
  std::string b1 = Submit("b", 32);
  Schedule();
  EXPECT_EQ(RunningGpus()["a"], 16);
  EXPECT_EQ(Get(b1).state(), "running");
  v1::Job held = Get(a3);
  ASSERT_EQ(held.state(), "pending");
  EXPECT_NE(held.pending_reason().find("cap of 16 GPUs"), std::string::npos)
      << held.pending_reason();
  // The tenant list shows the cap; -1 where there is none.
  const v1::ListTenantsResponse tenants = c_->ListTenants();
  for (const auto& t : tenants.tenants()) {
    EXPECT_EQ(t.max_gpus(), t.name() == "a" ? 16 : -1) << t.name();
  }
  // A cap below the tenant's own guarantee is refused at start, naming both flags.
  opts_.tenant_max_gpus = {{"a", 4}};
  auto bad = Controller::Open(opts_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--max-gpus a=4"), std::string::npos)
      << bad.status().message();
}

// Every pending job says why it waits, in the job record (GetJob, ListJobs, /api/state): the
// scheduler's reason, stored by the controller, cleared when the job binds. A steady queue
// rewrites nothing (no job events from a cycle that changed no reason). Before the fix a
// pending job had no reason at all.
TEST_F(LimitsTest, PendingJobsSayWhyTheyWait) {
  opts_.tenant_quotas = {{"prod", 16}};
  Open();
  AddNodes(4);  // 32 GPUs
  std::string huge = Submit("research", 100000);  // may fit once more nodes register: kept
  std::string fill = Submit("research", 24);
  Schedule();
  ASSERT_EQ(Get(fill).state(), "running");
  std::string over = Submit("prod", 24);      // first blocked: holds the reservation
  std::string within = Submit("prod", 8);     // fits in the 8 free GPUs
  std::string after = Submit("research", 8);  // no guarantee, nothing free once prod has 8
  Schedule();
  EXPECT_EQ(Get(within).state(), "running");
  EXPECT_TRUE(Get(within).pending_reason().empty()) << "cleared on bind";

  v1::Job h = Get(huge);
  ASSERT_EQ(h.state(), "pending");
  EXPECT_NE(h.pending_reason().find("asks 100000 GPUs; the cluster has 32"), std::string::npos)
      << h.pending_reason();
  v1::Job o = Get(over);
  ASSERT_EQ(o.state(), "pending");
  EXPECT_NE(o.pending_reason().find("next to start: nodes are held for its 24 GPUs"),
            std::string::npos)
      << o.pending_reason();
  v1::Job a = Get(after);
  ASSERT_EQ(a.state(), "pending");
  EXPECT_NE(a.pending_reason().find("tenant research has no guarantee"), std::string::npos)
      << a.pending_reason();
  bool listed = false;
  const v1::ListJobsResponse all = c_->ListJobs({});
  for (const auto& j : all.jobs()) {
    if (j.id() == over) listed = j.pending_reason() == o.pending_reason();
  }
  EXPECT_TRUE(listed);
  EXPECT_NE(c_->StateJson().find("\"pending_reason\""), std::string::npos);

  // Nothing changed: another cycle writes no job.
  uint64_t cursor = 0;
  (void)c_->SnapshotJobs({}, &cursor);
  Schedule();
  auto events = c_->WaitJobEvents({}, &cursor, std::chrono::milliseconds(0));
  ASSERT_TRUE(events.ok()) << events.status().ToString();
  EXPECT_TRUE(events->empty()) << events->size() << " jobs rewritten, first " << (*events)[0].id();
}

TEST(TenantLimits, FlagsParseAndNameTheirErrors) {
  TenantGpus caps;
  ASSERT_TRUE(ParseTenantGpus("--max-gpus", {"a=16", "b=0"}, &caps).ok());
  EXPECT_EQ(caps, (TenantGpus{{"a", 16}, {"b", 0}}));
  for (const char* bad : {"a", "=4", "a=", "a=x", "a=-1", "a=1.5", "a b=4", "a}\n=4"}) {
    Status s = ParseTenantGpus("--max-gpus", {bad}, &caps);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--max-gpus"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(ValidateTenantLimits({{"a", 8}}, {{"a", 8}}).ok());
  EXPECT_FALSE(ValidateTenantLimits({{"a", 8}}, {{"a", 7}}).ok());
  EXPECT_FALSE(ValidateTenantLimits({{"a", -1}}, {}).ok());
}

// Fractions at the scheduler's unit, one milli-GPU: below it (0.0004 became a whole GPU: it
// rounded to gpu_milli 0, which the API reads as whole GPUs), above 0.999 and finer than the
// unit are refused with the unit named; exact multiples pass.
TEST(GpuFraction, BelowOrFinerThanTheUnitIsRefused) {
  EXPECT_EQ(*GpuFractionToMilli("--gpu-fraction", 0.25), 250);
  EXPECT_EQ(*GpuFractionToMilli("--gpu-fraction", 0.001), 1);
  EXPECT_EQ(*GpuFractionToMilli("--gpu-fraction", 0.999), 999);
  EXPECT_EQ(*GpuFractionToMilli("--gpu-fraction", 0.3), 300);
  for (double bad : {0.0004, 0.0009, 0.9996, 0.2504, 0.0, 1.0, -0.5}) {
    auto m = GpuFractionToMilli("--gpu-fraction", bad);
    ASSERT_FALSE(m.ok()) << bad << " gave " << *m;
    EXPECT_NE(m.status().message().find("--gpu-fraction"), std::string::npos) << m.status().message();
  }
  auto low = GpuFractionToMilli("--gpu-fraction", 0.0004);
  EXPECT_NE(low.status().message().find("below the unit of 0.001 GPU"), std::string::npos)
      << low.status().message();
}

TEST(GpuFraction, YamlSpecRefusesWhatIsNotAFraction) {
  auto ok = ParseJobSpecYaml("gpu_fraction: 0.125\n", "j.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpu_milli(), 125);
  for (const char* text : {"gpu_fraction: 0.0004\n", "gpu_fraction: 0.2504\n", "gpu_milli: 0\n",
                           "gpu_milli: 1000\n"}) {
    auto r = ParseJobSpecYaml(text, "j.yaml");
    ASSERT_FALSE(r.ok()) << text << " gave gpu_milli " << r->gpu_milli() << ", gpus " << r->gpus();
    EXPECT_NE(r.status().message().find("j.yaml:1: gpu_"), std::string::npos) << r.status().message();
  }
  auto low = ParseJobSpecYaml("gpu_fraction: 0.0004\n", "j.yaml");
  EXPECT_NE(low.status().message().find("below the unit"), std::string::npos)
      << low.status().message();
}

}  // namespace
}  // namespace gpool::control
