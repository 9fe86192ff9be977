#include "sim/queues.h"

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/file.h"
#include "sim/baselines.h"
#include "sim/engine.h"
#include "sim/metrics.h"
#include "sim/test_clusters.h"
#include "sim/test_util.h"
#include "sim/workload_gen.h"

namespace gpool::sim {
namespace {

using test::Job;
using test::OneLeaf;

Workload TwoTenants(int jobs_each, double run_s = 1000) {
  Workload w;
  for (int i = 0; i < jobs_each; ++i) {
    for (const char* t : {"team-a", "team-b"}) {
      SimJob j = Job(0, run_s, 8);
      j.tenant = t;
      j.name = fmt::format("{}-{}", t, i);
      w.jobs.push_back(j);
    }
  }
  w.Finalize();
  return w;
}

StatusOr<TenantQueues> Queues(std::string_view yaml, const Workload& w, const SimCluster& c) {
  GPOOL_ASSIGN_OR_RETURN(QueueConfig cfg, ParseQueueConfig(yaml, "q.yaml"));
  return MakeConfiguredQueues(cfg, w, ToClusterSpec(c));
}

void ExpectError(const Status& s, std::string_view want) {
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << want;
  EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
}

TEST(QueueConfig, ParsesEveryKey) {
  auto cfg = ParseQueueConfig(
      "queues:\n"
      "  team-a:\n"
      "    guaranteed_gpus: 16\n"
      "    guaranteed_domains: [l1, p1]\n"
      "    weight: 2.5\n"
      "    max_gpus: 40\n"
      "    max_running_jobs: 3\n"
      "  team-b: {}\n"
      "default: {weight: 0.5, max_running_jobs: 1}\n",
      "q.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ASSERT_EQ(cfg->queues.size(), 2u);
  const QueueEntry& a = cfg->queues[0];
  EXPECT_EQ(a.tenant, "team-a");
  EXPECT_EQ(a.where, "q.yaml:2");
  EXPECT_EQ(a.guaranteed_gpus, 16);
  EXPECT_EQ(a.guaranteed_domains, (std::vector<std::string>{"l1", "p1"}));
  EXPECT_DOUBLE_EQ(a.weight, 2.5);
  EXPECT_EQ(a.max_gpus, 40);
  EXPECT_EQ(a.max_running_jobs, 3);
  EXPECT_EQ(cfg->queues[1].guaranteed_gpus, 0);
  EXPECT_EQ(cfg->queues[1].max_gpus, -1);
  ASSERT_TRUE(cfg->default_queue.has_value());
  EXPECT_DOUBLE_EQ(cfg->default_queue->weight, 0.5);

  // Quotas: team-a 16 + leaf l1 (16) + pod p1 (32) of TestTwoPodTree's 64 GPUs.
  SimCluster c = TestTwoPodTree();
  Workload w = TwoTenants(1);
  w.jobs[0].tenant = "team-c";  // not listed: gets the default
  auto q = MakeConfiguredQueues(*cfg, w, ToClusterSpec(c));
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->tenants, (std::vector<std::string>{"team-a", "team-b", "team-c"}));
  EXPECT_EQ(q->queues[0].guaranteed_domains.size(), 2u);
  EXPECT_EQ(q->queues[2].max_running_jobs, 1);
  EXPECT_DOUBLE_EQ(q->queues[2].weight, 0.5);
  // Entitlement: quota over all quotas (64 of 64 to team-a).
  EXPECT_DOUBLE_EQ(q->entitlement[0], 1.0);
  EXPECT_DOUBLE_EQ(q->entitlement[1], 0.0);
}

TEST(QueueConfig, EntitlementIsQuotaShareOrWeightShare) {
  SimCluster c = OneLeaf(4);  // 32 GPUs
  Workload w = TwoTenants(1);
  auto q = Queues("queues: {team-a: {guaranteed_gpus: 6}, team-b: {guaranteed_gpus: 2}}\n", w, c);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_DOUBLE_EQ(q->entitlement[0], 0.75);
  EXPECT_DOUBLE_EQ(q->entitlement[1], 0.25);
  auto by_weight = Queues("queues: {team-a: {weight: 3}, team-b: {}}\n", w, c);
  ASSERT_TRUE(by_weight.ok());
  EXPECT_DOUBLE_EQ(by_weight->entitlement[0], 0.75);
}

TEST(QueueConfig, ErrorsNameFileLineAndKey) {
  auto err = [](std::string_view yaml) { return ParseQueueConfig(yaml, "q.yaml").status(); };
  ExpectError(err("queues:\n  a:\n    weight: 0\n"), "q.yaml:3: weight: must be > 0");
  ExpectError(err("queues:\n  a:\n    guaranteed_gpus: lots\n"), "q.yaml:3: guaranteed_gpus: want a whole number");
  ExpectError(err("queues:\n  a:\n    guaranteed_gpus: -4\n"), "q.yaml:3: guaranteed_gpus: must be >= 0");
  ExpectError(err("queues:\n  a:\n    max_gpus: -2\n"), "q.yaml:3: max_gpus");
  ExpectError(err("queues:\n  a:\n    max_running_jobs: x\n"), "q.yaml:3: max_running_jobs");
  ExpectError(err("queues:\n  a:\n    guaranteed_domains: l0\n"), "q.yaml:3: guaranteed_domains: want a list");
  ExpectError(err("queues:\n  a:\n    wieght: 2\n"), "q.yaml:3: wieght: unknown key");
  ExpectError(err("queues:\n  a: {}\n  a: {}\n"), "q.yaml:3: queues: tenant 'a' listed twice");
  ExpectError(err("queue:\n  a: {}\n"), "q.yaml:1: queue: unknown key");
  ExpectError(err("default: {}\n"), "missing key 'queues'");
  ExpectError(err("queues: [a, b]\n"), "q.yaml:1: queues: want a mapping");
  ExpectError(err("default:\n  guaranteed_domains: [l0]\n"), "default.guaranteed_domains");
  ExpectError(err("queues: {a: {weight: [1}\n"), "q.yaml:1:");  // not YAML
}

TEST(QueueConfig, ChecksAgainstWorkloadAndCluster) {
  SimCluster c = TestTwoPodTree();  // 64 GPUs; leaves l0..l3 of 16, pods p0, p1 of 32
  Workload w = TwoTenants(1);
  ExpectError(Queues("queues: {team-a: {}}\n", w, c).status(),
              "q.yaml: tenant 'team-b' (first job at test) has no queue");
  ExpectError(Queues("queues: {team-a: {guaranteed_gpus: 40}, team-b: {guaranteed_gpus: 30}}\n", w, c).status(),
              "guaranteed quotas add up to 70 GPUs (team-a 40, team-b 30), more than the cluster's 64");
  ExpectError(Queues("queues: {team-a: {guaranteed_domains: [p0]}, team-b: {guaranteed_gpus: 33}}\n", w, c).status(),
              "add up to 65 GPUs");
  ExpectError(Queues("queues:\n  team-a: {guaranteed_domains: [l9]}\n  team-b: {}\n", w, c).status(),
              "q.yaml:2: queue 'team-a': guaranteed_domains: the cluster has no leaf or pod 'l9'");
  ExpectError(Queues("queues:\n  team-a: {guaranteed_domains: [p0]}\n  team-b: {guaranteed_domains: [l1]}\n", w, c).status(),
              "q.yaml:3: queue 'team-b': guaranteed_domains: 'l1' overlaps leaf 'l1', already guaranteed to queue 'team-a'");
  EXPECT_TRUE(Queues("queues: {team-a: {guaranteed_domains: [p0]}, team-b: {guaranteed_domains: [l2]}}\n", w, c).ok());
}

// The documented example: synthetic tenants on the Lingjun sample, and a run that uses it.
TEST(QueueConfig, ExampleFileRunsOnTheLingjunSample) {
  auto cfg = ReadQueueConfig("testdata/sim/queues.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto c = ParseClosCsv(*ReadFile("testdata/sim/lingjun_sample.csv"), "lingjun", {});
  ASSERT_TRUE(c.ok());
  SyntheticOptions o;
  o.jobs = 200;
  o.max_gpus = 64;
  o.load = 1.2;
  o.seed = 5;
  auto w = GenerateSynthetic(o, *ReadRuntimes(*ReadFile("testdata/sim/philly_runtime_sample.csv"), "philly"),
                             c->total_gpus());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto q = MakeConfiguredQueues(*cfg, *w, ToClusterSpec(*c));
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->tenants, (std::vector<std::string>{"tenant-0", "tenant-1", "tenant-2", "tenant-3"}));
  EXPECT_EQ(q->queues[0].guaranteed_domains.size(), 1u);
  EXPECT_EQ(q->queues[2].max_running_jobs, 20);
  EXPECT_EQ(q->queues[3].guaranteed_gpus, 16);  // the default entry
  EXPECT_EQ(q->queues[3].max_gpus, 64);
  EXPECT_DOUBLE_EQ(q->entitlement[0], 144.0 / 272);
  EXPECT_DOUBLE_EQ(q->entitlement[3], 16.0 / 272);

  auto p = MakePolicy("gpool", {});
  ASSERT_TRUE(p.ok());
  EngineOptions eo;
  eo.queues = &*q;
  auto r = RunSimulation(*c, *w, **p, eo);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->unfinished, 0);
  EXPECT_EQ(r->tenant_entitlement, q->entitlement);
}

StatusOr<RunResult> RunGpool(const SimCluster& c, const Workload& w, const TenantQueues* q) {
  GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy("gpool", {}));
  EngineOptions o;
  o.queues = q;
  return RunSimulation(c, w, *p, o);
}

// Jobs of each tenant that started at time 0.
std::vector<int> StartedAtZero(const RunResult& r) {
  std::vector<int> n(r.tenants.size(), 0);
  for (const auto& j : r.jobs) {
    if (j.start_s == 0) ++n[j.tenant];
  }
  return n;
}

// Jobs of each tenant finished by sim time t.
std::vector<int> DoneBy(const RunResult& r, double t) {
  std::vector<int> n(r.tenants.size(), 0);
  for (const auto& j : r.jobs) {
    if (j.finish_s >= 0 && j.finish_s <= t) ++n[j.tenant];
  }
  return n;
}

// Each tenant submits one 8-GPU job a second for 8 s on 32 GPUs, so both keep a backlog. With
// equal quotas (16 + 16) each runs two at a time. With quotas of 24 and 8, team-a reclaims
// team-b's borrowed GPUs as soon as team-b is over its quota and runs three at a time to
// team-b's one: more of its jobs are done while both wait, and only team-b is preempted.
TEST(EngineQueues, BiggerQuotaGetsBiggerShare) {
  SimCluster c = OneLeaf(4);
  Workload w = TwoTenants(8);
  for (auto& j : w.jobs) j.submit_s = static_cast<double>(j.id / 2);
  auto equal = RunGpool(c, w, nullptr);
  ASSERT_TRUE(equal.ok()) << equal.status().ToString();
  EXPECT_EQ(equal->preemptions, 0);
  EXPECT_EQ(DoneBy(*equal, 3001), (std::vector<int>{6, 6}));
  EXPECT_DOUBLE_EQ(equal->tenant_entitlement[0], 0.5);

  auto q = Queues("queues: {team-a: {guaranteed_gpus: 24}, team-b: {guaranteed_gpus: 8}}\n", w, c);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto r = RunGpool(c, w, &*q);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->unfinished, 0);
  EXPECT_GE(r->preemptions, 1);
  for (const auto& j : r->jobs) {
    if (j.tenant == 0) {
      EXPECT_EQ(j.preemptions, 0);
    }
  }
  // By 3,001 s team-a has run all eight (three at a time, its 24 GPUs, from 2 s on: a job
  // within its guarantee goes first), team-b two (one at a time, its 8, from 2 s on: the job
  // preempted at 2 s restarts at 1,000 s and ends at 2,029 s, the next ends at 3,002 s).
  EXPECT_EQ(DoneBy(*r, 3001), (std::vector<int>{8, 2}));
  Metrics m = ComputeMetrics(*r);
  ASSERT_EQ(m.tenants.size(), 2u);
  EXPECT_DOUBLE_EQ(m.tenants[0].entitlement, 0.75);
  EXPECT_DOUBLE_EQ(m.tenants[1].entitlement, 0.25);
}

TEST(EngineQueues, MaxRunningJobsIsRespected) {
  SimCluster c = OneLeaf(5);
  Workload w = TwoTenants(4, 100);
  auto q = Queues("queues: {team-a: {max_running_jobs: 1}, team-b: {}}\n", w, c);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto r = RunGpool(c, w, &*q);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->unfinished, 0);
  std::vector<std::pair<double, double>> a;
  for (const auto& j : r->jobs) {
    ASSERT_GE(j.finish_s, 0);
    if (j.tenant == 0) {
      EXPECT_EQ(j.preemptions, 0);
      a.emplace_back(j.start_s, j.finish_s);
    }
  }
  ASSERT_EQ(a.size(), 4u);
  std::sort(a.begin(), a.end());
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i].first, a[i - 1].second) << "job " << i;
  // team-b has no limit: its four jobs run at once (the 40 GPUs have room for five).
  EXPECT_EQ(StartedAtZero(*r)[1], 4);
}

}  // namespace
}  // namespace gpool::sim
