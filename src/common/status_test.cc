#include "common/status.h"

#include <gtest/gtest.h>

namespace gpool {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  GPOOL_ASSIGN_OR_RETURN(int h, Half(x));
  GPOOL_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Status::NotFound("job 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: job 7");
  EXPECT_EQ(s.WithContext("jobs.csv:3").ToString(), "NOT_FOUND: jobs.csv:3: job 7");
  EXPECT_EQ(Status::Ok().WithContext("x"), Status::Ok());
}

TEST(StatusTest, StatusOrPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  StatusOr<int> bad = Quarter(6);  // 6/2 = 3 is odd
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "odd");
  EXPECT_TRUE(Quarter(4).status().ok());
}

}  // namespace
}  // namespace gpool
