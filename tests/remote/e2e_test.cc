// End to end: unmodified CUDA programs (examples/cuda, built with nvcc -cudart shared) run through
// `gpool run` (NVIDIA's libcudart.so.13 from gpool's client lib dir over gpool's libcuda.so.1
// stand-in) against `gpool gpu-server` processes, over TCP and UCX, with the emulated backend and
// with the cuda backend on the emulated CUDA driver (kEmulated, kCuda below).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
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

// The gpu-server backends the suite runs against. kEmulated: `--backend emulated` with the example
// kernels plugin. kCuda: the real `cuda` backend (src/remote/server/cuda_backend.cc) on the
// emulated CUDA driver, a test stand-in for libcuda.so.1 that is not a GPU
// (tests/remote/emulated_driver: host memory, asynchronous work queued and run at the next
// synchronizing call, the example kernels on the CPU), loaded through GPOOL_LIBCUDA. What kCuda
// shows: the backend's own logic (staging buffers, the pipelined reads and in-place writes of
// copies over 4 MiB, 2-D copies and memsets, symbols, cooperative launches, limits, events)
// against the driver API's contracts as the emulated driver models them (a buffer reused or read
// before its copy is waited for holds stale bytes). What it cannot: DMA that overlaps, real
// kernels, the real driver's error behaviour (scripts/gpu-check.sh on a GPU lease does).
constexpr const char* kEmulated = "emulated";
constexpr const char* kCuda = "cuda";

// How a test server is started. The device count and layout reporting are asked for the same way
// for both backends; this turns them into the emulated backend's flags or the emulated driver's
// environment.
struct ServerOptions {
  std::string transport = "tcp";
  std::string backend = kEmulated;
  int devices = 1;
  // A server that cannot report kernel parameter layouts, as one whose driver lacks
  // cuFuncGetParamInfo (before CUDA 12.4): the emulated backend's --emulated-no-param-info, or
  // the cuda backend on the emulated driver's build without that entry point.
  bool without_param_info = false;
  // Memory per device; 0: the emulated backend's default (16 GiB), or 2 GiB on the emulated driver.
  uint64_t device_memory = 0;
  std::vector<std::string> flags;              // more gpu-server flags
};

// A gpu-server child on a free port.
class Server {
 public:
  explicit Server(ServerOptions o = {}) {
    std::vector<std::string> argv = {GPOOL_BIN, "--log-level", "info", "gpu-server", "--backend",
                                     o.backend, "--transport", o.transport};
    std::vector<std::string> env;
    if (o.backend == kEmulated) {
      argv.insert(argv.end(), {"--emulated-kernels", GPOOL_KERNELS_PLUGIN, "--emulated-devices",
                               std::to_string(o.devices)});
      if (o.without_param_info) argv.push_back("--emulated-no-param-info");
      if (o.device_memory) {
        argv.insert(argv.end(), {"--emulated-memory", std::to_string(o.device_memory)});
      }
    } else {
      env = DriverEnv(o);
    }
    bool keyed = false, listen = false;
    for (auto& e : o.flags) keyed |= e == "--key", listen |= e == "--listen";
    if (!keyed) argv.push_back("--insecure");
    if (!listen) argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    argv.insert(argv.end(), o.flags.begin(), o.flags.end());
    proc_ = std::make_unique<Subprocess>(argv, env);
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
  // The cuda backend's environment: the emulated driver build and its devices.
  static std::vector<std::string> DriverEnv(const ServerOptions& o) {
#ifdef GPOOL_EMULATED_DRIVER
    return {std::string("GPOOL_LIBCUDA=") +
                (o.without_param_info ? GPOOL_EMULATED_DRIVER_BEFORE_12_4 : GPOOL_EMULATED_DRIVER),
            "GPOOL_EMULATED_DRIVER_KERNELS=" GPOOL_KERNELS_PLUGIN,
            "GPOOL_EMULATED_DRIVER_DEVICES=" + std::to_string(o.devices),
            "GPOOL_EMULATED_DRIVER_MEMORY=" +
                std::to_string(o.device_memory ? o.device_memory : uint64_t{2} << 30)};
#else
    ADD_FAILURE() << "backend " << o.backend << " needs the emulated CUDA driver, not built here";
    return {};
#endif
  }

  std::unique_ptr<Subprocess> proc_;
  std::string address_;
};

// The command line of `gpool run` for `argv`. Under ASan the children run without the leak check:
// NVIDIA's runtime is not instrumented and LeakSanitizer's exit-time tracer has crashed in it
// (driver_e2e_test.cc, NoLeakCheckUnderAsan).
std::vector<std::string> RunArgv(const std::string& devices, const std::vector<std::string>& argv,
                                 const std::string& transport = "tcp",
                                 const std::vector<std::string>& extra_flags = {}) {
  std::vector<std::string> cmd = {GPOOL_BIN, "run", "--devices", devices, "--transport", transport};
  cmd.insert(cmd.end(), extra_flags.begin(), extra_flags.end());
  cmd.push_back("--");
#if defined(__SANITIZE_ADDRESS__)
  const char* o = std::getenv("ASAN_OPTIONS");
  cmd.insert(cmd.end(), {"env", std::string("ASAN_OPTIONS=") + (o ? o : "") + ":detect_leaks=0"});
#endif
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

std::pair<int, std::string> RunSample(const std::string& devices, std::vector<std::string> argv,
                                      std::string transport = "tcp",
                                      std::vector<std::string> extra_flags = {}) {
  return Run(RunArgv(devices, argv, transport, extra_flags));
}

// Pid of the session worker, from the server's log line "... in worker PID at ...".
pid_t WorkerPid(Subprocess& server) {
  if (!server.WaitFor(" in worker ", 10000)) return -1;
  const std::string& out = server.output();
  size_t at = out.rfind(" in worker ") + 11;
  return static_cast<pid_t>(std::atoi(out.c_str() + at));
}

bool Has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

// The shared suite's parameter: a data transport and a backend. Every test runs for every
// combination (Transports/E2E.NAME/tcp_emulated, ucx_emulated, tcp_cuda, ucx_cuda). Where the
// backends rightly differ (the device's name, their own error messages, whether a kernel fault is
// sticky), a test checks each backend's answer, saying why. CTest runs them as two tests
// (tests/remote/CMakeLists.txt filters on the name's suffix "_cuda").
struct Pair {
  std::string transport;
  std::string backend;
};
std::string Name(const Pair& p) { return p.transport + "_" + p.backend; }
void PrintTo(const Pair& p, std::ostream* os) { *os << Name(p); }
std::string PairName(const ::testing::TestParamInfo<Pair>& info) { return Name(info.param); }
std::vector<Pair> Pairs(const std::vector<std::string>& backends) {
  std::vector<Pair> pairs;
  for (const auto& b : backends) {
    for (const char* t : {"tcp", "ucx"}) pairs.push_back({t, b});
  }
  return pairs;
}
// The backends this build can run: the cuda backend only where the emulated driver was built.
std::vector<std::string> Backends() {
#ifdef GPOOL_EMULATED_DRIVER
  return {kEmulated, kCuda};
#else
  return {kEmulated};
#endif
}

// Most tests use one server per (transport, backend), started by the first test that needs it and
// stopped when the suite ends: two devices and a 1 GiB session memory limit, enough for every
// sample. Sharing it saves a server start (and over UCX a UCX context) per test, which matters in
// CI. Tests that need their own flags, a second server, a key, or kill the server or read its log
// start their own.
class E2E : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Sample("vector_add"))) {
      FAIL() << "CUDA samples missing in " << GPOOL_SAMPLES_DIR
             << ": nvcc was not found at configure time (set CUDA_HOME and re-run cmake)";
    }
  }
  static void TearDownTestSuite() { shared_.clear(); }

  const std::string& transport() const { return GetParam().transport; }
  const std::string& backend() const { return GetParam().backend; }
  bool cuda() const { return backend() == kCuda; }
  // `gpool run` of `argv` on `devices` over this test's transport.
  std::vector<std::string> RunArgv(const std::string& devices, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& flags = {}) const {
    return remote::RunArgv(devices, argv, transport(), flags);
  }
  std::pair<int, std::string> RunOn(const std::string& devices, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& flags = {}) const {
    return testing::Run(RunArgv(devices, argv, flags));
  }
  // The driver stand-in's loud refusal of an unimplemented call: it names the cu* call NVIDIA's
  // runtime made for the program's cuda* call.
  std::string NotSupported(const std::string& driver_call) const {
    return "gpool: " + driver_call + " is not supported by gpool's libcuda.so.1 stand-in";
  }
  // A server of this test's transport and backend.
  ServerOptions Options(int devices = 1) const {
    return {.transport = transport(), .backend = backend(), .devices = devices};
  }
  Server& Shared() {
    // Keyed by transport and backend.
    auto& s = shared_[transport() + "_" + backend()];
    // Read its log so far (for 1 ms): the pipe must not fill up while nobody waits on it. A
    // server that died in an earlier test is not replaced: the tests after it fail, loudly.
    if (s) s->proc().WaitFor("\x01never", 1);
    if (!s) {
      ServerOptions o = Options(2);
      o.flags = {"--session-mem-limit", "1GiB"};
      s = std::make_unique<Server>(o);
    }
    return *s;
  }
  // Runs a sample against the shared server's device 0.
  std::pair<int, std::string> RunShared(std::vector<std::string> argv) {
    return RunOn(Shared().address() + "/0", argv);
  }
  // The name device 0 reports (cudaGetDeviceProperties), which says which backend served it.
  std::string DeviceName() const {
    return cuda() ? "gpool emulated CUDA driver device 0 (not a GPU)" : "gpool emulated GPU 0";
  }

 private:
  static std::map<std::string, std::unique_ptr<Server>> shared_;
};
std::map<std::string, std::unique_ptr<Server>> E2E::shared_;

TEST_P(E2E, VectorAdd) {
  auto [rc, out] = RunShared({Sample("vector_add"), "100000"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS vector_add n=100000")) << out;
  EXPECT_TRUE(Has(out, DeviceName())) << out;
}

TEST_P(E2E, StructParamsArriveByteExact) {
  auto [rc, out] = RunShared({Sample("struct_param")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS struct_param")) << out;
  // The server answered the layouts (GetModuleInfo): the client's own parser was not needed.
  EXPECT_FALSE(Has(out, "cannot report kernel parameter layouts")) << out;
}

// A server that cannot report layouts, as one whose driver lacks cuFuncGetParamInfo (the emulated
// backend's --emulated-no-param-info; for the cuda backend, the emulated driver's build without
// it, which the backend loads without it, reporting each kernel's layout as "not in this
// driver" inside GetModuleInfo): the driver stand-in takes the layouts from its own parse of the
// image (driver_state.h, Function), so it never asks the server and has nothing to say. The
// server still launches with the layout it parsed itself and the CPU kernels check the sizes, so
// a client layout that differs fails the sample; struct_param checks every byte of the structs.
TEST_P(E2E, StructParamsThroughTheClientLayoutFallback) {
  ServerOptions o = Options();
  o.without_param_info = true;
  Server s(o);
  auto [rc, out] = RunOn(s.address() + "/0", {Sample("struct_param")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS struct_param")) << out;
  auto [rc2, out2] = RunOn(s.address() + "/0", {Sample("vector_add"), "1000"});
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(Has(out2, "PASS vector_add n=1000")) << out2;
}

TEST_P(E2E, StreamsAndEvents) {
  auto [rc, out] = RunShared({Sample("streams_events")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS streams_events")) << out;
}

// Both devices of the shared server: each has its own copy of the module's variables, so a value
// written on one device is not the other's, and a kernel sees its own device's copy (the sample
// checks the values; the line says it ran on two devices). On the cuda backend the variables come
// from cuModuleGetGlobal in each device's context's own load of the module (the emulated driver
// gives each load its own variables, as the driver does), so the backend must resolve a variable
// in the asking device's copy, not in the copy of whichever device the session used last.
TEST_P(E2E, SymbolsAndConstants) {
  std::string shared = Shared().address();
  auto [rc, out] = RunOn(shared + "/0," + shared + "/1", {Sample("symbols")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "per-device variables: 2 devices each saw and kept their own gCounter"))
      << out;
  EXPECT_TRUE(Has(out, "PASS symbols")) << out;
}

// Sizes from 1 byte to 256 MiB both ways. On the cuda backend the copies over its 4 MiB staging
// buffers go through the pipelined reads (StartD2H/FinishD2H) and the in-place writes
// (H2DTarget/CommitH2D); the emulated driver runs queued copies only at synchronizing calls, so a
// staging buffer reused or read before its copy was waited for fails the sample's byte checks.
TEST_P(E2E, MemcpyOneByteTo256MiB) {
  auto [rc, out] = RunShared({Sample("memcpy_sizes"), "268435456"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS memcpy_sizes max=268435456")) << out;
}

// A program built with --default-stream per-thread calls the _ptds/_ptsz variants: each must be
// mapped (a stub would fail the sample with cudaErrorNotSupported).
TEST_P(E2E, PerThreadDefaultStream) {
  auto bin_or = ReadFile(Sample("per_thread_stream"));
  ASSERT_TRUE(bin_or.ok()) << bin_or.status().ToString();
  const std::string& bin = *bin_or;
  for (const char* sym : {"cudaMemcpy2D_ptds", "cudaMemcpy2DAsync_ptsz", "cudaMemcpyToSymbol_ptds",
                          "cudaMemcpyFromSymbol_ptds", "cudaMemcpyToSymbolAsync_ptsz",
                          "cudaMemcpyFromSymbolAsync_ptsz", "cudaMemset_ptds", "cudaMemset2D_ptds",
                          "cudaEventRecordWithFlags_ptsz", "cudaStreamQuery_ptsz",
                          "__cudaLaunchKernel_ptsz"}) {
    EXPECT_TRUE(Has(bin, sym)) << "per_thread_stream does not call " << sym
                               << " (built without --default-stream per-thread?)";
  }
  auto [rc, out] = RunShared({Sample("per_thread_stream")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS per_thread_stream")) << out;
  EXPECT_FALSE(Has(out, "not supported")) << out;
}

// The libcudart.so.13 functions a sample imports, one " NAME@libcudart.so.13" per line as
// `nm -D --undefined-only` prints them (the leading blank keeps "cudaLaunchKernel" from matching
// "__cudaLaunchKernel"; the binary's string table may share that tail, so no byte search).
std::string Imports(const std::string& bin) {
  auto [rc, out] = Run({"nm", "-D", "--undefined-only", bin});
  EXPECT_EQ(rc, 0) << out;
  return out;
}

// Entry points no other sample calls (api_coverage.cu): the runtime launch calls, memsetAsync,
// peek, stream priorities, occupancy, device reset, and a __managed__ variable used on the device.
// Run on both devices of the shared server: the managed variable's module may run kernels on
// device 0 only, and the launch on device 1 must be refused, loudly.
TEST_P(E2E, ApiCoverage) {
  std::string imports = Imports(Sample("api_coverage"));
  for (const char* sym : {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "__cudaRegisterManagedVar",
                          "__cudaInitModule", "cudaMemsetAsync", "cudaPeekAtLastError",
                          "cudaStreamCreateWithPriority", "cudaDeviceGetStreamPriorityRange",
                          "cudaStreamGetPriority", "cudaDeviceReset",
                          "cudaOccupancyMaxActiveBlocksPerMultiprocessor"}) {
    EXPECT_TRUE(Has(imports, std::string(" ") + sym + "@libcudart.so.13"))
        << "api_coverage does not call " << sym << "\n" << imports;
  }
  std::string shared = Shared().address();
  auto [rc, out] = RunOn(shared + "/0," + shared + "/1", {Sample("api_coverage")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS api_coverage")) << out;
  for (const char* line :
       {"peek: error kept until cudaGetLastError", "priorities: least 0 greatest -5",
        "memsetAsync + cudaLaunchKernel + cudaLaunchKernel_ptsz: 5000 elements right",
        "occupancy: 16 blocks of 128 threads per multiprocessor",  // both emulations' answer
        "managed: device 0 kernels see one variable (7)",
        "managed: launch on device 1: cudaErrorNotSupported",
        "warning: __managed__ variable gManaged is registered as device memory of one GPU",
        "launch of kernel _Z11bumpManagedPii on device 1 refused: its module has __managed__ "
        "variable(s) gManaged",
        "reset: 64 MiB freed, 0 bytes short of the start; cudaFree(old pointer): "
        "cudaErrorInvalidValue"}) {
    EXPECT_TRUE(Has(out, line)) << line << "\n" << out;
  }
  EXPECT_FALSE(Has(out, "is not supported by gpool's libcuda.so.1 stand-in")) << out;
}

// Host access to a __managed__ variable cannot be right remotely (the GPU never sees a host
// copy). NVIDIA's runtime fetched the variable's address at load (cuLibraryGetManaged) and host
// code reads it directly: the address is the server's device memory, which the driver stand-in
// reserves in the program's address space (so the read faults, never returns a wrong value), and
// its fault handler names the variable, then lets the program die of the signal
// (docs/remoting/driver-api.md, "Managed variables"). Copies to and from the symbol work first; the handler
// is installed by then.
TEST_P(E2E, ManagedVariableHostAccessStopsTheProgram) {
  auto [rc, out] = RunShared({Sample("api_coverage"), "managed-host"});
  EXPECT_TRUE(Has(out, "managed: symbol copies see 41; fault handlers: SIGSEGV libcuda.so.1, "
                       "SIGBUS libcuda.so.1")) << out;
  EXPECT_TRUE(Has(out, "READ")) << out;
  EXPECT_FALSE(Has(out, "host reads")) << out;
  EXPECT_FALSE(Has(out, "PASS")) << out;
  EXPECT_EQ(rc, 128 + SIGSEGV) << "not a death by SIGSEGV\n" << out;  // Subprocess::Wait
  EXPECT_TRUE(Has(out, "warning: __managed__ variable gManaged is registered as device memory "
                       "of one GPU (device 0): managed memory is not remoted, so host access to "
                       "it stops the program")) << out;
  EXPECT_FALSE(Has(out, "device range is also host memory")) << out;
  // The FATAL line names the variable, its size (an int) and device, after the read began.
  // (No std::regex: GCC 12 warns inside <regex> under the sanitizer build's -O1.)
  const std::string head = "gpool: FATAL: host access to __managed__ variable gManaged (device address 0x";
  const std::string tail = ", 4 bytes, on device 0): managed memory is not remoted; access it from "
                           "kernels only, or copy it with cudaMemcpyFromSymbol/ToSymbol\n";
  const size_t at = out.find(head);
  ASSERT_NE(at, std::string::npos) << out;
  const size_t hex = at + head.size();
  const size_t end = out.find_first_not_of("0123456789abcdef", hex);
  ASSERT_NE(end, std::string::npos) << out;
  EXPECT_EQ(out.compare(end, tail.size(), tail), 0) << out;
  EXPECT_GT(end, hex) << "no device address: " << out;
  EXPECT_NE(out.substr(hex, end - hex).find_first_not_of('0'), std::string::npos)
      << "device address 0: " << out;
  EXPECT_GT(at, out.find("READ")) << out;
}

// A program without __managed__ variables gets no fault handler from the driver stand-in
// (libcuda.so.1): it installs one only when a variable is registered. (UCX's libucs, which the
// stand-in links, installs its own when loaded, whatever the transport.)
TEST_P(E2E, ProgramWithoutManagedVariablesInstallsNoFaultHandler) {
  auto [rc, out] = RunShared({Sample("error_paths"), "fault-handlers"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "fault handlers: SIGSEGV ")) << out;
  EXPECT_FALSE(Has(out, "SIGSEGV libcuda.so.1")) << out;
  EXPECT_FALSE(Has(out, "SIGBUS libcuda.so.1")) << out;
  EXPECT_TRUE(Has(out, "PASS error_paths fault-handlers")) << out;
}

// Device limits and flags, and host registration with its loud mapping flags (error_paths
// config). The server keeps limits per session: E2E.ErrorPaths runs config again in another
// session on the same server, and whichever of the two runs second must find the defaults, not
// the limit the other one set. The refusals are the backend's: the emulated backend's own
// messages, or the driver's error with the call's arguments (cuda_backend.cc); neither device has
// a persisting L2 cache to set aside.
void ExpectConfigPassed(const std::string& out, const std::string& backend) {
  EXPECT_TRUE(Has(out, "PASS error_paths config")) << out;
  EXPECT_TRUE(Has(out, "limits: malloc heap 8388608 at start")) << out;
  std::vector<std::string> refusals;
  if (backend == kCuda) {
    refusals = {"cuCtxSetLimit(limit 127, value 1): unsupported limit (215)",
                "cuCtxSetLimit(limit 6, value 1048576): unsupported limit (215)"};
  } else {
    refusals = {"cudaDeviceSetLimit: unknown limit 127",
                "cudaLimitPersistingL2CacheSize, 1048576): the emulated GPU has no persisting L2 "
                "cache"};
  }
  // Flags 0x3 (spin and yield at once): NVIDIA's runtime refuses them itself, before any driver
  // call (the sample checks the error), so no server says anything. The host-memory refusals are
  // the driver stand-in's, naming the cu* call NVIDIA's runtime made for the program's.
  refusals.insert(refusals.end(),
                  {"cuMemHostRegister_v2(CU_MEMHOSTREGISTER_DEVICEMAP) is not supported",
                   "cuMemHostRegister_v2(CU_MEMHOSTREGISTER_IOMEMORY) is not supported",
                   "cuMemHostRegister_v2(CU_MEMHOSTREGISTER_READ_ONLY) is not supported",
                   "is host memory, which cannot be mapped into a remote GPU's address space"});
  for (const auto& line : refusals) EXPECT_TRUE(Has(out, line)) << line << "\n" << out;
}

TEST_P(E2E, DeviceLimitsFlagsAndHostRegister) {
  auto [rc, out] = RunShared({Sample("error_paths"), "config"});
  EXPECT_EQ(rc, 0) << out;
  ExpectConfigPassed(out, backend());
}

// The device's own memory bound (256 MiB, no session limit): cudaMemGetInfo and totalGlobalMem
// report it, and an allocation beyond it fails with cudaErrorMemoryAllocation while a small one
// still works. The backend refuses it: the emulated backend's allocator, or cuMemAlloc (the
// emulated driver logs the size it was asked for, so the request did reach the driver).
TEST_P(E2E, DeviceMemoryBound) {
  ServerOptions o = Options();
  o.device_memory = uint64_t{256} << 20;
  Server s(o);
  auto [rc, out] = RunOn(s.address() + "/0", {Sample("error_paths"), "oom", "512", "268435456"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS error_paths oom")) << out;
  if (cuda()) {
    EXPECT_TRUE(Has(out, "cuMemAlloc: out of memory (2)")) << out;
    EXPECT_TRUE(s.proc().WaitFor("cuMemAlloc: 536870912 bytes asked", 10000)) << s.proc().output();
  } else {
    EXPECT_TRUE(Has(out, "emulated device 0 is out of memory (536870912 bytes asked, 0 of "
                         "268435456 in use)")) << out;
  }
}

TEST_P(E2E, TwoServersAggregated) {
  // Another one-device server, then the shared one's two devices: three devices on two servers.
  Server other(Options());
  std::string shared = Shared().address();
  std::string devices = other.address() + "/0," + shared + "/0," + shared + "/1";
  auto [rc, out] = RunOn(devices, {Sample("multi_device"), "3"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS multi_device devices=3")) << out;
  // Peer access: enabled between the shared server's two devices, refused loudly across servers
  // (by cuCtxEnablePeerAccess, which NVIDIA's runtime calls for cudaDeviceEnablePeerAccess).
  EXPECT_TRUE(Has(out, std::string("cuCtxEnablePeerAccess") + ": device 0 (" + other.address() + ") and device 1 (" + shared +
                           ") are on different GPU servers")) << out;
}

// runtime_calls: stream queries, cudaHostGetFlags, PCI bus ids, cudaChooseDevice,
// cudaMallocAsync/cudaFreeAsync, host functions on streams (a host function sees the kernel's
// result in pinned memory and the stream's later copy and kernel see its write; a query says not
// ready while one waits; their order across the legacy stream), cooperative launches and the
// occupancy helpers, each asserted by the sample. Four devices on two servers, one of them listed
// twice: every device's PCI bus id must differ (gpool's domain is the server's ordinal, and the
// repeated device gets one no server uses), and each is found again by cudaDeviceGetByPCIBusId.
// Then the loud launch attributes, and an asynchronous error first heard by the callback thread
// that the program's next synchronize must still report.
TEST_P(E2E, RuntimeCalls) {
  auto bin_or = ReadFile(Sample("runtime_calls"));
  ASSERT_TRUE(bin_or.ok()) << bin_or.status().ToString();
  for (const char* sym : {"cudaStreamGetFlags", "cudaStreamGetPriority", "cudaStreamGetDevice",
                          "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cudaHostGetFlags",
                          "cudaDeviceGetPCIBusId", "cudaDeviceGetByPCIBusId", "cudaChooseDevice",
                          "cudaMallocAsync", "cudaFreeAsync", "cudaLaunchHostFunc",
                          "cudaStreamAddCallback", "cudaLaunchCooperativeKernel",
                          "cudaLaunchKernelExC", "cudaOccupancyAvailableDynamicSMemPerBlock"}) {
    EXPECT_TRUE(Has(*bin_or, sym)) << "runtime_calls does not call " << sym;
  }
  Server other(Options());
  std::string shared = Shared().address();
  std::string devices =
      other.address() + "/0," + shared + "/0," + shared + "/1," + shared + "/0";
  auto [rc, out] = RunOn(devices, {Sample("runtime_calls")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS runtime_calls devices=4")) << out;
  EXPECT_FALSE(Has(out, "not supported")) << out;
  for (const char* id : {"device 0: 0000:00:00.0", "device 1: 0001:00:00.0",
                         "device 2: 0001:01:00.0", "device 3: 0005:00:00.0"}) {
    EXPECT_TRUE(Has(out, id)) << out;
  }

  // `runtime_calls unsupported` (a launch priority refused) does not hold here: the driver
  // stand-in accepts a priority (ignoring a scheduling hint changes nothing a program can observe,
  // and libraries pass it), so that mode is not run (docs/remoting.md, "Known limits").

  // The emulated backend reports the fault once; the emulated driver keeps it, as a GPU does.
  auto [arc, aout] =
      RunShared({Sample("runtime_calls"), "async-error", cuda() ? "sticky" : "once"});
  EXPECT_EQ(arc, 0) << aout;
  EXPECT_TRUE(Has(aout, "PASS runtime_calls async-error")) << aout;
  EXPECT_TRUE(Has(aout, cuda() ? "cuStreamSynchronize: unspecified launch failure (719)"
                               : "illegal address (emulated fault)")) << aout;
}

// The error paths, in one process (one program start instead of seven): the memory limit (2 GiB
// asked, over the shared server's 1 GiB session limit, under the device's memory; the limit is
// also what cudaMemGetInfo and totalGlobalMem report), calls gpool does not implement, the device
// configuration again, and asynchronous errors at the next synchronizing call. The kernel fault
// comes last: on the cuda backend it is sticky (the emulated driver fails every later call of the
// session, as a GPU does), so a mode after it could only fail. no-kernel is not run: it expects
// cudaErrorInvalidDeviceFunction, a runtime error with no driver-API counterpart, and NVIDIA's
// runtime reports the driver's error under its own number (the clear error for a kernel with no
// CPU implementation: driver_e2e_test.cc, the library samples' launches).
TEST_P(E2E, ErrorPaths) {
  std::vector<std::string> modes = {"oom", "bad-pointer", "unsupported", "dynamic-shared",
                                    "config", "launch-fail"};
  std::string list;
  for (const auto& m : modes) list += (list.empty() ? "" : ",") + m;
  auto [rc, out] = RunShared({Sample("error_paths"), list, "2048", "1073741824"});
  EXPECT_EQ(rc, 0) << out;
  for (const auto& mode : modes) {
    EXPECT_TRUE(Has(out, "PASS error_paths " + mode)) << mode << "\n" << out;
  }
  EXPECT_TRUE(Has(out, "session's memory limit is 1073741824 bytes")) << out;
  EXPECT_TRUE(Has(out, NotSupported("cuGraphAddChildGraphNode"))) << out;
  EXPECT_TRUE(Has(out, NotSupported("cuMemAllocManaged"))) << out;
  // A launch over the kernel's dynamic shared memory maximum is refused naming the kernel.
  if (cuda()) {
    EXPECT_TRUE(Has(out, "cuLaunchKernel: invalid argument (1) (kernel _Z13reverseSharedPfi, "
                         "grid 1x1x1, block 256x1x1, 65536 bytes of dynamic shared memory)")) << out;
    EXPECT_TRUE(Has(out, "cuCtxSynchronize: unspecified launch failure (719)")) << out;
  } else {
    EXPECT_TRUE(Has(out, "launch of _Z13reverseSharedPfi with 65536 bytes of dynamic shared "
                         "memory: the kernel's maximum is 49152")) << out;
    EXPECT_TRUE(Has(out, "kernel _Z11alwaysFailsPi failed: illegal address")) << out;
  }
  ExpectConfigPassed(out, backend());
}

// 2-D copies with pitches both ways and device to device, 2-D memsets, symbols on a stream
// (copies_2d checks every byte; on the cuda backend cuMemcpy2DAsync and cuMemsetD2D8Async). Through gpool the host-to-device and device-to-device 2-D copies
// and the memsets are posted: the server's own count of the session's requests and replies (its
// log line at the session's end) shows that the 200 small cudaMemcpy2DAsync calls waited for no
// reply and each 4096-row memset was one request. Before, each 2-D copy was a round trip and a
// 2-D memset one request per row (> 200 replies, > 8,000 requests).
std::map<std::string, unsigned long> RepliesByOp(Subprocess& server);  // below

TEST_P(E2E, Copies2DArePostedAndLand) {
  Server s(Options());  // its own: the test reads the one session's counts from the log
  auto [rc, out] = RunOn(s.address() + "/0", {Sample("copies_2d")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS copies_2d")) << out;
  ASSERT_TRUE(s.proc().WaitFor(" replies, ", 20000)) << s.proc().output();
  const std::string& log = s.proc().output();
  size_t at = log.find(" ended: ");
  ASSERT_NE(at, std::string::npos) << log;
  unsigned long requests = 0, replies = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at, " ended: %lu requests, %lu replies", &requests, &replies), 2)
      << log.substr(at, 200);
  // The sample's synchronizing calls: mallocs, frees, syncs, reads, the symbol lookup (~30).
  // NVIDIA's runtime also asks ~100 device attributes at start-up, one round trip each
  // (GetAttribute, cached after); those are not the copies' and are not counted.
  replies -= RepliesByOp(s.proc())["GetAttribute"];
  EXPECT_LT(replies, 60u) << log.substr(at, 200);
  EXPECT_LT(requests, 600u) << log.substr(at, 200);
  EXPECT_GT(requests, 200u) << "the burst of 2-D copies did not reach the server: " << log.substr(at, 200);
  std::printf("%s: copies_2d session: %lu requests, %lu replies\n", transport().c_str(), requests,
              replies);
}

// 3-D copies (cuMemcpy3D/3DAsync/3DPeer: slices apart and contiguous, boxes with offsets, into
// pinned memory), a batch of copies (cuMemcpyBatchAsync, refused on the legacy stream) and the
// 16- and 32-bit memsets, 1-D and 2-D, with patterns the protocol's byte memset cannot set:
// copies_3d checks every byte inside and around each box.
TEST_P(E2E, Copies3DBatchesAndWideMemsetsLand) {
  auto [rc, out] = RunShared({Sample("copies_3d")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS copies_3d")) << out;
  EXPECT_TRUE(Has(out, "cuMemcpyBatchAsync_v2: the legacy default stream cannot take a batch"))
      << out;
}

// Replies per op of the first session the server ended, from its log line "session N replies by
// op: GetDeviceProps 1, Malloc 2, ..." (SessionStats::RepliesByOp).
std::map<std::string, unsigned long> RepliesByOp(Subprocess& server) {
  std::map<std::string, unsigned long> counts;
  const std::string mark = " replies by op: ";
  if (!server.WaitFor(mark, 20000)) {
    ADD_FAILURE() << "no per-op reply counts in the server's log:\n" << server.output();
    return counts;
  }
  const std::string& log = server.output();
  size_t at = log.find(mark) + mark.size();
  std::string line = log.substr(at, log.find('\n', at) - at);
  for (size_t i = 0; i < line.size();) {
    size_t end = std::min(line.find(", ", i), line.size());
    std::string item = line.substr(i, end - i);
    size_t space = item.rfind(' ');
    if (space != std::string::npos) {
      counts[item.substr(0, space)] = std::stoul(item.substr(space + 1));
    }
    i = end + 2;
  }
  return counts;
}

// The most modules the session had registered at once, from the server's end-of-session line
// "... modules: N registered at the end, peak P" (SessionStats::peak_modules); -1 if absent.
long PeakModules(Subprocess& server) {
  const std::string mark = " registered at the end, peak ";
  if (!server.WaitFor(mark, 20000)) {
    ADD_FAILURE() << "no module counts in the server's log:\n" << server.output();
    return -1;
  }
  const std::string& log = server.output();
  return std::atol(log.c_str() + log.find(mark) + mark.size());
}

// Issue 4, module lifecycle: a kernel library dlopen()ed and dlclose()d five times
// (module_reload): each load is a fresh module (its variable starts over), each close unregisters
// it on the server, which frees it (the session never held more than that one module, and free
// memory on a server without a session limit comes back every round: the module's 8 MiB
// variable); then cudaDeviceReset: a variable reads its initial value again, and an allocation,
// a stream and an event made before it are invalid after it.
std::vector<std::string> ModuleReloadArgv() {
  return {Sample("module_reload"), Sample("libreload_kernels.so"), "5"};
}
void ExpectModuleReload(Server& s, const std::pair<int, std::string>& run) {
  const auto& [rc, out] = run;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "reload: 5 rounds")) << out;
  EXPECT_TRUE(Has(out, "reset: variable back to 0")) << out;
  EXPECT_TRUE(Has(out, "PASS module_reload")) << out;
  // Modules load lazily (driver_state.h, Module): the program's own (module_reload.cu has no
  // kernels, but nvcc registers its fatbin), never looked up, never reaches the server, so the
  // library's alone, one load at a time (five if closing the library left its module there).
  EXPECT_EQ(PeakModules(s.proc()), 1) << s.proc().output();
}

// Issue 4: kernel layouts and variable addresses cost one round trip per module and server device
// (GetModuleInfo), none per kernel or variable. symbols (four kernels, a __constant__ and a
// __device__ variable in one module) on both devices of one server: its variables are used on
// each device, whose copies differ, so two fetches (one per device); multi_device (no variables,
// its kernel launched on device 0 of one server and devices 0 and 1 of another): none, since the
// layouts come from the client's own parse of the image (driver_state.h, Function), so a module
// without variables needs no fetch at all. No session waited for a GetParamInfo or GetSymbol; the
// samples check their results. A kernel's attributes, which NVIDIA's runtime asks at its first launch, are
// one FuncAttributes round trip per kernel, kept after (at most one per kernel and server).
TEST_P(E2E, ModuleInfoIsFetchedOncePerModuleAndServerDevice) {
  auto expect_fetches = [](Subprocess& server, unsigned long fetches, const std::string& what) {
    auto counts = RepliesByOp(server);
    EXPECT_EQ(counts["GetModuleInfo"], fetches) << what << "\n" << server.output();
    EXPECT_EQ(counts.count("GetParamInfo"), 0u) << what << "\n" << server.output();
    EXPECT_EQ(counts.count("GetSymbol"), 0u) << what << "\n" << server.output();
    EXPECT_GT(counts["Malloc"], 0u) << what << ": the counts were not read\n" << server.output();
    return counts;
  };
  {
    Server s(Options(2));
    auto [rc, out] = RunOn(s.address() + "/0," + s.address() + "/1", {Sample("symbols")});
    EXPECT_EQ(rc, 0) << out;
    EXPECT_TRUE(Has(out, "per-device variables: 2 devices")) << out;
    EXPECT_TRUE(Has(out, "PASS symbols")) << out;
    auto counts = expect_fetches(s.proc(), 2, "symbols on two devices of one server");
    // symbols has four kernels.
    EXPECT_LE(counts["FuncAttributes"], 4u) << s.proc().output();
  }
  Server a(Options()), b(Options(2));
  std::string devices = a.address() + "/0," + b.address() + "/0," + b.address() + "/1";
  auto [rc, out] = RunOn(devices, {Sample("multi_device"), "3"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "PASS multi_device devices=3")) << out;
  expect_fetches(a.proc(), 0, "multi_device, server a");
  expect_fetches(b.proc(), 0, "multi_device, server b (two devices)");
}

TEST_P(E2E, KilledClientFreesItsMemory) {
  Server s(Options());  // its own: the test reads the one session's worker from the log
  Subprocess client(RunArgv(s.address() + "/0", {Sample("error_paths"), "hold", "256"}));
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
  std::printf("%s: worker exited %.3f s after its client was killed\n", transport().c_str(),
              s_taken);
}

TEST_P(E2E, KilledServerIsReportedNotAHang) {
  auto s = std::make_unique<Server>(Options());
  Subprocess client(RunArgv(s->address() + "/0", {Sample("error_paths"), "server-dies"}));
  ASSERT_TRUE(client.WaitFor("READY", 60000)) << client.output();
  s->proc().Kill(SIGKILL);
  s->proc().Wait();
  client.WriteStdin("go\n");
  int rc = client.Wait(60000);
  EXPECT_EQ(rc, 0) << client.output();
  EXPECT_TRUE(Has(client.output(), "lost the GPU server")) << client.output();
}

// A lease server (GPU 0 with 1 GiB, under a key): a valid token runs within the lease's memory;
// a forged token and no token are refused, clearly. The other lease checks (another GPU of the
// server, several tokens, another server's lease) are transport-independent: E2ETcp below.
TEST_P(E2E, BadTokenIsRefusedAndTheLeaseLimitHolds) {
  std::string key_file = ::testing::TempDir() + "/gpool_lease_" + std::to_string(getpid()) + "_" +
                         transport() + ".key";
  ASSERT_TRUE(WriteFileAtomic(key_file, std::string(64, 'a')).ok());
  ServerOptions o = Options();
  o.flags = {"--key", key_file};
  Server s(o);
  std::remove(key_file.c_str());
  auto authority = LeaseAuthority::Create(std::string(32, '\xaa'));
  ASSERT_TRUE(authority.ok()) << authority.status().ToString();
  auto token = authority->Issue({.gpu = s.address() + "/0", .memory_bytes = 1 << 30},
                                *UnixClock::Default());
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  // Over the lease's 1 GiB; the lease's limit is what the program sees and what refuses it.
  auto [rc_oom, out_oom] = RunOn(s.address() + "/0",
                                 {Sample("error_paths"), "oom", "2048", "1073741824"},
                                 {"--lease", *token});
  EXPECT_EQ(rc_oom, 0) << out_oom;
  EXPECT_TRUE(Has(out_oom, "PASS error_paths oom")) << out_oom;
  EXPECT_TRUE(Has(out_oom, "its lease's memory limit is 1073741824 bytes")) << out_oom;
  std::string forged = *token;
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  auto [rc2, out2] =
      RunOn(s.address() + "/0", {Sample("error_paths"), "refused"}, {"--lease", forged});
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(Has(out2, "lease refused")) << out2;
  auto [rc3, out3] = RunOn(s.address() + "/0", {Sample("error_paths"), "refused"});
  EXPECT_EQ(rc3, 0) << out3;
  EXPECT_TRUE(Has(out3, "no lease token")) << out3;
}

// Four bytes under the Launch op: its body does not decode.
struct Liar {
  static constexpr proto::Op kOp = proto::Op::kLaunch;
  uint32_t x = 7;
  template <class V> void Visit(V& v) { v(x, "x"); }
};

// Over each transport: the client link sends a well-framed batch whose Launch body is four bytes
// (it does not decode), on the session's data connection, TCP or UCX alike.
TEST_P(E2E, MalformedFrameClosesOnlyThatSession) {
  Server s(Options());  // its own: the test reads its log
  // A healthy session, then a second one that sends garbage on its data connection.
  auto good = client::ServerLink::Connect({.address = s.address(), .transport = transport()});
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  auto bad = client::ServerLink::Connect({.address = s.address(), .transport = transport()});
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
  auto again = client::ServerLink::Connect({.address = s.address(), .transport = transport()});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Call(ping, &head, &none).ok());
}

// A lease bounds its session. A token that has already expired is refused at connect, naming the
// expiry. A valid one works until it expires; then the server ends the session even though it is
// idle (its worker exits, which frees its memory), and the program's next call fails with the
// reason, not a hang and not "lost the server".
TEST_P(E2E, LeaseExpiryEndsTheSession) {
  std::string key_file = ::testing::TempDir() + "/gpool_lease_exp_" + std::to_string(getpid()) +
                         "_" + transport() + ".key";
  ASSERT_TRUE(WriteFileAtomic(key_file, std::string(64, 'b')).ok());
  ServerOptions o = Options();
  o.flags = {"--key", key_file};
  Server s(o);
  std::remove(key_file.c_str());
  auto authority = LeaseAuthority::Create(std::string(32, '\xbb'));
  ASSERT_TRUE(authority.ok()) << authority.status().ToString();
  const std::string gpu = s.address() + "/0";

  // Issued 100 s ago for 10 s.
  ManualClock past(UnixClock::Default()->NowNanos() - int64_t{100} * 1000000000);
  auto expired = authority->Issue({.gpu = gpu, .ttl_seconds = 10}, past);
  ASSERT_TRUE(expired.ok()) << expired.status().ToString();
  auto [rc1, out1] = RunOn(gpu, {Sample("error_paths"), "refused"}, {"--lease", *expired});
  EXPECT_EQ(rc1, 0) << out1;
  EXPECT_TRUE(Has(out1, "refused the session: lease refused: expired at ")) << out1;

  // Valid for 8 s: time for the program to start and make its first calls even under ASan on a
  // loaded 2-core CI machine (the test waits for the expiry; it asserts no timing, but a start
  // slower than the lease would fail the first calls).
  auto token = authority->Issue({.gpu = gpu, .ttl_seconds = 8}, *UnixClock::Default());
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  Subprocess client(RunArgv(gpu, {Sample("error_paths"), "lease-expiry"}, {"--lease", *token}));
  ASSERT_TRUE(client.WaitFor("READY", 60000)) << client.output() << s.proc().output();
  pid_t worker = WorkerPid(s.proc());
  ASSERT_GT(worker, 0) << s.proc().output();
  ASSERT_TRUE(s.proc().WaitFor("lease for GPU " + gpu + " expired at ", 60000)) << s.proc().output();
  auto t0 = std::chrono::steady_clock::now();
  while (kill(worker, 0) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(kill(worker, 0), 0) << "worker " << worker << " outlived its lease";
  client.WriteStdin("go\n");
  int rc = client.Wait(60000);
  EXPECT_EQ(rc, 0) << client.output();
  EXPECT_TRUE(Has(client.output(), "GPU server " + s.address() + " ended the session: lease for GPU " +
                                       gpu + " expired at "))
      << client.output();
  EXPECT_TRUE(Has(client.output(), "PASS error_paths lease-expiry")) << client.output();
  EXPECT_FALSE(Has(client.output(), "lost the GPU server")) << client.output();
}

// On the cuda backend each close unloads the module's copies (cuModuleUnload), and
// cudaDeviceReset destroys the device's modules, streams, events and allocations one by one
// (cuda_backend.cc, DeviceReset); there the emulated driver's own 256 MiB bound is the device's
// memory. No session memory limit: cudaMemGetInfo sees module variables.
TEST_P(E2E, KernelLibraryReloadAndDeviceReset) {
  ServerOptions o = Options();
  if (cuda()) o.device_memory = uint64_t{256} << 20;
  Server s(o);
  ExpectModuleReload(s, RunOn(s.address() + "/0", ModuleReloadArgv()));
}

INSTANTIATE_TEST_SUITE_P(Transports, E2E, ::testing::ValuesIn(Pairs(Backends())), PairName);

// Transport-independent checks (addresses, the control port, which is always TCP, the wire
// format), run once over TCP.
class E2ETcp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Sample("vector_add"))) {
      FAIL() << "CUDA samples missing in " << GPOOL_SAMPLES_DIR;
    }
  }
};

TEST_F(E2ETcp, WildcardListenTellsClientsTheAddressTheyReached) {
  // Bound to 0.0.0.0, the server must send clients to the address they reached it at, never to
  // 0.0.0.0 (which only happens to work on the same host).
  Server s({.flags = {"--listen", "0.0.0.0:0"}});
  ASSERT_EQ(s.address().rfind("0.0.0.0:", 0), 0u) << s.address();
  std::string reached = "127.0.0.1:" + s.address().substr(8);
  auto [rc, out] = RunSample(reached + "/0", {Sample("vector_add"), "1000"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASS vector_add"), std::string::npos) << out;
  ASSERT_TRUE(s.proc().WaitFor(" in worker ", 10000)) << s.proc().output();
  EXPECT_NE(s.proc().output().find(" at 127.0.0.1:"), std::string::npos) << s.proc().output();
  EXPECT_EQ(s.proc().output().find(" at 0.0.0.0:"), std::string::npos) << s.proc().output();
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

// The lease checks beyond E2E.BadTokenIsRefusedAndTheLeaseLimitHolds: a lease covers only its GPU,
// several tokens each bring their GPU's limits, a lease for another server is refused.
TEST_F(E2ETcp, LeaseIsRequiredAndChecked) {
  std::string key(64, 'a');
  std::string key_file = ::testing::TempDir() + "/gpool_lease_" + std::to_string(getpid()) + ".key";
  ASSERT_TRUE(WriteFileAtomic(key_file, key).ok());
  Server s({.devices = 2, .flags = {"--key", key_file}});
  auto authority = LeaseAuthority::Create(std::string(32, '\xaa'));
  ASSERT_TRUE(authority.ok()) << authority.status().ToString();
  auto token = authority->Issue({.gpu = s.address() + "/0", .memory_bytes = 1 << 30},
                                *UnixClock::Default());
  ASSERT_TRUE(token.ok()) << token.status().ToString();
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
  // A lease for another server's GPU is refused too.
  auto other = authority->Issue({.gpu = "10.9.9.9:1/0"}, *UnixClock::Default());
  ASSERT_TRUE(other.ok());
  auto [rc4, out4] = RunSample(s.address() + "/0", {Sample("error_paths"), "refused"}, "tcp",
                               {"--lease", *other});
  EXPECT_NE(out4.find("lease refused"), std::string::npos) << out4;
  std::remove(key_file.c_str());
}

TEST_F(E2ETcp, WrongTransportIsRefused) {
  Server s;
  auto link = client::ServerLink::Connect({.address = s.address(), .transport = "ucx"});
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.status().message().find("speaks tcp"), std::string::npos) << link.status().ToString();
}

}  // namespace
}  // namespace gpool::remote
