// Compute-share load: launches a kernel that keeps every SM busy for about KERNEL_US
// microseconds, in batches of 16 followed by a stream sync, for SECONDS seconds, and prints how
// many kernels ran. scripts/gpu-check.sh runs two of these at once through one gpool server with
// leases of shares 0.75 and 0.25 and prints the split of kernels (docs/remoting.md, "Sharing").
//
//   share_loop [SECONDS=10] [KERNEL_US=200]
#include <chrono>
#include "common.h"

__global__ void spin(long long cycles, unsigned long long* done) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(done, 1ULL);
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
  double kernel_us = argc > 2 ? std::atof(argv[2]) : 200.0;
  int clock_khz = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  long long cycles = static_cast<long long>(kernel_us * clock_khz / 1000.0);
  unsigned long long* done = nullptr;
  CHECK(cudaMalloc(&done, sizeof *done));
  CHECK(cudaMemset(done, 0, sizeof *done));
  const int kBatch = 16;
  long long n = 0;
  auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  while (s < seconds) {
    for (int i = 0; i < kBatch; ++i) spin<<<sms * 4, 128>>>(cycles, done);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(0));
    n += kBatch;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  unsigned long long ran = 0;
  CHECK(cudaMemcpy(&ran, done, sizeof ran, cudaMemcpyDeviceToHost));
  EXPECT(ran == static_cast<unsigned long long>(n));
  std::printf("PASS share_loop kernels=%lld seconds=%.2f kernels_per_s=%.1f\n", n, s, n / s);
  return 0;
}
