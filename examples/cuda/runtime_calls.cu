// Runtime calls real programs (PyTorch, CUTLASS, NCCL tests) make beyond the basics: stream
// queries (flags, priority, device, capture status), cudaHostGetFlags, PCI bus ids (unique per
// device and found again by id), cudaChooseDevice, stream-ordered allocation (cudaMallocAsync,
// cudaFreeAsync), host functions on streams (cudaLaunchHostFunc, cudaStreamAddCallback) and how
// the stream's work is ordered around them, cooperative launches (cudaLaunchCooperativeKernel,
// cudaLaunchKernelEx with the cooperative attribute, which the device's properties and attribute
// agree on), the occupancy helpers, and the profiler's start and stop with no profiler attached
// (success, as matrixMul and asyncAPI of cuda-samples expect).
//   runtime_calls              every check; a GPU passes them too (scripts/gpu-check.sh compares)
//   runtime_calls unsupported  a launch priority and a 2x1x1 cluster refused (gpool's former
//                              runtime stand-in; the driver stand-in accepts a priority, so no
//                              test runs it: docs/remoting.md, "Known limits")
//   runtime_calls async-error [once|sticky]
//                              gpool only (the emulated server and the emulated CUDA driver fail
//                              alwaysFails): a callback gets the stream's asynchronous error, and
//                              the program still gets it too; reported once (the default), or at
//                              every later sync with `sticky` (a fault the driver keeps, as a GPU)
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cooperative_groups.h>
#include <cuda_profiler_api.h>

#include "common.h"

namespace cg = cooperative_groups;

__global__ void fill(int* x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value + i;
}
__global__ void addInto(int* dst, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}
// Needs a cooperative launch: every block reads what other blocks wrote before the grid sync.
__global__ void coopFlip(int* data, int* out, int n) {
  cg::grid_group g = cg::this_grid();
  for (int i = g.thread_rank(); i < n; i += g.size()) data[i] *= 2;
  g.sync();
  for (int i = g.thread_rank(); i < n; i += g.size()) out[i] = data[n - 1 - i];
}
// Fails on gpool's emulated server (its CPU version reports a fault); harmless on a GPU.
__global__ void alwaysFails(int* p) { p[0] = 1; }
__global__ void reverseShared(float* x, int n) {
  extern __shared__ float s[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = s[n - 1 - i];
}

static void StreamQueries() {
  int least = 0, greatest = 0, cur = -1, dev = -1;
  CHECK(cudaGetDevice(&cur));
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithPriority(&a, cudaStreamNonBlocking, greatest));
  CHECK(cudaStreamCreateWithPriority(&b, cudaStreamDefault, greatest - 100));  // clamped
  unsigned flags = 99;
  int prio = 99;
  CHECK(cudaStreamGetFlags(a, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  CHECK(cudaStreamGetPriority(a, &prio));
  EXPECT(prio == greatest);
  CHECK(cudaStreamGetFlags(b, &flags));
  EXPECT(flags == cudaStreamDefault);
  CHECK(cudaStreamGetPriority(b, &prio));
  EXPECT(prio == greatest);
  CHECK(cudaStreamGetPriority(0, &prio));
  EXPECT(prio == 0);
  CHECK(cudaStreamGetDevice(a, &dev));
  EXPECT(dev == cur);
  dev = -1;
  CHECK(cudaStreamGetDevice(cudaStreamPerThread, &dev));
  EXPECT(dev == cur);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(a, &cs));
  EXPECT(cs == cudaStreamCaptureStatusNone);
  cs = cudaStreamCaptureStatusActive;
  unsigned long long id = 0;
  CHECK(cudaStreamGetCaptureInfo(0, &cs, &id));
  EXPECT(cs == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
}

static void HostFlags() {
  int* h = nullptr;
  const unsigned want = cudaHostAllocPortable | cudaHostAllocWriteCombined;
  CHECK(cudaHostAlloc(&h, 4096, want));
  unsigned flags = 0;
  CHECK(cudaHostGetFlags(&flags, h));
  EXPECT((flags & want) == want);
  CHECK(cudaFreeHost(h));
  std::vector<int> pageable(16);
  EXPECT(cudaHostGetFlags(&flags, pageable.data()) != cudaSuccess);
  (void)cudaGetLastError();
}

static int PciIds() {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  std::set<std::string> ids;
  for (int d = 0; d < n; ++d) {
    char id[32] = {};
    CHECK(cudaDeviceGetPCIBusId(id, sizeof id, d));
    EXPECT(ids.insert(id).second);  // unique among the program's devices
    int back = -1;
    CHECK(cudaDeviceGetByPCIBusId(&back, id));
    EXPECT(back == d);
    unsigned dom = 0, bus = 0, slot = 0, fn = 0;
    EXPECT(std::sscanf(id, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) == 4);
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, d));
    EXPECT(unsigned(p.pciDomainID) == dom && unsigned(p.pciBusID) == bus &&
           unsigned(p.pciDeviceID) == slot);
    int attr = -1;
    CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrPciDomainId, d));
    EXPECT(unsigned(attr) == dom);
    std::printf("device %d: %s\n", d, id);
  }
  int none = -1;
  EXPECT(cudaDeviceGetByPCIBusId(&none, "ffff:fe:1f.0") != cudaSuccess);
  (void)cudaGetLastError();
  cudaDeviceProp want;
  std::memset(&want, 0, sizeof want);
  want.major = 1;
  int chosen = -1;
  CHECK(cudaChooseDevice(&chosen, &want));
  EXPECT(chosen >= 0 && chosen < n);
  return n;
}

static void StreamOrderedAlloc() {
  const int n = 1 << 16;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int *a = nullptr, *b = nullptr;
  CHECK(cudaMallocAsync(&a, n * sizeof(int), s));
  CHECK(cudaMallocAsync(&b, n * sizeof(int), s));
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, a));
  EXPECT(pa.type == cudaMemoryTypeDevice);
  fill<<<(n + 255) / 256, 256, 0, s>>>(a, 7, n);
  CHECK(cudaMemcpyAsync(b, a, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
  CHECK(cudaFreeAsync(a, s));  // after the fill and the copy that read it
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 7 + i);
  int* c = nullptr;
  CHECK(cudaMallocAsync(&c, 256, 0));  // the default stream
  CHECK(cudaFree(c));                  // either free takes either allocation
  CHECK(cudaStreamDestroy(s));
}

// What the host function sees and does: it checks the kernel's result, copied into pinned
// memory before it on the stream, and writes pinned memory that a later copy on the stream
// takes to the device.
struct Handoff {
  const int* seen;
  int* write;
  int n;
  bool saw_kernel = false;
};
static void CheckAndWrite(void* p) {
  auto* h = static_cast<Handoff*>(p);
  h->saw_kernel = true;
  for (int i = 0; i < h->n; ++i) h->saw_kernel &= h->seen[i] == 100 + i;
  for (int i = 0; i < h->n; ++i) h->write[i] = 1000 + i;
}
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> ran{false};
};
static void WaitForGate(void* p) {
  auto* g = static_cast<Gate*>(p);
  while (!g->open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g->ran = true;
}
struct Order {
  std::atomic<int> next{0};
  int got[3] = {-1, -1, -1};
};
static Order g_order;
static void Append0(void*) { g_order.got[0] = g_order.next++; }
static void Append1(void*) { g_order.got[1] = g_order.next++; }
static void Append2(void*) { g_order.got[2] = g_order.next++; }
struct Status {
  std::atomic<int> calls{0};
  cudaError_t status = cudaErrorUnknown;
  cudaStream_t stream = nullptr;
};
static void CUDART_CB OnCallback(cudaStream_t stream, cudaError_t status, void* p) {
  auto* s = static_cast<Status*>(p);
  s->status = status;
  s->stream = stream;
  ++s->calls;
}

static void HostFunctions() {
  const int n = 4096;
  size_t bytes = n * sizeof(int);
  int *seen, *write, *result, *d, *d2;
  CHECK(cudaMallocHost(&seen, bytes));
  CHECK(cudaMallocHost(&write, bytes));
  CHECK(cudaMallocHost(&result, bytes));
  std::memset(seen, 0, bytes);
  std::memset(write, 0, bytes);
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMalloc(&d2, bytes));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  Handoff h{seen, write, n};
  fill<<<(n + 255) / 256, 256, 0, s>>>(d, 100, n);
  CHECK(cudaMemcpyAsync(seen, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, CheckAndWrite, &h));
  // Both must see the host function's write: the stream's later work waits for it.
  CHECK(cudaMemcpyAsync(d2, write, bytes, cudaMemcpyHostToDevice, s));
  addInto<<<(n + 255) / 256, 256, 0, s>>>(d, d2, n);
  CHECK(cudaMemcpyAsync(result, d, bytes, cudaMemcpyDeviceToHost, s));
  Status st;
  CHECK(cudaStreamAddCallback(s, OnCallback, &st, 0));
  CHECK(cudaStreamSynchronize(s));
  EXPECT(h.saw_kernel);
  for (int i = 0; i < n; ++i) EXPECT(result[i] == 1100 + 2 * i);
  EXPECT(st.calls == 1 && st.status == cudaSuccess && st.stream == s);

  // A host function that has not returned holds its stream: a query says not ready, and a
  // synchronize returns only after it ran.
  Gate g;
  CHECK(cudaLaunchHostFunc(s, WaitForGate, &g));
  EXPECT(cudaStreamQuery(s) == cudaErrorNotReady);
  EXPECT(!g.ran);
  g.open = true;
  CHECK(cudaStreamSynchronize(s));
  EXPECT(g.ran);
  EXPECT(cudaStreamQuery(s) == cudaSuccess);

  // On a blocking stream, the legacy default stream and another blocking stream, in that order
  // (the legacy stream orders them); cudaDeviceSynchronize waits for all three.
  cudaStream_t s2;
  CHECK(cudaStreamCreate(&s2));
  CHECK(cudaLaunchHostFunc(s, Append0, nullptr));
  CHECK(cudaLaunchHostFunc(cudaStreamLegacy, Append1, nullptr));
  CHECK(cudaLaunchHostFunc(s2, Append2, nullptr));
  CHECK(cudaDeviceSynchronize());
  EXPECT(g_order.got[0] == 0 && g_order.got[1] == 1 && g_order.got[2] == 2);

  EXPECT(cudaLaunchHostFunc(s, nullptr, nullptr) == cudaErrorInvalidValue);
  EXPECT(cudaStreamAddCallback(s, OnCallback, &st, 1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK(cudaStreamDestroy(s2));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(seen));
  CHECK(cudaFreeHost(write));
  CHECK(cudaFreeHost(result));
}

static void CooperativeLaunches() {
  int coop = 0;
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  EXPECT(coop == 1);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(prop.cooperativeLaunch == coop);  // the properties agree with the attribute
  int n = 4096;
  size_t bytes = n * sizeof(int);
  int *data, *out;
  CHECK(cudaMalloc(&data, bytes));
  CHECK(cudaMalloc(&out, bytes));
  std::vector<int> h(n);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  fill<<<(n + 255) / 256, 256, 0, s>>>(data, 0, n);  // data[i] = i
  void* args[] = {&data, &out, &n};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coopFlip), dim3(4), dim3(128),
                                    args, 0, s));
  CHECK(cudaMemcpyAsync(h.data(), out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 2 * (n - 1 - i));
  // cudaLaunchKernelEx (the C++ template over cudaLaunchKernelExC) with the attribute.
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeCooperative;
  attrs[0].val.cooperative = 1;
  attrs[1].id = cudaLaunchAttributeIgnore;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(4);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  cfg.attrs = attrs;
  cfg.numAttrs = 2;
  CHECK(cudaLaunchKernelEx(&cfg, coopFlip, data, out, n));  // data doubles again
  CHECK(cudaMemcpyAsync(h.data(), out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 4 * (n - 1 - i));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
}

static void Occupancy() {
  size_t avail = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, reverseShared, 2, 128));
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, reverseShared));
  EXPECT(avail > 0 && avail <= size_t(a.maxDynamicSharedSizeBytes));
  // A launch with that much dynamic shared memory works.
  int n = int(std::min<size_t>(avail / sizeof(float), 4096));
  std::vector<float> h(n), back(n);
  for (int i = 0; i < n; ++i) h[i] = float(i);
  float* x;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  reverseShared<<<1, 128, avail>>>(x, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(back.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == float(n - 1 - i));
  CHECK(cudaFree(x));
  // Far more blocks than a multiprocessor holds: nothing is available.
  cudaError_t e = cudaOccupancyAvailableDynamicSMemPerBlock(&avail, reverseShared, 100000, 128);
  EXPECT(e != cudaSuccess || avail == 0);
  (void)cudaGetLastError();
  int min_grid = 0, block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, fill, 0, 0));
  EXPECT(block > 0 && block <= 1024 && block % 32 == 0 && min_grid > 0);
}

// gpool only (a GPU honours these): attributes gpool cannot honour are refused, not dropped.
static int Unsupported() {
  int *data, *out, n = 256;
  CHECK(cudaMalloc(&data, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributePriority;
  attr.val.priority = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(128);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  EXPECT(cudaLaunchKernelEx(&cfg, fill, data, 1, n) == cudaErrorNotSupported);
  EXPECT(cudaGetLastError() == cudaErrorNotSupported);
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(2);
  EXPECT(cudaLaunchKernelEx(&cfg, fill, data, 1, n) == cudaErrorNotSupported);
  (void)cudaGetLastError();
  attr.val.clusterDim.x = 1;  // 1x1x1: no clusters, honoured
  CHECK(cudaLaunchKernelEx(&cfg, fill, data, 1, n));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(data));
  CHECK(cudaFree(out));
  std::printf("PASS runtime_calls unsupported\n");
  return 0;
}

// gpool only: the helper thread that runs the callback is the first to hear of the launch
// failure; the program's own next synchronizing call must still report it, as on a GPU. The
// emulated backend reports a fault once; a driver keeps it (`sticky`: the cuda backend on the
// emulated driver), so every later synchronizing call reports it again.
static int AsyncError(bool sticky) {
  int* d;
  CHECK(cudaMalloc(&d, 64));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  Status st;
  alwaysFails<<<1, 1, 0, s>>>(d);
  CHECK(cudaStreamAddCallback(s, OnCallback, &st, 0));
  for (int i = 0; i < 10000 && st.calls == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT(st.calls == 1);
  EXPECT(st.status == cudaErrorLaunchFailure);
  EXPECT(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
  (void)cudaGetLastError();
  EXPECT(cudaStreamSynchronize(s) == (sticky ? cudaErrorLaunchFailure : cudaSuccess));
  if (sticky) {
    // Every later call gets the fault, an allocation too (not cudaErrorMemoryAllocation).
    void* p = nullptr;
    EXPECT(cudaMalloc(&p, 64) == cudaErrorLaunchFailure);
  }
  std::printf("PASS runtime_calls async-error\n");
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unsupported") return Unsupported();
  std::string how = argc > 2 ? argv[2] : "once";
  if (mode == "async-error" && (how == "once" || how == "sticky")) {
    return AsyncError(how == "sticky");
  }
  if (!mode.empty()) {
    std::fprintf(stderr, "usage: runtime_calls [unsupported|async-error [once|sticky]]\n");
    return 2;
  }
  StreamQueries();
  HostFlags();
  int devices = PciIds();
  StreamOrderedAlloc();
  HostFunctions();
  CooperativeLaunches();
  Occupancy();
  // No profiler attached: both succeed (the real runtime's answer), and nothing is left failed.
  CHECK(cudaProfilerStart());
  CHECK(cudaProfilerStop());
  CHECK(cudaGetLastError());
  std::printf("PASS runtime_calls devices=%d\n", devices);
  return 0;
}
