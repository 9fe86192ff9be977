// Device-to-host cudaMemcpyAsync into pinned memory is asynchronous, as CUDA defines it: built
// the default way (NVIDIA's static runtime, which turns the call into cuMemcpyDtoHAsync_v2 on
// gpool's libcuda.so.1 stand-in), the copy is queued behind a kernel that spins for ~1 s and the
// call returns before that kernel has finished, so the pinned buffer still holds what the
// program put there. The data is in place once the stream is synchronized, and again after an
// event recorded behind a second copy; cudaFreeHost right after a third copy waits for it (it
// synchronizes, as CUDA's does) instead of letting it write into freed memory. A stand-in that
// completed every Async copy before returning (one round trip per copy) fails the first check.
// Prints "PASS async_d2h".
#include "common.h"

#include <vector>

__global__ void spin(long long cycles, unsigned long long* done) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(done, 1ULL);
}

int main() {
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(int);
  std::vector<int> src(n);
  for (int i = 0; i < n; ++i) src[i] = 3 * i + 1;
  int* d;
  unsigned long long* done;
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMalloc(&done, sizeof *done));
  CHECK(cudaMemset(done, 0, sizeof *done));
  CHECK(cudaMemcpy(d, src.data(), bytes, cudaMemcpyHostToDevice));
  int* pinned;
  CHECK(cudaMallocHost(&pinned, bytes));
  for (int i = 0; i < n; ++i) pinned[i] = -1;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  // ~1 s of the device's clock: far longer than the few microseconds between the copy call's
  // return and the check below.
  spin<<<1, 1, 0, s>>>(static_cast<long long>(clock_khz) * 1000, done);
  CHECK(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, s));
  const bool untouched = pinned[0] == -1 && pinned[n - 1] == -1;
  std::printf("async_d2h: the copy call returned before the kernel ahead of it finished: %s\n",
              untouched ? "yes" : "no");
  std::fflush(stdout);
  EXPECT(untouched);
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT(pinned[i] == 3 * i + 1);
  // Landed by an event behind it: a different synchronizing call.
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  for (int i = 0; i < n; ++i) pinned[i] = -1;
  CHECK(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(ev, s));
  CHECK(cudaEventSynchronize(ev));
  for (int i = 0; i < n; ++i) EXPECT(pinned[i] == 3 * i + 1);
  // Freed while a copy into it may be outstanding: cudaFreeHost waits for it.
  CHECK(cudaMemcpyAsync(pinned, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaStreamSynchronize(s));
  unsigned long long ran = 0;
  CHECK(cudaMemcpy(&ran, done, sizeof ran, cudaMemcpyDeviceToHost));
  EXPECT(ran == 1);
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  CHECK(cudaFree(done));
  std::printf("PASS async_d2h\n");
  return 0;
}
