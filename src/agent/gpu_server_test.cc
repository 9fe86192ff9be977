#include "agent/gpu_server.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/file.h"

namespace gpool::agent {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GpuServerArgsTest, EmulatedGpusGetTheEmulatedBackendWithTheirCountAndMemory) {
  auto a = GpuServerArgs({.lease_key_file = "/k", .emulated_gpus = 2, .emulated_memory_bytes = 1 << 30,
                          .emulated_kernels = "/p.so", .emulated_launch_log = "/l"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(*a, ElementsAre("gpu-server", "--key", "/k", "--backend", "emulated", "--emulated-devices",
                              "2", "--emulated-memory", "1073741824", "--emulated-kernels", "/p.so",
                              "--emulated-launch-log", "/l"));
}

TEST(GpuServerArgsTest, RealGpusGetTheCudaBackendAndTheAdvertisedAddress) {
  auto a = GpuServerArgs({.advertise = "node7:7100", .lease_key_file = "/k", .log_level = "info"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(*a, ElementsAre("--log-level", "info", "gpu-server", "--key", "/k", "--backend", "cuda", "--advertise", "node7:7100"));
}

TEST(GpuServerArgsTest, RefusesNoLeaseKeyAndEmulatedFlagsOnRealGpus) {
  auto a = GpuServerArgs({.emulated_gpus = 2});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("--lease-key"));
  a = GpuServerArgs({.lease_key_file = "/k", .emulated_kernels = "/p.so"});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("--emulated-gpus"));
}

TEST(GpuServerBackoffTest, DoublesPerQuickFailureUpToTheMaximum) {
  SupervisorOptions o{.backoff_initial = 1000ms, .backoff_max = 5000ms};
  EXPECT_EQ(RestartBackoff(o, 1), 1000ms);
  EXPECT_EQ(RestartBackoff(o, 2), 2000ms);
  EXPECT_EQ(RestartBackoff(o, 3), 4000ms);
  EXPECT_EQ(RestartBackoff(o, 4), 5000ms);
  EXPECT_EQ(RestartBackoff(o, 40), 5000ms);
}

// The supervisor runs a stand-in server: a shell script that records its pid and --listen
// argument, prints the line `gpool gpu-server` prints, and sleeps (exec: the pid stays).
class GpuServerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gpool_gpu_server_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `prelude` runs first; then the script prints its address ($2; port 0 -> 4242) and sleeps.
  SupervisorOptions Fake(const std::string& prelude = "") {
    std::string d = dir_.string();
    std::string script = prelude + "\necho $$ >> " + d + "/pids; echo \"$2\" >> " + d +
                         "/listens; a=$2; case $a in *:0) a=${a%:0}:4242;; esac; "
                         "echo \"gpool gpu-server: listening on $a (backend emulated, transport tcp)\"; "
                         "exec sleep 1000";
    return {.exe = "/bin/sh", .args = {"-c", script, "fake-gpu-server"}, .log_dir = d + "/logs",
            .backoff_initial = 10ms, .backoff_max = 10ms, .stop_grace = 5000ms};
  }
  std::vector<std::string> Lines(const std::string& name) {
    std::vector<std::string> out;
    auto text = ReadFile((dir_ / name).string());
    if (!text.ok()) return out;
    for (std::string_view l : Split(*text, '\n')) {
      if (!l.empty()) out.emplace_back(l);
    }
    return out;
  }
  // Running and not a zombie.
  static bool Alive(int pid) {
    auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    if (!stat.ok()) return false;
    size_t close = stat->rfind(')');
    return close != std::string::npos && stat->size() > close + 2 && (*stat)[close + 2] != 'Z';
  }
  // No process with this id at all: neither running nor a zombie left unreaped.
  static bool Gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }
  std::filesystem::path dir_;
};

TEST_F(GpuServerSupervisorTest, StartWaitsForTheAddressAndStopLeavesNoZombie) {
  GpuServerSupervisor s(Fake());
  {
    Status st = s.Start(20s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_EQ(s.address(), "127.0.0.1:4242");
  int pid = s.pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(Alive(pid));
  s.Stop();
  EXPECT_EQ(s.pid(), -1);
  EXPECT_TRUE(Gone(pid));  // exited and reaped
}

TEST_F(GpuServerSupervisorTest, RestartsADeadServerOnThePortItPicked) {
  GpuServerSupervisor s(Fake());
  {
    Status st = s.Start(20s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  int first = s.pid();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // Liveness bound only: the restart comes after a 10 ms backoff.
  for (int i = 0; i < 2000 && (s.restarts() < 1 || s.pid() <= 0 || Lines("pids").size() < 2); ++i) {
    s.Poll();
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(s.restarts(), 1);
  EXPECT_NE(s.pid(), first);
  EXPECT_TRUE(Gone(first));  // the dead one was reaped
  // The first run picked port 4242 from :0; the second was told to listen there.
  EXPECT_THAT(Lines("listens"), ElementsAre("127.0.0.1:0", "127.0.0.1:4242"));
  EXPECT_EQ(s.address(), "127.0.0.1:4242");
}

TEST_F(GpuServerSupervisorTest, KillsWhatTheDeadServerLeftInItsGroup) {
  GpuServerSupervisor s(Fake("sleep 1000 & echo $! > " + dir_.string() + "/bg"));
  {
    Status st = s.Start(20s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  auto bg = Lines("bg");
  ASSERT_EQ(bg.size(), 1u);
  int bg_pid = std::stoi(bg[0]);
  EXPECT_TRUE(Alive(bg_pid));
  ASSERT_EQ(kill(s.pid(), SIGKILL), 0);
  for (int i = 0; i < 2000 && Alive(bg_pid); ++i) {
    s.Poll();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(Alive(bg_pid));
}

TEST_F(GpuServerSupervisorTest, AServerThatIgnoresSigtermIsKilled) {
  SupervisorOptions o = Fake("trap '' TERM");
  o.stop_grace = 100ms;
  GpuServerSupervisor s(o);
  {
    Status st = s.Start(20s);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  int pid = s.pid();
  s.Stop();
  EXPECT_TRUE(Gone(pid));
}

TEST_F(GpuServerSupervisorTest, StartReportsAServerThatEndsWithItsStderr) {
  SupervisorOptions o = Fake();
  o.args = {"-c", "echo 'gpool gpu-server: --key /nope: no such file' >&2; exit 2"};
  GpuServerSupervisor s(o);
  Status st = s.Start(20s);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("exit 2"));
  EXPECT_THAT(st.message(), HasSubstr("--key /nope: no such file"));
  EXPECT_EQ(s.pid(), -1);
}

// The agent killed with SIGKILL cannot stop its server: the kernel must (PR_SET_PDEATHSIG).
// This process becomes a subreaper, so the orphaned server is reparented here and its end
// (and how it ended) can be observed.
TEST_F(GpuServerSupervisorTest, AServerDiesWithAnAgentKilledWithSigkill) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    GpuServerSupervisor s(Fake());
    if (!s.Start(20s).ok()) _exit(3);  // seen by the parent as exit 3
    raise(SIGKILL);
    _exit(4);
  }
  int st = 0;
  ASSERT_EQ(waitpid(agent, &st, 0), agent);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the fake agent failed: " << st;
  auto pids = Lines("pids");
  ASSERT_EQ(pids.size(), 1u);
  int server = std::stoi(pids[0]);
  bool ended = false;
  for (int i = 0; i < 2000 && !ended; ++i) {  // liveness bound
    if (waitpid(server, &st, WNOHANG) == server) ended = true;
    else std::this_thread::sleep_for(10ms);
  }
  if (!ended) {
    kill(server, SIGKILL);
    waitpid(server, &st, 0);
  }
  (void)prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(ended) << "the server outlived its agent";
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

}  // namespace
}  // namespace gpool::agent
