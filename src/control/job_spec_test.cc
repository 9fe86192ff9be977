// Job spec files (job_spec.h): what a YAML file may not say. The parsing of every field is
// covered in controller_test.cc (JobSpecYaml.*).
#include "control/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpool::control {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Error(std::string_view yaml) {
  auto r = ParseJobSpecYaml(yaml, "job.yaml");
  return r.ok() ? "accepted" : r.status().message();
}

TEST(JobSpecTest, DuplicateKeysAreRefusedNamingBothLines) {
  // yaml-cpp keeps both entries, and the last used to win silently.
  EXPECT_EQ(Error("gpus: 1\ntenant: a\ngpus: 64\n"),
            "job.yaml:3: gpus: duplicate key: gpus is already set at line 1");
  // Two spellings of one field are the same key.
  EXPECT_THAT(Error("gpus: 1\nmemory: 1GiB\nmem: 2GiB\n"),
              HasSubstr("job.yaml:3: mem: duplicate key: memory is already set at line 2"));
  EXPECT_THAT(Error("gpu_fraction: 0.5\ngpu_milli: 250\n"),
              HasSubstr("job.yaml:2: gpu_milli: duplicate key: gpu_fraction is already set at line 1"));
}

TEST(JobSpecTest, NulBytesAreRefused) {
  // YAML's "\0" escape: a command argument that no argv can hold.
  EXPECT_EQ(Error("gpus: 1\ncommand: [python, \"train\\0.py\"]\n"),
            "job.yaml:2: command[1]: a NUL byte at position 5");
  EXPECT_EQ(Error("gpus: 1\ncommand: \"run \\0 now\"\n"),
            "job.yaml:2: command: a NUL byte at position 4");
  EXPECT_THAT(Error("gpus: 1\ngpu_model: \"H1\\x0000\"\n"), HasSubstr("gpu_model: a NUL byte"));
  // A raw NUL byte in the file.
  EXPECT_EQ(Error(std::string_view("gpus: 1\ncommand: [a]\n\0\n", 22)),
            "job.yaml:3: a NUL byte in the file");
}

TEST(JobSpecTest, DurationErrorsSayItOnce) {
  std::string e = Error("gpus: 1\nduration: -5s\n");
  EXPECT_EQ(e, "job.yaml:2: duration: must not be negative, got '-5s'");
  e = Error("gpus: 1\nduration: soon\n");
  EXPECT_THAT(e, HasSubstr("job.yaml:2: duration: want a duration"));
  EXPECT_THAT(e, Not(HasSubstr("duration: duration")));
  EXPECT_THAT(Error("gpus: 1\nmin_runtime: -1m\n"), HasSubstr("min_runtime: must not be negative"));
}

TEST(JobSpecTest, TenantAndRequestIdAreNames) {
  EXPECT_THAT(Error("gpus: 1\ntenant: \"evil\\nDefault=0x7fff : ALL=full ;\"\n"),
              HasSubstr("job.yaml:2: tenant: 'evil\\nDefault=0x7fff : ALL=full ;': character"));
  EXPECT_THAT(Error("gpus: 1\ntenant: 'x\"} 1'\n"), HasSubstr("character '\"' at position 1"));
  EXPECT_THAT(Error("gpus: 1\nrequest_id: a/b\n"), HasSubstr("job.yaml:2: request_id: 'a/b'"));
  auto ok = ParseJobSpecYaml("gpus: 1\ntenant: team_b.prod-2\nrequest_id: nightly-42\n", "j.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->tenant(), "team_b.prod-2");
}

TEST(JobSpecTest, RemoteAttachmentKeys) {
  auto ok = ParseJobSpecYaml("gpus: 4\ngpu_source: pooled\ngpu_within: leaf\nmax_slowdown: 1.1\n",
                             "j.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpu_source(), "pooled");
  EXPECT_EQ(ok->gpu_within(), "leaf");
  EXPECT_DOUBLE_EQ(ok->max_slowdown(), 1.1);
  // A slowdown below 1 would be a speed-up: refused at its line, naming the key.
  EXPECT_EQ(Error("gpus: 1\ngpu_source: remote\nmax_slowdown: 0.5\n"),
            "job.yaml:3: max_slowdown: want 0 (any) or a factor >= 1, got 0.5");
  EXPECT_THAT(Error("gpus: 1\nmax_slowdown: fast\n"), HasSubstr("job.yaml:2: max_slowdown"));
}

}  // namespace
}  // namespace gpool::control
