#include "sim/trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "common/file.h"

namespace gpool::sim {
namespace {

TEST(OpenbTrace, ParsesSampleAndCountsPodsThatNeverRan) {
  auto text = ReadFile("testdata/sim/openb_pods_sample.csv");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto w = ParseOpenbTrace(*text, "pods.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs.size(), 40u);
  ASSERT_EQ(w->skipped.size(), 1u);
  EXPECT_EQ(w->skipped[0].count, 1);
  EXPECT_EQ(w->skipped[0].example, "pods.csv:42");
  // openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
  const SimJob* pod1 = nullptr;
  for (const auto& j : w->jobs) {
    if (j.name == "openb-pod-0001") pod1 = &j;
  }
  ASSERT_NE(pod1, nullptr);
  EXPECT_EQ(pod1->cpu_milli, 6000);
  EXPECT_EQ(pod1->mem_mib, 12288);
  EXPECT_EQ(pod1->num_gpus, 1);
  EXPECT_EQ(pod1->gpu_milli, 460);
  EXPECT_TRUE(pod1->fractional());
  EXPECT_DOUBLE_EQ(pod1->submit_s, 427061);
  EXPECT_DOUBLE_EQ(pod1->run_s, 12902960 - 427061);
  EXPECT_EQ(pod1->source, "pods.csv:3");
  // Sorted by submit time and numbered densely.
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    EXPECT_EQ(w->jobs[i].id, i);
    if (i > 0) {
      EXPECT_LE(w->jobs[i - 1].submit_s, w->jobs[i].submit_s);
    }
  }
}

constexpr char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(OpenbTrace, ErrorsNameFileLineAndField) {
  std::string good = "p0,1000,100,1,1000,,LS,Running,0,10,0\n";
  auto bad_num = ParseOpenbTrace(std::string(kHeader) + good + "p1,12x,100,1,1000,,LS,Running,0,10,0\n", "t.csv");
  ASSERT_FALSE(bad_num.ok());
  EXPECT_NE(bad_num.status().message().find("t.csv:3"), std::string::npos);
  EXPECT_NE(bad_num.status().message().find("cpu_milli"), std::string::npos);

  auto short_row = ParseOpenbTrace(std::string(kHeader) + "p1,1000,100\n", "t.csv");
  ASSERT_FALSE(short_row.ok());
  EXPECT_NE(short_row.status().message().find("t.csv:2: expected 11 fields, got 3"), std::string::npos);

  auto backwards = ParseOpenbTrace(std::string(kHeader) + "p1,1000,100,1,1000,,LS,Running,0,5,9\n", "t.csv");
  ASSERT_FALSE(backwards.ok());
  EXPECT_NE(backwards.status().message().find("deletion_time"), std::string::npos);

  auto milli = ParseOpenbTrace(std::string(kHeader) + "p1,1000,100,1,1500,,LS,Running,0,5,0\n", "t.csv");
  ASSERT_FALSE(milli.ok());
  EXPECT_NE(milli.status().message().find("gpu_milli"), std::string::npos);

  auto no_col = ParseOpenbTrace("name,cpu_milli\np,1\n", "t.csv");
  ASSERT_FALSE(no_col.ok());
  EXPECT_NE(no_col.status().message().find("t.csv:1: header lacks column 'memory_mib'"),
            std::string::npos);

  EXPECT_FALSE(ParseOpenbTrace("", "t.csv").ok());
}

TEST(JobsCsv, ParsesExampleWithDefaults) {
  auto text = ReadFile("testdata/sim/jobs.csv");
  ASSERT_TRUE(text.ok());
  auto w = ParseJobsCsv(*text, "jobs.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->jobs.size(), 3u);
  EXPECT_EQ(w->jobs[0].name, "train-a");
  EXPECT_EQ(w->jobs[0].num_gpus, 16);
  EXPECT_EQ(w->jobs[0].gpu_milli, 1000);  // empty cell keeps the default
  EXPECT_DOUBLE_EQ(w->jobs[0].comm_fraction, 0.3);
  EXPECT_EQ(w->jobs[0].tenant, "team-a");
  EXPECT_EQ(w->jobs[1].gpu_milli, 500);
  EXPECT_EQ(w->jobs[1].priority, 1);
  EXPECT_EQ(w->jobs[2].num_gpus, 0);
  EXPECT_EQ(w->jobs[2].source, "jobs.csv:5");
  // The scheduler's job fields.
  EXPECT_EQ(w->jobs[0].locality.level, sched::Level::kLeaf);
  EXPECT_TRUE(w->jobs[0].locality.required);
  EXPECT_TRUE(w->jobs[0].preemptible);
  EXPECT_DOUBLE_EQ(w->jobs[0].min_runtime_s, 600);
  EXPECT_DOUBLE_EQ(w->jobs[0].estimate_s(), 4000);
  EXPECT_EQ(w->jobs[0].kind, sched::JobKind::kTraining);
  EXPECT_FALSE(w->jobs[0].allow_split);
  EXPECT_EQ(w->jobs[1].locality.level, sched::Level::kFabric);  // empty: any, preferred
  EXPECT_FALSE(w->jobs[1].locality.required);
  EXPECT_FALSE(w->jobs[1].preemptible);
  EXPECT_FALSE(w->jobs[1].has_estimate);
  EXPECT_DOUBLE_EQ(w->jobs[1].estimate_s(), 0);
  EXPECT_EQ(w->jobs[1].kind, sched::JobKind::kInference);
  EXPECT_EQ(w->jobs[2].locality.level, sched::Level::kPod);
  EXPECT_FALSE(w->jobs[2].locality.required);
  EXPECT_EQ(w->jobs[2].kind, sched::JobKind::kInteractive);
  EXPECT_TRUE(w->jobs[2].allow_split);
}

TEST(JobsCsv, LocalitySyntax) {
  auto w = ParseJobsCsv("submit_s,run_s,gpus,locality\n0,1,1,node!\n0,1,1,Leaf\n0,1,1,any\n0,1,1,pod !\n",
                        "l.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs[0].locality.level, sched::Level::kNode);
  EXPECT_TRUE(w->jobs[0].locality.required);
  EXPECT_EQ(w->jobs[1].locality.level, sched::Level::kLeaf);
  EXPECT_FALSE(w->jobs[1].locality.required);
  EXPECT_EQ(w->jobs[2].locality.level, sched::Level::kFabric);
  EXPECT_EQ(w->jobs[3].locality.level, sched::Level::kPod);
  EXPECT_TRUE(w->jobs[3].locality.required);
}

TEST(JobsCsv, EstimateDefaultsToRunTimeWithoutTheColumn) {
  auto w = ParseJobsCsv("submit_s,run_s,gpus\n0,70,1\n", "e.csv");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->jobs[0].has_estimate);
  EXPECT_DOUBLE_EQ(w->jobs[0].estimate_s(), 70);
}

TEST(JobsCsv, RejectsBadJobFieldsWithWhere) {
  struct Case {
    const char* column;
    const char* good;  // row 2
    const char* bad;   // row 3
  };
  for (const Case& c :
       {Case{"locality", "leaf", "rack"}, Case{"locality", "pod!", "!"},
        Case{"locality", "any", "leaf!!"}, Case{"preemptible", "false", "maybe"},
        Case{"allow_split", "1", "2"}, Case{"min_runtime_s", "5", "-1"},
        Case{"min_runtime_s", "0", "soon"}, Case{"est_s", "none", "0"},
        Case{"est_s", "2", "-3"}, Case{"est_s", "", "abc"},
        Case{"kind", "inference", "batch"}}) {
    std::string text = std::string("submit_s,run_s,gpus,") + c.column + "\n0,1,1," + c.good +
                       "\n0,1,1," + c.bad + "\n";
    auto w = ParseJobsCsv(text, "b.csv");
    ASSERT_FALSE(w.ok()) << c.column << "=" << c.bad;
    const std::string want = std::string("b.csv:3: field '") + c.column + "'";
    EXPECT_NE(w.status().message().find(want), std::string::npos)
        << c.column << "=" << c.bad << ": " << w.status().message();
  }
}

TEST(JobsJsonl, JobFieldsAndBooleans) {
  auto w = ParseJobsJsonl(
      "{\"submit_s\":0,\"run_s\":5,\"gpus\":1,\"preemptible\":false,\"allow_split\":true,"
      "\"est_s\":null,\"locality\":\"pod!\"}\n"
      "{\"submit_s\":0,\"run_s\":5,\"gpus\":1,\"est_s\":9,\"kind\":\"interactive\"}\n",
      "j.jsonl");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_FALSE(w->jobs[0].preemptible);
  EXPECT_TRUE(w->jobs[0].allow_split);
  EXPECT_FALSE(w->jobs[0].has_estimate);
  EXPECT_EQ(w->jobs[0].locality.level, sched::Level::kPod);
  EXPECT_TRUE(w->jobs[0].locality.required);
  EXPECT_DOUBLE_EQ(w->jobs[1].estimate_s(), 9);
  EXPECT_EQ(w->jobs[1].kind, sched::JobKind::kInteractive);

  auto bad = ParseJobsJsonl("{\"submit_s\":0,\"run_s\":5,\"gpus\":1}\n"
                            "{\"submit_s\":0,\"run_s\":5,\"gpus\":1,\"preemptible\":\"nope\"}\n",
                            "j.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("j.jsonl:2: field 'preemptible'"), std::string::npos)
      << bad.status().message();
  auto boolnum = ParseJobsJsonl("{\"submit_s\":0,\"run_s\":5,\"gpus\":true}\n", "j.jsonl");
  ASSERT_FALSE(boolnum.ok());
  EXPECT_NE(boolnum.status().message().find("'gpus'"), std::string::npos);
}

TEST(JobsCsv, RejectsBadInputWithWhere) {
  auto unknown = ParseJobsCsv("submit_s,run_s,gpus,gpuz\n0,1,1,2\n", "j.csv");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown field 'gpuz'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("j.csv:1"), std::string::npos);

  auto missing = ParseJobsCsv("submit_s,gpus\n0,1\n", "j.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'run_s'"), std::string::npos);

  auto frac = ParseJobsCsv("submit_s,run_s,gpus,gpu_milli\n0,1,2,500\n", "j.csv");
  ASSERT_FALSE(frac.ok());
  EXPECT_NE(frac.status().message().find("j.csv:2: field 'gpu_milli'"), std::string::npos);

  auto comm = ParseJobsCsv("submit_s,run_s,gpus,comm\n0,1,2,1.5\n", "j.csv");
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("'comm'"), std::string::npos);

  auto empty_req = ParseJobsCsv("submit_s,run_s,gpus\n0,,2\n", "j.csv");
  ASSERT_FALSE(empty_req.ok());
  EXPECT_NE(empty_req.status().message().find("run_s"), std::string::npos);

  auto neg = ParseJobsCsv("submit_s,run_s,gpus\n-5,1,2\n", "j.csv");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("submit_s"), std::string::npos);
}

TEST(JobsJsonl, MatchesCsvExample) {
  auto csv = ParseJobsCsv(*ReadFile("testdata/sim/jobs.csv"), "jobs.csv");
  auto jsonl = ParseJobsJsonl(*ReadFile("testdata/sim/jobs.jsonl"), "jobs.jsonl");
  ASSERT_TRUE(csv.ok());
  ASSERT_TRUE(jsonl.ok()) << jsonl.status().ToString();
  ASSERT_EQ(csv->jobs.size(), jsonl->jobs.size());
  for (size_t i = 0; i < csv->jobs.size(); ++i) {
    const auto &a = csv->jobs[i], &b = jsonl->jobs[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.num_gpus, b.num_gpus);
    EXPECT_EQ(a.gpu_milli, b.gpu_milli);
    EXPECT_DOUBLE_EQ(a.run_s, b.run_s);
    EXPECT_DOUBLE_EQ(a.comm_fraction, b.comm_fraction);
    EXPECT_EQ(a.priority, b.priority);
    EXPECT_EQ(a.tenant, b.tenant);
    EXPECT_EQ(a.locality.level, b.locality.level);
    EXPECT_EQ(a.locality.required, b.locality.required);
    EXPECT_EQ(a.preemptible, b.preemptible);
    EXPECT_DOUBLE_EQ(a.min_runtime_s, b.min_runtime_s);
    EXPECT_EQ(a.has_estimate, b.has_estimate);
    EXPECT_DOUBLE_EQ(a.estimate_s(), b.estimate_s());
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.allow_split, b.allow_split);
  }
}

TEST(JobsJsonl, RejectsBadLines) {
  auto bad = ParseJobsJsonl("{\"submit_s\":0,\"run_s\":1,\"gpus\":1}\n{oops\n", "j.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("j.jsonl:2: not valid JSON"), std::string::npos);
  auto arr = ParseJobsJsonl("[1,2]\n", "j.jsonl");
  ASSERT_FALSE(arr.ok());
  auto type = ParseJobsJsonl("{\"submit_s\":0,\"run_s\":1,\"gpus\":[1]}\n", "j.jsonl");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("'gpus'"), std::string::npos);
  auto missing = ParseJobsJsonl("{\"submit_s\":0,\"gpus\":1}\n", "j.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'run_s'"), std::string::npos);
}

TEST(TraceFormat, ParsesNames) {
  EXPECT_EQ(*ParseTraceFormat("openb"), TraceFormat::kOpenb);
  EXPECT_EQ(*ParseTraceFormat("jobs-jsonl"), TraceFormat::kJobsJsonl);
  EXPECT_FALSE(ParseTraceFormat("csv").ok());
}

TEST(Workload, ScaleArrivalsKeepsFirstSubmitAndRunTimes) {
  Workload w;
  w.jobs.push_back({.submit_s = 100, .run_s = 5});
  w.jobs.push_back({.submit_s = 300, .run_s = 7});
  w.Finalize();
  w.ScaleArrivals(0.5);
  EXPECT_DOUBLE_EQ(w.jobs[0].submit_s, 100);
  EXPECT_DOUBLE_EQ(w.jobs[1].submit_s, 200);
  EXPECT_DOUBLE_EQ(w.jobs[1].run_s, 7);
}

TEST(Workload, ScaleDurationsScalesThenCapsRunTimesAndEstimates) {
  Workload w;
  w.description = "w";
  w.jobs.push_back({.submit_s = 0, .run_s = 1000});                 // exact estimate (est_s < 0)
  w.jobs.push_back({.submit_s = 10, .run_s = 100, .est_s = 400});   // an explicit estimate
  w.jobs.push_back({.submit_s = 20, .run_s = 50000, .min_runtime_s = 600});
  w.Finalize();
  StatusOr<int64_t> capped = w.ScaleDurations(0.5, 3600);
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  EXPECT_EQ(*capped, 1);  // 50000 x 0.5 = 25000 > 3600
  EXPECT_DOUBLE_EQ(w.jobs[0].run_s, 500);
  EXPECT_LT(w.jobs[0].est_s, 0);  // still "exact": the estimate follows run_s
  EXPECT_DOUBLE_EQ(w.jobs[0].estimate_s(), 500);
  EXPECT_DOUBLE_EQ(w.jobs[1].run_s, 50);
  EXPECT_DOUBLE_EQ(w.jobs[1].est_s, 200);
  EXPECT_DOUBLE_EQ(w.jobs[2].run_s, 3600);
  EXPECT_DOUBLE_EQ(w.jobs[2].min_runtime_s, 600);  // a preemption guard, not a duration
  EXPECT_DOUBLE_EQ(w.jobs[2].submit_s, 20);        // arrivals are --arrival-scale's
  EXPECT_NE(w.description.find("run times scaled by 0.5"), std::string::npos) << w.description;
  EXPECT_NE(w.description.find("capped at 3600 s (1 jobs capped)"), std::string::npos) << w.description;
  // A cap alone: an explicit estimate above it is capped too (a known wall-time limit).
  Workload v;
  v.jobs.push_back({.submit_s = 0, .run_s = 100, .est_s = 900});
  v.Finalize();
  ASSERT_TRUE(v.ScaleDurations(1, 300).ok());
  EXPECT_DOUBLE_EQ(v.jobs[0].run_s, 100);
  EXPECT_DOUBLE_EQ(v.jobs[0].est_s, 300);
}

TEST(Workload, ScaleDurationsRejectsBadFactorsAndChangesNothing) {
  Workload w;
  w.jobs.push_back({.submit_s = 0, .run_s = 100});
  w.Finalize();
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  using P = std::pair<double, double>;
  for (auto [factor, cap] : {P{0, 0}, P{-1, 0}, P{nan, 0}, P{inf, 0}, P{1, -5}, P{1, inf}}) {
    StatusOr<int64_t> r = w.ScaleDurations(factor, cap);
    EXPECT_FALSE(r.ok()) << factor << " " << cap;
    EXPECT_DOUBLE_EQ(w.jobs[0].run_s, 100);
  }
  EXPECT_NE(w.ScaleDurations(0, 0).status().message().find("duration scale"), std::string::npos);
  EXPECT_NE(w.ScaleDurations(1, -1).status().message().find("duration cap"), std::string::npos);
}

}  // namespace
}  // namespace gpool::sim
