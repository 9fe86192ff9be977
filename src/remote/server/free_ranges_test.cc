#include "remote/server/free_ranges.h"

#include <gtest/gtest.h>

#include <map>

namespace gpool::remote::server {
namespace {

using Map = std::map<uint64_t, uint64_t>;

TEST(FreeRanges, FirstFitHonoursAlignmentAndTakeSplitsTheRange) {
  FreeRanges f;
  f.Add(0x1100, 0x10000);
  EXPECT_EQ(f.FindFirst(0x100, 1), 0x1100u);
  EXPECT_EQ(f.FindFirst(0x100, 0x1000), 0x2000u);  // the range's first aligned address
  EXPECT_EQ(f.FindFirst(0x10001, 1), 0u);           // fits nowhere
  f.Take(0x2000, 0x1000);
  EXPECT_EQ(f.ranges(), (Map{{0x1100, 0xf00}, {0x3000, 0xe100}}));
  EXPECT_TRUE(f.Holds(0x1100, 0xf00));
  EXPECT_FALSE(f.Holds(0x1100, 0xf01));  // runs into the taken part
  EXPECT_FALSE(f.Holds(0x2000, 1));
}

TEST(FreeRanges, GiveMergesWithBothNeighboursAndOnlyAdjacentOnes) {
  FreeRanges f;
  f.Add(0, 0x400);
  f.Take(0x100, 0x100);
  f.Take(0x300, 0x80);
  EXPECT_EQ(f.ranges(), (Map{{0, 0x100}, {0x200, 0x100}, {0x380, 0x80}}));
  f.Give(0x300, 0x80);  // between 0x200.. and 0x380..: one range
  EXPECT_EQ(f.ranges(), (Map{{0, 0x100}, {0x200, 0x200}}));
  f.Give(0x100, 0x100);
  EXPECT_EQ(f.ranges(), (Map{{0, 0x400}}));
  f.Take(0, 0x400);
  EXPECT_TRUE(f.ranges().empty());
  f.Give(0x40, 0x10);  // no neighbours: stands alone
  EXPECT_EQ(f.ranges(), (Map{{0x40, 0x10}}));
}

}  // namespace
}  // namespace gpool::remote::server
