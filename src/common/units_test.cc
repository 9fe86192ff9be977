#include "common/units.h"

#include <gtest/gtest.h>

namespace gpool {
namespace {

TEST(UnitsTest, ParseBytes) {
  EXPECT_EQ(*ParseBytes("8GiB"), 8 * kGiB);
  EXPECT_EQ(*ParseBytes("512 MiB"), 512 * kMiB);
  EXPECT_EQ(*ParseBytes("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("2g"), 2 * kGiB);
  EXPECT_FALSE(ParseBytes("GiB").ok());
  StatusOr<uint64_t> bad = ParseBytes("3 parsecs");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("parsecs"), std::string::npos);
}

TEST(UnitsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(8 * kGiB), "8 GiB");
  EXPECT_EQ(FormatBytes(kMiB + kMiB / 2), "1.5 MiB");
  EXPECT_EQ(FormatBytes(100), "100 B");
}

TEST(UnitsTest, RatesAndDurations) {
  EXPECT_DOUBLE_EQ(ParseGbps("400Gb/s")->value, 400);
  EXPECT_DOUBLE_EQ(ParseGbps("200")->value, 200);
  EXPECT_DOUBLE_EQ(Gbps{400}.bytes_per_second(), 50e9);
  EXPECT_FALSE(ParseGbps("400MB/s").ok());
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("1h"), 3600);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseDurationSeconds("90"), 90);
  EXPECT_FALSE(ParseDurationSeconds("5 fortnights").ok());
  StatusOr<double> negative = ParseDurationSeconds("-5s");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(), "duration '-5s': must not be negative");
}

}  // namespace
}  // namespace gpool
