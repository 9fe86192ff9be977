// One kernel on each of two devices, in turn: c = a + b on device 0, then on device 1, each with
// its own buffers, checked on the host. Built as plain nvcc builds it, NVIDIA's runtime registers
// the program's kernels once, as a library, and launches the same kernel on both devices.
// Prints "PASS two_devices".
#include <vector>

#include "common.h"

__global__ void vectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  const int n = 4096;
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= 2);
  for (int dev = 0; dev < 2; ++dev) {
    CHECK(cudaSetDevice(dev));
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; ++i) {
      a[i] = float(i);
      b[i] = float(100 * (dev + 1));
    }
    float *da, *db, *dc;
    const size_t bytes = n * sizeof(float);
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
    vectorAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(c[i] == a[i] + b[i]);
    std::printf("device %d: c=%p\n", dev, static_cast<void*>(dc));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
  }
  std::printf("PASS two_devices\n");
  return 0;
}
