#include "common/clock.h"

#include <gtest/gtest.h>

namespace gpool {
namespace {

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(100);
  EXPECT_EQ(c.NowNanos(), 100);
  c.AdvanceSeconds(1.5);
  EXPECT_EQ(c.NowNanos(), 1'500'000'100);
  c.SetNanos(7);
  EXPECT_EQ(c.NowNanos(), 7);
}

TEST(ClockTest, SystemClockIsMonotonic) {
  Clock* c = SystemClock::Default();
  int64_t a = c->NowNanos();
  int64_t b = c->NowNanos();
  EXPECT_LE(a, b);
  EXPECT_GT(a, 0);
}

}  // namespace
}  // namespace gpool
