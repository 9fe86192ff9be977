// End-to-end tests of `gpool sim`: run the built binary (GPOOL_BIN, set by CTest) on tiny clusters
// whose outcome can be worked out by hand, and check fill.json / metrics.json against it and
// against the run's own numbers.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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

// The first-failure variant (--fill-until-first-failure).
// 3-GPU jobs on two 8-GPU hosts: two fit per host, the fifth finds 2 + 2 GPUs and fails, so every
// policy leaves exactly 4 GPUs unallocated after 4 placements, whatever the order.
TEST_F(SimCliTest, FillLeavesTheCrumbsNoJobFits) {
  Write("g3.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib\na,0,100,3,1000,1024\nb,5,100,3,1000,1024\n");
  Json doc = RunJson("sim --trace " + Path("g3.csv") + " --nodes " + Path("nodes.csv") +
                     " --compare all --fill --fill-until-first-failure --fill-runs 3 --seed 7 -q -o json --out " + Path("out"));
  EXPECT_EQ(doc["mode"], "fill-until-first-failure");
  EXPECT_EQ(doc["runs"], 3);
  // The file says the same as stdout.
  EXPECT_EQ(Json::parse(Slurp(Path("out/fill.json"))), doc);
  ASSERT_EQ(doc["policies"].size(), 8u);  // gpool, the FGD paper's six, gpool+remote
  for (const auto& [name, p] : doc["policies"].items()) {
    CheckConsistent(name, p, 16);
    // gpool+remote gathers a fifth job from the 2 + 2 GPUs left (remote attachment); the sixth
    // finds one GPU.
    const bool remote = name == "gpool+remote";
    EXPECT_EQ(p["avg_unallocated_gpus"].get<double>(), remote ? 1.0 : 4.0) << name;
    EXPECT_EQ(p["avg_placed_jobs"].get<double>(), remote ? 5.0 : 4.0) << name;
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
                     " --compare gpool,slurm --fill --fill-until-first-failure -q -o json --out " + Path("out"));
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
                 "testdata/sim/openb_nodes_sample.csv --compare gpool,fifo --fill --fill-until-first-failure "
                 "--fill-runs 2 -q --out " +
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
  // Nothing is dropped silently: the pod that never ran (skipped by the reader) and the two
  // CPU-only pods (left out of the fill) are counted in fill.json and the table, even with -q.
  ASSERT_EQ(doc["skipped_rows"].size(), 2u) << doc["skipped_rows"].dump();
  EXPECT_EQ(doc["skipped_rows"][0]["reason"], "pod never scheduled in production (no scheduled_time)");
  EXPECT_EQ(doc["skipped_rows"][0]["count"], 1);
  EXPECT_EQ(doc["skipped_rows"][0]["example"], "testdata/sim/openb_pods_sample.csv:42");
  EXPECT_EQ(doc["skipped_rows"][1]["reason"], "CPU-only (takes no GPU)");
  EXPECT_EQ(doc["skipped_rows"][1]["count"], 2);
  EXPECT_EQ(doc["skipped_rows"][1]["example"], "testdata/sim/openb_pods_sample.csv:7");
  EXPECT_NE(r.out.find("skipped 2 rows: CPU-only (takes no GPU) (first at testdata/sim/openb_pods_sample.csv:7)"),
            std::string::npos) << r.out;
  // -q: no progress (nor anything else) on stderr.
  EXPECT_EQ(r.err, "");
}

// FGD's method (the default --fill) on a pod list without timestamps: 3-GPU pods and a CPU-only
// pod. Copies of the 3-GPU pod bring the request to 21 GPUs (7 pods; 1.3 x 16 = 20.8, checked
// per GPU as the artifact does); two fit per host, so after 12 GPUs every later 3-GPU pod fails
// and the run goes on. The pods arrive at 19, 38, 56, 75, 94, 112 and 131% of the GPUs: none
// at 99..101%, so the figure at 100% is undefined, printed so and null in fill.json.
TEST_F(SimCliTest, FillFollowsFgdsMethodOnAPodList) {
  Write("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,3,1000\np1,1000,1024,0,0\n");
  Result r = Run("sim --trace " + Path("pods.csv") + " --nodes " + Path("nodes.csv") +
                 " --compare all --fill -q --out " + Path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/fill.json")));
  EXPECT_EQ(doc["mode"], "fill");
  EXPECT_EQ(doc["runs"], 10);  // FGD's 10 seeds, 42..51
  EXPECT_EQ(doc["load_ratio"], 1.3);
  ASSERT_EQ(doc["policies"].size(), 8u);
  for (const char* name : {"gpool", "random", "dotprod", "clustering", "packing", "bestfit", "fgd"}) {
    SCOPED_TRACE(name);
    const Json& p = doc["policies"][name];
    EXPECT_TRUE(p["avg_unallocated_gpus"].is_null());
    ASSERT_EQ(p["runs"].size(), 10u);
    EXPECT_EQ(p["runs"][0]["seed"], 42);
    EXPECT_EQ(p["runs"][9]["seed"], 51);
    for (const Json& run : p["runs"]) {
      // Every pod of the list (the CPU-only one too) plus the copies; the CPU-only pod and
      // copies of it place, and 3 of the 7 three-GPU pods fail.
      EXPECT_EQ(run["submitted_pods"].get<int>(), 2 + run["copies"].get<int>());
      EXPECT_EQ(run["failed_gpu_pods"], 3);
      EXPECT_EQ(run["allocated_gpus_at_end"].get<double>(), 12.0);
    }
    const Json& curve = p["curve"];
    ASSERT_EQ(curve["arrived_pct"].size(), 131u);
    EXPECT_DOUBLE_EQ(curve["unallocated_gpus"][75].get<double>(), 4.0);   // 12 of 16 allocated
    EXPECT_DOUBLE_EQ(curve["unallocated_gpus"][112].get<double>(), 4.0);  // the run went on
    EXPECT_TRUE(curve["unallocated_gpus"][100].is_null());
  }
  EXPECT_NE(r.out.find("undefined"), std::string::npos) << r.out;
  // gpool+remote: the 2 GPUs left on each host make one more 3-GPU pod, gathered from both hosts
  // (remote GPUs, not stranded ones: both hosts had the CPU for it).
  const Json& remote = doc["policies"]["gpool+remote"];
  ASSERT_EQ(remote["runs"].size(), 10u);
  for (const Json& run : remote["runs"]) {
    EXPECT_EQ(run["failed_gpu_pods"], 2);
    EXPECT_EQ(run["allocated_gpus_at_end"].get<double>(), 15.0);
    EXPECT_EQ(run["remote_pods"], 1);
  }
  EXPECT_EQ(remote["remote_attach"]["source"], "pooled");
  EXPECT_TRUE(remote["remote_attach"]["avg_recovered_gpus"].is_null());  // 100% undefined
}

// 1-GPU pods: the 16th arrives at exactly 100% and fills the cluster; the table names each
// policy with fill.json's figure.
TEST_F(SimCliTest, FillTableShowsTheFigureAt100Percent) {
  Write("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1024,1,1000,G2\n");
  Result r = Run("sim --trace " + Path("pods.csv") + " --nodes " + Path("nodes.csv") +
                 " --compare gpool,fgd,bestfit --fill --fill-runs 2 -q --out " + Path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/fill.json")));
  for (const char* name : {"gpool", "fgd", "bestfit"}) {
    EXPECT_EQ(doc["policies"][name]["avg_unallocated_gpus"].get<double>(), 0.0) << name;
    EXPECT_NE(r.out.find(std::string(name) + std::string(12 - std::string(name).size(), ' ') +
                         "          0.0"),
              std::string::npos)
        << name << "\n" << r.out;
  }
}

// Remote attachment: host n0 has CPU for two 1-GPU pods only, so without it 6 of its GPUs are
// stranded at 100% arrived (16 pods on 16 GPUs); --remote-attach turns gpool into gpool+remote,
// which runs those pods on n1 with n0's GPUs, and says so in fill.json and the table.
TEST_F(SimCliTest, RemoteAttachRecoversStrandedGpusInAFill) {
  Write("nodes2.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,2000,262144,8,G2\nn1,64000,262144,8,G2\n");
  Write("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,1024,1,1000,G2\n");
  const std::string base = "sim --trace " + Path("pods.csv") + " --nodes " + Path("nodes2.csv") +
                           " --fill --fill-runs 2 -q";
  Result r = Run(base + " --remote-attach --out " + Path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/fill.json")));
  ASSERT_EQ(doc["policies"].size(), 1u);  // gpool ran as gpool+remote
  const Json& p = doc["policies"]["gpool+remote"];
  EXPECT_EQ(p["avg_unallocated_gpus"].get<double>(), 0.0);
  EXPECT_EQ(p["remote_attach"]["avg_recovered_gpus"].get<double>(), 6.0);
  EXPECT_EQ(p["remote_attach"]["avg_remote_gpus"].get<double>(), 6.0);
  EXPECT_EQ(p["remote_attach"]["source"], "pooled");
  EXPECT_EQ(p["remote_attach"]["within"], "fabric");
  EXPECT_GT(p["remote_attach"]["avg_remote_slowdown"].get<double>(), 1.0);
  EXPECT_NE(doc["command"].get<std::string>().find("--remote-attach=pooled"), std::string::npos);
  EXPECT_NE(r.out.find("stranded GPUs recovered"), std::string::npos) << r.out;

  r = Run(base + " --compare gpool,gpool+remote --out " + Path("both"));
  ASSERT_EQ(r.code, 0) << r.err;
  doc = Json::parse(Slurp(Path("both/fill.json")));
  EXPECT_EQ(doc["policies"]["gpool"]["avg_unallocated_gpus"].get<double>(), 6.0);
  EXPECT_EQ(doc["policies"]["gpool+remote"]["remote_attach"]["unallocated_reduction_vs_gpool"].get<double>(), 6.0);
  EXPECT_FALSE(doc["policies"]["gpool"].contains("remote_attach"));

  // A slowdown limit below every remote pair's estimate keeps gpool+remote local.
  r = Run(base + " --remote-attach --max-slowdown 1.001 --out " + Path("strict"));
  ASSERT_EQ(r.code, 0) << r.err;
  doc = Json::parse(Slurp(Path("strict/fill.json")));
  EXPECT_EQ(doc["policies"]["gpool+remote"]["avg_unallocated_gpus"].get<double>(), 6.0);

  // Flags that no run would read, and bad values, are errors naming the flag.
  r = Run(base + " --policy fifo --remote-within leaf --out " + Path("e"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--remote-within"), std::string::npos) << r.err;
  r = Run(base + " --remote-attach=local --out " + Path("e"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--remote-attach"), std::string::npos) << r.err;
  r = Run(base + " --remote-attach --max-slowdown 0.5 --out " + Path("e"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--max-slowdown"), std::string::npos) << r.err;
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

// --policy-config is checked before anything runs, whichever policies run: an unknown key or a
// bad value fails naming the key, and a config no gpool run would read is an error too.
TEST_F(SimCliTest, PolicyConfigIsCheckedUpFront) {
  Write("j.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib\na,0,100,8,1000,1024\nb,5,100,4,1000,1024\n");
  const std::string base = "sim --trace " + Path("j.csv") + " --nodes " + Path("nodes.csv") + " -q --out " +
                           Path("out");
  Result r = Run(base + " --policy fifo --policy-config foo=1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown key 'foo'"), std::string::npos) << r.err;
  r = Run(base + " --policy gpool --policy-config foo=1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("unknown key 'foo'"), std::string::npos) << r.err;
  r = Run(base + " --compare fifo,slurm --policy-config fairshare_half_life_s=-5");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("fairshare_half_life_s"), std::string::npos) << r.err;
  // Valid, but nothing would read it.
  r = Run(base + " --policy fifo --policy-config fairshare_half_life_s=3600");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--policy-config configures the gpool policy"), std::string::npos) << r.err;
  // Nothing was written by the refused runs.
  EXPECT_FALSE(std::filesystem::exists(Path("out/metrics.json")));
  // With gpool in the run it is accepted.
  r = Run(base + " --compare fifo,gpool --policy-config fairshare_half_life_s=3600");
  EXPECT_EQ(r.code, 0) << r.err;
}

// A replay's outputs, read back: metrics.json names both policies with every metric and sane
// values, timeline.csv has rows for both, report.html holds the four plots.
TEST_F(SimCliTest, ReplayWritesMetricsTimelineAndReport) {
  Result r = Run("sim --trace testdata/sim/openb_pods_sample.csv --nodes testdata/sim/openb_nodes_sample.csv "
                 "--compare fifo,gpool -q --out " + Path("out"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/metrics.json")));
  // 41 rows: one pod never ran (skipped, counted), 40 jobs replayed.
  ASSERT_EQ(doc["skipped_rows"].size(), 1u);
  EXPECT_EQ(doc["skipped_rows"][0]["count"], 1);
  ASSERT_EQ(doc["policies"].size(), 2u);
  for (const char* name : {"fifo", "gpool"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(doc["policies"].contains(name));
    const Json& p = doc["policies"][name];
    for (const char* key : {"jobs", "finished", "rejected", "unfinished", "avg_jct_s", "p50_jct_s", "p99_jct_s",
                            "avg_wait_s", "avg_slowdown", "unallocated_gpus", "allocation_rate", "makespan_s",
                            "preemptions", "energy_kwh", "wait_by_gang_size", "tenants"}) {
      EXPECT_TRUE(p.contains(key)) << key;
    }
    EXPECT_EQ(p["jobs"], 40);
    EXPECT_EQ(p["finished"], 40);
    EXPECT_EQ(p["rejected"], 0);
    EXPECT_EQ(p["unfinished"], 0);
    EXPECT_GT(p["avg_jct_s"].get<double>(), 0);
    EXPECT_GT(p["p50_jct_s"].get<double>(), 0);
    EXPECT_GE(p["p99_jct_s"].get<double>(), p["p50_jct_s"].get<double>());
    EXPECT_GE(p["avg_wait_s"].get<double>(), 0);
    EXPECT_GT(p["allocation_rate"].get<double>(), 0);
    EXPECT_LE(p["allocation_rate"].get<double>(), 1);
    EXPECT_GT(p["makespan_s"].get<double>(), 0);
    EXPECT_GT(p["energy_kwh"].get<double>(), 0);
    int64_t bucketed = 0;
    for (const Json& b : p["wait_by_gang_size"]) bucketed += b["jobs"].get<int64_t>();
    EXPECT_EQ(bucketed, 40);
  }
  const std::string timeline = Slurp(Path("out/timeline.csv"));
  ASSERT_EQ(timeline.rfind("policy,t_s,allocated_gpus,", 0), 0u) << timeline.substr(0, 200);
  EXPECT_NE(timeline.find("\nfifo,"), std::string::npos);
  EXPECT_NE(timeline.find("\ngpool,"), std::string::npos);
  const std::string html = Slurp(Path("out/report.html"));
  for (const char* plot : {"<h2>GPU allocation over time</h2><svg", "<h2>JCT CDF</h2><svg",
                           "<h2>Average queue wait by gang size (GPUs)</h2><svg", "<h2>Energy</h2><svg"}) {
    EXPECT_NE(html.find(plot), std::string::npos) << plot;
  }
  EXPECT_NE(html.find(">gpool<"), std::string::npos);
  EXPECT_NE(html.find(">fifo<"), std::string::npos);
}

// metrics.json's `command` names every flag that changes the result: run as recorded, it gives
// the same metrics. --gpus-per-host and --host-gbps (Clos CSV cluster) are not the defaults here.
TEST_F(SimCliTest, RecordedCommandReproducesTheRun) {
  Write("jobs.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib,comm\n"
                    "a,0,1000,8,1000,1024,0.5\nb,10,500,6,1000,1024,0.5\nc,20,300,2,1000,1024,0.5\n");
  Result r = Run("sim --trace " + Path("jobs.csv") + " --nodes testdata/sim/lingjun_sample.csv "
                 "--gpus-per-host 2 --host-gbps 100 --policy fifo -q --out " + Path("a"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json a = Json::parse(Slurp(Path("a/metrics.json")));
  const std::string cmd = a["command"].get<std::string>();
  EXPECT_NE(cmd.find("--gpus-per-host 2"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("--host-gbps 100"), std::string::npos) << cmd;
  ASSERT_EQ(cmd.rfind("gpool sim ", 0), 0u) << cmd;
  // Re-run it as written (into another directory) and compare.
  std::string again = cmd.substr(6);
  const std::string from = "--out " + Path("a"), to = "--out " + Path("b");
  ASSERT_NE(again.find(from), std::string::npos) << again;
  again.replace(again.find(from), from.size(), to);
  r = Run(again + " -q");
  ASSERT_EQ(r.code, 0) << r.err;
  Json b = Json::parse(Slurp(Path("b/metrics.json")));
  for (Json* d : {&a, &b}) (*d)["policies"]["fifo"].erase("wall_s");
  EXPECT_EQ(a["policies"], b["policies"]);
  EXPECT_EQ(a["cluster"], b["cluster"]);
  // The flags matter here: 2 GPUs per host, 100 Gb/s NICs, give another result than the defaults.
  r = Run("sim --trace " + Path("jobs.csv") + " --nodes testdata/sim/lingjun_sample.csv --policy fifo -q --out " +
          Path("c"));
  ASSERT_EQ(r.code, 0) << r.err;
  Json c = Json::parse(Slurp(Path("c/metrics.json")));
  c["policies"]["fifo"].erase("wall_s");
  EXPECT_NE(a["policies"], c["policies"]);
}

// The loaded replay's flags: --duration-scale and --duration-cap-s change run times as
// documented (recorded in the command and the workload's description), bad values are refused
// naming the flag, and --baseline-power-off-s adds a "+poweroff" row per baseline whose idle
// host is turned off, so its energy drops. Two 8-GPU hosts: a (8 GPUs) at 0 and b (8 GPUs) at
// 10000, each 4000 s, halved to 2000 s, then capped at 1500 s.
TEST_F(SimCliTest, LoadedReplayKnobsAndPowerOffBaseline) {
  Write("j.csv", "name,submit_s,run_s,gpus,cpu_milli,mem_mib\na,0,4000,8,1000,1024\nb,10000,4000,8,1000,1024\n");
  const std::string base = "sim --trace " + Path("j.csv") + " --nodes " + Path("nodes.csv") + " -q --out " + Path("out");
  Result r = Run(base + " --compare gpool,fifo --duration-scale 0.5 --duration-cap-s 1500 --baseline-power-off-s 600");
  ASSERT_EQ(r.code, 0) << r.err;
  Json doc = Json::parse(Slurp(Path("out/metrics.json")));
  const std::string cmd = doc["command"].get<std::string>();
  for (const char* flag : {"--duration-scale 0.5", "--duration-cap-s 1500", "--baseline-power-off-s 600"}) {
    EXPECT_NE(cmd.find(flag), std::string::npos) << cmd;
  }
  EXPECT_NE(doc["workload"].get<std::string>().find("capped at 1500 s (2 jobs capped)"), std::string::npos)
      << doc["workload"];
  // Offered load: 8 GPUs over [0,1500) and [10000,11500) of 16, over 11500 s.
  EXPECT_DOUBLE_EQ(doc["offered_load"]["peak_gpus"].get<double>(), 8);
  EXPECT_NEAR(doc["offered_load"]["avg_gpus"].get<double>(), 8 * 3000.0 / 11500, 1e-9);
  ASSERT_EQ(doc["policies"].size(), 3u);
  const Json& fifo = doc["policies"]["fifo"];
  const Json& off = doc["policies"]["fifo+poweroff"];
  EXPECT_DOUBLE_EQ(fifo["avg_jct_s"].get<double>(), 1500);  // 4000 x 0.5, capped
  EXPECT_DOUBLE_EQ(fifo["makespan_s"].get<double>(), 11500);
  EXPECT_DOUBLE_EQ(off["idle_power_off_s"].get<double>(), 600);
  EXPECT_DOUBLE_EQ(fifo["idle_power_off_s"].get<double>(), 0);
  EXPECT_GE(off["idle_power_offs"].get<int64_t>(), 2);  // both hosts idle through the gap
  EXPECT_EQ(off["boot_waits"].get<int64_t>(), 1);        // b waits for a boot
  EXPECT_LT(off["energy_busy_span_kwh"].get<double>(), fifo["energy_busy_span_kwh"].get<double>());
  EXPECT_GT(off["avg_jct_s"].get<double>(), fifo["avg_jct_s"].get<double>());
  EXPECT_FALSE(doc["policies"].contains("gpool+poweroff"));  // gpool manages power itself
  // The printed table has the rows and the busy-span energy.
  r = Run(base + " --policy fifo --baseline-power-off-s 600");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("busy_kwh"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fifo+poweroff"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("offered load"), std::string::npos) << r.out;

  std::filesystem::remove_all(Path("out"));
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--duration-scale 0", "--duration-scale 0: must be a finite number > 0"},
           {"--duration-scale -2", "--duration-scale -2"},
           {"--duration-cap-s -1", "--duration-cap-s -1"},
           {"--baseline-power-off-s -5", "--baseline-power-off-s -5"},
           {"--policy gpool --baseline-power-off-s 600", "this run has none"},
           {"--fill --duration-scale 2", "a fill (--fill) has no run times"}}) {
    SCOPED_TRACE(flags);
    r = Run(base + " " + flags);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(Path("out/metrics.json")));
  }
}

// --pooling on a Helios-format log and VC table: two VCs of one 8-GPU node each (the table's
// day chosen), vcA submits two 8-GPU jobs 1 s apart and vcB one 1-GPU job at 50 s. On static slices
// vcA's second job waits 99 s for its first; pooled, it borrows vcB's idle node. The CPU-only row
// is skipped and counted; -o json prints what pooling.json holds.
TEST_F(SimCliTest, PoolingComparesStaticSlicesWithThePool) {
  Write("gpu_number.csv", "date,vcA,vcB,vcC,total\n2020-09-01,16,8,8,32\n2020-09-02,8,8,0,16\n"
                          "2020-09-03,24,8,8,40\n");
  Write("cluster_log.csv",
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        "1,u1,vcA,8,8,1,COMPLETED,2020-09-02 10:00:00,2020-09-02 10:00:00,2020-09-02 10:01:40,100,0\n"
        "2,u1,vcA,8,8,1,COMPLETED,2020-09-02 10:00:01,2020-09-02 10:00:01,2020-09-02 10:01:41,100,0\n"
        "3,u2,vcB,0,2,1,COMPLETED,2020-09-02 10:00:01,2020-09-02 10:00:01,2020-09-02 10:00:05,4,0\n"
        "4,u2,vcB,1,2,1,COMPLETED,2020-09-02 10:00:50,2020-09-02 10:00:50,2020-09-02 10:00:55,5,0\n");
  const std::string args = "sim --pooling --trace " + Path("cluster_log.csv") + " --trace-format helios --slices " +
                           Path("gpu_number.csv") + " --slices-date 2020-09-02 --seed 3 -q --out " + Path("out");
  Json doc = RunJson(args + " -o json");
  EXPECT_EQ(Json::parse(Slurp(Path("out/pooling.json"))), doc);
  EXPECT_EQ(doc["mode"], "pooling");
  EXPECT_EQ(doc["total_gpus"], 16);
  EXPECT_EQ(doc["jobs"], 3);
  EXPECT_EQ(doc["window_start_s"], 0);
  EXPECT_EQ(doc["window_end_s"], 50);
  ASSERT_EQ(doc["slices"].size(), 2u);  // vcC has no GPUs that day
  ASSERT_EQ(doc["skipped_rows"].size(), 1u);
  EXPECT_EQ(doc["skipped_rows"][0]["example"], Path("cluster_log.csv") + ":4");
  const std::string cmd = doc["command"].get<std::string>();
  for (const char* flag : {"--pooling", "--slices-date 2020-09-02", "--seed 3", "--trace-format helios"}) {
    EXPECT_NE(cmd.find(flag), std::string::npos) << cmd;
  }
  std::vector<std::string> names;
  for (const Json& c : doc["configs"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"static", "pool", "pool+frac", "pool+remote"}));
  const Json& st = doc["configs"][0];
  const Json& pool = doc["configs"][1];
  EXPECT_EQ(st["tenants"][0]["tenant"], "vcA");
  EXPECT_DOUBLE_EQ(st["tenants"][0]["avg_wait_s"].get<double>(), 99.0 / 2);
  EXPECT_DOUBLE_EQ(pool["tenants"][0]["avg_wait_s"].get<double>(), 0);
  // Over [0, 50] s (first to last submit): static holds vcA's node only (8 GPUs for 50 s); the
  // pool also lends vcB's node to vcA's second job from 1 s.
  EXPECT_DOUBLE_EQ(st["all"]["alloc"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(pool["all"]["alloc"].get<double>(), (8 * 50 + 8 * 49) / (16.0 * 50));
  // A real trace's offered load per tenant is the GPU time its jobs submitted in the window ask
  // for over the slice's: vcA 2 x 8 GPUs x 100 s, vcB 1 GPU x 5 s, slices of 8 GPUs x 50 s.
  EXPECT_DOUBLE_EQ(st["tenants"][0]["offered_load"].get<double>(), 1600.0 / 400);
  EXPECT_DOUBLE_EQ(st["tenants"][1]["offered_load"].get<double>(), 5.0 / 400);
  EXPECT_DOUBLE_EQ(st["all"]["offered_load"].get<double>(), 1605.0 / 800);

  // The table says the same.
  Result r = Run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("static       all"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + Path("out") + "/pooling.json"), std::string::npos) << r.out;
}

// The Philly subset in testdata (testdata/sim/philly_vc/README.md): the VC table gives 11 slices
// (nodes x 8 GPUs, 2,816 GPUs), and a run on a window file's first 400 jobs (a whole window takes
// minutes) reads every one of them as a job of its VC and, with --warmup-s, counts only those
// submitted after the warm-up; each is finished, rejected or left unfinished.
TEST_F(SimCliTest, PoolingReadsThePhillySubset) {
  const std::string dir = "testdata/sim/philly_vc/";
  std::ifstream in(dir + "philly_w3.csv");
  ASSERT_TRUE(in) << "missing " << dir << "philly_w3.csv";
  std::string line, header, head;
  int64_t rows = 0, measured = 0;
  double first_submit = -1;
  const double warmup = 3600;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header.empty()) {
      header = line;
      continue;
    }
    if (++rows > 400) continue;
    head += line + "\n";
    const double submit = std::stod(line.substr(0, line.find(',')));
    if (first_submit < 0) first_submit = submit;
    if (submit >= first_submit + warmup) ++measured;
  }
  EXPECT_EQ(header, "submit_s,tenant,gpus,run_s,est_s");
  EXPECT_GT(rows, 10000);
  ASSERT_GT(measured, 0);
  ASSERT_LT(measured, 400);

  Write("head.csv", header + "\n" + head);
  Json doc = RunJson("sim --pooling --trace " + Path("head.csv") + " --trace-format jobs-csv --slices " + dir +
                     "philly_vc_nodes.csv --warmup-s " + std::to_string(static_cast<int>(warmup)) +
                     " --min-cycle-s 30 -q -o json --out " + Path("out"));
  EXPECT_EQ(doc["total_gpus"], 2816);
  ASSERT_EQ(doc["slices"].size(), 11u);
  EXPECT_EQ(doc["slices"][0]["tenant"], "6214e9");
  EXPECT_EQ(doc["slices"][0]["gpus"], 512);
  EXPECT_EQ(doc["jobs"], 400);
  EXPECT_TRUE(doc["skipped_rows"].empty());
  EXPECT_DOUBLE_EQ(doc["warmup_s"].get<double>(), warmup);
  EXPECT_DOUBLE_EQ(doc["window_start_s"].get<double>(), first_submit + warmup);
  EXPECT_NE(doc["command"].get<std::string>().find("--warmup-s 3600"), std::string::npos);
  for (const Json& c : doc["configs"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(c["all"]["jobs"], measured);
    const int64_t accounted = c["all"]["finished"].get<int64_t>() + c["all"]["rejected"].get<int64_t>() +
                              c["all"]["unfinished"].get<int64_t>();
    EXPECT_EQ(accounted, measured);
    EXPECT_EQ(c["tenants"].size(), 11u);
    EXPECT_GT(c["all"]["offered_load"].get<double>(), 0);
  }
}

TEST_F(SimCliTest, PoolingFlagsAreCheckedUpFront) {
  Write("slices.csv", "tenant,gpus\na,8\n");
  Write("jobs.csv", "submit_s,run_s,gpus,tenant\n0,10,1,a\n");
  const std::string base = "sim --trace " + Path("jobs.csv") + " --trace-format jobs-csv --out " + Path("out");
  for (const auto& [extra, want] : std::vector<std::pair<std::string, std::string>>{
           {" --pooling", "--pooling needs --slices"},
           {" --pooling --slices " + Path("slices.csv") + " --nodes " + Path("nodes.csv"), "--nodes/--fabric"},
           {" --pooling --slices " + Path("slices.csv") + " --compare all", "--policy/--compare"},
           {" --pooling --slices " + Path("slices.csv") + " --net-model route", "--net-model/--lfts"},
           {" --slices " + Path("slices.csv"), "need --pooling"},
           {" --warmup-s 60", "need --pooling"},
           {" --pooling --slices " + Path("slices.csv") + " --warmup-s -1", "--warmup-s: must be >= 0"},
           {" --pooling --slices " + Path("slices.csv") + " --warmup-s 60", "leaves no window"},
           {" --pooling --slices " + Path("slices.csv") + " --shapes x.csv", "--shapes is read only by"},
           {" --pooling --slices " + Path("nope.csv"), "nope.csv"}}) {
    Result r = Run(base + extra);
    EXPECT_NE(r.code, 0) << extra;
    EXPECT_NE(r.err.find(want), std::string::npos) << extra << "\n" << r.err;
  }
  Result ok = Run(base + " --pooling --slices " + Path("slices.csv") + " -q");
  EXPECT_EQ(ok.code, 0) << ok.err;
  // Philly's job log goes through the same mode (tenant = its vc).
  Write("philly.json", R"([{"jobid": "app_1", "vc": "a", "user": "u", "status": "Pass",
    "submitted_time": "2017-10-03 02:54:53", "attempts": [{"start_time": "2017-10-03 02:55:00",
    "end_time": "2017-10-03 03:00:00", "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}])");
  Json philly = RunJson("sim --pooling --trace " + Path("philly.json") + " --trace-format philly --slices " +
                        Path("slices.csv") + " -q -o json --out " + Path("philly"));
  EXPECT_EQ(philly["jobs"], 1);
  // Its run time is its attempt's, 300 s; the trace's own 7 s in the queue is not replayed (the
  // scheduler under test decides when it starts, here at once).
  EXPECT_DOUBLE_EQ(philly["configs"][0]["all"]["avg_jct_s"].get<double>(), 300);
}

}  // namespace
