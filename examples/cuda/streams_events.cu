// Streams and events: async copies and kernels on two streams, a cross-stream wait, event timing.
#include <vector>
#include "common.h"

__global__ void scale(float* x, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

int main() {
  const int n = 1 << 16;
  size_t bytes = n * sizeof(float);
  float* host;
  CHECK(cudaMallocHost(&host, bytes));
  for (int i = 0; i < n; ++i) host[i] = float(i);
  float *d0, *d1;
  CHECK(cudaMalloc(&d0, bytes));
  CHECK(cudaMalloc(&d1, bytes));
  cudaStream_t s0, s1;
  CHECK(cudaStreamCreate(&s0));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t start, copied, done;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&copied));
  CHECK(cudaEventCreate(&done));
  CHECK(cudaEventRecord(start, s0));
  CHECK(cudaMemcpyAsync(d0, host, bytes, cudaMemcpyHostToDevice, s0));
  scale<<<(n + 255) / 256, 256, 0, s0>>>(d0, 2.0f, n);
  CHECK(cudaEventRecord(copied, s0));
  CHECK(cudaStreamWaitEvent(s1, copied, 0));
  CHECK(cudaMemcpyAsync(d1, d0, bytes, cudaMemcpyDeviceToDevice, s1));
  scale<<<(n + 255) / 256, 256, 0, s1>>>(d1, 3.0f, n);
  CHECK(cudaEventRecord(done, s1));
  CHECK(cudaEventSynchronize(done));
  CHECK(cudaStreamSynchronize(s0));
  EXPECT(cudaStreamQuery(s1) == cudaSuccess);
  EXPECT(cudaEventQuery(done) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, done));
  EXPECT(ms >= 0);
  std::vector<float> out(n);
  CHECK(cudaMemcpyAsync(out.data(), d1, bytes, cudaMemcpyDeviceToHost, s1));
  CHECK(cudaStreamSynchronize(s1));
  for (int i = 0; i < n; ++i) EXPECT(out[i] == 6.0f * i);
  // Into pinned memory a device-to-host cudaMemcpyAsync is truly asynchronous, and stream order
  // holds: the kernel queued after it does not change what it copied, and the data is in place
  // once an event recorded after it has completed.
  for (int i = 0; i < n; ++i) host[i] = -1.0f;
  CHECK(cudaMemcpyAsync(host, d1, bytes, cudaMemcpyDeviceToHost, s1));
  scale<<<(n + 255) / 256, 256, 0, s1>>>(d1, 0.5f, n);
  CHECK(cudaEventRecord(done, s1));
  CHECK(cudaEventSynchronize(done));
  for (int i = 0; i < n; ++i) EXPECT(host[i] == 6.0f * i);
  // Many launches in a row, queued without waiting; the sync at the end sees them all.
  CHECK(cudaMemset(d0, 0, bytes));
  for (int k = 0; k < 1000; ++k) scale<<<1, 1, 0, s0>>>(d0, 1.0f, 1);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(copied));
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(s0));
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaFree(d0));
  CHECK(cudaFree(d1));
  CHECK(cudaFreeHost(host));
  std::printf("PASS streams_events elapsed_ms=%.3f\n", ms);
  return 0;
}
