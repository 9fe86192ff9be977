// Copies of 1 B to 256 MiB each way, pageable and pinned, plus 2-D copies and memset; every byte
// checked. Prints bandwidth for the large sizes.
#include <chrono>
#include <cstring>
#include <vector>
#include "common.h"

// (i >> 20): each MiB differs from the others, so a chunk of a large copy landing at another
// chunk's offset (4 MiB pieces, 4 MiB staging buffers) is caught; without it the pattern repeats
// every 128 KiB.
static unsigned char Pattern(size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131 + seed) ^ (i >> 9) ^ (i >> 20));
}

int main(int argc, char** argv) {
  size_t max = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (size_t{256} << 20);
  unsigned char* dev;
  CHECK(cudaMalloc(&dev, max));
  std::vector<unsigned char> src(max), dst(max);
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, max));
  unsigned seed = 1;
  for (size_t n = 1; n <= max; n = n < 4096 ? n * 3 + 1 : n * 4) {
    for (size_t i = 0; i < n; ++i) src[i] = Pattern(i, seed);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaMemcpy(dev, src.data(), n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(pinned, dev, n, cudaMemcpyDeviceToHost));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT(std::memcmp(src.data(), pinned, n) == 0);
    if (n >= (1u << 20)) std::printf("size %zu: round trip %.1f MB/s\n", n, 2 * n / s / 1e6);
    ++seed;
  }
  // The exact maximum, through cudaMemcpyDefault (direction from the pointers).
  for (size_t i = 0; i < max; ++i) src[i] = Pattern(i, 99);
  CHECK(cudaMemcpy(dev, src.data(), max, cudaMemcpyDefault));
  CHECK(cudaMemcpy(dst.data(), dev, max, cudaMemcpyDefault));
  EXPECT(std::memcmp(src.data(), dst.data(), max) == 0);
  // memset, then a 2-D copy of a 100x37 sub-block with pitches.
  CHECK(cudaMemset(dev, 0xab, 4096));
  CHECK(cudaMemcpy(dst.data(), dev, 4096, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4096; ++i) EXPECT(dst[i] == 0xab);
  size_t pitch;
  unsigned char* dev2;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&dev2), &pitch, 100, 37));
  EXPECT(pitch >= 100);
  CHECK(cudaMemcpy2D(dev2, pitch, src.data(), 200, 100, 37, cudaMemcpyHostToDevice));
  std::vector<unsigned char> back(150 * 37, 0);
  CHECK(cudaMemcpy2D(back.data(), 150, dev2, pitch, 100, 37, cudaMemcpyDeviceToHost));
  for (int r = 0; r < 37; ++r) EXPECT(std::memcmp(&back[r * 150], &src[r * 200], 100) == 0);
  CHECK(cudaFree(dev2));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(dev));
  std::printf("PASS memcpy_sizes max=%zu\n", max);
  return 0;
}
