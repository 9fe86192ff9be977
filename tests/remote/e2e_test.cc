// End to end: unmodified CUDA programs (examples/cuda, built with nvcc -cudart shared) run through
// `gpool run` against `gpool gpu-server --backend emulated` processes, over TCP and UCX.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/file.h"
#include "remote/client/link.h"
#include "remote/lease/lease.h"
#include "remote/protocol/messages.h"
#include "subprocess.h"

namespace gpool::remote {
namespace {

using testing::Run;
using testing::Subprocess;

std::string Sample(const std::string& name) { return std::string(GPOOL_SAMPLES_DIR) + "/" + name; }

// A gpu-server child on a free port.
class Server {
 public:
  explicit Server(std::vector<std::string> extra = {}, std::string transport = "tcp") {
    std::vector<std::string> argv = {GPOOL_BIN, "--log-level", "info", "gpu-server", "--backend",
                                     "emulated", "--emulated-kernels", GPOOL_KERNELS_PLUGIN,
                                     "--transport", transport};
    bool keyed = false, listen = false;
    for (auto& e : extra) keyed |= e == "--key", listen |= e == "--listen";
    if (!keyed) argv.push_back("--insecure");
    if (!listen) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc_ = std::make_unique<Subprocess>(argv);
    const std::string mark = "listening on ";
    if (!proc_->WaitFor(" (backend", 20000)) {
      ADD_FAILURE() << "gpu-server did not start:\n" << proc_->output();
      return;
    }
    const std::string& out = proc_->output();
    size_t at = out.find(mark) + mark.size();
    address_ = out.substr(at, out.find(' ', at) - at);
  }
  const std::string& address() const { return address_; }
  Subprocess& proc() { return *proc_; }

 private:
  std::unique_ptr<Subprocess> proc_;
  std::string address_;
};

std::pair<int, std::string> RunSample(const std::string& devices, std::vector<std::string> argv,
                                      std::string transport = "tcp",
                                      std::vector<std::string> extra_flags = {}) {
  std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", devices, "--transport", transport};
  cmd.insert(cmd.end(), extra_flags.begin(), extra_flags.end());
  cmd.push_back("--");
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return Run(cmd);
}

class E2E : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Sample("vector_add"))) {
      FAIL() << "CUDA samples missing in " << GPOOL_SAMPLES_DIR
             << ": nvcc was not found at configure time (set CUDA_HOME and re-run cmake)";
    }
  }
};

TEST_P(E2E, VectorAdd) {
  Server s({}, GetParam());
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("vector_add"), "100000"}, GetParam());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS vector_add n=100000"), std::string::npos) << out;
  EXPECT_NE(out.find("gpool emulated GPU 0"), std::string::npos) << out;
}

TEST_P(E2E, StructParamsArriveByteExact) {
  Server s({}, GetParam());
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("struct_param")}, GetParam());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS struct_param"), std::string::npos) << out;
}

TEST_P(E2E, StreamsAndEvents) {
  Server s({}, GetParam());
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("streams_events")}, GetParam());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS streams_events"), std::string::npos) << out;
}

TEST_P(E2E, SymbolsAndConstants) {
  Server s({}, GetParam());
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("symbols")}, GetParam());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS symbols"), std::string::npos) << out;
}

TEST_P(E2E, MemcpyOneByteTo256MiB) {
  Server s({}, GetParam());
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("memcpy_sizes"), "268435456"}, GetParam());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS memcpy_sizes max=268435456"), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(Transports, E2E, ::testing::Values("tcp", "ucx"));

class E2ETcp : public E2E {};

TEST_F(E2ETcp, TwoServersAggregated) {
  Server a, b({"--emulated-devices", "2"});
  std::string devices = a.address() + "/0," + b.address() + "/0," + b.address() + "/1";
  auto [rc, out] = RunSample(devices, {Sample("multi_device"), "3"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS multi_device devices=3"), std::string::npos) << out;
}

TEST_F(E2ETcp, WildcardListenTellsClientsTheAddressTheyReached) {
  // Bound to 0.0.0.0, the server must send clients to the address they reached it at, never to
  // 0.0.0.0 (which only happens to work on the same host).
  Server s({"--listen", "0.0.0.0:0"});
  ASSERT_EQ(s.address().rfind("0.0.0.0:", 0), 0u) << s.address();
  std::string reached = "127.0.0.1:" + s.address().substr(8);
  auto [rc, out] = RunSample(reached + "/0", {Sample("vector_add"), "1000"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS vector_add"), std::string::npos) << out;
  ASSERT_TRUE(s.proc().WaitFor(" in worker ", 10000)) << s.proc().output();
  EXPECT_NE(s.proc().output().find(" at 127.0.0.1:"), std::string::npos) << s.proc().output();
  EXPECT_EQ(s.proc().output().find(" at 0.0.0.0:"), std::string::npos) << s.proc().output();
}

TEST_F(E2ETcp, MemoryLimitOverrun) {
  Server s({"--session-mem-limit", "1GiB"});
  // 2 GiB: over the limit, well under the 16 GiB emulated device; the limit is also what
  // cudaMemGetInfo and totalGlobalMem report.
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("error_paths"), "oom", "2048", "1073741824"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS error_paths oom"), std::string::npos) << out;
  EXPECT_NE(out.find("session's memory limit is 1073741824 bytes"), std::string::npos) << out;
}

TEST_F(E2ETcp, AsyncErrorsSurfaceAtNextSync) {
  Server s;
  for (const char* mode : {"launch-fail", "no-kernel", "bad-pointer"}) {
    auto [rc, out] = RunSample(s.address() + "/0", {Sample("error_paths"), mode});
    EXPECT_EQ(rc, 0) << mode << "\n" << out;
    EXPECT_NE(out.find(std::string("PASS error_paths ") + mode), std::string::npos) << out;
  }
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("error_paths"), "launch-fail"});
  EXPECT_NE(out.find("kernel _Z11alwaysFailsPi failed: illegal address"), std::string::npos) << out;
  auto [rc2, out2] = RunSample(s.address() + "/0", {Sample("error_paths"), "no-kernel"});
  EXPECT_NE(out2.find("no CPU implementation of kernel _Z19noCpuImplementationPi"),
            std::string::npos) << out2;
}

TEST_F(E2ETcp, UnsupportedCallsFailLoudly) {
  Server s;
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("error_paths"), "unsupported"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("cudaGraphCreate is not supported by the gpool client runtime"),
            std::string::npos) << out;
  EXPECT_NE(out.find("cudaMallocManaged is not supported"), std::string::npos) << out;
  EXPECT_NE(out.find("cudaFuncSetAttribute(attribute 8, value 102400) is not supported"),
            std::string::npos) << out;
}

TEST_F(E2ETcp, NoDevicesIsAClearError) {
  auto [rc, out] = testing::Run({Sample("vector_add")},
                       {"LD_LIBRARY_PATH=" + std::filesystem::path(GPOOL_BIN).parent_path().parent_path().string() + "/lib",
                        "GPOOL_DEVICES="});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("GPOOL_DEVICES is not set"), std::string::npos) << out;
}

TEST_F(E2ETcp, UnreachableServerIsAClearError) {
  auto [rc, out] = RunSample("127.0.0.1:1/0", {Sample("error_paths"), "refused"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("GPU server 127.0.0.1:1 unreachable"), std::string::npos) << out;
}

// Pid of the session worker, from the server's log line "... in worker PID at ...".
pid_t WorkerPid(Subprocess& server) {
  if (!server.WaitFor(" in worker ", 10000)) return -1;
  const std::string& out = server.output();
  size_t at = out.rfind(" in worker ") + 11;
  return static_cast<pid_t>(std::atoi(out.c_str() + at));
}

TEST_F(E2ETcp, KilledClientFreesItsMemory) {
  Server s;
  Subprocess client({GPOOL_BIN, "run", "--devices", s.address() + "/0", "--",
                     Sample("error_paths"), "hold", "256"});
  ASSERT_TRUE(client.WaitFor("READY", 60000)) << client.output();
  pid_t worker = WorkerPid(s.proc());
  ASSERT_GT(worker, 0) << s.proc().output();
  ASSERT_EQ(kill(worker, 0), 0);
  auto t0 = std::chrono::steady_clock::now();
  client.Kill(SIGKILL);
  client.Wait();
  // The worker exits when its client's connection drops; the OS then frees all its memory.
  // The target is 1 s; the bound here is loose so a loaded CI machine does not flake.
  while (kill(worker, 0) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double s_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(kill(worker, 0), 0) << "worker " << worker << " still alive";
  RecordProperty("worker_exit_seconds", std::to_string(s_taken));
  std::printf("worker exited %.3f s after its client was killed\n", s_taken);
}

TEST_F(E2ETcp, KilledServerIsReportedNotAHang) {
  auto s = std::make_unique<Server>();
  Subprocess client({GPOOL_BIN, "run", "--devices", s->address() + "/0", "--",
                     Sample("error_paths"), "server-dies"});
  ASSERT_TRUE(client.WaitFor("READY", 60000)) << client.output();
  s->proc().Kill(SIGKILL);
  s->proc().Wait();
  client.WriteStdin("go\n");
  int rc = client.Wait(60000);
  EXPECT_EQ(rc, 0) << client.output();
  EXPECT_NE(client.output().find("lost the GPU server"), std::string::npos) << client.output();
}

// Four bytes under the Launch op: its body does not decode.
struct Liar {
  static constexpr proto::Op kOp = proto::Op::kLaunch;
  uint32_t x = 7;
  template <class V> void Visit(V& v) { v(x, "x"); }
};

TEST_F(E2ETcp, MalformedFrameClosesOnlyThatSession) {
  Server s;
  // A healthy session, then a second one that sends garbage on its data connection.
  auto good = client::ServerLink::Connect({.address = s.address()});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  auto bad = client::ServerLink::Connect({.address = s.address()});
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  // A launch frame with a truncated body: the worker must drop the session.
  proto::ReplyHead head;
  proto::Empty none;
  proto::Ping ping;
  ASSERT_TRUE((*bad)->Call(ping, &head, &none).ok());
  Liar liar;
  ASSERT_TRUE((*bad)->Post(liar).ok());
  Status st = (*bad)->Call(ping, &head, &none);
  EXPECT_FALSE(st.ok()) << "the worker answered after a malformed frame";
  EXPECT_TRUE(s.proc().WaitFor("decoding Launch", 10000)) << s.proc().output();
  // The other session and new ones still work.
  EXPECT_TRUE((*good)->Call(ping, &head, &none).ok());
  auto again = client::ServerLink::Connect({.address = s.address()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Call(ping, &head, &none).ok());
}

TEST_F(E2ETcp, LeaseIsRequiredAndChecked) {
  std::string key(64, 'a');
  std::string key_file = ::testing::TempDir() + "/gpool_lease_" + std::to_string(getpid()) + ".key";
  ASSERT_TRUE(WriteFileAtomic(key_file, key).ok());
  Server s({"--key", key_file, "--emulated-devices", "2"});
  auto authority = LeaseAuthority::Create(std::string(32, '\xaa'));
  ASSERT_TRUE(authority.ok()) << authority.status().ToString();
  auto token = authority->Issue({.gpu = s.address() + "/0", .memory_bytes = 1 << 30},
                                *UnixClock::Default());
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  // A valid lease: the program runs, within the lease's memory.
  auto [rc, out] = RunSample(s.address() + "/0", {Sample("vector_add"), "1000"}, "tcp",
                             {"--lease", *token});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS vector_add"), std::string::npos) << out;
  // Over the lease's 1 GiB, under the 16 GiB device; the lease's limit is what the program sees.
  auto [rc_oom, out_oom] = RunSample(s.address() + "/0",
                                     {Sample("error_paths"), "oom", "2048", "1073741824"}, "tcp",
                                     {"--lease", *token});
  EXPECT_EQ(rc_oom, 0) << out_oom;
  EXPECT_NE(out_oom.find("PASS error_paths oom"), std::string::npos) << out_oom;
  EXPECT_NE(out_oom.find("its lease's memory limit is 1073741824 bytes"), std::string::npos)
      << out_oom;
  // The lease names GPU 0: the same server's GPU 1 is refused, naming it.
  auto [rc_dev, out_dev] = RunSample(s.address() + "/1", {Sample("vector_add"), "1000"}, "tcp",
                                     {"--lease", *token});
  EXPECT_NE(rc_dev, 0) << out_dev;
  EXPECT_NE(out_dev.find("on GPU " + s.address() + "/1 refused: this session's lease covers only " +
                         s.address() + "/0"),
            std::string::npos) << out_dev;
  // Several tokens: each GPU gets its own lease's limits, not the first token's (GPU 1's lease
  // has no memory limit; GPU 0's 1 GiB still applies).
  auto token1 = authority->Issue({.gpu = s.address() + "/1"}, *UnixClock::Default());
  ASSERT_TRUE(token1.ok());
  auto [rc_two, out_two] = RunSample(s.address() + "/0",
                                     {Sample("error_paths"), "oom", "2048", "1073741824"}, "tcp",
                                     {"--lease", *token1 + "," + *token});
  EXPECT_EQ(rc_two, 0) << out_two;
  EXPECT_NE(out_two.find("PASS error_paths oom"), std::string::npos) << out_two;
  // A forged token (signature changed) and no token at all are refused, clearly.
  std::string forged = *token;
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  auto [rc2, out2] = RunSample(s.address() + "/0", {Sample("error_paths"), "refused"}, "tcp",
                               {"--lease", forged});
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("lease refused"), std::string::npos) << out2;
  auto [rc3, out3] = RunSample(s.address() + "/0", {Sample("error_paths"), "refused"});
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_NE(out3.find("no lease token"), std::string::npos) << out3;
  // A lease for another server's GPU is refused too.
  auto other = authority->Issue({.gpu = "10.9.9.9:1/0"}, *UnixClock::Default());
  ASSERT_TRUE(other.ok());
  auto [rc4, out4] = RunSample(s.address() + "/0", {Sample("error_paths"), "refused"}, "tcp",
                               {"--lease", *other});
  EXPECT_NE(out4.find("lease refused"), std::string::npos) << out4;
  std::remove(key_file.c_str());
}

TEST_F(E2ETcp, WrongTransportIsRefused) {
  Server s({}, "tcp");
  auto link = client::ServerLink::Connect({.address = s.address(), .transport = "ucx"});
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.status().message().find("speaks tcp"), std::string::npos) << link.status().ToString();
}

}  // namespace
}  // namespace gpool::remote
