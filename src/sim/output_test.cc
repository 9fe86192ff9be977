// The simulator's report (all four plots, the JCT CDF per policy) and the synthetic generator's
// daily cycle and run-time sampling: behaviour the other tests only touch in passing.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>
#include <string>

#include "sim/baselines.h"
#include "sim/engine.h"
#include "sim/report.h"
#include "sim/test_util.h"
#include "sim/workload_gen.h"

namespace gpool::sim {
namespace {

using test::Job;

// The text of the section under heading `h2` (up to the next <h2 or the end).
std::string Section(const std::string& html, const std::string& h2) {
  const size_t at = html.find("<h2>" + h2);
  if (at == std::string::npos) return "";
  const size_t end = html.find("<h2", at + 4);
  return html.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(Report, HasAllFourPlotsAndAJctCurvePerPolicy) {
  SimCluster c = test::OneLeaf(2);
  Workload w;
  w.jobs = {Job(0, 100, 8), Job(10, 50, 16), Job(20, 10, 8), Job(30, 20, 1)};
  w.Finalize();
  std::vector<RunResult> runs;
  std::vector<Metrics> ms;
  for (const char* name : {"fifo", "slurm"}) {
    auto p = MakePolicy(name, {});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto r = RunSimulation(c, w, **p, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ms.push_back(ComputeMetrics(*r));
    runs.push_back(std::move(*r));
  }
  std::string html = ReportHtml({.workload = "w", .cluster = "c"}, runs, ms);
  for (const char* h : {"GPU allocation over time", "JCT CDF", "Average queue wait by gang size",
                        "Energy"}) {
    std::string s = Section(html, h);
    ASSERT_FALSE(s.empty()) << "no section " << h;
    EXPECT_NE(s.find("<svg"), std::string::npos) << "no plot under " << h;
    EXPECT_NE(s.find("</svg>"), std::string::npos) << "unclosed plot under " << h;
  }
  // The JCT CDF draws one curve per policy, and its legend names both.
  std::string cdf = Section(html, "JCT CDF");
  EXPECT_NE(cdf.find("fifo"), std::string::npos);
  EXPECT_NE(cdf.find("slurm"), std::string::npos);
  std::set<std::string> strokes;  // one colour per curve
  for (size_t at = cdf.find("<polyline"); at != std::string::npos; at = cdf.find("<polyline", at + 1)) {
    const size_t st = cdf.find("stroke='", at);
    ASSERT_NE(st, std::string::npos);
    strokes.insert(cdf.substr(st, cdf.find('\'', st + 8) - st));
  }
  EXPECT_EQ(strokes.size(), 2u);
}

// Arrivals per hour of the day over many days (hour 6 is the sine's peak, hour 18 its trough).
std::array<int, 24> ArrivalsByHour(double amplitude) {
  SyntheticOptions o;
  o.jobs = 12000;
  o.jobs_per_hour = 50;  // 10 days
  o.max_gpus = 1;
  o.day_amplitude = amplitude;
  o.seed = 3;
  auto w = GenerateSynthetic(o, {600.0}, 64);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  std::array<int, 24> by_hour{};
  if (!w.ok()) return by_hour;
  for (const SimJob& j : w->jobs) ++by_hour[static_cast<int>(std::fmod(j.submit_s, 86400.0) / 3600.0)];
  return by_hour;
}

int Window(const std::array<int, 24>& h, int from, int to) {
  int n = 0;
  for (int i = from; i < to; ++i) n += h[i];
  return n;
}

TEST(Synthetic, ArrivalRateFollowsTheDailyCycle) {
  // rate(t) = base (1 + a sin(2 pi t / 1 day)): with a = 0.8 hours 4-8 get about
  // (1 + 0.8 x 0.95) / (1 - 0.8 x 0.95) = 7x the arrivals of hours 16-20.
  std::array<int, 24> cyc = ArrivalsByHour(0.8);
  EXPECT_GT(Window(cyc, 4, 8), 4 * Window(cyc, 16, 20));
  // Without amplitude the two windows see the same rate.
  std::array<int, 24> flat = ArrivalsByHour(0);
  const double ratio = static_cast<double>(Window(flat, 4, 8)) / Window(flat, 16, 20);
  EXPECT_GT(ratio, 0.8);
  EXPECT_LT(ratio, 1.25);
}

TEST(Synthetic, RunTimesAreDrawnFromTheListAndClamped) {
  SyntheticOptions o;
  o.jobs = 600;
  o.max_gpus = 8;
  o.min_run_s = 60;
  o.max_run_s = 86400;
  auto w = GenerateSynthetic(o, {10, 300, 7000, 1e6}, 64);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::set<double> seen;
  for (const SimJob& j : w->jobs) seen.insert(j.run_s);
  // 10 s is clamped up to 60, 1e6 down to a day; nothing outside the list appears.
  EXPECT_EQ(seen, (std::set<double>{60, 300, 7000, 86400}));
}

}  // namespace
}  // namespace gpool::sim
