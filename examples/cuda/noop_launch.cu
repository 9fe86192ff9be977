// Launch rate: N empty kernel launches, queued without waiting, then one synchronize. Prints
// launches per second (the benchmark in bench/remote_bench.cc measures the same path in-process).
#include <chrono>
#include "common.h"

__global__ void noop(int) {}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  noop<<<1, 1>>>(0);
  CHECK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) noop<<<1, 1>>>(i);
  CHECK(cudaDeviceSynchronize());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("PASS noop_launch n=%d launches_per_s=%.0f\n", n, n / s);
  return 0;
}
