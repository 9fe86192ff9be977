#include "agent/task_runner.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/file.h"

namespace gpool::agent {
namespace {

using namespace std::chrono_literals;

class TaskRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpool_task_runner_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Polls until `n` exits were reported or 20 s passed (a liveness bound, not a timing check).
  std::vector<TaskExit> WaitExits(TaskRunner* r, size_t n) {
    std::vector<TaskExit> all;
    for (int i = 0; i < 2000 && all.size() < n; ++i) {
      for (auto& e : r->Poll()) all.push_back(e);
      if (all.size() < n) std::this_thread::sleep_for(10ms);
    }
    return all;
  }
  static bool Alive(int pid) {
    auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return false;
    size_t close = stat->rfind(')');
    return close != std::string::npos && stat->size() > close + 2 && (*stat)[close + 2] != 'Z';
  }
  std::filesystem::path dir_;
};

TEST_F(TaskRunnerTest, ExitStatusAndLogs) {
  TaskRunner r({.log_dir = dir_.string()});
  ASSERT_TRUE(r.Start({"j1", 0}, {"sh", "-c", "echo hello; echo oops >&2; exit 3"}, CurrentEnvironment()).ok());
  ASSERT_TRUE(r.Start({"j1", 1}, {"true"}, CurrentEnvironment()).ok());
  auto exits = WaitExits(&r, 2);
  ASSERT_EQ(exits.size(), 2u);
  for (const TaskExit& e : exits) {
    EXPECT_EQ(e.signal, 0);
    EXPECT_EQ(e.exit_code, e.key.second == 0 ? 3 : 0);
  }
  EXPECT_EQ(*ReadFile(r.LogPath({"j1", 0}, "out")), "hello\n");
  EXPECT_EQ(*ReadFile(r.LogPath({"j1", 0}, "err")), "oops\n");
  EXPECT_FALSE(r.running({"j1", 0}));
}

TEST_F(TaskRunnerTest, SignalledTaskReportsTheSignal) {
  TaskRunner r({.log_dir = dir_.string()});
  ASSERT_TRUE(r.Start({"j2", 0}, {"sh", "-c", "kill -KILL $$"}, CurrentEnvironment()).ok());
  auto exits = WaitExits(&r, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].signal, SIGKILL);
}

TEST_F(TaskRunnerTest, MissingCommandExits127) {
  TaskRunner r({.log_dir = dir_.string()});
  ASSERT_TRUE(r.Start({"j3", 0}, {"/nonexistent/gpool-no-such-binary"}, CurrentEnvironment()).ok());
  ASSERT_TRUE(r.Start({"j3", 1}, {}, CurrentEnvironment()).ok());
  auto exits = WaitExits(&r, 2);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].exit_code, 127);
  EXPECT_EQ(exits[1].exit_code, 127);
  EXPECT_NE(ReadFile(r.LogPath({"j3", 0}, "err"))->find("cannot start"), std::string::npos);
  EXPECT_NE(ReadFile(r.LogPath({"j3", 1}, "err"))->find("no command"), std::string::npos);
}

TEST_F(TaskRunnerTest, StopKillsTheWholeGroupEvenIfTermIsIgnored) {
  TaskRunner r({.log_dir = dir_.string(), .kill_grace = 200ms});
  std::string pidfile = (dir_ / "child.pid").string();
  std::filesystem::create_directories(dir_);
  // The task ignores SIGTERM and has a child in its group (which also ignores it).
  ASSERT_TRUE(r.Start({"j4", 0},
                      {"sh", "-c", "trap '' TERM; sleep 300 & echo $! > " + pidfile + "; wait"},
                      CurrentEnvironment()).ok());
  int child = 0;
  for (int i = 0; i < 2000 && child == 0; ++i) {
    auto s = ReadFile(pidfile);
    if (s.ok() && !s->empty() && s->back() == '\n') child = std::stoi(*s);
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(child, 0);
  ASSERT_TRUE(Alive(child));
  r.Stop({"j4", 0});
  // A stopped task's exit is not reported; wait until it is gone.
  for (int i = 0; i < 2000 && r.running({"j4", 0}); ++i) {
    EXPECT_TRUE(r.Poll().empty());
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(r.running({"j4", 0}));
  for (int i = 0; i < 500 && Alive(child); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(Alive(child)) << "the task's child survived";
}

TEST_F(TaskRunnerTest, LeftoverChildrenDieWithTheirTask) {
  TaskRunner r({.log_dir = dir_.string()});
  std::string pidfile = (dir_ / "bg.pid").string();
  std::filesystem::create_directories(dir_);
  ASSERT_TRUE(r.Start({"j5", 0}, {"sh", "-c", "sleep 300 & echo $! > " + pidfile}, CurrentEnvironment()).ok());
  auto exits = WaitExits(&r, 1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code, 0);
  int bg = std::stoi(*ReadFile(pidfile));
  for (int i = 0; i < 500 && Alive(bg); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(Alive(bg));
}

TEST(TaskEnvTest, WholeLocalGpus) {
  v1::TaskAssignment t;
  t.set_job_id("j00000007");
  t.set_task(2);
  t.set_num_tasks(4);
  t.set_gpu_mask(0b1010);
  std::vector<std::string> base = {"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1,2,3", "GPOOL_LEASE=stale"};
  auto env = BuildTaskEnv(t, {.node = "n1"}, base);
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=1,3"));
  EXPECT_TRUE(has("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  EXPECT_TRUE(has("GPOOL_JOB_ID=j00000007"));
  EXPECT_TRUE(has("GPOOL_TASK_INDEX=2"));
  EXPECT_TRUE(has("GPOOL_NUM_TASKS=4"));
  EXPECT_TRUE(has("GPOOL_NODE=n1"));
  for (const auto& e : env) EXPECT_NE(e.rfind("GPOOL_LEASE=", 0), 0u) << e;
  // With UUIDs (NVML), they name the devices.
  env = BuildTaskEnv(t, {.node = "n1", .gpu_uuids = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"}}, base);
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=GPU-b,GPU-d"));
  // No GPU: none visible.
  t.set_gpu_mask(0);
  env = BuildTaskEnv(t, {.node = "n1"}, base);
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES="));
}

TEST(TaskEnvTest, FractionWithoutLeaseIsToldItsShare) {
  v1::TaskAssignment t;
  t.set_job_id("j2");
  t.set_gpu_mask(0b100);
  t.set_gpu_milli(250);
  t.set_gpu_memory_bytes(1 << 30);
  auto env = BuildTaskEnv(t, {.node = "n1"}, {"GPOOL_GPU_MILLI=999"});
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=2"));
  EXPECT_TRUE(has("GPOOL_GPU_MILLI=250"));
  EXPECT_TRUE(has("GPOOL_GPU_MEMORY_BYTES=1073741824"));
  t.set_gpu_milli(0);
  env = BuildTaskEnv(t, {.node = "n1"}, {"GPOOL_GPU_MILLI=999"});
  for (const auto& e : env) EXPECT_NE(e.rfind("GPOOL_GPU_MILLI=", 0), 0u) << e;
}

TEST(TaskEnvTest, RemoteOrFractionalGpusUseTheRemotingRuntime) {
  v1::TaskAssignment t;
  t.set_job_id("j1");
  t.set_devices("host1:7000/0,host2:7000/3");
  t.set_lease("TOKEN");
  auto env = BuildTaskEnv(t, {.node = "n1", .client_lib_dir = "/opt/gpool/lib"},
                          {"CUDA_VISIBLE_DEVICES=0", "LD_LIBRARY_PATH=/usr/local/lib"});
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  EXPECT_TRUE(has("GPOOL_DEVICES=host1:7000/0,host2:7000/3"));
  EXPECT_TRUE(has("GPOOL_LEASE=TOKEN"));
  EXPECT_TRUE(has("LD_LIBRARY_PATH=/opt/gpool/lib:/usr/local/lib"));
  for (const auto& e : env) EXPECT_NE(e.rfind("CUDA_VISIBLE_DEVICES=", 0), 0u) << e;
}

}  // namespace
}  // namespace gpool::agent
