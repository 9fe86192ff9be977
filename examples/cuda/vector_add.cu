// vectorAdd: the classic. c = a + b over n floats, checked on the host.
//   vector_add [N [DEVICE]]   on device DEVICE (default 0), made current first
#include <vector>
#include "common.h"

__global__ void vectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1 << 20;
  const int dev = argc > 2 ? std::atoi(argv[2]) : 0;
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count > dev);
  CHECK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %d: %s, %zu MiB\n", dev, prop.name, prop.totalGlobalMem >> 20);
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.5f * i;
    b[i] = 2.0f * i + 1;
  }
  float *da, *db, *dc;
  size_t bytes = sizeof(float) * n;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  int threads = 256, blocks = (n + threads - 1) / threads;
  vectorAdd<<<blocks, threads>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i]) {
      std::fprintf(stderr, "mismatch at %d: %f != %f\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  std::printf("PASS vector_add n=%d\n", n);
  return 0;
}
