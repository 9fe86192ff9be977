// End-to-end tests of `gpool sim`: run the built binary (GPOOL_BIN, set by CTest) on tiny clusters
// whose outcome can be worked out by hand, and check fill.json / metrics.json against it and
// against the run's own numbers.
#include <algorithm>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace {

using gpool::clitest::Json;
using gpool::clitest::Result;
using gpool::clitest::Slurp;

class SimCliTest : public gpool::clitest::CliTest {
 protected:
  // Two 8-GPU hosts in one synthetic leaf.
  void SetUp() override {
    CliTest::SetUp();
    Write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\nn1,64000,262144,8,G2\n");
  }
  // The fill numbers of one policy must agree with each other and with the cluster.
  static void CheckConsistent(const std::string& policy, const Json& p, double total_gpus) {
    SCOPED_TRACE(policy);
    EXPECT_EQ(p["total_gpus"].get<double>(), total_gpus);
    double sum = 0, lo = 1e300, hi = -1e300, placed = 0;
    for (const Json& r : p["runs"]) {
      const double u = r["unallocated_gpus"].get<double>();
      EXPECT_NEAR(u + r["allocated_gpus"].get<double>(), total_gpus, 1e-9);
      EXPECT_GE(u, 0);
      EXPECT_FALSE(r["failed_job"].get<std::string>().empty());  // every run ended by a failure
      EXPECT_FALSE(r["hit_max_jobs"].get<bool>());
      sum += u;
      lo = std::min(lo, u);
      hi = std::max(hi, u);
      placed += r["placed_jobs"].get<double>();
    }
    const double n = static_cast<double>(p["runs"].size());
    ASSERT_GT(n, 0);
    EXPECT_NEAR(p["avg_unallocated_gpus"].get<double>(), sum / n, 1e-9);
    EXPECT_EQ(p["min_unallocated_gpus"].get<double>(), lo);
    EXPECT_EQ(p["max_unallocated_gpus"].get<double>(), hi);
    EXPECT_NEAR(p["avg_placed_jobs"].get<double>(), placed / n, 1e-9);
  }
};

// 3-GPU jobs on two 8-GPU hosts: two fit per host, the fifth finds 2 + 2 GPUs and fails, so every
// policy leaves exactly 4 GPUs unallocated after 4 placements, whatever the order.
TEST_F(SimCliTest, FillLeavesTheCrumbsNoJobFits) {
  Write("g3.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib\na,0,100,3,1000,1024\nb,5,100,3,1000,1024\n");
  Json doc = RunJson("sim --trace " + Path("g3.csv") + " --nodes " + Path("nodes.csv") +
                     " --compare all --fill --fill-runs 3 --seed 7 -q -o json --out " + Path("out"));
  EXPECT_EQ(doc["mode"], "fill");
  EXPECT_EQ(doc["runs"], 3);
  // The file says the same as stdout.
  EXPECT_EQ(Json::parse(Slurp(Path("out/fill.json"))), doc);
  ASSERT_EQ(doc["policies"].size(), 5u);
  for (const auto& [name, p] : doc["policies"].items()) {
    CheckConsistent(name, p, 16);
    EXPECT_EQ(p["avg_unallocated_gpus"].get<double>(), 4.0) << name;
    EXPECT_EQ(p["avg_placed_jobs"].get<double>(), 4.0) << name;
    EXPECT_EQ(p["ended_by_preemption"].get<int>(), 0) << name;
    for (const Json& r : p["runs"]) {
      EXPECT_NE(r["failed_job"].get<std::string>().find("3 GPU"), std::string::npos) << r.dump();
    }
  }
  // Seeds follow --seed: 7, 8, 9.
  const Json& runs = doc["policies"]["gpool"]["runs"];
  EXPECT_EQ(runs[0]["seed"], 7);
  EXPECT_EQ(runs[2]["seed"], 9);
}

// Half-GPU jobs: sharing policies pack two per GPU and fill the cluster (32 jobs, nothing left);
// slurm's exclusive GRES gives each a whole GPU and strands half of every GPU it places (16
// jobs, 8 GPUs of capacity unallocated).
TEST_F(SimCliTest, FillShowsExclusiveGresStranding) {
  Write("half.csv", "name,submit_s,run_s,gpus,gpu_milli,cpu_milli,mem_mib\n"
                    "a,0,100,1,500,1000,1024\nb,5,100,1,500,1000,1024\n");
  Json doc = RunJson("sim --trace " + Path("half.csv") + " --nodes " + Path("nodes.csv") +
                     " --compare gpool,slurm --fill -q -o json --out " + Path("out"));
  ASSERT_EQ(doc["policies"].size(), 2u);
  CheckConsistent("gpool", doc["policies"]["gpool"], 16);
  CheckConsistent("slurm", doc["policies"]["slurm"], 16);
  EXPECT_EQ(doc["policies"]["gpool"]["avg_unallocated_gpus"].get<double>(), 0.0);
  EXPECT_EQ(doc["policies"]["gpool"]["avg_placed_jobs"].get<double>(), 32.0);
  EXPECT_EQ(doc["policies"]["slurm"]["avg_unallocated_gpus"].get<double>(), 8.0);
  EXPECT_EQ(doc["policies"]["slurm"]["avg_placed_jobs"].get<double>(), 16.0);
}

// The human table names each policy with the same numbers as fill.json.
TEST_F(SimCliTest, FillTableMatchesTheJson) {
  Result r = Run("sim --trace testdata/sim/openb_pods_sample.csv --nodes "
                 "testdata/sim/openb_nodes_sample.csv --compare gpool,fifo --fill --fill-runs 2 -q --out " +
                 Path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/fill.json")));
  for (const char* name : {"gpool", "fifo"}) {
    const Json& p = doc["policies"][name];
    CheckConsistent(name, p, 88);  // the sample's 21 hosts hold 88 GPUs
    char want[64];
    std::snprintf(want, sizeof want, "%-9s %14.1f", name, p["avg_unallocated_gpus"].get<double>());
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("wrote " + Path("out") + "/fill.json"), std::string::npos) << r.out;
}

TEST_F(SimCliTest, FillBadInputFailsWithAClearMessage) {
  Result r = Run("sim --trace testdata/sim/jobs.csv --nodes " + Path("nodes.csv") +
                 " --fill --fill-runs 0 --out " + Path("out"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--fill-runs"), std::string::npos) << r.err;
}

// --fabric runs the route-based network model on the fabric's routes: computed by gpool's engine,
// or OpenSM's tables from an LFT dump, which give the same schedule when they are the same
// routes. A 3-host jobs file on a 2-level fat-tree of 1-GPU hosts, so rings cross leaves.
TEST_F(SimCliTest, FabricRunsTheRouteModelOnComputedOrDumpedRoutes) {
  const std::string topo = Path("ft.topo"), lfts = Path("ft.lfts");
  ASSERT_EQ(Run("fabric gen fat-tree --levels 2 --radix 4 --out " + topo).code, 0);
  ASSERT_EQ(Run("fabric route " + topo + " --engine minhop --lft-out " + lfts).code, 0);
  Write("jobs.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib,comm\n"
                    "a,0,1000,3,1000,1024,0.5\nb,0,1000,3,1000,1024,0.5\nc,0,1000,2,1000,1024,0.5\n");
  const std::string common = "sim --trace " + Path("jobs.csv") + " --fabric " + topo +
                             " --gpus-per-host 1 --policy fifo -q -o json --out " + Path("out");
  Json routed = RunJson(common + " --routing minhop");
  EXPECT_NE(routed["cluster"].get<std::string>().find("route-based network model (minhop routes)"),
            std::string::npos) << routed["cluster"];
  Json dumped = RunJson(common + " --lfts " + lfts);
  EXPECT_NE(dumped["cluster"].get<std::string>().find("(opensm routes)"), std::string::npos)
      << dumped["cluster"];
  Json pipes = RunJson(common + " --net-model aggregate");
  EXPECT_NE(pipes["cluster"].get<std::string>().find("aggregate-pipe"), std::string::npos);
  auto metric = [](const Json& doc, const char* key) { return doc["policies"]["fifo"][key].get<double>(); };
  ASSERT_TRUE(routed["policies"].contains("fifo")) << routed.dump();
  EXPECT_EQ(metric(routed, "finished"), 3);
  // Same routes, same result.
  EXPECT_EQ(metric(routed, "avg_jct_s"), metric(dumped, "avg_jct_s"));
  EXPECT_EQ(metric(routed, "avg_slowdown"), metric(dumped, "avg_slowdown"));
  EXPECT_GE(metric(routed, "avg_slowdown"), 1.0);
  EXPECT_EQ(metric(pipes, "finished"), 3);

  Result r = Run("sim --trace " + Path("jobs.csv") + " --nodes " + Path("nodes.csv") +
                 " --net-model route --out " + Path("out"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--net-model route needs a fabric"), std::string::npos) << r.err;
  r = Run(common + " --net-model fluid");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--net-model 'fluid'"), std::string::npos) << r.err;
  Write("bad.lfts", "Unicast lids [0x0-0x3] of switch Lid 99 guid 0xdead (nosuch):\n");
  r = Run(common + " --lfts " + Path("bad.lfts"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("bad.lfts"), std::string::npos) << r.err;
}

// --queues: per-tenant quotas reach the run (entitlement = quota share in metrics.json), and bad
// files fail naming file:line and the key, or the tenant without a queue.
TEST_F(SimCliTest, QueuesFileSetsQuotasAndEntitlement) {
  Write("two.csv", "name,submit_s,run_s,gpus,tenant\na1,0,100,4,a\nb1,0,100,4,b\na2,0,100,4,a\n");
  Write("q.yaml", "queues:\n  a: {guaranteed_gpus: 12, max_running_jobs: 1}\n  b: {guaranteed_gpus: 4}\n");
  const std::string common = "sim --trace " + Path("two.csv") + " --nodes " + Path("nodes.csv") +
                             " --policy gpool -q -o json --out " + Path("out");
  Json doc = RunJson(common + " --queues " + Path("q.yaml"));
  const Json& tenants = doc["policies"]["gpool"]["tenants"];
  ASSERT_EQ(tenants.size(), 2u) << doc.dump();
  EXPECT_EQ(tenants[0]["tenant"], "a");
  EXPECT_DOUBLE_EQ(tenants[0]["entitlement"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(tenants[1]["entitlement"].get<double>(), 0.25);
  EXPECT_NE(doc["command"].get<std::string>().find("--queues"), std::string::npos);
  // max_running_jobs 1: a's second job (job 2) starts when its first ends, though 4 of the 16
  // GPUs are free (jobs.csv: policy,job,tenant,gpus,gpu_milli,submit_s,start_s,...).
  const std::string jobs = Slurp(Path("out/jobs.csv"));
  EXPECT_NE(jobs.find("\ngpool,2,0,4,1000,0.000,100.000,"), std::string::npos) << jobs;
  Json eq = RunJson(common);
  EXPECT_DOUBLE_EQ(eq["policies"]["gpool"]["tenants"][0]["entitlement"].get<double>(), 0.5);
  EXPECT_NE(Slurp(Path("out/jobs.csv")).find("\ngpool,2,0,4,1000,0.000,0.000,"), std::string::npos);

  Write("bad.yaml", "queues:\n  a:\n    weight: -1\n");
  Result r = Run(common + " --queues " + Path("bad.yaml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("bad.yaml:3: weight: must be > 0"), std::string::npos) << r.err;
  Write("missing.yaml", "queues:\n  a: {}\n");
  r = Run(common + " --queues " + Path("missing.yaml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("tenant 'b'"), std::string::npos) << r.err;
  Write("over.yaml", "queues:\n  a: {guaranteed_gpus: 12}\n  b: {guaranteed_gpus: 8}\n");
  r = Run(common + " --queues " + Path("over.yaml"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("more than the cluster's 16"), std::string::npos) << r.err;
}

}  // namespace
