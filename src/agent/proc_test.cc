#include "agent/proc.h"

#include <gtest/gtest.h>

namespace gpool::agent {
namespace {

const std::string kFixtures = "testdata/agent";

TEST(ProcTest, ParsesFixtureFiles) {
  auto mem = ReadMemInfo(kFixtures);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ(mem->total_bytes, 24683620ull * 1024);
  EXPECT_EQ(mem->available_bytes, 21560188ull * 1024);
  auto cpu = ReadCpuInfo(kFixtures);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->logical_cpus, 2);
  EXPECT_EQ(cpu->model, "Intel(R) Xeon(R) Platinum 8480+");
}

TEST(ProcTest, StatUtilization) {
  auto a = ParseProcStat("cpu  100 0 50 800 50 0 0 0 0 0\n");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->total, 1000u);
  EXPECT_EQ(a->busy, 150u);  // idle and iowait are not busy
  auto b = ParseProcStat("cpu  400 0 50 1100 50 0 0 0 0 0\n");
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(CpuUtilization(*a, *b), 0.5);  // 300 busy of 600 ticks
  EXPECT_EQ(CpuUtilization(*b, *b), 0);
}

TEST(ProcTest, BadInputNamesTheField) {
  auto m = ParseMemInfo("MemTotal: 12 kB\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("MemAvailable"), std::string::npos);
  m = ParseMemInfo("MemTotal: lots kB\nMemAvailable: 1 kB\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("meminfo:1: MemTotal"), std::string::npos) << m.status().ToString();
  EXPECT_FALSE(ParseCpuInfo("flags : fpu\n").ok());
  EXPECT_FALSE(ParseProcStat("intr 1\n").ok());
  EXPECT_FALSE(ParseProcStat("cpu  1 x 3 4\n").ok());
}

TEST(ProcTest, ThisMachine) {
  auto mem = ReadMemInfo();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_GT(mem->total_bytes, 64ull << 20);
  EXPECT_LE(mem->available_bytes, mem->total_bytes);
  auto cpu = ReadCpuInfo();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_GE(cpu->logical_cpus, 1);
  CpuSampler s;
  ASSERT_TRUE(s.Sample().ok());
  auto u = s.Sample();
  ASSERT_TRUE(u.ok());
  EXPECT_GE(*u, 0);
  EXPECT_LE(*u, 1);
}

}  // namespace
}  // namespace gpool::agent
