#include "sim/workload_gen.h"

#include <gtest/gtest.h>

#include "common/file.h"

namespace gpool::sim {
namespace {

std::vector<double> Runtimes() {
  auto text = ReadFile("testdata/sim/philly_runtime_sample.csv");
  EXPECT_TRUE(text.ok());
  auto r = ReadRuntimes(*text, "philly.csv");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

TEST(Synthetic, ReadsRuntimeList) {
  auto r = Runtimes();
  EXPECT_EQ(r.size(), 40u);
  auto bad = ReadRuntimes("runtime\n5\nx\n", "r.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("r.csv:3"), std::string::npos);
}

TEST(Synthetic, DeterministicGivenSeedAndWithinBounds) {
  SyntheticOptions o;
  o.jobs = 2000;
  o.max_gpus = 256;
  o.seed = 7;
  auto a = GenerateSynthetic(o, Runtimes(), 1024);
  auto b = GenerateSynthetic(o, Runtimes(), 1024);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->jobs.size(), 2000u);
  bool any_big = false;
  for (size_t i = 0; i < a->jobs.size(); ++i) {
    const auto& j = a->jobs[i];
    EXPECT_EQ(j.submit_s, b->jobs[i].submit_s);
    EXPECT_EQ(j.num_gpus, b->jobs[i].num_gpus);
    EXPECT_EQ(j.run_s, b->jobs[i].run_s);
    EXPECT_GE(j.num_gpus, 1);
    EXPECT_LE(j.num_gpus, 256);
    EXPECT_EQ(j.num_gpus & (j.num_gpus - 1), 0) << "gang sizes are powers of two";
    EXPECT_GE(j.run_s, o.min_run_s);
    EXPECT_LE(j.run_s, o.max_run_s);
    if (j.num_gpus == 1) {
      EXPECT_EQ(j.comm_fraction, 0);
    }
    if (j.num_gpus > 1) {
      EXPECT_GE(j.comm_fraction, o.comm_min);
      EXPECT_LE(j.comm_fraction, o.comm_max);
    }
    if (j.num_gpus >= 64) any_big = true;
    if (i > 0) {
      EXPECT_LE(a->jobs[i - 1].submit_s, j.submit_s);
    }
  }
  EXPECT_TRUE(any_big);
  o.seed = 8;
  auto c = GenerateSynthetic(o, Runtimes(), 1024);
  int same = 0;
  for (size_t i = 0; i < c->jobs.size(); ++i) same += c->jobs[i].num_gpus == a->jobs[i].num_gpus;
  EXPECT_LT(same, 1900);
}

TEST(Synthetic, LoadSetsArrivalRate) {
  // With fixed run times and the offered load L on G GPUs, the mean gap is mean_gpus*run/(L*G).
  SyntheticOptions o;
  o.jobs = 20000;
  o.max_gpus = 1;  // every job 1 GPU
  o.day_amplitude = 0;
  o.load = 0.5;
  auto w = GenerateSynthetic(o, {1000.0}, 100);
  ASSERT_TRUE(w.ok());
  double span = w->jobs.back().submit_s - w->jobs.front().submit_s;
  double gap = span / (o.jobs - 1);
  EXPECT_NEAR(gap, 1000.0 / (0.5 * 100), 1.0);  // 20 s, within 5%
}

TEST(Synthetic, SpecParsing) {
  auto o = ParseSyntheticSpec("jobs=500,load=0.7,max_gpus=64,frac=0.2", {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->jobs, 500);
  EXPECT_DOUBLE_EQ(o->load, 0.7);
  EXPECT_EQ(o->max_gpus, 64);
  EXPECT_DOUBLE_EQ(o->frac_share, 0.2);
  auto bad_key = ParseSyntheticSpec("jobz=5", {});
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("'jobz'"), std::string::npos);
  EXPECT_FALSE(ParseSyntheticSpec("load=abc", {}).ok());
  EXPECT_FALSE(ParseSyntheticSpec("day_amplitude=2", {}).ok());
  EXPECT_FALSE(ParseSyntheticSpec("comm_min=0.9,comm_max=0.1", {}).ok());
}

TEST(Synthetic, GangDistributionSumsToOne) {
  auto d = GangSizeDistribution(1024);
  ASSERT_EQ(d.size(), 11u);
  EXPECT_EQ(d.back().first, 1024);
  double s = 0;
  for (auto& [g, w] : d) s += w;
  EXPECT_NEAR(s, 1.0, 1e-12);
}

}  // namespace
}  // namespace gpool::sim
