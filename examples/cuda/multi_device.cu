// Aggregation: every device the program sees (GPUs of several servers) runs a kernel on its own
// data, then data moves between devices with cudaMemcpyPeer (relayed through the client when
// the devices sit on different servers); peer access is enabled where a device can reach another.
#include <algorithm>
#include <vector>
#include "common.h"

__global__ void fill(int* x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value + i;
}

int main(int argc, char** argv) {
  int want = argc > 1 ? std::atoi(argv[1]) : 2;
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count >= want);
  const int n = 1 << 18;
  std::vector<int*> bufs(count);
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    int cur = -1;
    CHECK(cudaGetDevice(&cur));
    EXPECT(cur == d);
    CHECK(cudaMalloc(&bufs[d], n * sizeof(int)));
    fill<<<(n + 255) / 256, 256>>>(bufs[d], d * 1000000, n);
    CHECK(cudaGetLastError());
  }
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceSynchronize());
  }
  std::vector<int> h(n);
  for (int d = 0; d < count; ++d) {
    int next = (d + 1) % count;
    int* tmp;
    CHECK(cudaSetDevice(next));
    CHECK(cudaMalloc(&tmp, n * sizeof(int)));
    CHECK(cudaMemcpyPeer(tmp, next, bufs[d], d, n * sizeof(int)));
    CHECK(cudaMemcpy(h.data(), tmp, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) EXPECT(h[i] == d * 1000000 + i);
    CHECK(cudaFree(tmp));
  }
  // An asynchronous copy into pinned memory on a stream of ANOTHER device (CUDA allows a copy on
  // any device's stream), then a sync of that stream: the data must be there. With gpool the
  // stream may live on another server than the source.
  int* pinned;
  CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
  for (int d = 0; d < count; ++d) {
    int next = (d + 1) % count;
    cudaStream_t s;
    CHECK(cudaSetDevice(next));
    CHECK(cudaStreamCreate(&s));
    std::fill(pinned, pinned + n, -1);
    CHECK(cudaMemcpyAsync(pinned, bufs[d], n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) EXPECT(pinned[i] == d * 1000000 + i);
    // The same as a 2-D copy: 512 rows of 1 KiB from the device, 2 KiB apart in the host buffer.
    std::fill(pinned, pinned + n, -1);
    const size_t row = 1024, rows = 512;
    CHECK(cudaMemcpy2DAsync(pinned, 2 * row, bufs[d], row, row, rows, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t r = 0; r < rows; ++r) {
      const int* got = pinned + r * 2 * row / sizeof(int);
      for (size_t i = 0; i < row / sizeof(int); ++i) {
        EXPECT(got[i] == d * 1000000 + static_cast<int>(r * row / sizeof(int) + i));
      }
    }
    CHECK(cudaStreamDestroy(s));
  }
  CHECK(cudaFreeHost(pinned));
  // Peer access where a device can reach another (devices of one server), refused where not.
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    for (int p = 0; p < count; ++p) {
      if (p == d) continue;
      int can = -1;
      CHECK(cudaDeviceCanAccessPeer(&can, d, p));
      if (can) {
        CHECK(cudaDeviceEnablePeerAccess(p, 0));
        EXPECT(cudaDeviceEnablePeerAccess(p, 0) == cudaErrorPeerAccessAlreadyEnabled);
        EXPECT(cudaGetLastError() == cudaErrorPeerAccessAlreadyEnabled);
        CHECK(cudaDeviceDisablePeerAccess(p));
        EXPECT(cudaDeviceDisablePeerAccess(p) == cudaErrorPeerAccessNotEnabled);
      } else {
        EXPECT(cudaDeviceEnablePeerAccess(p, 0) == cudaErrorPeerAccessUnsupported);
      }
      (void)cudaGetLastError();
    }
  }
  for (int d = 0; d < count; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaFree(bufs[d]));
  }
  std::printf("PASS multi_device devices=%d\n", count);
  return 0;
}
