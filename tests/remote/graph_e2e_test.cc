// End to end: stream capture and CUDA graphs through the driver stand-in. examples/cuda/
// graph_capture.cu, built the default way (NVIDIA's static runtime inside), runs through `gpool
// run` against a gpu-server over TCP and UCX, on the emulated backend and on the cuda backend over
// the emulated CUDA driver; its kernels run from the example CPU plugin. The stand-in captures on
// the client and replays the graph's nodes at each launch (docs/remoting/driver-api.md, "Stream capture and
// graphs"), so on the emulated backend the server's launch log counts exactly the launches the
// graph launches stand for, and none for the captures themselves.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "gpu_server_child.h"
#include "subprocess.h"

namespace gpool::remote::graph_e2e {
namespace {

using testing::Subprocess;

constexpr auto& Built = testing::SampleBin;
using testing::Has;

using Pair = testing::ServerPair;

// A gpu-server child whose emulated backend logs every launch, for the tests to read.
class GraphServer : public testing::ServerChild {
 public:
  explicit GraphServer(const Pair& p) : ServerChild(p, {.launch_log = true}) {}
};

// Launches of `kernel` (its mangled name) in the emulated server's launch log.
int LaunchCount(const std::string& log_path, const std::string& kernel) {
  std::ifstream log(log_path);
  std::string record;
  int n = 0;
  while (std::getline(log, record)) n += Has(record, " kernel=" + kernel + " ");
  return n;
}

// NVIDIA's runtime is not built with ASan (see driver_e2e_test.cc, NoLeakCheckUnderAsan).
std::vector<std::string> ChildEnv() {
#if defined(__SANITIZE_ADDRESS__)
  const char* o = std::getenv("ASAN_OPTIONS");
  return {std::string("ASAN_OPTIONS=") + (o ? o : "") + ":detect_leaks=0"};
#else
  return {};
#endif
}

class GraphE2E : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Built("graph_capture"))) {
      GTEST_FAIL() << "graph_capture missing in " << GPOOL_SAMPLES_DIR
                   << ": nvcc was not found at configure time (set CUDA_HOME and re-run cmake)";
    }
  }
  std::pair<int, std::string> RunSample(const GraphServer& server) {
    return gpool::testing::Run({GPOOL_BIN, "run", "--devices", server.address() + "/0",
                                "--transport", GetParam().transport, "--",
                                Built("graph_capture")},
                               ChildEnv());
  }
};

// The sample checks every launch's result against the CPU: a capture that ran its work instead
// of recording it, a replay in a wrong order, a copy from host memory read at capture time
// instead of launch time, or a kernel node without its parameters fails it. On the emulated
// backend the server saw each graph launch's kernels and nothing else: 10 launches of the
// captured graph (2 scale, 1 vectorAdd each) and 4 of the hand-built one (1 scale each); the
// kernel captured by the invalidated capture never reached it.
TEST_P(GraphE2E, CapturedAndHandBuiltGraphsReplayAndMatchTheCpu) {
  GraphServer server(GetParam());
  auto [rc, out] = RunSample(server);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "graph_capture: captured 9 nodes")) << out;
  EXPECT_TRUE(Has(out, "10 launches of the captured graph match the CPU")) << out;
  EXPECT_TRUE(Has(out, "3 launches of the hand-built graph and 1 with new kernel parameters "
                       "match the CPU")) << out;
  EXPECT_TRUE(Has(out, "PASS graph_capture")) << out;
  EXPECT_FALSE(Has(out, "not supported")) << out;
  if (GetParam().backend == "emulated") {
    EXPECT_EQ(LaunchCount(server.launch_log(), "_Z9vectorAddPKfS0_Pfi"), 10);
    EXPECT_EQ(LaunchCount(server.launch_log(), "_Z5scalePffi"), 10 * 2 + 3 + 1);
  }
}

// A synchronous copy (cudaMemcpy -> cuMemcpyDtoH_v2) from the capturing thread during a
// global-mode capture fails with cudaErrorStreamCaptureUnsupported and invalidates the capture,
// whose end then fails with cudaErrorStreamCaptureInvalidated and gives no graph, as CUDA does;
// the stand-in says which call broke it.
TEST_P(GraphE2E, SynchronousCallDuringGlobalCaptureInvalidatesIt) {
  GraphServer server(GetParam());
  auto [rc, out] = RunSample(server);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "a synchronous copy during global capture: "
                       "cudaErrorStreamCaptureUnsupported")) << out;
  EXPECT_TRUE(Has(out, "ending it: cudaErrorStreamCaptureInvalidated")) << out;
  EXPECT_TRUE(Has(out, "gpool: cuMemcpyDtoH_v2: a synchronous call is not permitted while a "
                       "stream capture is going on (global mode")) << out;
  EXPECT_TRUE(Has(out, "gpool: cuStreamEndCapture: the capture was invalidated")) << out;
}

INSTANTIATE_TEST_SUITE_P(Transports, GraphE2E, ::testing::ValuesIn(testing::ServerPairs()),
                         testing::ServerPairName);

}  // namespace
}  // namespace gpool::remote::graph_e2e
