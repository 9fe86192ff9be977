#include "sim/metrics.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sim/report.h"

namespace gpool::sim {
namespace {

TEST(Metrics, PercentileIsNearestRank) {
  std::vector<double> v = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(Percentile(&v, 50), 5);
  EXPECT_DOUBLE_EQ(Percentile(&v, 99), 10);
  EXPECT_DOUBLE_EQ(Percentile(&v, 10), 1);
  std::vector<double> empty;
  EXPECT_DOUBLE_EQ(Percentile(&empty, 50), 0);
}

TEST(Metrics, GangBuckets) {
  EXPECT_EQ(GangBucketLabel(1, 500), "<1");
  EXPECT_EQ(GangBucketLabel(1, 1000), "1");
  EXPECT_EQ(GangBucketLabel(8, 1000), "2-8");
  EXPECT_EQ(GangBucketLabel(64, 1000), "9-64");
  EXPECT_EQ(GangBucketLabel(1024, 1000), "257-1024");
}

RunResult Handmade() {
  RunResult r;
  r.policy = "p";
  r.total_gpu_milli = 4000;
  r.start_s = 0;
  r.end_s = 100;
  r.jobs = {{.submit_s = 0, .start_s = 0, .finish_s = 100, .gpus = 2},
            {.submit_s = 0, .start_s = 50, .finish_s = 60, .gpus = 2},
            {.submit_s = 0, .rejected = true}};
  // 2 GPUs from 0 to 50, 4 from 50 to 60, 2 from 60 to 100: 100 + 40 + 80 = 220 GPU-s.
  r.timeline = {{.t = 0, .used_milli = 2000}, {.t = 50, .used_milli = 4000}, {.t = 60, .used_milli = 2000}};
  r.energy_j = 3.6e6;
  r.tenants = {"a", "b"};
  r.tenant_entitlement = {0.5, 0.5};
  r.tenant_gpu_s = {150, 50};
  r.rejected = 1;
  return r;
}

TEST(Metrics, ComputedFromRun) {
  Metrics m = ComputeMetrics(Handmade());
  EXPECT_EQ(m.jobs, 3);
  EXPECT_EQ(m.finished, 2);
  EXPECT_EQ(m.rejected, 1);
  EXPECT_DOUBLE_EQ(m.avg_jct_s, 80);
  EXPECT_DOUBLE_EQ(m.avg_wait_s, 25);
  EXPECT_DOUBLE_EQ(m.allocation_rate, 220.0 / 400.0);
  EXPECT_DOUBLE_EQ(m.energy_kwh, 1.0);
  ASSERT_EQ(m.tenants.size(), 2u);
  EXPECT_DOUBLE_EQ(m.tenants[0].share, 0.75);
  EXPECT_DOUBLE_EQ(m.tenants[1].entitlement, 0.5);
  auto j = MetricsToJson(m);
  for (const char* k : {"avg_jct_s", "p50_jct_s", "p99_jct_s", "unallocated_gpus",
                        "allocation_rate", "makespan_s", "preemptions", "energy_kwh"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
}

TEST(Metrics, UndefinedMeasuresAreNullNotZero) {
  // No job finished and no placement failed: the JCT figures and the unallocated GPUs at the
  // first failure have nothing to measure. They are NaN, null in JSON, "undefined" in tables.
  RunResult r;
  r.policy = "p";
  r.jobs.resize(1);  // one job that never finished
  r.unfinished = 1;
  Metrics m = ComputeMetrics(r);
  EXPECT_TRUE(std::isnan(m.avg_jct_s));
  EXPECT_TRUE(std::isnan(m.p99_jct_s));
  EXPECT_TRUE(std::isnan(m.unallocated_gpus));
  EXPECT_TRUE(std::isnan(m.avg_unallocated_gpus_blocked));
  auto j = MetricsToJson(m);
  EXPECT_TRUE(j["avg_jct_s"].is_null());
  EXPECT_TRUE(j["unallocated_gpus"].is_null());
  EXPECT_EQ(FormatMetric(m.unallocated_gpus, "{:.1f}"), "undefined");
  EXPECT_EQ(FormatMetric(2.25, "{:.1f}"), "2.2");
  // The busy span has no end without a finished job: makespan, allocation rate, its energy.
  EXPECT_TRUE(std::isnan(m.makespan_s));
  EXPECT_TRUE(std::isnan(m.allocation_rate));
  EXPECT_TRUE(std::isnan(m.energy_busy_span_kwh));
  EXPECT_TRUE(std::isnan(m.first_failed_placement_s));
  for (const char* k : {"makespan_s", "allocation_rate", "energy_busy_span_kwh", "first_failed_placement_s",
                        "avg_unallocated_gpus_while_blocked", "avg_slowdown", "avg_wait_s"}) {
    EXPECT_TRUE(j[k].is_null()) << k;
  }
  // A tenant share of no GPU-seconds at all is undefined too.
  r.tenants = {"a"};
  r.tenant_entitlement = {1};
  r.tenant_gpu_s = {0};
  EXPECT_TRUE(std::isnan(ComputeMetrics(r).tenants[0].share));
  EXPECT_TRUE(MetricsToJson(ComputeMetrics(r))["tenants"][0]["share"].is_null());
  // Remote attachment with no GPU job started: its shares are undefined too.
  r.remote_attach = true;
  auto jr = MetricsToJson(ComputeMetrics(r));
  EXPECT_TRUE(jr["remote_attach"]["remote_job_share"].is_null());
  EXPECT_TRUE(jr["remote_attach"]["remote_gpu_share"].is_null());
  EXPECT_TRUE(jr["remote_attach"]["avg_remote_slowdown"].is_null());
  r.remote_attach = false;
  // A failure defines it, 0 included.
  r.first_fail_s = 5;
  r.unallocated_gpus_at_first_fail = 0;
  EXPECT_DOUBLE_EQ(ComputeMetrics(r).unallocated_gpus, 0);
}

TEST(Metrics, OfferedLoadIsEachJobFromItsSubmitForItsRunTime) {
  // 8 GPUs over [0,100), 4 over [50,150), 8 over [150,200) (ends before starts at 150), a
  // CPU-only job (no GPUs): 8, 12, 4, 8 GPUs in four 50 s steps.
  SimJob a{.submit_s = 0, .run_s = 100, .num_gpus = 8};
  SimJob b{.submit_s = 50, .run_s = 100, .num_gpus = 4};
  SimJob c{.submit_s = 150, .run_s = 50, .num_gpus = 8};
  SimJob cpu{.submit_s = 60, .run_s = 10, .num_gpus = 0};
  Workload w;
  w.jobs = {a, b, cpu, c};
  w.Finalize();
  OfferedLoad o = ComputeOfferedLoad(w, 16);
  EXPECT_DOUBLE_EQ(o.peak_gpus, 12);
  EXPECT_DOUBLE_EQ(o.avg_gpus, (50 * 8 + 50 * 12 + 50 * 4 + 50 * 8) / 200.0);
  EXPECT_DOUBLE_EQ(o.span_s, 200);
  EXPECT_DOUBLE_EQ(o.peak_share(), 0.75);
  auto j = OfferedLoadToJson(o);
  EXPECT_DOUBLE_EQ(j["avg_share"].get<double>(), 0.5);
  // Nothing to offer: undefined, not 0.
  OfferedLoad none = ComputeOfferedLoad(Workload{}, 16);
  EXPECT_TRUE(std::isnan(none.peak_gpus));
  EXPECT_TRUE(OfferedLoadToJson(none)["avg_gpus"].is_null());
}

TEST(Report, HtmlHasPlotsAndCsvIsThinned) {
  RunResult r = Handmade();
  std::vector<RunResult> runs = {r};
  std::vector<Metrics> ms = {ComputeMetrics(r)};
  RunInfo info{.workload = "w <x>", .cluster = "c"};
  std::string html = ReportHtml(info, runs, ms);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("w &lt;x&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // only the SVG namespace
  for (int i = 0; i < 5000; ++i) runs[0].timeline.push_back({.t = 100.0 + i});
  std::string csv = TimelineCsv(runs, 100);
  size_t lines = std::count(csv.begin(), csv.end(), '\n');
  EXPECT_LE(lines, 102u);
  EXPECT_EQ(csv.rfind("policy,t_s,", 0), 0u);
  auto doc = MetricsDocument(info, ms);
  EXPECT_TRUE(doc["policies"].contains("p"));
}

TEST(Report, JobsCsvHasOneRowPerJobWithItsTimes) {
  RunResult r = Handmade();
  r.jobs[1].preemptions = 2;
  r.jobs[1].base_run_s = 8;
  r.jobs[0].remote_gpus = 1;
  r.jobs[0].remote_slowdown = 1.25;
  const std::string csv = JobsCsv({r});
  EXPECT_EQ(csv.rfind("policy,job,tenant,gpus,gpu_milli,submit_s,start_s,finish_s,wait_s,jct_s,", 0), 0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);  // header + 3 jobs
  EXPECT_NE(csv.find("\np,1,0,2,1000,0.000,50.000,60.000,50.000,60.000,8.000,1.0000,2,0,0,1.0000\n"),
            std::string::npos)
      << csv;
  // The rejected job never started: no wait, no JCT.
  EXPECT_NE(csv.find("\np,2,0,0,1000,0.000,-1.000,-1.000,,,0.000,1.0000,0,0,0,1.0000\n"), std::string::npos) << csv;
  // Remote attachment's columns: GPUs on other nodes and the estimated slowdown.
  EXPECT_NE(csv.find(",1,1.2500\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",leaves,remote_gpus,remote_slowdown\n"), std::string::npos) << csv;
}

}  // namespace
}  // namespace gpool::sim
