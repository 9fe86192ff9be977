// __constant__ and __device__ variables: copy to and from symbols, symbol address and size,
// kernels reading constants and writing a device global; function attributes and occupancy.
// Four kernels and two variables in one module: gpool fetches all their layouts and addresses
// from a server device in one round trip (E2E.ModuleInfoIsFetchedOncePerModuleAndServerDevice
// counts it). With two or more devices, each device's own copy of gCounter: see PerDeviceCopies.
#include <vector>
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

// *out = gCounter, then gCounter += delta: reads and writes the device's own copy.
__global__ void takeCounter(int* out, int delta) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *out = gCounter;
    gCounter += delta;
  }
}

// A module's variables exist once per device (each device loads its own copy of the module).
// A different value goes to gCounter on every device before any kernel runs, so one copy shared
// by the devices (or a copy to another device's variable) would keep only the last value; then a
// kernel on each device reads its device's value and adds to it, and cudaMemcpyFromSymbol on each
// device must read that device's result.
void PerDeviceCopies(int count) {
  auto value = [](int d) { return 1000 * (d + 1); };
  std::vector<void*> addr(count);
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    int v = value(d);
    CHECK(cudaMemcpyToSymbol(gCounter, &v, sizeof v));
    CHECK(cudaGetSymbolAddress(&addr[d], gCounter));
    for (int e = 0; e < d; ++e) EXPECT(addr[e] != addr[d]);
  }
  std::vector<int*> seen(count);
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMalloc(&seen[d], sizeof(int)));
    takeCounter<<<1, 1>>>(seen[d], d + 1);
    CHECK(cudaGetLastError());
  }
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    int got = -1, after = -1;
    CHECK(cudaMemcpy(&got, seen[d], sizeof got, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpyFromSymbol(&after, gCounter, sizeof after));
    if (got != value(d) || after != value(d) + d + 1) {
      std::fprintf(stderr, "device %d: kernel saw gCounter %d (wrote %d), read back %d (want %d)\n",
                   d, got, value(d), after, value(d) + d + 1);
    }
    EXPECT(got == value(d));
    EXPECT(after == value(d) + d + 1);
    CHECK(cudaFree(seen[d]));
  }
  CHECK(cudaSetDevice(0));
  std::printf("per-device variables: %d devices each saw and kept their own gCounter\n", count);
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
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count >= 2) PerDeviceCopies(count);
  std::printf("PASS symbols\n");
  return 0;
}
