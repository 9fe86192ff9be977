#include "slurm/run_command.h"

#include <gtest/gtest.h>

namespace gpool::slurm {
namespace {

TEST(RunCommand, CapturesOutputErrorAndExitStatus) {
  StatusOr<CommandResult> r =
      RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 30);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
}

TEST(RunCommand, ArgumentsAreNeverSeenByAShell) {
  StatusOr<CommandResult> r = RunCommand({"printf", "%s|", "a b", "$(echo x)", ";true"}, 30);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "a b|$(echo x)|;true|");
}

TEST(RunCommand, ASignalIsReportedAs128PlusIt) {
  StatusOr<CommandResult> r = RunCommand({"/bin/sh", "-c", "kill -9 $$"}, 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 128 + 9);
}

TEST(RunCommand, AProgramThatCannotStartIsNamed) {
  StatusOr<CommandResult> r = RunCommand({"/nonexistent/gpool", "jobs"}, 30);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/gpool"), std::string::npos);
}

TEST(RunCommand, OneThatRunsPastItsBoundIsKilled) {
  StatusOr<CommandResult> r = RunCommand({"sleep", "30"}, 0.2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("sleep 30"), std::string::npos);
}

}  // namespace
}  // namespace gpool::slurm
