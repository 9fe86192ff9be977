// The multi-tenant trace readers (Helios cluster_log.csv, Philly cluster_job_log) and the slice
// files: good inputs give the jobs worked out by hand, bad inputs an error naming file:line (or
// the Philly job) and the field, and mangled inputs never crash.
#include "sim/tenant_traces.h"

#include <string>

#include <gtest/gtest.h>

namespace gpool::sim {
namespace {

constexpr char kHeliosHeader[] =
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n";

std::string HeliosSample() {
  return std::string(kHeliosHeader) +
         "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n"
         "1425512,uVMrF,vchbv,16,32,2,FAILED,2020-06-09 18:41:27,2020-06-09 18:42:27,2020-06-09 18:46:36,249,60\n"
         "1425513,uzqls,vchbv,0,4,1,COMPLETED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-09 18:45:28,240,0\n"
         "1425514,uzqls,vcJkd,2,8,1,CANCELLED,2020-06-09 18:40:00,,,0,0\n"
         "1425515,uzqls,vcJkd,8,8,1,COMPLETED,2020-06-10 00:00:00,2020-06-10 00:00:00,2020-06-10 00:10:00,600,0\n";
}

std::string PhillySample() {
  return R"([
 {"status": "Pass", "vc": "6214e9", "jobid": "application_1", "user": "u1",
  "submitted_time": "2017-10-03 02:54:53",
  "attempts": [{"start_time": "2017-10-03 02:55:00", "end_time": "2017-10-03 03:00:00",
                "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]},
               {"start_time": "2017-10-03 03:10:00", "end_time": "2017-10-03 03:30:00",
                "detail": [{"ip": "m2", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]},
                           {"ip": "m3", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3"]}]}]},
 {"status": "Killed", "vc": "b436b2", "jobid": "application_2", "user": "u2",
  "submitted_time": "2017-10-03 02:54:50", "attempts": []},
 {"status": "Running", "vc": "b436b2", "jobid": "application_3", "user": "u2",
  "submitted_time": "2017-10-03 02:54:58",
  "attempts": [{"start_time": "2017-10-03 02:56:00", "end_time": null, "detail": []}]},
 {"status": "Pass", "vc": "b436b2", "jobid": "application_4", "user": "u3",
  "submitted_time": "2017-10-03 02:54:43",
  "attempts": [{"start_time": "2017-10-03 02:55:00", "end_time": "2017-10-03 02:55:30",
                "detail": [{"ip": "m4", "gpus": ["gpu3"]}]}]}
])";
}

TEST(TenantTraces, DateTimeIsSecondsSinceTheEpochAsWritten) {
  // Values from Python's calendar.timegm.
  EXPECT_EQ(*ParseTraceDateTime("2020-06-09 18:41:01", "t", "w"), 1591728061);
  EXPECT_EQ(*ParseTraceDateTime("2020-02-29 12:00:00", "t", "w"), 1582977600);
  EXPECT_EQ(*ParseTraceDateTime("1970-01-01 00:00:00", "t", "w"), 0);
  for (const char* bad : {"2021-02-29 00:00:00", "2020-13-01 00:00:00", "2020-06-09T18:41:01",
                          "2020-06-09 24:00:00", "2020-6-9 18:41:01", "", "None"}) {
    auto r = ParseTraceDateTime(bad, "submit_time", "f.csv:3");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("f.csv:3: field 'submit_time'"), std::string::npos)
        << r.status().message();
  }
}

TEST(TenantTraces, HeliosLogGivesOneJobPerGpuRow) {
  auto w = ParseHeliosLog(HeliosSample(), "cluster_log.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // The CPU-only row and the job that ran 0 s are skipped and counted.
  ASSERT_EQ(w->jobs.size(), 3u);
  EXPECT_EQ(w->total_skipped(), 2);
  // Sorted by submit time; times from the earliest submit (18:41:01).
  const SimJob& a = w->jobs[0];
  EXPECT_EQ(a.name, "helios-1425511");
  EXPECT_EQ(a.tenant, "vcJkd");
  EXPECT_EQ(a.num_gpus, 1);
  EXPECT_EQ(a.cpu_milli, 1000);
  EXPECT_EQ(a.submit_s, 0);
  EXPECT_EQ(a.run_s, 36848);
  EXPECT_FALSE(a.has_estimate);
  const SimJob& b = w->jobs[1];
  EXPECT_EQ(b.tenant, "vchbv");
  EXPECT_EQ(b.num_gpus, 16);
  EXPECT_EQ(b.cpu_milli, 32000);
  EXPECT_EQ(b.submit_s, 26);
  EXPECT_EQ(b.run_s, 249);
  EXPECT_EQ(w->jobs[2].submit_s, 5 * 3600 + 18 * 60 + 59);  // 2020-06-10 00:00:00, across midnight
  EXPECT_EQ(w->jobs[2].source, "cluster_log.csv:6");
}

TEST(TenantTraces, HeliosBadInputNamesLineAndField) {
  struct Case {
    std::string row, want;
  };
  const Case cases[] = {
      {"1,u,vcA,1,1,1,COMPLETED,2020-06-31 00:00:00,,,5,0", "log.csv:2: field 'submit_time'"},
      {"1,u,vcA,x,1,1,COMPLETED,2020-06-01 00:00:00,,,5,0", "log.csv:2: field 'gpu_num'"},
      {"1,u,vcA,-2,1,1,COMPLETED,2020-06-01 00:00:00,,,5,0", "log.csv:2: field 'gpu_num'"},
      {"1,u,vcA,1,1,1,COMPLETED,2020-06-01 00:00:00,,,-5,0", "log.csv:2: field 'duration'"},
      {"1,u,vcA,1,1,1,COMPLETED,2020-06-01 00:00:00,yesterday,,5,0", "log.csv:2: field 'start_time'"},
      {"1,u,vcA,1,1,1,COMPLETED,2020-06-01 00:00:00,,,5,-1", "log.csv:2: field 'queue'"},
      {"1,u,vc A,1,1,1,COMPLETED,2020-06-01 00:00:00,,,5,0", "log.csv:2: vc"},
      {"1,u,vcA,1,1,1,COMPLETED,2020-06-01 00:00:00,,5,0", "log.csv:2: expected 12 fields, got 11"},
  };
  for (const auto& c : cases) {
    auto w = ParseHeliosLog(std::string(kHeliosHeader) + c.row + "\n", "log.csv");
    ASSERT_FALSE(w.ok()) << c.row;
    EXPECT_NE(w.status().message().find(c.want), std::string::npos) << w.status().message();
  }
  auto missing = ParseHeliosLog("job_id,vc,gpu_num\n1,vcA,1\n", "log.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("log.csv:1"), std::string::npos) << missing.status().message();
  EXPECT_FALSE(ParseHeliosLog("", "log.csv").ok());
}

TEST(TenantTraces, PhillyJobLogSumsAttemptsAndTakesTheLastAttemptsGpus) {
  auto w = ParsePhillyJobLog(PhillySample(), "cluster_job_log");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  // application_2 never ran, application_3's attempt never ended: skipped and counted.
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_EQ(w->total_skipped(), 2);
  const SimJob& first = w->jobs[0];  // application_4, the earliest submit
  EXPECT_EQ(first.name, "application_4");
  EXPECT_EQ(first.tenant, "b436b2");
  EXPECT_EQ(first.submit_s, 0);
  EXPECT_EQ(first.num_gpus, 1);
  EXPECT_EQ(first.run_s, 30);
  const SimJob& j = w->jobs[1];
  EXPECT_EQ(j.name, "application_1");
  EXPECT_EQ(j.tenant, "6214e9");
  EXPECT_EQ(j.submit_s, 10);
  EXPECT_EQ(j.num_gpus, 8);             // 4 + 4 GPUs of its last attempt
  EXPECT_EQ(j.run_s, 5 * 60 + 20 * 60);  // both attempts held GPUs
  EXPECT_FALSE(j.has_estimate);
}

TEST(TenantTraces, PhillyBadInputNamesTheJobAndField) {
  auto parse_err = ParsePhillyJobLog("[\n{\"vc\": \"a\",\n \"jobid\": }\n]", "log.json");
  ASSERT_FALSE(parse_err.ok());
  EXPECT_NE(parse_err.status().message().find("log.json:3: not valid JSON"), std::string::npos)
      << parse_err.status().message();
  auto not_array = ParsePhillyJobLog("{}", "log.json");
  ASSERT_FALSE(not_array.ok());
  EXPECT_NE(not_array.status().message().find("expected a JSON array"), std::string::npos);
  struct Case {
    std::string job, want;
  };
  const std::string ok_attempt =
      R"("attempts": [{"start_time": "2017-10-03 02:55:00", "end_time": "2017-10-03 03:00:00", "detail": [{"ip": "m", "gpus": ["g"]}]}])";
  const Case cases[] = {
      {R"({"jobid": "j1", "submitted_time": "2017-10-03 02:54:53", )" + ok_attempt + "}",
       "job 0 (j1): field 'vc': missing"},
      {R"({"jobid": "j1", "vc": 7, "submitted_time": "2017-10-03 02:54:53", )" + ok_attempt + "}",
       "job 0 (j1): field 'vc': expected a string"},
      {R"({"jobid": "j1", "vc": "a", "submitted_time": "yesterday", )" + ok_attempt + "}",
       "job 0 (j1): field 'submitted_time'"},
      {R"({"jobid": "j1", "vc": "a", "submitted_time": "2017-10-03 02:54:53", "attempts": 3})",
       "job 0 (j1): field 'attempts'"},
      {R"({"jobid": "j1", "vc": "a", "submitted_time": "2017-10-03 02:54:53", "attempts": [{"start_time": "2017-10-03 03:00:00", "end_time": "2017-10-03 02:00:00", "detail": []}]})",
       "field 'attempts[0].end_time'"},
      {R"({"jobid": "j1", "vc": "a", "submitted_time": "2017-10-03 02:54:53", "attempts": [{"start_time": "2017-10-03 03:00:00", "end_time": "2017-10-03 04:00:00", "detail": [{"ip": "m", "gpus": 2}]}]})",
       "field 'attempts[0].detail[0].gpus'"},
  };
  for (const auto& c : cases) {
    auto w = ParsePhillyJobLog("[" + c.job + "]", "log.json");
    ASSERT_FALSE(w.ok()) << c.job;
    EXPECT_NE(w.status().message().find(c.want), std::string::npos) << w.status().message();
    EXPECT_EQ(w.status().message().rfind("log.json", 0), 0u) << w.status().message();
  }
}

// Fuzz-style: every truncation and a deterministic set of byte changes of a valid file either
// parse or fail with an error naming the file; none crashes (ASan/UBSan in CI).
TEST(TenantTraces, MangledInputsNeverCrash) {
  const std::string inputs[] = {HeliosSample(), PhillySample()};
  uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  const char junk[] = {',', '"', '\n', '\0', '-', '9', '[', '}', ':', ' ', '\xff', 'e'};
  for (int which = 0; which < 2; ++which) {
    const std::string& good = inputs[which];
    auto check = [&](const std::string& text) {
      auto w = which == 0 ? ParseHeliosLog(text, "mangled") : ParsePhillyJobLog(text, "mangled");
      if (!w.ok()) {
        EXPECT_EQ(w.status().message().rfind("mangled", 0), 0u) << w.status().message();
      }
    };
    for (size_t n = 0; n < good.size(); n += 3) check(good.substr(0, n));
    for (int k = 0; k < 400; ++k) {
      std::string t = good;
      const int edits = 1 + static_cast<int>(next() % 3);
      for (int e = 0; e < edits; ++e) {
        const size_t at = next() % t.size();
        switch (next() % 3) {
          case 0: t[at] = junk[next() % sizeof(junk)]; break;
          case 1: t.erase(at, 1 + next() % 8); break;
          default: t.insert(at, 1, junk[next() % sizeof(junk)]); break;
        }
        if (t.empty()) t = "x";
      }
      check(t);
    }
  }
}

TEST(TenantTraces, SlicesFromHeliosVcTablesLucidAndPlainCsv) {
  const std::string helios =
      "date,vcA,vcB,vcC,total\n"
      "2020-09-01,64,0,16,80\n"
      "2020-09-02,72,8,16,96\n";
  auto last = ParseSlices(helios, "gpu_number.csv", "", 8);
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  ASSERT_EQ(last->size(), 3u);
  EXPECT_EQ((*last)[0].tenant, "vcA");
  EXPECT_EQ((*last)[0].gpus, 72);
  EXPECT_EQ((*last)[1].gpus, 8);
  EXPECT_EQ((*last)[2].where, "gpu_number.csv:3");
  // A VC with no GPUs that day has no slice.
  auto first = ParseSlices(helios, "gpu_number.csv", "2020-09-01", 8);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[1].tenant, "vcC");
  EXPECT_FALSE(ParseSlices(helios, "gpu_number.csv", "2020-10-01", 8).ok());
  auto bad_total = ParseSlices("date,vcA,total\n2020-09-01,8,9\n", "g.csv", "", 8);
  ASSERT_FALSE(bad_total.ok());
  EXPECT_NE(bad_total.status().message().find("g.csv:2: field 'total'"), std::string::npos);

  // Lucid's vc_config.csv: nodes.
  auto lucid = ParseSlices(",num\nvcEwI,9\nvcgkz,1\n", "vc_config.csv", "", 8);
  ASSERT_TRUE(lucid.ok()) << lucid.status().ToString();
  EXPECT_EQ((*lucid)[0].gpus, 72);
  EXPECT_EQ((*lucid)[1].gpus, 8);
  auto gpus = ParseSlices("tenant,gpus\na,12\nb,4\n", "s.csv", "", 8);
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ((*gpus)[0].gpus, 12);

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"team,size\na,1\n", "s.csv:1: unknown slices header"},
           {"tenant,gpus\na,1\na,2\n", "s.csv:3: tenant 'a' listed twice"},
           {"tenant,gpus\na,-1\n", "s.csv:2: field 'gpus'"},
           {"tenant,gpus\na,x\n", "s.csv:2: field 'gpus'"},
           {"tenant,gpus\na,0\n", "no tenant has GPUs"},
           {"tenant,gpus\na b,1\n", "s.csv:2: tenant"}}) {
    auto r = ParseSlices(text, "s.csv", "", 8);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace gpool::sim
