// The per-thread default stream: built with `nvcc --default-stream per-thread` (tests/remote/
// CMakeLists.txt), so every call below that has a per-thread variant is that variant
// (cudaMemcpy_ptds, cudaMemcpyAsync_ptsz, cudaMemset2D_ptds, cudaStreamQuery_ptsz,
// __cudaLaunchKernel_ptsz, ...), and a null stream is the calling thread's default stream.
// Copies, memsets, symbols, 2-D copies, events and a kernel on it, from two host threads.
#include <cstring>
#include <thread>
#include "common.h"

__device__ float gTable[256];

__global__ void scale(float* x, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

// A kernel on this thread's default stream, then its result read back on the same stream.
static void ScaleOnThisThread(float factor) {
  const int n = 256;
  float h[n], back[n];
  for (int i = 0; i < n; ++i) h[i] = float(i);
  float* d;
  CHECK(cudaMalloc(&d, sizeof h));
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  scale<<<1, n>>>(d, factor, n);
  CHECK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == factor * i);
  CHECK(cudaFree(d));
}

int main() {
  const int n = 256;
  float h[n], back[n];
  for (int i = 0; i < n; ++i) h[i] = float(i) + 0.5f;
  // Symbols, synchronous and on the per-thread stream.
  CHECK(cudaMemcpyToSymbol(gTable, h, sizeof h));
  CHECK(cudaMemcpyFromSymbol(back, gTable, sizeof back));
  EXPECT(std::memcmp(h, back, sizeof h) == 0);
  for (int i = 0; i < n; ++i) h[i] = -float(i);
  CHECK(cudaMemcpyToSymbolAsync(gTable, h, sizeof h, 0, cudaMemcpyHostToDevice, 0));
  std::memset(back, 0, sizeof back);
  CHECK(cudaMemcpyFromSymbolAsync(back, gTable, sizeof back, 0, cudaMemcpyDeviceToHost, 0));
  CHECK(cudaStreamSynchronize(0));
  EXPECT(std::memcmp(h, back, sizeof h) == 0);

  // Memsets and 2-D copies: 16 rows of 16 floats in pitched memory.
  float* d;
  CHECK(cudaMalloc(&d, sizeof h));
  CHECK(cudaMemset(d, 0xff, sizeof h));
  CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(reinterpret_cast<unsigned*>(back)[i] == 0xffffffffu);
  float* d2;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&d2), &pitch, 16 * sizeof(float), 16));
  CHECK(cudaMemset2D(d2, pitch, 0, 16 * sizeof(float), 16));
  CHECK(cudaMemcpy2D(back, 16 * sizeof(float), d2, pitch, 16 * sizeof(float), 16,
                     cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == 0.0f);
  CHECK(cudaMemcpy2D(d2, pitch, h, 16 * sizeof(float), 16 * sizeof(float), 16,
                     cudaMemcpyHostToDevice));
  std::memset(back, 0, sizeof back);
  CHECK(cudaMemcpy2DAsync(back, 16 * sizeof(float), d2, pitch, 16 * sizeof(float), 16,
                          cudaMemcpyDeviceToHost, 0));
  // An event recorded on the per-thread stream after the copy; the stream is idle once it is.
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaEventRecordWithFlags(ev, 0, cudaEventRecordDefault));
  CHECK(cudaEventSynchronize(ev));
  EXPECT(cudaStreamQuery(0) == cudaSuccess);
  EXPECT(std::memcmp(h, back, sizeof h) == 0);
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));

  // Kernels on the default streams of two host threads.
  ScaleOnThisThread(2.0f);
  std::thread other(ScaleOnThisThread, 3.0f);
  other.join();
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS per_thread_stream\n");
  return 0;
}
