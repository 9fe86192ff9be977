// The error paths, one mode per run (argv[1]), or several separated by commas, run in turn in one
// process (the last error cleared between them; later arguments go to each): each prints
// "PASS error_paths <mode>" when the runtime behaves as CUDA would, and the tests check the
// messages gpool prints on stderr.
//   oom [MiB [LIMIT]]  a cudaMalloc of MiB (default 64 GiB) beyond the session's memory limit
//                fails, smaller ones still work; with LIMIT (bytes), cudaMemGetInfo's total and
//                totalGlobalMem must both report exactly LIMIT, and free at most that
//   launch-fail  a kernel that fails is reported at the next synchronizing call
//   no-kernel    a kernel the server cannot run is reported at the next synchronizing call, as
//                cudaErrorInvalidDeviceFunction (NVIDIA's runtime over gpool's driver stand-in
//                reports another number, so no test runs it: docs/remoting.md, "Known limits")
//   bad-pointer  cudaFree and cudaMemcpy of pointers that were never allocated fail
//   unsupported  calls gpool does not implement fail with cudaErrorNotSupported
//   refused      the server refuses the session (bad lease): the first call needing it fails,
//                and every later one with the same error
//   config       device limits and flags read back what was set (printing the malloc heap limit
//                found first: a session starts with the device's defaults), a bad limit or flag is
//                refused; cudaHostRegister'ed memory copies both ways, and the flags and calls
//                that need a device mapping of host memory fail with cudaErrorNotSupported
//   dynamic-shared  a launch asking for more dynamic shared memory than the kernel's maximum
//                fails with cudaErrorInvalidValue (at the launch or, through gpool, at the next
//                synchronizing call); cudaFuncSetAttribute raises the maximum (read back with
//                cudaFuncGetAttributes), refuses a value beyond the device's opt-in limit, and the
//                same launch then runs and reverses 64 KiB through shared memory
//   fault-handlers  allocates, launches a kernel and synchronizes, then prints which libraries
//                hold the SIGSEGV/SIGBUS handlers ("fault handlers: SIGSEGV ..., SIGBUS ..."; gpool's
//                driver stand-in installs one only for __managed__ variables)
//   hold MiB     allocates MiB, prints READY, sleeps (a test kills it mid-run)
//   server-dies  allocates, prints READY, waits for a line on stdin, then expects the lost
//                server to be reported (the test kills the server in between)
//   lease-expiry allocates and copies (the lease is valid), prints READY, waits for a line on
//                stdin, then expects every call to fail with cudaErrorNotPermitted, at once (the
//                test lets the lease expire in between: the server ends the session)
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>
#include "common.h"

__global__ void alwaysFails(int* x) { x[0] = 1; }
__global__ void noCpuImplementation(int* x) { x[0] = 2; }
// Reverses x[0..n) through dynamic shared memory (n floats of it): one block.
__global__ void reverseShared(float* x, int n) {
  extern __shared__ float s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = s[n - 1 - i];
}

static int RunMode(const std::string& mode, int argc, char** argv) {
  if (mode == "oom") {
    void* p = nullptr;
    size_t ask_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{64} << 10;
    if (argc > 3) {
      size_t limit = std::strtoull(argv[3], nullptr, 10);
      size_t free_b = 0, total_b = 0;
      CHECK(cudaMemGetInfo(&free_b, &total_b));
      cudaDeviceProp prop;
      CHECK(cudaGetDeviceProperties(&prop, 0));
      std::printf("memory: total %zu free %zu totalGlobalMem %zu\n", total_b, free_b,
                  prop.totalGlobalMem);
      EXPECT(total_b == limit);
      EXPECT(free_b <= limit);
      EXPECT(prop.totalGlobalMem == limit);
    }
    cudaError_t e = cudaMalloc(&p, ask_mib << 20);
    EXPECT(e == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError() == cudaSuccess);
    CHECK(cudaMalloc(&p, 1 << 20));
    CHECK(cudaFree(p));
  } else if (mode == "launch-fail" || mode == "no-kernel") {
    int* d;
    CHECK(cudaMalloc(&d, sizeof(int)));
    if (mode == "launch-fail") {
      alwaysFails<<<1, 1>>>(d);
    } else {
      noCpuImplementation<<<1, 1>>>(d);
    }
    CHECK(cudaGetLastError());  // the launch itself is asynchronous: no error yet
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == (mode == "launch-fail" ? cudaErrorLaunchFailure : cudaErrorInvalidDeviceFunction));
  } else if (mode == "bad-pointer") {
    int x = 0;
    EXPECT(cudaFree(reinterpret_cast<void*>(0x1234)) == cudaErrorInvalidValue);
    int* d;
    CHECK(cudaMalloc(&d, 16));
    // 64 bytes from a 16-byte allocation: the server refuses, reported at the next sync.
    int big[16];
    CHECK(cudaMemcpy(d, big, sizeof big, cudaMemcpyHostToDevice));
    EXPECT(cudaDeviceSynchronize() == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(&x, d, sizeof x, cudaMemcpyDeviceToHost));
  } else if (mode == "unsupported") {
    void* p = nullptr;
    EXPECT(cudaMallocManaged(&p, 16) == cudaErrorNotSupported);
    // Graphs are remoted, child graph nodes are not.
    cudaGraph_t g, child;
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphCreate(&child, 0));
    cudaGraphNode_t node;
    EXPECT(cudaGraphAddChildGraphNode(&node, g, nullptr, 0, child) == cudaErrorNotSupported);
    EXPECT(cudaGetLastError() == cudaErrorNotSupported);
  } else if (mode == "dynamic-shared") {
    const int n = 16384;  // 64 KiB of floats: over the 48 KiB a kernel gets without opting in
    const size_t bytes = n * sizeof(float);
    const void* k = reinterpret_cast<const void*>(reverseShared);
    std::vector<float> h(n), back(n);
    for (int i = 0; i < n; ++i) h[i] = float(i);
    float* d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, k));
    EXPECT(a.maxDynamicSharedSizeBytes == 48 << 10);
    reverseShared<<<1, 256, bytes>>>(d, n);
    cudaError_t e = cudaGetLastError();  // a GPU refuses at the launch; gpool at the next sync
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                int(prop.sharedMemPerBlockOptin) + 1) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    CHECK(cudaFuncGetAttributes(&a, k));
    EXPECT(a.maxDynamicSharedSizeBytes == int(bytes));
    reverseShared<<<1, 256, bytes>>>(d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(back[i] == float(n - 1 - i));
    CHECK(cudaFree(d));
  } else if (mode == "config") {
    size_t v = 0;
    CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    std::printf("limits: malloc heap %zu at start\n", v);
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, size_t{64} << 20));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    CHECK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    EXPECT(v == size_t{64} << 20);
    CHECK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
    EXPECT(v == 4096);
    EXPECT(cudaDeviceSetLimit(static_cast<cudaLimit>(0x7f), 1) == cudaErrorUnsupportedLimit);
    EXPECT(cudaGetLastError() == cudaErrorUnsupportedLimit);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (std::strstr(prop.name, "gpool emulated")) {
      // The emulated GPU has no persisting L2 cache: it refuses to pretend to set one aside.
      EXPECT(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20) == cudaErrorUnsupportedLimit);
      EXPECT(cudaGetLastError() == cudaErrorUnsupportedLimit);
    }
    unsigned flags = 0;
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    CHECK(cudaGetDeviceFlags(&flags));
    EXPECT((flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync);
    EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield) == cudaErrorInvalidValue);
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue);
    // Registered (pageable) memory: copies both ways, the async one into it completes by the sync.
    const size_t bytes = 1 << 20;
    std::vector<unsigned char> buf(bytes, 7);
    unsigned char* d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaHostRegister(buf.data(), bytes, cudaHostRegisterDefault));
    EXPECT(cudaHostRegister(buf.data() + 4096, 4096, cudaHostRegisterPortable) ==
           cudaErrorHostMemoryAlreadyRegistered);
    EXPECT(cudaGetLastError() == cudaErrorHostMemoryAlreadyRegistered);
    cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, buf.data() + 100));
    EXPECT(attr.type == cudaMemoryTypeHost);
    CHECK(cudaMemcpy(d, buf.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d + 10, 9, 1));
    std::fill(buf.begin(), buf.end(), 0);
    CHECK(cudaMemcpyAsync(buf.data(), d, bytes, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    for (size_t i = 0; i < bytes; ++i) EXPECT(buf[i] == (i == 10 ? 9 : 7));
    CHECK(cudaHostUnregister(buf.data()));
    EXPECT(cudaHostUnregister(buf.data()) == cudaErrorHostMemoryNotRegistered);
    EXPECT(cudaGetLastError() == cudaErrorHostMemoryNotRegistered);
    CHECK(cudaFree(d));
    // A GPU on another host cannot map this host's memory: every way of asking for that is loud.
    EXPECT(cudaHostRegister(buf.data(), 4096, cudaHostRegisterMapped) == cudaErrorNotSupported);
    EXPECT(cudaHostRegister(buf.data(), 4096, cudaHostRegisterIoMemory) == cudaErrorNotSupported);
    EXPECT(cudaHostRegister(buf.data(), 4096, cudaHostRegisterReadOnly) == cudaErrorNotSupported);
    void* mapped = nullptr;
    EXPECT(cudaHostGetDevicePointer(&mapped, buf.data(), 0) == cudaErrorNotSupported);
    EXPECT(cudaGetLastError() == cudaErrorNotSupported);
  } else if (mode == "refused") {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 16);
    EXPECT(e == cudaErrorNotPermitted || e == cudaErrorDevicesUnavailable);
    // Every later call says the same, not just the first (a refused session stays refused).
    EXPECT(cudaMalloc(&p, 16) == e);
    EXPECT(cudaDeviceSynchronize() == e);
  } else if (mode == "fault-handlers") {
    float* p;
    CHECK(cudaMalloc(&p, 64 * sizeof(float)));
    CHECK(cudaMemset(p, 0, 64 * sizeof(float)));
    reverseShared<<<1, 32, 64 * sizeof(float)>>>(p, 64);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(p));
    std::printf("fault handlers: %s\n", FaultHandlers().c_str());
  } else if (mode == "hold") {
    size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64;
    void* p;
    CHECK(cudaMalloc(&p, mib << 20));
    CHECK(cudaMemset(p, 1, mib << 20));
    CHECK(cudaDeviceSynchronize());
    std::printf("READY\n");
    std::fflush(stdout);
    for (;;) pause();
  } else if (mode == "server-dies") {
    void* p;
    CHECK(cudaMalloc(&p, 1 << 20));
    std::printf("READY\n");
    std::fflush(stdout);
    char line[16];
    if (!std::fgets(line, sizeof line, stdin)) return 2;
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorDevicesUnavailable);
    EXPECT(cudaMalloc(&p, 16) == cudaErrorDevicesUnavailable);  // fails fast, no hang
  } else if (mode == "lease-expiry") {
    void* p;
    CHECK(cudaMalloc(&p, 16 << 20));
    CHECK(cudaMemset(p, 3, 16 << 20));
    std::vector<char> back(4096);
    CHECK(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost));
    EXPECT(back[4095] == 3);
    std::printf("READY\n");
    std::fflush(stdout);
    char line[16];
    if (!std::fgets(line, sizeof line, stdin)) return 2;
    // The session is over: the next call learns why, later ones fail fast the same way.
    EXPECT(cudaMemcpy(back.data(), p, back.size(), cudaMemcpyDeviceToHost) == cudaErrorNotPermitted);
    EXPECT(cudaMalloc(&p, 16) == cudaErrorNotPermitted);
    EXPECT(cudaDeviceSynchronize() == cudaErrorNotPermitted);
  } else {
    std::fprintf(stderr, "usage: error_paths MODE (see the file's comment)\n");
    return 2;
  }
  std::printf("PASS error_paths %s\n", mode.c_str());
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  std::string modes = argc > 1 ? argv[1] : "";
  size_t at = 0;
  do {
    size_t comma = modes.find(',', at);
    std::string mode = modes.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? std::string::npos : comma + 1;
    (void)cudaGetLastError();
    if (int rc = RunMode(mode, argc, argv); rc != 0) return rc;
  } while (at != std::string::npos);
  return 0;
}
