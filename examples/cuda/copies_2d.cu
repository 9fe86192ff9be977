// 2-D copies with pitches != width, both ways and device to device, synchronous and on a stream
// (into pinned memory: the rows land by the stream's synchronize); 2-D memsets of 4096 rows,
// plain and on a stream; a burst of small asynchronous 2-D copies; symbols copied on a stream
// (cudaMemcpyFromSymbolAsync into pinned memory, cudaMemcpyToSymbolAsync device to device).
// Every byte checked, including the bytes between rows that must stay untouched.
// Through gpool, the writes and memsets are posted: remote_e2e_test counts the round trips.
#include <cstring>
#include <vector>
#include "common.h"

__device__ unsigned char gTable[4096];

static unsigned char At(size_t row, size_t col, unsigned seed) {
  return static_cast<unsigned char>(row * 7 + col * 13 + seed);
}

int main() {
  const size_t W = 100, H = 37, kSrcPitch = 200, kHostPitch = 150;
  std::vector<unsigned char> src(kSrcPitch * H);
  for (size_t r = 0; r < H; ++r) {
    for (size_t c = 0; c < kSrcPitch; ++c) src[r * kSrcPitch + c] = At(r, c, 1);
  }
  size_t pitch;
  unsigned char *a, *b;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&a), &pitch, W, H));
  CHECK(cudaMalloc(&b, pitch * H));
  EXPECT(pitch >= W);
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));

  // Synchronous: host -> a, a -> b, b -> pageable host rows of another pitch.
  CHECK(cudaMemcpy2D(a, pitch, src.data(), kSrcPitch, W, H, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy2D(b, pitch, a, pitch, W, H, cudaMemcpyDeviceToDevice));
  std::vector<unsigned char> back(kHostPitch * H, 0xee);
  CHECK(cudaMemcpy2D(back.data(), kHostPitch, b, pitch, W, H, cudaMemcpyDeviceToHost));
  for (size_t r = 0; r < H; ++r) {
    EXPECT(std::memcmp(&back[r * kHostPitch], &src[r * kSrcPitch], W) == 0);
    if (r + 1 < H) EXPECT(back[r * kHostPitch + W] == 0xee && back[r * kHostPitch + kHostPitch - 1] == 0xee);
  }

  // On a stream, into pinned memory: valid once the stream is synchronized.
  unsigned char* pinned;
  CHECK(cudaMallocHost(&pinned, kHostPitch * H));
  std::memset(pinned, 0xee, kHostPitch * H);
  std::vector<unsigned char> src2(src.size());
  for (size_t i = 0; i < src2.size(); ++i) src2[i] = static_cast<unsigned char>(src[i] ^ 0x5a);
  CHECK(cudaMemcpy2DAsync(a, pitch, src2.data(), kSrcPitch, W, H, cudaMemcpyHostToDevice, st));
  CHECK(cudaMemcpy2DAsync(b, pitch, a, pitch, W, H, cudaMemcpyDeviceToDevice, st));
  CHECK(cudaMemcpy2DAsync(pinned, kHostPitch, b, pitch, W, H, cudaMemcpyDeviceToHost, st));
  CHECK(cudaStreamSynchronize(st));
  for (size_t r = 0; r < H; ++r) {
    EXPECT(std::memcmp(&pinned[r * kHostPitch], &src2[r * kSrcPitch], W) == 0);
    if (r + 1 < H) EXPECT(pinned[r * kHostPitch + W] == 0xee);
  }

  // 2-D memsets of 4096 rows: 48 of every 64 bytes set, the rest left alone.
  const size_t MW = 48, MH = 4096;
  size_t mpitch;
  unsigned char* m;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&m), &mpitch, 64, MH));
  CHECK(cudaMemset(m, 0x11, mpitch * MH));
  CHECK(cudaMemset2D(m, mpitch, 0x2ab, MW, MH));
  CHECK(cudaMemset2DAsync(m + 8, mpitch, 0x3c, 4, MH, st));
  std::vector<unsigned char> rows(mpitch * MH);
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaMemcpy(rows.data(), m, rows.size(), cudaMemcpyDeviceToHost));
  for (size_t r = 0; r < MH; ++r) {
    const unsigned char* p = &rows[r * mpitch];
    EXPECT(p[0] == 0xab && p[7] == 0xab && p[8] == 0x3c && p[11] == 0x3c && p[12] == 0xab);
    EXPECT(p[MW - 1] == 0xab && p[MW] == 0x11 && p[mpitch - 1] == 0x11);
  }

  // A burst of small asynchronous 2-D copies to the device, then one read of the result.
  const int kBurst = 200;
  std::vector<unsigned char> tiles(16 * 4 * kBurst);
  for (size_t i = 0; i < tiles.size(); ++i) tiles[i] = static_cast<unsigned char>(i * 31 + 7);
  unsigned char* t;
  CHECK(cudaMalloc(&t, 32 * 4 * kBurst));
  CHECK(cudaMemsetAsync(t, 0, 32 * 4 * kBurst, st));
  for (int k = 0; k < kBurst; ++k) {  // tile k: 4 rows of 16 bytes, 32 apart
    CHECK(cudaMemcpy2DAsync(t + k * 32 * 4, 32, &tiles[k * 16 * 4], 16, 16, 4,
                            cudaMemcpyHostToDevice, st));
  }
  std::vector<unsigned char> tback(32 * 4 * kBurst);
  CHECK(cudaMemcpyAsync(tback.data(), t, tback.size(), cudaMemcpyDeviceToHost, st));
  for (int k = 0; k < kBurst; ++k) {
    for (int r = 0; r < 4; ++r) {
      EXPECT(std::memcmp(&tback[k * 128 + r * 32], &tiles[k * 64 + r * 16], 16) == 0);
      EXPECT(tback[k * 128 + r * 32 + 16] == 0);
    }
  }

  // Symbols on a stream: to the symbol, device to device into it, and back into pinned memory.
  std::vector<unsigned char> table(4096);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<unsigned char>(i * 5 + 3);
  CHECK(cudaMemcpyToSymbolAsync(gTable, table.data(), table.size(), 0, cudaMemcpyHostToDevice, st));
  CHECK(cudaMemcpyToSymbolAsync(gTable, a, 64, 1024, cudaMemcpyDeviceToDevice, st));  // a's row 0
  unsigned char* sym;
  CHECK(cudaMallocHost(&sym, table.size()));
  std::memset(sym, 0, table.size());
  CHECK(cudaMemcpyFromSymbolAsync(sym, gTable, table.size(), 0, cudaMemcpyDeviceToHost, st));
  CHECK(cudaStreamSynchronize(st));
  EXPECT(std::memcmp(sym, table.data(), 1024) == 0);
  EXPECT(std::memcmp(sym + 1024, src2.data(), 64) == 0);
  EXPECT(std::memcmp(sym + 1088, table.data() + 1088, table.size() - 1088) == 0);
  std::vector<unsigned char> part(100);
  CHECK(cudaMemcpyFromSymbolAsync(part.data(), gTable, part.size(), 2000, cudaMemcpyDeviceToHost, st));
  EXPECT(std::memcmp(part.data(), table.data() + 2000, part.size()) == 0);  // pageable: done

  CHECK(cudaFreeHost(sym));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(t));
  CHECK(cudaFree(m));
  CHECK(cudaFree(b));
  CHECK(cudaFree(a));
  CHECK(cudaStreamDestroy(st));
  std::printf("PASS copies_2d\n");
  return 0;
}
