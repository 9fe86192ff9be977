// CUDA graphs, as programs (PyTorch's CUDA graphs, libraries under capture) use them: built the
// default way (static runtime), so NVIDIA's runtime turns each call into the driver's stream
// capture and graph calls.
// 1. Stream capture across two streams (fork and join through events): a host-to-device copy,
//    kernels on both streams, a memset, a device-to-device copy, a device-to-host copy and a host
//    function that reads what that copy brought (it runs after it at each launch). While
//    the stream captures nothing runs. The graph is instantiated once and launched 10 times,
//    with new host input before each launch (a captured copy from host memory reads it at
//    launch time), each result checked against the CPU.
// 2. A graph built node by node (empty, memset, kernel and 1-D memcpy nodes, a memset node
//    through the generic cudaGraphAddNode, an added
//    dependency), its nodes, roots and one node's dependencies and dependents counted, cloned
//    (the kernel node found in the clone), and the clone launched 3 times, then once
//    more with new kernel and memset parameters (cudaGraphKernelNodeSetParams before, and
//    cudaGraphExecKernelNodeSetParams / cudaGraphExecNodeSetParams after instantiation).
// 3. A synchronous copy during a global-mode capture fails and invalidates the capture
//    (cudaErrorStreamCaptureUnsupported; the end of the capture says invalidated).
// Kernels: vectorAdd and scale (CPU versions in emulated_kernels.cc). Prints "PASS graph_capture".
#include "common.h"

#include <cmath>
#include <cstring>

__global__ void vectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
__global__ void scale(float* x, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

namespace {

const int kN = 4096;
const int kThreads = 256;
const int kBlocks = (kN + kThreads - 1) / kThreads;

bool Near(float a, float b) { return std::fabs(a - b) <= 1e-4f * (1.0f + std::fabs(b)); }

// The captured host function: runs at each launch after the copy back before it, so it sees that
// launch's first result.
struct HostSeen {
  const float* out;
  int calls = 0;
  float first = 0;
};
void CUDART_CB SeeResult(void* p) {
  auto* s = static_cast<HostSeen*>(p);
  ++s->calls;
  s->first = s->out[0];
}

void CapturedGraph() {
  const size_t bytes = kN * sizeof(float);
  float *h_a, *h_b, *h_out;  // pinned, as graph copies from and to host memory want
  CHECK(cudaMallocHost(&h_a, bytes));
  CHECK(cudaMallocHost(&h_b, bytes));
  CHECK(cudaMallocHost(&h_out, bytes));
  float *d_a, *d_b, *d_c, *d_t;
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  CHECK(cudaMalloc(&d_c, bytes));
  CHECK(cudaMalloc(&d_t, bytes));
  for (int i = 0; i < kN; ++i) h_out[i] = -7.0f;
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s1, &st));
  EXPECT(st == cudaStreamCaptureStatusActive);
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  CHECK(cudaMemcpyAsync(d_a, h_a, bytes, cudaMemcpyHostToDevice, s1));
  CHECK(cudaEventRecord(fork, s1));
  CHECK(cudaStreamWaitEvent(s2, fork, 0));  // s2 joins the capture
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusActive);
  CHECK(cudaMemcpyAsync(d_b, h_b, bytes, cudaMemcpyHostToDevice, s2));
  scale<<<kBlocks, kThreads, 0, s2>>>(d_b, 2.0f, kN);
  CHECK(cudaGetLastError());
  scale<<<kBlocks, kThreads, 0, s1>>>(d_a, 3.0f, kN);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(join, s2));
  CHECK(cudaStreamWaitEvent(s1, join, 0));
  vectorAdd<<<kBlocks, kThreads, 0, s1>>>(d_a, d_b, d_c, kN);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(d_t, d_c, bytes, cudaMemcpyDeviceToDevice, s1));
  CHECK(cudaMemsetAsync(d_c, 0, bytes, s1));
  CHECK(cudaMemcpyAsync(h_out, d_t, bytes, cudaMemcpyDeviceToHost, s1));
  HostSeen seen{h_out};
  CHECK(cudaLaunchHostFunc(s1, SeeResult, &seen));
  unsigned long long id = 0;
  CHECK(cudaStreamGetCaptureInfo(s1, &st, &id));
  EXPECT(st == cudaStreamCaptureStatusActive && id != 0);
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaStreamIsCapturing(s1, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  CHECK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone);
  CHECK(cudaDeviceSynchronize());
  EXPECT(h_out[0] == -7.0f && h_out[kN - 1] == -7.0f && seen.calls == 0);  // captured, not run
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  std::printf("graph_capture: captured %zu nodes\n", nodes);
  EXPECT(nodes == 9);  // 2 copies in, 3 kernels, a device copy, a memset, a copy out, a host call

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int iter = 0; iter < 10; ++iter) {
    for (int i = 0; i < kN; ++i) {
      h_a[i] = static_cast<float>(i % 97) + iter;
      h_b[i] = static_cast<float>(i % 13) - 0.5f * iter;
    }
    CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(seen.calls == iter + 1);
    EXPECT(Near(seen.first, 3.0f * h_a[0] + 2.0f * h_b[0]));
    for (int i = 0; i < kN; ++i) {
      float want = 3.0f * h_a[i] + 2.0f * h_b[i];
      if (!Near(h_out[i], want)) {
        std::fprintf(stderr, "launch %d: out[%d] = %g, want %g\n", iter, i, h_out[i], want);
        std::exit(1);
      }
    }
  }
  // The memset node cleared d_c after the copy out of it.
  CHECK(cudaMemcpy(h_out, d_c, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) EXPECT(h_out[i] == 0.0f);
  std::printf("graph_capture: 10 launches of the captured graph match the CPU\n");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(fork));
  CHECK(cudaEventDestroy(join));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  for (float* p : {d_a, d_b, d_c, d_t}) CHECK(cudaFree(p));
  for (float* p : {h_a, h_b, h_out}) CHECK(cudaFreeHost(p));
}

void HandBuiltGraph() {
  const size_t bytes = kN * sizeof(float);
  float *d_x, *d_y;
  CHECK(cudaMalloc(&d_x, bytes));
  CHECK(cudaMalloc(&d_y, bytes));
  float* h = nullptr;
  CHECK(cudaMallocHost(&h, bytes));
  for (int i = 0; i < kN; ++i) h[i] = static_cast<float>(i % 31) + 1.0f;
  CHECK(cudaMemcpy(d_x, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(d_y, 0xff, bytes));

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t start, set, kern, copy, out;
  CHECK(cudaGraphAddEmptyNode(&start, g, nullptr, 0));
  cudaMemsetParams mp = {};
  mp.dst = d_y;
  mp.value = 0;
  mp.elementSize = 4;
  mp.width = kN;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&set, g, &start, 1, &mp));
  float f = 0.25f;  // replaced by 0.5 below (cudaGraphKernelNodeSetParams)
  int n = kN;
  void* args[] = {&d_x, &f, &n};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(scale);
  kp.gridDim = dim3(kBlocks);
  kp.blockDim = dim3(kThreads);
  kp.kernelParams = args;
  CHECK(cudaGraphAddKernelNode(&kern, g, nullptr, 0, &kp));
  f = 0.5f;
  CHECK(cudaGraphKernelNodeSetParams(kern, &kp));
  f = 100.0f;  // the node keeps the value it was given
  CHECK(cudaGraphAddDependencies(g, &start, &kern, nullptr, 1));
  cudaGraphNode_t both[] = {set, kern};
  CHECK(cudaGraphAddMemcpyNode1D(&copy, g, both, 2, d_y, d_x, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemcpyNode1D(&out, g, &copy, 1, h, d_y, bytes, cudaMemcpyDeviceToHost));
  // A memset node through the generic cudaGraphAddNode: z[0..15] = 7 after the copy out.
  int* d_z;
  CHECK(cudaMalloc(&d_z, 16 * sizeof(int)));
  CHECK(cudaMemset(d_z, 0, 16 * sizeof(int)));
  cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeMemset;
  np.memset.dst = d_z;
  np.memset.value = 7;
  np.memset.elementSize = 4;
  np.memset.width = 16;
  np.memset.height = 1;
  cudaGraphNode_t zset;
  CHECK(cudaGraphAddNode(&zset, g, &out, nullptr, 1, &np));
  size_t count = 0, roots = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
  EXPECT(count == 6 && roots == 1);
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(kern, &type));
  EXPECT(type == cudaGraphNodeTypeKernel);
  size_t deps = 0, dependents = 0;
  CHECK(cudaGraphNodeGetDependencies(copy, nullptr, nullptr, &deps));
  CHECK(cudaGraphNodeGetDependentNodes(start, nullptr, nullptr, &dependents));
  EXPECT(deps == 2 && dependents == 2);

  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, g));
  cudaGraphNode_t ckern = nullptr, czset = nullptr;
  CHECK(cudaGraphNodeFindInClone(&ckern, kern, clone));
  CHECK(cudaGraphNodeFindInClone(&czset, zset, clone));
  CHECK(cudaGraphNodeGetType(ckern, &type));
  EXPECT(type == cudaGraphNodeTypeKernel);
  CHECK(cudaGraphDestroy(g));  // the clone stands alone
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, clone, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int k = 1; k <= 3; ++k) {
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < kN; ++i) {
      float want = (static_cast<float>(i % 31) + 1.0f) * std::pow(0.5f, static_cast<float>(k));
      if (!Near(h[i], want)) {
        std::fprintf(stderr, "hand-built launch %d: y[%d] = %g, want %g\n", k, i, h[i], want);
        std::exit(1);
      }
    }
  }
  int z[16];
  CHECK(cudaMemcpy(z, d_z, sizeof z, cudaMemcpyDeviceToHost));
  for (int v : z) EXPECT(v == 7);
  // New kernel and memset parameters for the executable graph (named by the clone's nodes):
  // x *= 2 now, and z is set to 9.
  f = 2.0f;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, ckern, &kp));
  np.memset.value = 9;
  CHECK(cudaGraphExecNodeSetParams(exec, czset, &np));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) {
    float want = (static_cast<float>(i % 31) + 1.0f) * 0.125f * 2.0f;
    if (!Near(h[i], want)) {
      std::fprintf(stderr, "launch with new parameters: y[%d] = %g, want %g\n", i, h[i], want);
      std::exit(1);
    }
  }
  CHECK(cudaMemcpy(z, d_z, sizeof z, cudaMemcpyDeviceToHost));
  for (int v : z) EXPECT(v == 9);
  CHECK(cudaFree(d_z));
  std::printf("graph_capture: 3 launches of the hand-built graph and 1 with new kernel "
              "parameters match the CPU\n");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(clone));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_y));
  CHECK(cudaFreeHost(h));
}

void IllegalSyncInvalidates() {
  float* d;
  CHECK(cudaMalloc(&d, sizeof(float) * kN));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  scale<<<kBlocks, kThreads, 0, s>>>(d, 2.0f, kN);
  float back = 0;
  cudaError_t e = cudaMemcpy(&back, d, sizeof back, cudaMemcpyDeviceToHost);
  std::printf("graph_capture: a synchronous copy during global capture: %s\n", cudaGetErrorName(e));
  EXPECT(e == cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  e = cudaStreamEndCapture(s, &g);
  std::printf("graph_capture: ending it: %s\n", cudaGetErrorName(e));
  EXPECT(e == cudaErrorStreamCaptureInvalidated && g == nullptr);
  (void)cudaGetLastError();  // the two errors above were the point
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
}

}  // namespace

int main() {
  CapturedGraph();
  HandBuiltGraph();
  IllegalSyncInvalidates();
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS graph_capture\n");
  return 0;
}
