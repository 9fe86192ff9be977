// End to end, virtual memory management through the driver stand-in: examples/cuda/vmm_alloc.cc
// (a driver-API program, nvcc -cudart none, -lcuda) does what an expandable caching allocator
// does (reserve 1 GiB, map two 2 MiB chunks back to back, a kernel over both as one buffer,
// remap, alias, release) through `gpool run` against gpu-server processes, over TCP and UCX, on
// the emulated backend and on the cuda backend over the emulated CUDA driver; and a session's
// memory limit refuses a chunk over it.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "gpu_server_child.h"
#include "subprocess.h"

namespace gpool::remote {
namespace {

using testing::Subprocess;

constexpr auto& Sample = testing::SampleBin;
using testing::Has;

using VmmPair = testing::ServerPair;

// A gpu-server child; `mem_limit`: its --session-mem-limit (0: none).
class VmmServer : public testing::ServerChild {
 public:
  VmmServer(const VmmPair& p, uint64_t mem_limit) : ServerChild(p, {.mem_limit = mem_limit}) {}
};

class VmmE2E : public ::testing::TestWithParam<VmmPair> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Sample("vmm_alloc"))) {
      GTEST_FAIL() << "vmm_alloc missing in " << GPOOL_SAMPLES_DIR
                   << ": nvcc was not found at configure time (set CUDA_HOME and re-run cmake)";
    }
  }
  std::pair<int, std::string> Run(const VmmServer& s, std::vector<std::string> args) {
    std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", s.address() + "/0",
                                    "--transport", GetParam().transport, "--",
                                    Sample("vmm_alloc"), Sample("driver_kernels.fatbin")};
    cmd.insert(cmd.end(), args.begin(), args.end());
    return gpool::testing::Run(cmd);
  }
};

// The whole walk: every call succeeds, the kernel's results over the two chunks are right, the
// moved chunk keeps its bytes, two mappings of one chunk alias, and a copy from reserved space
// with nothing mapped fails (the program goes on, and so does the server: the walk ends).
TEST_P(VmmE2E, AnExpandableAllocatorsWalk) {
  VmmServer server(GetParam(), 0);
  auto [rc, out] = Run(server, {"unmapped"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "granularity 2097152")) << out;
  EXPECT_TRUE(Has(out, "kernel over 1048576 floats in two mapped chunks: ok")) << out;
  EXPECT_TRUE(Has(out, "copy from unmapped reserved space refused: CUDA_ERROR_INVALID_VALUE"))
      << out;
  EXPECT_TRUE(Has(out, "remap and aliasing: ok")) << out;
  EXPECT_TRUE(Has(out, "PASS vmm_alloc")) << out;
  // The refused copy is said, naming the call; the emulated backend also names the address that
  // is not mapped (the cuda backend passes the driver's own error).
  EXPECT_TRUE(Has(out, "gpool: cuMemcpyDtoH_v2")) << out;
  if (GetParam().backend == "emulated") {
    EXPECT_TRUE(Has(out, "nothing mapped")) << out;
  }
}

// A kernel whose pointer parameter points into reserved space with nothing mapped is refused as a
// GPU's would fault (illegal address), and the server's worker lives on to say so. Emulated
// backend only: the emulated CUDA driver under the cuda backend runs the CPU kernel, which faults.
TEST_P(VmmE2E, AKernelOnUnmappedSpaceIsAnIllegalAddress) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "the emulated backend checks parameters";
  VmmServer server(GetParam(), 0);
  auto [rc, out] = Run(server, {"unmapped", "kernel"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "kernel on unmapped reserved space refused: CUDA_ERROR_ILLEGAL_ADDRESS"))
      << out;
  EXPECT_TRUE(Has(out, "parameter 0 is 0x")) << out;
}

// Under a session limit of 5 MiB two 2 MiB chunks fit and a third is refused as cuMemAlloc would
// be (out of memory, the limit named); releasing one makes room again.
TEST_P(VmmE2E, ASessionLimitRefusesAChunkOverIt) {
  VmmServer server(GetParam(), 5 << 20);
  auto [rc, out] = Run(server, {"limit", "2"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "chunk 3 of 2097152 bytes refused: out of memory")) << out;
  EXPECT_TRUE(Has(out, "memory limit is 5242880 bytes")) << out;
  EXPECT_TRUE(Has(out, "PASS vmm_alloc limit")) << out;
}

INSTANTIATE_TEST_SUITE_P(Transports, VmmE2E, ::testing::ValuesIn(testing::ServerPairs()),
                         testing::ServerPairName);

}  // namespace
}  // namespace gpool::remote
