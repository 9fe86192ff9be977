// The pooling experiment on clusters small enough to work out by hand: static slices keep each
// tenant on its own nodes, the pool lets a tenant borrow idle GPUs and reclaim gives them back,
// fractions pack more jobs than whole GPUs, remote attachment gathers GPUs of two nodes, and the
// stand-in workload and the whole experiment are deterministic.
#include "sim/pooling.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpool::sim {
namespace {

struct J {
  std::string tenant;
  double submit, run;
  int gpus;
  int milli = 1000;
  int64_t cpu = 0;
};

Workload Work(const std::vector<J>& jobs) {
  Workload w;
  for (const auto& j : jobs) {
    SimJob s;
    s.tenant = j.tenant;
    s.name = j.tenant + "-" + std::to_string(w.jobs.size());
    s.source = "test:" + s.name;
    s.submit_s = j.submit;
    s.run_s = j.run;
    s.num_gpus = j.gpus;
    s.gpu_milli = j.milli;
    s.cpu_milli = j.cpu;
    s.has_estimate = false;
    w.jobs.push_back(s);
  }
  w.Finalize();
  return w;
}

SlicedCluster Cluster(const std::vector<TenantSlice>& slices, int gpus_per_host, int64_t cpu_milli = 96000) {
  SliceHost h;
  h.gpus = gpus_per_host;
  h.cpu_milli = cpu_milli;
  auto c = BuildSlicedCluster(slices, h);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

const PoolingConfig& Config(const PoolingResult& r, const std::string& name) {
  for (const auto& c : r.configs) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no configuration " << name;
  return r.configs.front();
}

TEST(Pooling, SlicedClusterGivesEachTenantItsOwnHosts) {
  SlicedCluster sc = Cluster({{"a", 16, "s:2"}, {"b", 12, "s:3"}}, 8);
  ASSERT_EQ(sc.cluster.hosts.size(), 4u);
  EXPECT_EQ(sc.cluster.total_gpus(), 28);
  EXPECT_EQ(sc.first_host, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(sc.end_host, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(sc.cluster.hosts[3].gpus, 4);  // the remainder as one smaller host
  SimCluster b = SubCluster(sc.cluster, sc.first_host[1], sc.end_host[1]);
  ASSERT_EQ(b.hosts.size(), 2u);
  EXPECT_EQ(b.total_gpus(), 12);
  for (const auto& h : b.hosts) EXPECT_EQ(h.name.rfind("b-", 0), 0u) << h.name;
  EXPECT_TRUE(b.Validate().ok());
  // A tenant with two slices, or a slice without GPUs, is an error naming where it came from.
  auto dup = BuildSlicedCluster({{"a", 8, "s:2"}, {"a", 8, "s:3"}}, SliceHost{});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("s:3"), std::string::npos);
}

// a has two 8-GPU jobs and one of 16 GPUs; b (8 GPUs) is idle. On static slices a's second job
// waits for the first (99 s) and the 16-GPU job can never run; in the pool the second job borrows
// b's idle node at once and the 16-GPU job runs when both are done.
TEST(Pooling, StaticSlicesKeepATenantOffIdleNodesThePoolLendsThem) {
  SlicedCluster sc = Cluster({{"a", 8, "s:2"}, {"b", 8, "s:3"}}, 8);
  Workload w = Work({{"a", 0, 100, 8}, {"a", 1, 100, 8}, {"a", 2, 100, 16}});
  PoolingOptions o;
  o.remote_row = false;
  auto r = RunPooling(sc, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->configs.size(), 3u);
  EXPECT_EQ(r->window_start_s, 0);
  EXPECT_EQ(r->window_end_s, 2);

  const PoolingConfig& st = Config(*r, "static");
  const PoolingRow& sa = st.tenants[0];
  EXPECT_EQ(sa.rejected, 1);  // 16 GPUs never fit a's 8
  EXPECT_EQ(sa.finished, 2);
  EXPECT_DOUBLE_EQ(sa.avg_wait_s, 99.0 / 2);
  EXPECT_DOUBLE_EQ(sa.p99_wait_s, 99);
  EXPECT_DOUBLE_EQ(sa.alloc, 1.0);            // a's one node busy over [0, 2]
  EXPECT_DOUBLE_EQ(st.tenants[1].alloc, 0);   // b idle
  EXPECT_DOUBLE_EQ(st.all.alloc, 0.5);        // 8 of 16 GPUs

  const PoolingConfig& pool = Config(*r, "pool");
  const PoolingRow& pa = pool.tenants[0];
  EXPECT_EQ(pa.rejected, 0);
  EXPECT_EQ(pa.finished, 3);
  // Waits 0, 0 and 99: the 16-GPU job (submitted at 2) starts at 101, when the second 8-GPU
  // job ends.
  EXPECT_DOUBLE_EQ(pa.p99_wait_s, 99);
  EXPECT_DOUBLE_EQ(pa.avg_wait_s, 99.0 / 3);
  // Over [0, 2]: 8 GPUs for 2 s and 8 more for 1 s, on a slice of 8: a used 1.5 slices.
  EXPECT_DOUBLE_EQ(pa.alloc, 1.5);
  EXPECT_DOUBLE_EQ(pool.all.alloc, 0.75);
}

// A warm-up: a's job submitted at 0 (before the window starts at 50) runs to 150 and holds a's
// node; it loads the cluster but is not counted. a's job at 60 waits for it (90 s) and counts;
// b's job counts. Without the window's figure for the trace, "offered" is the GPU time the
// counted jobs asked for over the slice's GPU time in the window [50, 100].
TEST(Pooling, WarmupJobsLoadTheClusterButAreNotCounted) {
  SlicedCluster sc = Cluster({{"a", 8, "s:2"}, {"b", 8, "s:3"}}, 8);
  Workload w = Work({{"a", 0, 150, 8}, {"a", 60, 10, 8}, {"b", 100, 25, 8}});
  PoolingOptions o;
  o.remote_row = false;
  o.warmup_s = 50;
  auto r = RunPooling(sc, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->window_start_s, 50);
  EXPECT_DOUBLE_EQ(r->window_end_s, 100);
  EXPECT_EQ(r->jobs, 3);  // the workload; the rows count the window's jobs
  const PoolingConfig& st = Config(*r, "static");
  const PoolingRow& sa = st.tenants[0];
  EXPECT_EQ(sa.jobs, 1);
  EXPECT_EQ(sa.finished, 1);
  EXPECT_DOUBLE_EQ(sa.avg_wait_s, 90);  // 60 -> 150: the warm-up job held the node
  EXPECT_DOUBLE_EQ(sa.alloc, 1.0);       // the warm-up job's GPU time inside [50, 100] counts
  EXPECT_EQ(st.all.jobs, 2);
  EXPECT_DOUBLE_EQ(sa.offered, 8.0 * 10 / (8.0 * 50));
  EXPECT_DOUBLE_EQ(st.tenants[1].offered, 8.0 * 25 / (8.0 * 50));
  EXPECT_DOUBLE_EQ(st.all.offered, (80.0 + 200.0) / (16.0 * 50));

  o.warmup_s = 0;
  auto none = RunPooling(sc, w, o);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(Config(*none, "static").tenants[0].jobs, 2);
  EXPECT_DOUBLE_EQ(Config(*none, "static").tenants[0].avg_wait_s, 45);

  o.warmup_s = 100;  // nothing left to measure
  auto all = RunPooling(sc, w, o);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("leaves no window"), std::string::npos) << all.status().ToString();
  o.warmup_s = -1;
  EXPECT_FALSE(RunPooling(sc, w, o).ok());
}

// a borrows b's node with a long job; when b submits, reclaim preempts the borrower and b runs at
// once. With reclaim off (a config key of gpool's policy) b waits for the borrower to end.
TEST(Pooling, ReclaimGivesBorrowedGpusBackToTheirOwner) {
  SlicedCluster sc = Cluster({{"a", 8, "s:2"}, {"b", 8, "s:3"}}, 8);
  Workload w = Work({{"a", 0, 1000, 8}, {"a", 0, 1000, 8}, {"b", 10, 100, 8}});
  PoolingOptions o;
  o.remote_row = false;
  auto r = RunPooling(sc, w, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PoolingConfig& pool = Config(*r, "pool");
  EXPECT_GE(pool.preemptions, 1);
  EXPECT_DOUBLE_EQ(pool.tenants[1].p99_wait_s, 0);
  EXPECT_EQ(pool.all.finished, 3);  // the preempted borrower finishes later
  // On its own slice b never waits either; a's second job waits for its first.
  EXPECT_DOUBLE_EQ(Config(*r, "static").tenants[1].p99_wait_s, 0);
  EXPECT_DOUBLE_EQ(Config(*r, "static").tenants[0].p99_wait_s, 1000);

  o.gpool_config = "reclaim=false";
  auto no = RunPooling(sc, w, o);
  ASSERT_TRUE(no.ok()) << no.status().ToString();
  EXPECT_DOUBLE_EQ(Config(*no, "pool").tenants[1].p99_wait_s, 990);
}

// Four quarter-GPU jobs on one 1-GPU slice, submitted at 0, 1, 2, 3 and running 100 s. Whole
// GPUs run them one after another (waits 0, 99, 198, 297); fractions run them together.
TEST(Pooling, FractionsPackMoreJobsThanWholeGpuRounding) {
  SlicedCluster sc = Cluster({{"a", 1, "s:2"}}, 1);
  Workload w = Work({{"a", 0, 100, 1, 250}, {"a", 1, 100, 1, 250}, {"a", 2, 100, 1, 250}, {"a", 3, 100, 1, 250}});
  auto r = RunPooling(sc, w, PoolingOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->configs.size(), 4u);
  for (const char* whole : {"static", "pool"}) {
    SCOPED_TRACE(whole);
    const PoolingRow& a = Config(*r, whole).all;
    EXPECT_DOUBLE_EQ(a.avg_wait_s, (0 + 99 + 198 + 297) / 4.0);
    EXPECT_DOUBLE_EQ(a.max_wait_s, 297);
    EXPECT_DOUBLE_EQ(a.avg_jct_s, (100 + 199 + 298 + 397) / 4.0);
    EXPECT_DOUBLE_EQ(a.alloc, 1.0);   // the GPU held whole over [0, 3]...
    EXPECT_DOUBLE_EQ(a.busy, 0.25);   // ...for a quarter-GPU request
    EXPECT_DOUBLE_EQ(a.alloc_run, 1.0);  // [0, 400]
    EXPECT_DOUBLE_EQ(a.busy_run, 0.25);
  }
  for (const char* frac : {"pool+frac", "pool+remote"}) {
    SCOPED_TRACE(frac);
    const PoolingRow& a = Config(*r, frac).all;
    EXPECT_DOUBLE_EQ(a.avg_wait_s, 0);
    EXPECT_DOUBLE_EQ(a.avg_jct_s, 100);
    // Over [0, 3]: 0.25 x (3 + 2 + 1) GPU-s of 3.
    EXPECT_DOUBLE_EQ(a.alloc, 0.5);
    EXPECT_DOUBLE_EQ(a.busy, 0.5);
    EXPECT_NEAR(a.busy_run, 100.0 / 103, 1e-12);  // [0, 103]
  }
}

// Two 2-GPU hosts whose CPUs two 1-GPU jobs take whole: a GPU is left on each, stranded. A 2-GPU
// job waits for them in the local pool; with remote attachment it takes one GPU of each node.
TEST(Pooling, RemoteRowGathersStrandedGpusOfTwoNodes) {
  SlicedCluster sc = Cluster({{"a", 4, "s:2"}}, 2, 4000);
  Workload w = Work({{"a", 0, 100, 1, 1000, 4000}, {"a", 0, 100, 1, 1000, 4000}, {"a", 1, 100, 2}});
  auto r = RunPooling(sc, w, PoolingOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(Config(*r, "pool+frac").all.p99_wait_s, 99);
  EXPECT_EQ(Config(*r, "pool+frac").remote_jobs, 0);
  const PoolingConfig& remote = Config(*r, "pool+remote");
  EXPECT_DOUBLE_EQ(remote.all.p99_wait_s, 0);
  EXPECT_EQ(remote.remote_jobs, 1);
  EXPECT_EQ(remote.all.finished, 3);
}

TEST(Pooling, JobsOfATenantWithoutASliceAreLeftOutAndCounted) {
  std::vector<TenantSlice> slices = {{"a", 8, "s:2"}};
  Workload w = Work({{"a", 0, 10, 1}, {"zz", 1, 10, 1}, {"zz", 2, 10, 1}});
  auto refused = RunPooling(Cluster(slices, 8), w, PoolingOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tenant 'zz' has no slice"), std::string::npos);
  LeaveOutUnsliced(slices, &w);
  ASSERT_EQ(w.jobs.size(), 1u);
  EXPECT_EQ(w.total_skipped(), 2);
  EXPECT_EQ(w.jobs[0].id, 0u);
}

Workload Shapes() {
  Workload s;
  auto add = [&](int gpus, int milli, int64_t cpu, int64_t mem) {
    SimJob j;
    j.num_gpus = gpus;
    j.gpu_milli = milli;
    j.cpu_milli = cpu;
    j.mem_mib = mem;
    s.jobs.push_back(j);
  };
  add(1, 500, 4000, 8192);
  add(1, 1000, 8000, 16384);
  add(2, 1000, 16000, 32768);
  add(0, 1000, 2000, 1024);          // CPU-only: left out
  add(16, 1000, 8000, 1024);         // more GPUs than a host: left out
  add(1, 1000, 200000, 1024);        // more CPU than a host: left out
  s.description = "test shapes";
  return s;
}

TEST(Pooling, StandInLoadsTenantsAsAskedWithShapesThatFit) {
  std::vector<TenantSlice> slices = {{"a", 64, "s:2"}, {"b", 16, "s:3"}, {"c", 32, "s:4"}};
  SliceHost host;
  StandInOptions o;
  o.days = 2;
  o.load = 0.8;
  o.skew = 1.5;
  o.seed = 3;
  auto s = GenerateStandIn(slices, host, Shapes(), {100, 1000, 5000, 50000}, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->offered.size(), 3u);
  double offered = 0;
  for (size_t k = 0; k < 3; ++k) offered += s->offered[k] * static_cast<double>(slices[k].gpus);
  EXPECT_NEAR(offered / 112, 0.8, 1e-12);
  EXPECT_GT(*std::max_element(s->offered.begin(), s->offered.end()) /
                *std::min_element(s->offered.begin(), s->offered.end()),
            1.5);  // skewed: some tenants busier than others
  ASSERT_GT(s->workload.jobs.size(), 100u);
  for (const auto& j : s->workload.jobs) {
    EXPECT_TRUE(j.num_gpus == 1 || j.num_gpus == 2) << j.name;
    EXPECT_LE(j.cpu_milli, host.cpu_milli);
    EXPECT_GE(j.run_s, o.min_run_s);
    EXPECT_LE(j.run_s, o.max_run_s);
    EXPECT_LT(j.submit_s, 2 * 86400);
  }
  // Deterministic; another seed, another workload.
  auto again = GenerateStandIn(slices, host, Shapes(), {100, 1000, 5000, 50000}, o);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->workload.jobs.size(), s->workload.jobs.size());
  for (size_t i = 0; i < s->workload.jobs.size(); ++i) {
    EXPECT_EQ(again->workload.jobs[i].submit_s, s->workload.jobs[i].submit_s);
    EXPECT_EQ(again->workload.jobs[i].tenant, s->workload.jobs[i].tenant);
  }
  o.seed = 4;
  auto other = GenerateStandIn(slices, host, Shapes(), {100, 1000, 5000, 50000}, o);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->workload.jobs.size() == s->workload.jobs.size() &&
                other->workload.jobs[0].submit_s == s->workload.jobs[0].submit_s,
            true);
}

TEST(Pooling, TheExperimentIsDeterministic) {
  std::vector<TenantSlice> slices = {{"a", 16, "s:2"}, {"b", 8, "s:3"}, {"c", 8, "s:4"}};
  SliceHost host;
  StandInOptions o;
  o.days = 0.5;
  o.load = 1.0;
  o.max_run_s = 7200;
  o.seed = 9;
  auto s = GenerateStandIn(slices, host, Shapes(), {100, 1000, 5000, 50000}, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  SlicedCluster sc = Cluster(slices, 8);
  PoolingOptions po;
  po.seed = 9;
  auto r1 = RunPooling(sc, s->workload, po, s->offered);
  auto r2 = RunPooling(sc, s->workload, po, s->offered);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  ASSERT_TRUE(r2.ok());
  nlohmann::json j1 = PoolingToJson(*r1), j2 = PoolingToJson(*r2);
  for (auto* j : {&j1, &j2}) {
    for (auto& c : (*j)["configs"]) c.erase("wall_s");
  }
  EXPECT_EQ(j1, j2);
  // Every job is accounted for in every configuration, and the table shows each one.
  for (const auto& c : r1->configs) {
    EXPECT_EQ(c.all.jobs, static_cast<int64_t>(s->workload.jobs.size())) << c.name;
    int64_t sum = 0;
    for (const auto& t : c.tenants) sum += t.jobs;
    EXPECT_EQ(sum, c.all.jobs) << c.name;
    EXPECT_NE(FormatPoolingTable(*r1).find(c.name), std::string::npos);
  }
}

}  // namespace
}  // namespace gpool::sim
