// End to end at the driver API: examples/cuda/driver_api.cc, a driver-API program built with
// nvcc -cudart none and linked with -lcuda against the toolkit's stub, runs through `gpool run`,
// which puts gpool's libcuda.so.1 stand-in first, against gpu-server processes over TCP and UCX,
// on the emulated backend and on the cuda backend over the emulated CUDA driver. Its module comes
// from driver_kernels.cu as a cubin, a fatbin and PTX; the kernels run from the example CPU plugin.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "gpu_server_child.h"
#include "subprocess.h"

namespace gpool::remote {
namespace {

using testing::Subprocess;

constexpr auto& Built = testing::SampleBin;
using testing::Has;

using Pair = testing::ServerPair;

// A gpu-server child whose emulated backend logs every launch, for the tests to read.
class Server : public testing::ServerChild {
 public:
  explicit Server(const Pair& p, int devices = 1, bool info_log = false)
      : ServerChild(p, {.devices = devices, .info_log = info_log, .launch_log = true}) {}
};

class DriverE2E : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Built("driver_api"))) {
      GTEST_FAIL() << "driver_api missing in " << GPOOL_SAMPLES_DIR
                   << ": nvcc was not found at configure time (set CUDA_HOME and re-run cmake)";
    }
    auto& s = servers_[GetParam().transport + "_" + GetParam().backend];
    if (!s) s = std::make_unique<Server>(GetParam());
    server_ = s.get();
  }
  static void TearDownTestSuite() { servers_.clear(); }
  std::pair<int, std::string> RunDriver(std::vector<std::string> args) {
    std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", server_->address() + "/0",
                                    "--transport", GetParam().transport, "--",
                                    Built("driver_api")};
    cmd.insert(cmd.end(), args.begin(), args.end());
    return gpool::testing::Run(cmd);
  }
  Server* server_ = nullptr;
  // One server per (transport, backend), started by its first test.
  static std::map<std::string, std::unique_ptr<Server>> servers_;
};
std::map<std::string, std::unique_ptr<Server>> DriverE2E::servers_;

// The program imports the driver API by its versioned names, from libcuda.so.1, and nothing of
// the runtime: what runs here is the driver stand-in alone.
TEST_P(DriverE2E, TheProgramImportsTheDriverOnly) {
  auto [rc, out] = gpool::testing::Run({"nm", "-D", "--undefined-only", Built("driver_api")});
  ASSERT_EQ(rc, 0) << out;
  for (const char* sym : {" cuInit", " cuMemAlloc_v2", " cuLaunchKernel", " cuModuleLoadData",
                          " cuModuleGetGlobal_v2", " cuCtxCreate_v4", " cuGetProcAddress_v2",
                          " cuMemcpyDtoHAsync_v2", " cuEventElapsedTime_v2", " cuMemPoolCreate",
                          " cuMemAllocFromPoolAsync", " cuMemFreeAsync", " cuMemcpyAsync",
                          " cuStreamGetCaptureInfo_v3"}) {
    EXPECT_TRUE(Has(out, sym)) << sym << "\n" << out;
  }
  EXPECT_FALSE(Has(out, " cuda")) << out;
  auto [rc2, deps] = gpool::testing::Run({"readelf", "-d", Built("driver_api")});
  EXPECT_TRUE(Has(deps, "[libcuda.so.1]")) << deps;
  EXPECT_FALSE(Has(deps, "libcudart")) << deps;
}

TEST_P(DriverE2E, CubinFatbinAndPtxModules) {
  for (const char* form : {"driver_kernels.cubin", "driver_kernels.fatbin"}) {
    auto [rc, out] = RunDriver({Built(form)});
    EXPECT_EQ(rc, 0) << form << "\n" << out;
    EXPECT_TRUE(Has(out, "PASS driver_api")) << form << "\n" << out;
    EXPECT_FALSE(Has(out, "not supported")) << form << "\n" << out;
    // Capture and a graph through the entry points older runtimes fetch (driver_graphs_compat.cc).
    EXPECT_TRUE(Has(out, "driver_api: a graph through the CUDA 10.0-12.0 entry points ran"))
        << form << "\n" << out;
  }
  // PTX: the client reads no variables from PTX, so the program skips its variable part.
  auto [rc, out] = RunDriver({Built("driver_kernels.ptx"), "noglobals"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS driver_api")) << out;
}

// An entry point gpool does not implement fails loudly and names itself, called directly or
// through a pointer from cuGetProcAddress (which resolves it, so libraries that fetch every entry
// point at start-up still load).
TEST_P(DriverE2E, AnUnimplementedCallFailsNamingItself) {
  auto [rc, out] = RunDriver({Built("driver_kernels.cubin"), "stub"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "gpool: cuMemAllocManaged is not supported by gpool's libcuda.so.1 "
                       "stand-in (returning CUDA_ERROR_NOT_SUPPORTED)")) << out;
  EXPECT_TRUE(Has(out, "cuMemAllocManaged returned 801")) << out;
  EXPECT_TRUE(Has(out, "gpool: cuGraphAddChildGraphNode is not supported")) << out;
  EXPECT_TRUE(Has(out, "cuGraphAddChildGraphNode through cuGetProcAddress returned 801")) << out;
}

// NVIDIA's runtime runs in programs that are not built with ASan; in the sanitizer tree gpool's
// libcuda.so.1 brings the ASan runtime in late (verify_asan_link_order=0), and over UCX
// LeakSanitizer's exit-time tracer crashed there (SEGV inside the tracer, after the program had
// passed). Those children run without the leak check; gpool's own code keeps it in every other
// test, the driver stand-in's included.
std::vector<std::string> NoLeakCheckUnderAsan() {
#if defined(__SANITIZE_ADDRESS__)
  const char* o = std::getenv("ASAN_OPTIONS");
  return {std::string("ASAN_OPTIONS=") + (o ? o : "") + ":detect_leaks=0"};
#else
  return {};
#endif
}

// NVIDIA's own runtime over the stand-in: vector_add as plain nvcc builds it (libcudart_static.a
// linked in) runs through `gpool run` and passes. The runtime needs the private export tables
// (driver_export_tables.cc), the integrity check among them: with a wrong value it refuses the
// driver (cudaErrorSoftwareValidityNotEstablished) at the program's first call. It registers the
// program's kernels as libraries (cuLibraryLoadData) and launches through cuLaunchKernel.
TEST_P(DriverE2E, PlainNvccProgramRunsOnNvidiasStaticRuntime) {
  auto [rc0, deps] = gpool::testing::Run({"readelf", "-d", Built("vector_add_static")});
  ASSERT_EQ(rc0, 0) << deps;
  EXPECT_FALSE(Has(deps, "libcudart")) << deps;  // the runtime is inside the program
  auto [rc, out] = gpool::testing::Run({GPOOL_BIN, "run", "--devices", server_->address() + "/0",
                                        "--transport", GetParam().transport, "--",
                                        Built("vector_add_static")},
                                       NoLeakCheckUnderAsan());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS vector_add n=1048576")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;  // no table, slot or call was missing
}

// cudaMemcpyAsync device-to-host into pinned memory, from NVIDIA's static runtime
// (cuMemcpyDtoHAsync_v2 on the stand-in): the call returns before the kernel queued ahead of it
// (a ~1 s spin) has finished, and the data is in place at the stream's and an event's synchronize;
// cudaFreeHost waits for an outstanding copy (examples/cuda/async_d2h.cu). A stand-in that
// completes every Async copy before returning, one round trip each, fails the first check.
TEST_P(DriverE2E, AsyncDeviceToHostCopyIntoPinnedMemoryReturnsAtOnce) {
  if (GetParam().backend != "emulated") {
    GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  }
  auto [rc, out] = gpool::testing::Run({GPOOL_BIN, "run", "--devices", server_->address() + "/0",
                                        "--transport", GetParam().transport, "--",
                                        Built("async_d2h")},
                                       NoLeakCheckUnderAsan());
  EXPECT_TRUE(Has(out, "returned before the kernel ahead of it finished: yes")) << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS async_d2h")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
}

// The same program built with `-cudart shared` runs through plain `gpool run` on NVIDIA's
// libcudart.so.13, which the build copied from the toolkit into gpool's client lib dir (the same
// bytes), over the driver stand-in.
TEST_P(DriverE2E, SharedBuildRunsOnNvidiasLibcudart) {
  auto [rc, out] = gpool::testing::Run({GPOOL_BIN, "run", "--devices", server_->address() + "/0",
                                        "--transport", GetParam().transport, "--",
                                        Built("vector_add")},
                                       NoLeakCheckUnderAsan());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS vector_add n=1048576")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
  // What the program loads under `gpool run`: the client lib dir's libcudart.so.13 ...
  auto [rc2, libs] = gpool::testing::Run({GPOOL_BIN, "run", "--devices", "127.0.0.1:1/0", "--",
                                          "ldd", Built("vector_add")});
  EXPECT_EQ(rc2, 0) << libs;
  EXPECT_TRUE(Has(libs, "libcudart.so.13 => " GPOOL_CLIENT_LIB_DIR "/libcudart.so.13")) << libs;
  // ... which is NVIDIA's, byte for byte.
  auto [rc3, cmp] = gpool::testing::Run({"cmp", GPOOL_CLIENT_LIB_DIR "/libcudart.so.13",
                                         GPOOL_CUDA_LIB_DIR "/libcudart.so.13"});
  EXPECT_EQ(rc3, 0) << cmp;
}

// A client lib dir without NVIDIA's runtime (a build that found no toolkit runtime to copy):
// `gpool run` refuses, saying which file is missing and where it comes from, before the program
// runs (a loader error about libcudart.so.13 would not say).
TEST(DriverLayerRun, MissingNvidiaRuntimeIsExplained) {
  std::string dir = ::testing::TempDir() + "/gpool_nocudart_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(GPOOL_CLIENT_LIB_DIR "/libcuda.so.1", dir + "/libcuda.so.1");
  auto [rc, out] = gpool::testing::Run({GPOOL_BIN, "run", "--devices", "127.0.0.1:1/0", "--",
                                        "true"}, {"GPOOL_CLIENT_LIB_DIR=" + dir});
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(Has(out, "NVIDIA's CUDA runtime " + dir + "/libcudart.so.13 is missing: the build "
                       "copies it from the CUDA toolkit")) << out;
  std::filesystem::remove_all(dir);
}

// A sample of an NVIDIA library (examples/cuda, built when the toolkit has the library) run
// directly with the toolkit's folder first in the library path, over the driver stand-in.
std::pair<int, std::string> RunLibrarySample(const std::string& name, const std::string& devices,
                                             const std::string& transport,
                                             std::vector<std::string> extra_env = {}) {
  std::vector<std::string> env = {"LD_LIBRARY_PATH=" GPOOL_CUDA_LIB_DIR ":" GPOOL_CLIENT_LIB_DIR,
                                  "GPOOL_DEVICES=" + devices, "GPOOL_TRANSPORT=" + transport};
  for (std::string& e : NoLeakCheckUnderAsan()) env.push_back(std::move(e));
  for (std::string& e : extra_env) env.push_back(std::move(e));
  return gpool::testing::Run({Built(name)}, env);
}

// The device addresses a sample printed on its line starting with `tag` ("matrices A=0x.. B=0x.."),
// each as the 16 hex digits of its little-endian bytes, as a kernel's parameter buffer holds it.
std::vector<std::string> PrintedPointersLE(const std::string& out, const std::string& tag) {
  std::vector<std::string> ptrs;
  size_t at = out.find(tag);
  if (at == std::string::npos) return ptrs;
  std::istringstream m(out.substr(at, out.find('\n', at) - at));
  std::string word;
  while (m >> word) {
    size_t eq = word.find("=0x");
    if (eq == std::string::npos) continue;
    uint64_t v = std::stoull(word.substr(eq + 1), nullptr, 16);
    std::string h;
    for (int i = 0; i < 8; ++i) h += fmt::format("{:02x}", (v >> (8 * i)) & 0xff);
    ptrs.push_back(h);
  }
  return ptrs;
}

// The kernel the emulated server said it had no CPU implementation of ("" if none said).
const std::string kNoCpu = "emulated backend has no CPU implementation of kernel ";
std::string KernelWithoutCpu(const std::string& out) {
  size_t at = out.find(kNoCpu);
  if (at == std::string::npos) return "";
  at += kNoCpu.size();
  return out.substr(at, out.find(' ', at) - at);
}

// The server's launch log records (--emulated-launch-log) of launches of `kernel`.
std::vector<std::string> LaunchesOf(const std::string& log_path, const std::string& kernel) {
  std::ifstream log(log_path);
  std::string record;
  std::vector<std::string> found;
  while (std::getline(log, record)) {
    if (Has(record, " kernel=" + kernel + " ")) found.push_back(record);
  }
  return found;
}
// The launches of `kernel` once the log has them, waiting up to 20 s: a program that ends on an
// error may leave the last server's worker still writing what it received when the test reads.
// Not a timing assertion: an absent launch fails after the wait, a present one returns at once.
std::vector<std::string> AwaitLaunchesOf(const std::string& log_path, const std::string& kernel) {
  for (int i = 0; i < 200; ++i) {
    auto found = LaunchesOf(log_path, kernel);
    if (!found.empty()) return found;
    usleep(100 * 1000);
  }
  return LaunchesOf(log_path, kernel);
}
std::string ParamsOf(const std::string& record) {
  size_t at = record.find(" params=");
  return at == std::string::npos ? "" : record.substr(at + 8);
}

// Every "gpool:" line of `out` contains one of `allowed`: nothing else was missing on the way.
void ExpectOnlyGpoolLines(const std::string& out, const std::vector<std::string>& allowed) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (!Has(line, "gpool:")) continue;
    bool ok = false;
    for (const auto& a : allowed) ok |= Has(line, a);
    EXPECT_TRUE(ok) << line;
  }
}

// cuBLAS (libcublas.so.13 from the toolkit, NVIDIA's runtime inside it) over the driver
// stand-in: cublasCreate (8 kernel libraries, loaded lazily; kernel attributes, occupancy,
// context limits), cublasSetStream, cublasSetWorkspace, the matrices' allocations and copies,
// then an SGEMM, which cuBLASLt plans (its heuristics need the tools thread-local tables) and
// launches with cuLaunchKernelEx. The launch reaches the emulated server as a launch of a cuBLAS
// kernel, which has no CPU implementation: the stream's synchronize reports that, naming the
// kernel.
TEST_P(DriverE2E, CublasSgemmReachesTheServerAsACublasKernel) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cublas_sgemm"))) {
    GTEST_SKIP() << "the toolkit has no libcublas.so: cublas_sgemm was not built";
  }
  auto [rc, out] = RunLibrarySample("cublas_sgemm", server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "matrices A=0x")) << out;  // create, stream, workspace, allocations passed
  EXPECT_TRUE(Has(out, "cublasSgemm: CUBLAS_STATUS_SUCCESS")) << out;
  // The server ran the launch and names cuBLAS's kernel; nothing else was missing on the way.
  std::string kernel = KernelWithoutCpu(out);
  ASSERT_FALSE(kernel.empty()) << out;
  EXPECT_TRUE(Has(kernel, "gemm")) << kernel;
  EXPECT_TRUE(Has(kernel, "cublas")) << kernel;
  EXPECT_TRUE(Has(out, "cudaStreamSynchronize(s) failed")) << out;
  EXPECT_NE(rc, 0) << out;
  // The server's record of that launch: the three matrices' device addresses are among its
  // parameter bytes (little-endian 64-bit values, as the kernel would read them).
  std::vector<std::string> ptrs = PrintedPointersLE(out, "matrices A=");
  ASSERT_EQ(ptrs.size(), 3u) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  for (const auto& p : ptrs) EXPECT_TRUE(Has(ParamsOf(found.back()), p)) << p << " not in " << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu});
}

// The stand-in's GPOOL_DRIVER_STATS=1 line: {modules and libraries loaded, sent to a server};
// {-1, -1} when absent.
std::pair<long, long> DriverStats(const std::string& out) {
  const std::string mark = "gpool: driver stats: ";
  size_t at = out.find(mark);
  if (at == std::string::npos) return {-1, -1};
  at += mark.size();
  long loaded = std::atol(out.c_str() + at);
  const std::string sent_mark = " loaded, ";
  size_t s = out.find(sent_mark, at);
  return {loaded, s == std::string::npos ? -1 : std::atol(out.c_str() + s + sent_mark.size())};
}

// Lazy loading in the stand-in: a module reaches the server at the first lookup of one of its
// kernels or variables. driver_api loads one module it unloads without a lookup, then the one it
// uses: two loaded, one sent, and the server's session never held more than one (its
// end-of-session line). Sent at load, as before, both would have reached the server.
TEST_P(DriverE2E, AModuleNeverLookedUpNeverReachesTheServer) {
  Server fresh(GetParam(), 1, /*info_log=*/true);
  auto [rc, out] = gpool::testing::Run(
      {GPOOL_BIN, "run", "--devices", fresh.address() + "/0", "--transport", GetParam().transport,
       "--", Built("driver_api"), Built("driver_kernels.cubin")},
      {"GPOOL_DRIVER_STATS=1"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS driver_api")) << out;
  EXPECT_EQ(DriverStats(out), std::make_pair(2L, 1L)) << out;
  const std::string mark = " registered at the end, peak ";
  ASSERT_TRUE(fresh.proc().WaitFor(mark, 20000)) << fresh.proc().output();
  const std::string& log = fresh.proc().output();
  EXPECT_EQ(std::atol(log.c_str() + log.find(mark) + mark.size()), 1) << log;
}

// Lazy loading in NVIDIA's runtime: the stand-in answers cuModuleGetLoadingMode with
// CU_MODULE_LAZY_LOADING, and the runtime inside cuBLAS then loads a kernel library only when one
// of its kernels is needed. Answered CU_MODULE_EAGER_LOADING, that runtime loads every one of its
// 2976 kernel images as a library at start-up (2980 cuLibraryLoadData calls, counted at the
// stand-in's entry points; docs/remoting/driver-api.md), which is what made cublasCreate take seconds.
TEST_P(DriverE2E, CublasLoadsItsKernelLibrariesLazily) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cublas_sgemm"))) {
    GTEST_SKIP() << "the toolkit has no libcublas.so: cublas_sgemm was not built";
  }
  auto [rc, out] = RunLibrarySample("cublas_sgemm", server_->address() + "/0",
                                    GetParam().transport, {"GPOOL_DRIVER_STATS=1"});
  EXPECT_TRUE(Has(out, "cublasSgemm: CUBLAS_STATUS_SUCCESS")) << out;
  auto [loaded, sent] = DriverStats(out);
  EXPECT_GE(sent, 1) << out;  // the SGEMM's kernel library at least
  EXPECT_LE(sent, loaded) << out;
  EXPECT_LT(loaded, 100) << out;
}

// A plain nvcc program launching its kernel on device 0, then on device 1, of one server:
// NVIDIA's runtime registers the kernel once, as a library, on the device current then, and the
// stand-in launches it on the device of the stream (here each device's default stream), where
// the server holds the module too. The server's launch log shows the kernel launched on each
// device; launched on the library's device for both, device 1's buffers would be used on
// device 0.
TEST_P(DriverE2E, ALibraryKernelLaunchesOnEachDeviceOfItsServer) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  Server two(GetParam(), 2);
  auto [rc, out] = gpool::testing::Run(
      {GPOOL_BIN, "run", "--devices", two.address() + "/0," + two.address() + "/1",
       "--transport", GetParam().transport, "--", Built("two_devices")},
      NoLeakCheckUnderAsan());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS two_devices")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
  auto found = LaunchesOf(two.launch_log(), "_Z9vectorAddPKfS0_Pfi");
  ASSERT_EQ(found.size(), 2u) << out;
  EXPECT_TRUE(Has(found[0], " device=0 ")) << found[0];
  EXPECT_TRUE(Has(found[1], " device=1 ")) << found[1];
  // Each launch carries its own device's output buffer.
  for (int dev = 0; dev < 2; ++dev) {
    auto ptrs = PrintedPointersLE(out, fmt::format("device {}: c=", dev));
    ASSERT_EQ(ptrs.size(), 1u) << out;
    EXPECT_TRUE(Has(ParamsOf(found[dev]), ptrs[0])) << found[dev];
  }
}

// cuRAND's host API (libcurand.so.10): a Philox generator, a seed, a stream, then
// curandGenerateUniform. cuRAND sets the generator's state up at the first generate with a
// kernel of its own (generate_seed_pseudo) whose parameters carry the seed, and synchronizes
// the context after it. That launch reaches the emulated server, seed in its parameter bytes;
// the server cannot run it (no CPU implementation), so the synchronize reports that, naming the
// kernel, and the generate returns CURAND_STATUS_LAUNCH_FAILURE (201): the numbers are never
// asked for.
TEST_P(DriverE2E, CurandGeneratorReachesTheServerWithItsSeed) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("curand_uniform"))) {
    GTEST_SKIP() << "the toolkit has no libcurand.so: curand_uniform was not built";
  }
  auto [rc, out] = RunLibrarySample("curand_uniform", server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "output=0x")) << out;  // generator, seed, stream and allocation passed
  std::string kernel = KernelWithoutCpu(out);
  EXPECT_TRUE(Has(kernel, "generate_seed_pseudo")) << out;
  EXPECT_TRUE(Has(kernel, "curandStatePhilox4_32_10")) << out;
  EXPECT_TRUE(Has(out, "curandGenerateUniform: status 201")) << out;
  EXPECT_NE(rc, 0) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  // The sample's seed, 1234, as the kernel's first 64-bit parameter.
  EXPECT_EQ(ParamsOf(found.back()).substr(0, 16), "d204000000000000") << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu});
}

// cuFFT (libcufft.so.12): a 1-D C2C plan, a stream, then one forward transform. Planning loads
// each cuFFT kernel as a module of one function (cuModuleLoadData) and takes the function from the
// private module table (docs/remoting/driver-api.md, "Export tables"), asks the work area's buffer id
// (cuPointerGetAttribute) and probes modules for an optional variable. The transform reaches the
// emulated server as a launch of a cuFFT kernel with the input and output buffers in its
// parameters; it has no CPU implementation, so the synchronize reports that, naming it.
TEST_P(DriverE2E, CufftPlanAndExecReachTheServer) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cufft_c2c"))) {
    GTEST_SKIP() << "the toolkit has no libcufft.so: cufft_c2c was not built";
  }
  auto [rc, out] = RunLibrarySample("cufft_c2c", server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "cufftExecC2C: cufftResult 0")) << out;  // CUFFT_SUCCESS
  std::string kernel = KernelWithoutCpu(out);
  EXPECT_TRUE(Has(kernel, "fft")) << out;
  EXPECT_TRUE(Has(out, "cudaStreamSynchronize(s) failed")) << out;
  EXPECT_NE(rc, 0) << out;
  std::vector<std::string> ptrs = PrintedPointersLE(out, "buffers in=");
  ASSERT_EQ(ptrs.size(), 2u) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  for (const auto& p : ptrs) EXPECT_TRUE(Has(ParamsOf(found.back()), p)) << p << " not in " << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu});
}

// cuDNN (libcudnn.so.9 and its sub-libraries): cudnnCreate, a stream, then one ReLU
// (cudnnActivationForward). It reaches the emulated server as a launch of a cuDNN kernel with the
// input and output tensors in its parameters; it has no CPU implementation, so the synchronize
// reports that, naming it. On its way cudnnCreate asks for a device pointer of mapped host memory
// (cuMemHostGetDevicePointer), which gpool refuses saying why (no zero-copy memory across the
// network); cuDNN goes on without it.
TEST_P(DriverE2E, CudnnActivationReachesTheServer) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cudnn_relu"))) {
    GTEST_SKIP() << "the toolkit has no libcudnn.so: cudnn_relu was not built";
  }
  auto [rc, out] = RunLibrarySample("cudnn_relu", server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "cudnnCreate: ok")) << out;
  EXPECT_TRUE(Has(out, "cudnnActivationForward: CUDNN_STATUS_SUCCESS")) << out;
  std::string kernel = KernelWithoutCpu(out);
  EXPECT_TRUE(Has(kernel, "cudnn")) << out;
  EXPECT_TRUE(Has(out, "cudaStreamSynchronize(s) failed")) << out;
  EXPECT_NE(rc, 0) << out;
  std::vector<std::string> ptrs = PrintedPointersLE(out, "buffers x=");
  ASSERT_EQ(ptrs.size(), 2u) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  for (const auto& p : ptrs) EXPECT_TRUE(Has(ParamsOf(found.back()), p)) << p << " not in " << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu, "cuMemHostGetDevicePointer_v2: "});
}

// gpool's NVML stand-in through `gpool run` over three devices of two servers (the suite's
// server's GPU 0, another's GPUs 0 and 1): every answer agrees with the driver stand-in's (count,
// bus ids in each of NVML's forms, UUIDs, names, compute capability), handles are found again by
// bus id and UUID, nothing has NVLink or P2P to another device, and an unimplemented entry point
// fails loudly, naming itself (nvml_probe.cc).
TEST_P(DriverE2E, NvmlAnswersAsTheDriverStandInDoes) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "the emulated CUDA driver has one device";
  Server other(GetParam(), 2);
  auto [rc, out] = gpool::testing::Run(
      {GPOOL_BIN, "run", "--devices",
       server_->address() + "/0," + other.address() + "/0," + other.address() + "/1",
       "--transport", GetParam().transport, "--", GPOOL_NVML_PROBE});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS nvml_probe devices=3")) << out;
  // gpool's PCI domains: the first server's devices in 0000, the second's in 0001.
  EXPECT_TRUE(Has(out, "device 0: 00000000:00:00.0")) << out;
  EXPECT_TRUE(Has(out, "device 1: 00000001:00:00.0")) << out;
  EXPECT_TRUE(Has(out, "device 2: 00000001:01:00.0")) << out;
  ExpectOnlyGpoolLines(out, {"nvmlDeviceGetMemoryInfo is not implemented by gpool's "
                             "libnvidia-ml.so.1 stand-in"});
  EXPECT_TRUE(Has(out, "gpool: nvmlDeviceGetMemoryInfo is not implemented")) << out;
}

// NVIDIA's NCCL (libnccl.so.2, `gpool run --nccl native`), one process over two emulated devices
// of two servers (the suite's server's GPU 0 and another server's): the toolkit's folder is in the
// library path for NCCL itself, and `gpool run` puts its stand-ins first (libcuda.so.1, libnvidia-ml.so.1) and
// turns NCCL's peer-to-peer and shared-memory transports off (docs/remoting/nccl.md).
std::pair<int, std::string> RunNccl(const std::string& devices, const std::string& transport,
                                    const std::vector<std::string>& args) {
  std::vector<std::string> env = {"LD_LIBRARY_PATH=" GPOOL_CUDA_LIB_DIR, "NCCL_DEBUG=WARN",
                                  "NCCL_SOCKET_IFNAME=lo"};
  for (std::string& e : NoLeakCheckUnderAsan()) env.push_back(std::move(e));
  std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", devices, "--transport",
                                  transport, "--nccl", "native", "--", Built("nccl_allreduce")};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return gpool::testing::Run(cmd, env);
}

// ncclCommInitAll completes: NCCL finds both GPUs through the NVML stand-in (by the PCI bus ids
// the driver stand-in reports, distinct for the two servers' GPU 0), builds its topology without
// the GPUs' sysfs nodes, creates each communicator's memory pool, kernels and streams, and
// connects the two ranks over its network transport. Each communicator has 2 ranks, its own
// device and rank; they are destroyed. No "gpool:" line: every driver and NVML call NCCL made is
// implemented (NVML answers as for a PCIe GPU without NVLink, no P2P between the servers).
TEST_P(DriverE2E, NcclCommInitAllOverTwoServers) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("nccl_allreduce"))) {
    GTEST_SKIP() << "the toolkit has no libnccl.so: nccl_allreduce was not built";
  }
  Server other(GetParam(), 2);
  auto [rc, out] = RunNccl(server_->address() + "/0," + other.address() + "/0",
                           GetParam().transport, {"init"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "devices: 2")) << out;
  EXPECT_TRUE(Has(out, "ncclCommInitAll: ok")) << out;
  EXPECT_TRUE(Has(out, "comm 0: count=2 device=0 rank=0")) << out;
  EXPECT_TRUE(Has(out, "comm 1: count=2 device=1 rank=1")) << out;
  EXPECT_TRUE(Has(out, "PASS nccl_allreduce init devices=2")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
  EXPECT_FALSE(Has(out, "NCCL WARN")) << out;
  EXPECT_FALSE(Has(out, "Caught signal")) << out;  // its exit handlers call the driver: no crash
}

// An allreduce then launches NCCL's kernel on both GPUs: on the second server from the copy of
// NCCL's kernel library the driver stand-in loads there at the first launch (a library's kernels
// launch on every device). Both servers record the launch; neither has a CPU implementation of
// it, so the stream's synchronize fails naming the kernel, at once, instead of hanging.
TEST_P(DriverE2E, NcclAllReduceReachesBothServersAndFailsAtItsKernel) {
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("nccl_allreduce"))) {
    GTEST_SKIP() << "the toolkit has no libnccl.so: nccl_allreduce was not built";
  }
  Server other(GetParam(), 2);
  auto [rc, out] = RunNccl(server_->address() + "/0," + other.address() + "/0",
                           GetParam().transport, {"1024"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "ncclAllReduce: enqueued")) << out;
  std::string kernel = KernelWithoutCpu(out);
  EXPECT_TRUE(Has(kernel, "ncclDevKernel_AllReduce_Sum_f32")) << out;
  EXPECT_TRUE(Has(out, "cudaStreamSynchronize(streams[d]) failed")) << out;
  EXPECT_FALSE(AwaitLaunchesOf(server_->launch_log(), kernel).empty())
      << "no launch of " << kernel << " in " << server_->launch_log();
  EXPECT_FALSE(AwaitLaunchesOf(other.launch_log(), kernel).empty())
      << "no launch of " << kernel << " in " << other.launch_log();
  ExpectOnlyGpoolLines(out, {kNoCpu});
}

// gpool's libnccl.so.2 stand-in (`gpool run`'s default, lib/nccl/): nccl_collectives.cu runs
// NCCL's collectives and checks every result on the host (docs/remoting/nccl.md).
std::pair<int, std::string> RunCollectives(const std::string& devices, const std::string& transport,
                                           const std::vector<std::string>& args) {
  std::vector<std::string> env = {"LD_LIBRARY_PATH=" GPOOL_CUDA_LIB_DIR};
  for (std::string& e : NoLeakCheckUnderAsan()) env.push_back(std::move(e));
  std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", devices, "--transport",
                                  transport, "--", Built("nccl_collectives")};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return gpool::testing::Run(cmd, env);
}
#define GPOOL_NEEDS_NCCL_SAMPLE()                                                             \
  if (GetParam().backend != "emulated") GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here"; \
  if (!std::filesystem::exists(Built("nccl_collectives"))) {                                  \
    GTEST_SKIP() << "the toolkit has no libnccl.so: nccl_collectives was not built";          \
  }

// Every collective (AllReduce of ten types x five operators, Broadcast and Reduce ungrouped,
// AllGather, ReduceScatter in float, half, bfloat16 and int32, a Send/Recv ring, a copy ordered
// after an AllReduce on its stream) over device 0 of two servers, each result checked on the
// host; the communicators from ncclCommInitAll. NVIDIA's NCCL cannot run these here (no CPU
// version of its kernels; NcclAllReduceReachesBothServersAndFailsAtItsKernel), so passing shows
// the stand-in ran them: no NCCL kernel reached either server.
TEST_P(DriverE2E, NcclCollectivesOverTwoServers) {
  GPOOL_NEEDS_NCCL_SAMPLE();
  Server other(GetParam(), 2);
  auto [rc, out] = RunCollectives(server_->address() + "/0," + other.address() + "/0",
                                  GetParam().transport, {"all", "all"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "allreduce bfloat16: 5 ops ok")) << out;
  EXPECT_TRUE(Has(out, "send/recv ring: ok")) << out;
  EXPECT_TRUE(Has(out, "PASS nccl_collectives all init=all devices=2")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
  EXPECT_TRUE(LaunchesOf(other.launch_log(), "ncclDevKernel").empty());
}

// The same on two devices of one server, the communicators from ncclGetUniqueId and
// ncclCommInitRank / ncclCommInitRankConfig in one group.
TEST_P(DriverE2E, NcclCollectivesOverTwoDevicesOfOneServer) {
  GPOOL_NEEDS_NCCL_SAMPLE();
  Server other(GetParam(), 2);
  auto [rc, out] = RunCollectives(other.address() + "/0," + other.address() + "/1",
                                  GetParam().transport, {"all", "uid"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "init uid: ok")) << out;
  EXPECT_TRUE(Has(out, "PASS nccl_collectives all init=uid devices=2")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
}

// One thread per rank: ncclCommInitRank outside a group waits for the other thread's rank, and
// each thread's grouped AllReduce runs once both have posted.
TEST_P(DriverE2E, NcclRanksInThreadsOfOneProcess) {
  GPOOL_NEEDS_NCCL_SAMPLE();
  Server other(GetParam(), 2);
  auto [rc, out] = RunCollectives(server_->address() + "/0," + other.address() + "/1",
                                  GetParam().transport, {"threads"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS nccl_collectives threads devices=2")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
}

// A group that ends with an AllReduce posted on rank 0 only: NCCL would hang; the stand-in's
// ncclGroupEnd returns ncclInvalidUsage naming the call and the rank it waits for, and the next
// full AllReduce still runs.
TEST_P(DriverE2E, NcclGroupMissingARankFailsNamingIt) {
  GPOOL_NEEDS_NCCL_SAMPLE();
  Server other(GetParam(), 2);
  auto [rc, out] = RunCollectives(server_->address() + "/0," + other.address() + "/0",
                                  GetParam().transport, {"missing"});
  EXPECT_EQ(rc, 0) << out;
  const std::string why = "ncclGroupEnd: the group ended with ncclAllReduce(count 16, ncclFloat32, "
                          "ncclSum; the 1st call posted on rank 0) has no matching call on rank(s) "
                          "1: NCCL would wait here forever; gpool dropped them";
  EXPECT_TRUE(Has(out, "gpool: " + why)) << out;
  EXPECT_TRUE(Has(out, "ncclGroupEnd returned invalid usage")) << out;
  EXPECT_TRUE(Has(out, "last error: " + why)) << out;
  EXPECT_TRUE(Has(out, "PASS nccl_collectives missing")) << out;
  ExpectOnlyGpoolLines(out, {why});
}

// What the stand-in does not do fails by name: an unimplemented collective (ncclAlltoAll), an
// fp8 reduction, and a communicator whose unique id crosses into another process.
TEST_P(DriverE2E, NcclUnsupportedCallsAndCrossProcessInitAreLoud) {
  GPOOL_NEEDS_NCCL_SAMPLE();
  Server other(GetParam(), 2);
  const std::string devs = other.address() + "/0," + other.address() + "/1";
  auto [rc, out] = RunCollectives(devs, GetParam().transport, {"stub"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "gpool: ncclAlltoAll is not implemented by gpool's libnccl.so.2 stand-in")) << out;
  EXPECT_TRUE(Has(out, "ncclAlltoAll returned invalid usage")) << out;
  auto [rc2, out2] = RunCollectives(devs, GetParam().transport, {"fp8"});
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(Has(out2, "gpool: ncclAllReduce: ncclSum of ncclFloat8e4m3: gpool's libnccl.so.2 "
                        "stand-in does not reduce fp8")) << out2;
  auto [rc3, out3] = RunCollectives(devs, GetParam().transport, {"xproc"});
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_TRUE(Has(out3, "gpool: ncclCommInitRank: rank 1 of 2: the unique id was made by another "
                        "process")) << out3;
  EXPECT_TRUE(Has(out3, "runs communicators of one process only")) << out3;
  EXPECT_TRUE(Has(out3, "PASS nccl_collectives xproc")) << out3;
}

INSTANTIATE_TEST_SUITE_P(Transports, DriverE2E, ::testing::ValuesIn(testing::ServerPairs()),
                         testing::ServerPairName);

// The stand-in defines every function the real driver exports (the toolkit's link stub lists
// them), so no program or library finds a name missing, and exports nothing else.
TEST(DriverExports, ExactlyTheRealDriversNames) {
  auto names = [](const std::string& lib) {
    auto [rc, out] = gpool::testing::Run({"nm", "-D", "--defined-only", lib});
    EXPECT_EQ(rc, 0) << out;
    std::set<std::string> functions, others;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string addr, type, name;
      f >> addr >> type >> name;
      if (name.empty()) continue;
      (type == "T" || type == "W" ? functions : others).insert(name);
    }
    return std::make_pair(functions, others);
  };
  auto [ours, our_others] = names(GPOOL_CLIENT_LIB_DIR "/libcuda.so.1");
  auto [theirs, their_others] = names(GPOOL_CUDA_LINK_STUB);
  ASSERT_GT(theirs.size(), 600u);
  EXPECT_EQ(ours, theirs);
  for (const auto& n : our_others) {
    EXPECT_TRUE(their_others.count(n)) << "libcuda.so.1 stand-in exports " << n;
  }
}

// The NCCL stand-in defines every function NVIDIA's libnccl.so.2 of the toolkit exports (loud
// stubs for what it does not implement), so a program linked with -lnccl always loads.
TEST(NcclExports, ExactlyNvidiasNames) {
  const std::string theirs_lib = GPOOL_CUDA_LIB_DIR "/libnccl.so.2";
  if (!std::filesystem::exists(theirs_lib)) GTEST_SKIP() << "no " << theirs_lib;
  auto names = [](const std::string& lib) {
    auto [rc, out] = gpool::testing::Run({"nm", "-D", "--defined-only", lib});
    EXPECT_EQ(rc, 0) << out;
    std::set<std::string> functions;
    std::istringstream in(out);
    std::string addr, type, name;
    while (in >> addr >> type >> name) {
      if (type == "T" || type == "W") functions.insert(name);
    }
    return functions;
  };
  auto ours = names(GPOOL_CLIENT_LIB_DIR "/nccl/libnccl.so.2");
  auto theirs = names(theirs_lib);
  ASSERT_GT(theirs.size(), 50u);
  EXPECT_EQ(ours, theirs);
}

// The NVML stand-in defines every entry point NCCL 2.28.9 fetches with dlsym (src/misc/nvmlwrap.cc
// of that release; an absent one is a silent null to NCCL) and exports NVML's names only.
TEST(NvmlExports, EveryNameNcclFetchesAndNothingElse) {
  auto [rc, out] = gpool::testing::Run(
      {"nm", "-D", "--defined-only", std::string(GPOOL_CLIENT_LIB_DIR) + "/libnvidia-ml.so.1"});
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> functions;
  std::istringstream in(out);
  std::string addr, type, name;
  while (in >> addr >> type >> name) {
    EXPECT_EQ(name.rfind("nvml", 0), 0u) << "libnvidia-ml.so.1 stand-in exports " << name;
    if (type == "T") functions.insert(name);
  }
  for (const char* n :
       {"nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetIndex",
        "nvmlErrorString", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo",
        "nvmlDeviceGetNvLinkCapability", "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetP2PStatus", "nvmlDeviceGetFieldValues", "nvmlDeviceGetGpuFabricInfoV",
        "nvmlDeviceGetPlatformInfo", "nvmlSystemGetConfComputeState",
        "nvmlSystemGetConfComputeSettings"}) {
    EXPECT_TRUE(functions.count(n)) << n;
  }
}

// Errors the stand-in raises name the call: a program with no GPOOL_DEVICES (run without
// `gpool run`, its libcuda.so.1 found through LD_LIBRARY_PATH) fails at cuInit saying why.
TEST(DriverE2EAlone, WithoutDevicesCuInitSaysWhy) {
  auto [rc, out] = gpool::testing::Run({Built("driver_api"), Built("driver_kernels.cubin")},
                       {"LD_LIBRARY_PATH=" GPOOL_CLIENT_LIB_DIR, "GPOOL_DEVICES="});
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(Has(out, "gpool: cuInit: GPOOL_DEVICES is not set: no GPUs (run the program with "
                       "`gpool run`)")) << out;
  EXPECT_TRUE(Has(out, "cuInit(0) failed: CUDA_ERROR_NO_DEVICE (100)")) << out;
}

// ---- Training and library samples of the real-GPU check (scripts/gpu-check.sh), on CPU ----

// A sample with arguments through `gpool run` (which sets NCCL up for pooled GPUs, as RunNccl),
// the toolkit's libraries after gpool's.
std::pair<int, std::string> RunSampleWithArgs(const std::string& name,
                                              const std::vector<std::string>& args,
                                              const std::string& devices,
                                              const std::string& transport) {
  std::vector<std::string> env = {"LD_LIBRARY_PATH=" GPOOL_CUDA_LIB_DIR, "NCCL_DEBUG=WARN",
                                  "NCCL_SOCKET_IFNAME=lo"};
  for (std::string& e : NoLeakCheckUnderAsan()) env.push_back(std::move(e));
  std::vector<std::string> cmd = {GPOOL_BIN,     "run",     "--devices", devices,
                                  "--transport", transport, "--",        Built(name)};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return gpool::testing::Run(cmd, env);
}

// The number after `key` in `out` (NaN when absent).
double NumberAfter(const std::string& out, const std::string& key) {
  size_t at = out.find(key);
  return at == std::string::npos ? std::nan("") : std::atof(out.c_str() + at + key.size());
}

// mlp_train.cu with --naive-gemm on one emulated device: the whole training loop (NVIDIA's static
// runtime over the driver stand-in; every kernel has a CPU version in emulated_kernels.cc) runs
// on the server for 100 steps and the loss falls. The server's launch log holds each step's five
// GEMMs and one SGD update; no NCCL call is made with one device, and nothing was missing.
TEST_P(DriverE2E, MlpTrainingWithNaiveGemmLearnsOnOneDevice) {
  if (GetParam().backend != "emulated")
    GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("mlp_train"))) {
    GTEST_SKIP() << "the toolkit has no libcublas.so or libnccl.so: mlp_train was not built";
  }
  const size_t gemms_before =
      LaunchesOf(server_->launch_log(), "_Z9gemmNaiveiiiiiPKfiS0_iPfi").size();
  const size_t sgd_before = LaunchesOf(server_->launch_log(), "_Z9sgdUpdatePfPKffi").size();
  auto [rc, out] = RunSampleWithArgs("mlp_train", {"--naive-gemm", "--steps", "100"},
                                     server_->address() + "/0", GetParam().transport);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "mlp_train: devices=1 gemm=naive")) << out;
  double first = NumberAfter(out, "loss first="), last = NumberAfter(out, " last=");
  EXPECT_GT(first, 0.5) << out;  // ~ln(4) for 4 classes at the start
  EXPECT_LT(last, 0.8 * first) << out;
  EXPECT_TRUE(Has(out, "replicas: 1,")) << out;
  EXPECT_TRUE(Has(out, "PASS mlp_train steps=100 gemm=naive")) << out;
  EXPECT_FALSE(Has(out, "ncclCommInitAll")) << out;
  EXPECT_FALSE(Has(out, "gpool:")) << out;
  EXPECT_EQ(LaunchesOf(server_->launch_log(), "_Z9gemmNaiveiiiiiPKfiS0_iPfi").size() - gemms_before,
            500u);
  EXPECT_EQ(LaunchesOf(server_->launch_log(), "_Z9sgdUpdatePfPKffi").size() - sgd_before, 100u);
}

// The same loop over two emulated devices of two servers, its gradients summed by gpool's
// libnccl.so.2 (`gpool run`'s default; NVIDIA's all-reduce kernel has no CPU version, as
// NcclAllReduceReachesBothServersAndFailsAtItsKernel shows): the replicas stay equal only if every
// step's all-reduce summed both devices' gradients into both.
TEST_P(DriverE2E, MlpTrainingOverTwoServersAllReducesGradients) {
  if (GetParam().backend != "emulated")
    GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("mlp_train"))) {
    GTEST_SKIP() << "the toolkit has no libcublas.so or libnccl.so: mlp_train was not built";
  }
  Server other(GetParam(), 2);
  auto [rc, out] =
      RunSampleWithArgs("mlp_train", {"--naive-gemm", "--steps", "100"},
                        server_->address() + "/0," + other.address() + "/0", GetParam().transport);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "mlp_train: devices=2 gemm=naive")) << out;
  EXPECT_TRUE(Has(out, "ncclCommInitAll: ok (2 ranks)")) << out;
  EXPECT_LT(NumberAfter(out, " last="), 0.8 * NumberAfter(out, "loss first=")) << out;
  EXPECT_TRUE(Has(out, "replicas: 2, max weight difference from device 0: 0")) << out;
  EXPECT_TRUE(Has(out, "PASS mlp_train steps=100 gemm=naive")) << out;
}

// cudnn_conv.cu: cuDNN's legacy convolution API (descriptors, the heuristics' algorithm list,
// the workspace query) runs through the driver stand-in, and the forward pass reaches the server
// as a launch of cuDNN's convolution kernel with the input, filter and output tensors among its
// parameters; that kernel has no CPU version, so the synchronize fails naming it.
TEST_P(DriverE2E, CudnnConvolutionReachesTheServer) {
  if (GetParam().backend != "emulated")
    GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cudnn_conv"))) {
    GTEST_SKIP() << "the toolkit has no libcudnn.so: cudnn_conv was not built";
  }
  auto [rc, out] = RunLibrarySample("cudnn_conv", server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "cudnnCreate: ok")) << out;
  EXPECT_TRUE(Has(out, "algorithm ")) << out;
  EXPECT_TRUE(Has(out, "cudnnConvolutionForward: CUDNN_STATUS_SUCCESS")) << out;
  std::string kernel = KernelWithoutCpu(out);
  ASSERT_FALSE(kernel.empty()) << out;
  EXPECT_TRUE(Has(out, "cudaStreamSynchronize(stream) failed")) << out;
  EXPECT_NE(rc, 0) << out;
  std::vector<std::string> ptrs = PrintedPointersLE(out, "buffers x=");
  ASSERT_EQ(ptrs.size(), 3u) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  for (const auto& p : ptrs)
    EXPECT_TRUE(Has(ParamsOf(found.back()), p)) << p << " not in " << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu, "cuMemHostGetDevicePointer_v2: "});
}

// The real-GPU check's SGEMM size, 4096 x 4096 (64 MiB a matrix): created, planned and launched
// as at 256, the launch reaching the server as a cuBLAS GEMM kernel with the three matrices'
// device addresses among its parameters.
TEST_P(DriverE2E, Sgemm4096ReachesTheServerAsACublasKernel) {
  if (GetParam().backend != "emulated")
    GTEST_SKIP() << "NVIDIA's runtime runs on the emulated backend here";
  if (!std::filesystem::exists(Built("cublas_sgemm"))) {
    GTEST_SKIP() << "the toolkit has no libcublas.so: cublas_sgemm was not built";
  }
  auto [rc, out] =
      RunSampleWithArgs("cublas_sgemm", {"4096"}, server_->address() + "/0", GetParam().transport);
  EXPECT_TRUE(Has(out, "cublasSgemm: CUBLAS_STATUS_SUCCESS")) << out;
  std::string kernel = KernelWithoutCpu(out);
  ASSERT_FALSE(kernel.empty()) << out;
  EXPECT_TRUE(Has(kernel, "gemm")) << kernel;
  EXPECT_NE(rc, 0) << out;
  std::vector<std::string> ptrs = PrintedPointersLE(out, "matrices A=");
  ASSERT_EQ(ptrs.size(), 3u) << out;
  auto found = LaunchesOf(server_->launch_log(), kernel);
  ASSERT_FALSE(found.empty()) << "no launch of " << kernel << " in " << server_->launch_log();
  for (const auto& p : ptrs)
    EXPECT_TRUE(Has(ParamsOf(found.back()), p)) << p << " not in " << found.back();
  ExpectOnlyGpoolLines(out, {kNoCpu});
}

}  // namespace
}  // namespace gpool::remote
