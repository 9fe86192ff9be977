// __constant__ and __device__ variables: copy to and from symbols, symbol address and size,
// kernels reading constants and writing a device global; function attributes and occupancy.
// Three kernels and two variables in one module: gpool fetches all their layouts and addresses
// from a server in one round trip (E2E.ModuleInfoIsFetchedOncePerModuleAndServer counts it).
#include "common.h"

__constant__ float kCoeffs[4];
__device__ int gCounter;

__global__ void polynomial(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = kCoeffs[0] + v * (kCoeffs[1] + v * (kCoeffs[2] + v * kCoeffs[3]));
    atomicAdd(&gCounter, 1);
  }
}

// Sets the device global from a kernel.
__global__ void setCounter(int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) gCounter = value;
}

// y[i] += gCounter + kCoeffs[0]: reads both variables.
__global__ void addCounter(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += gCounter + kCoeffs[0];
}

int main() {
  const int n = 1000;
  float coeffs[4] = {1, 2, 3, 4};
  CHECK(cudaMemcpyToSymbol(kCoeffs, coeffs, sizeof coeffs));
  int zero = 0;
  CHECK(cudaMemcpyToSymbol(gCounter, &zero, sizeof zero));
  float readback[4];
  CHECK(cudaMemcpyFromSymbol(readback, kCoeffs, sizeof readback));
  for (int i = 0; i < 4; ++i) EXPECT(readback[i] == coeffs[i]);
  size_t size = 0;
  CHECK(cudaGetSymbolSize(&size, kCoeffs));
  EXPECT(size == sizeof coeffs);
  void* addr = nullptr;
  CHECK(cudaGetSymbolAddress(&addr, gCounter));
  EXPECT(addr != nullptr);

  float hx[n], hy[n];
  for (int i = 0; i < n; ++i) hx[i] = i * 0.01f;
  float *x, *y;
  CHECK(cudaMalloc(&x, sizeof hx));
  CHECK(cudaMalloc(&y, sizeof hy));
  CHECK(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  polynomial<<<(n + 127) / 128, 128>>>(x, y, n);
  CHECK(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float v = hx[i], want = 1 + v * (2 + v * (3 + v * 4));
    EXPECT(hy[i] > want - 1e-3f * (1 + want) && hy[i] < want + 1e-3f * (1 + want));
  }
  int counter = 0;
  CHECK(cudaMemcpyFromSymbol(&counter, gCounter, sizeof counter));
  EXPECT(counter == n);
  int via_addr = -1;
  CHECK(cudaMemcpy(&via_addr, addr, sizeof via_addr, cudaMemcpyDeviceToHost));
  EXPECT(via_addr == n);

  setCounter<<<1, 1>>>(7);
  addCounter<<<(n + 127) / 128, 128>>>(y, n);
  float hz[n];
  CHECK(cudaMemcpy(hz, y, sizeof hz, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(hz[i] == hy[i] + (7 + coeffs[0]));
  CHECK(cudaMemcpyFromSymbol(&counter, gCounter, sizeof counter));
  EXPECT(counter == 7);

  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, polynomial));
  EXPECT(attr.maxThreadsPerBlock > 0);
  int blocks = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, polynomial, 128, 0));
  EXPECT(blocks > 0);
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  std::printf("PASS symbols\n");
  return 0;
}
