// 3-D copies of pitched volumes (cudaMalloc3D, cudaMemcpy3D both ways, device to device with
// offsets, on a stream into pinned memory, cudaMemcpy3DPeer), a batch of copies
// (cudaMemcpyBatchAsync, refused on the legacy stream) and the driver's 16- and 32-bit memsets,
// 1-D and 2-D, fetched as a program without -lcuda fetches them (cudaGetDriverEntryPointByVersion).
// Every byte checked, including those outside each copy's box that must stay untouched.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common.h"

static unsigned char At(size_t x, size_t y, size_t z, unsigned seed) {
  return static_cast<unsigned char>(x * 3 + y * 17 + z * 101 + seed);
}

template <class Fn>
static Fn Entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
  EXPECT(q == cudaDriverEntryPointSuccess && fn != nullptr);
  return reinterpret_cast<Fn>(fn);
}

int main() {
  const size_t W = 100, H = 20, D = 6;
  // The host volume: its own pitch and a gap of 3 rows between slices.
  const size_t kHostPitch = W + 28, kHostRows = H + 3;
  std::vector<unsigned char> src(kHostPitch * kHostRows * D);
  for (size_t z = 0; z < D; ++z)
    for (size_t y = 0; y < kHostRows; ++y)
      for (size_t x = 0; x < kHostPitch; ++x) src[(z * kHostRows + y) * kHostPitch + x] = At(x, y, z, 1);
  cudaExtent ext = make_cudaExtent(W, H, D);
  cudaPitchedPtr a, b;
  CHECK(cudaMalloc3D(&a, ext));
  CHECK(cudaMalloc3D(&b, ext));
  EXPECT(a.pitch >= W && a.ysize == H);
  CHECK(cudaMemset(b.ptr, 0, b.pitch * H * D));

  // Host to device (slices apart on the host: one 2-D copy per slice).
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(src.data(), kHostPitch, W, kHostRows);
  p.dstPtr = a;
  p.extent = ext;
  p.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&p));

  // Device to device, a box with offsets on both sides.
  p = {};
  p.srcPtr = a;
  p.srcPos = make_cudaPos(2, 1, 1);
  p.dstPtr = b;
  p.dstPos = make_cudaPos(4, 2, 0);
  p.extent = make_cudaExtent(W - 10, H - 5, D - 2);
  p.kind = cudaMemcpyDeviceToDevice;
  CHECK(cudaMemcpy3D(&p));

  // Back to a contiguous host volume (rows evenly spaced on both sides: one 2-D copy).
  std::vector<unsigned char> back(W * H * D, 0xee);
  p = {};
  p.srcPtr = b;
  p.dstPtr = make_cudaPitchedPtr(back.data(), W, W, H);
  p.extent = ext;
  p.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&p));
  for (size_t z = 0; z < D; ++z)
    for (size_t y = 0; y < H; ++y)
      for (size_t x = 0; x < W; ++x) {
        const bool in = x >= 4 && x < 4 + W - 10 && y >= 2 && y < 2 + H - 5 && z < D - 2;
        const unsigned char want = in ? At(x - 4 + 2, y - 2 + 1, z + 1, 1) : 0;
        EXPECT(back[(z * H + y) * W + x] == want);
      }

  // On a stream into pinned memory, from a's slices 1..3 rows 5..14, into a padded host box.
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  unsigned char* pinned;
  const size_t kPinPitch = 128, kPinRows = 12;
  CHECK(cudaMallocHost(&pinned, kPinPitch * kPinRows * 3));
  std::memset(pinned, 0x77, kPinPitch * kPinRows * 3);
  p = {};
  p.srcPtr = a;
  p.srcPos = make_cudaPos(0, 5, 1);
  p.dstPtr = make_cudaPitchedPtr(pinned, kPinPitch, W, kPinRows);
  p.extent = make_cudaExtent(W, 10, 3);
  p.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3DAsync(&p, st));
  CHECK(cudaStreamSynchronize(st));
  for (size_t z = 0; z < 3; ++z)
    for (size_t y = 0; y < kPinRows; ++y)
      for (size_t x = 0; x < kPinPitch; ++x) {
        const unsigned char want = (y < 10 && x < W) ? At(x, y + 5, z + 1, 1) : 0x77;
        EXPECT(pinned[(z * kPinRows + y) * kPinPitch + x] == want);
      }

  // A peer copy on one device: a's first slice over b's last.
  cudaMemcpy3DPeerParms pp = {};
  pp.srcPtr = a;
  pp.srcDevice = 0;
  pp.dstPtr = b;
  pp.dstPos = make_cudaPos(0, 0, D - 1);
  pp.dstDevice = 0;
  pp.extent = make_cudaExtent(W, H, 1);
  CHECK(cudaMemcpy3DPeer(&pp));
  std::vector<unsigned char> slice(W * H);
  CHECK(cudaMemcpy2D(slice.data(), W, static_cast<char*>(b.ptr) + b.pitch * H * (D - 1), b.pitch,
                     W, H, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < H; ++y)
    for (size_t x = 0; x < W; ++x) EXPECT(slice[y * W + x] == At(x, y, 0, 1));

  // A batch: host to device, device to device, device to host, on a stream.
  std::vector<unsigned char> in(4096), out(4096, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 11 + 5);
  unsigned char *c, *d;
  CHECK(cudaMalloc(&c, in.size()));
  CHECK(cudaMalloc(&d, in.size()));
  void* dsts[3] = {c, d, out.data()};
  const void* srcs[3] = {in.data(), c, d};
  size_t sizes[3] = {in.size(), in.size(), in.size()};
  cudaMemcpyAttributes attr = {};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, st));
  CHECK(cudaStreamSynchronize(st));
  EXPECT(out == in);
  EXPECT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, cudaStreamLegacy) ==
         cudaErrorInvalidValue);
  cudaGetLastError();

  // The driver's 16- and 32-bit memsets: a pattern whose bytes differ and one whose bytes agree.
  using D16 = CUresult (*)(CUdeviceptr, unsigned short, size_t);
  using D16Async = CUresult (*)(CUdeviceptr, unsigned short, size_t, CUstream);
  using D2D16 = CUresult (*)(CUdeviceptr, size_t, unsigned short, size_t, size_t);
  using D2D32 = CUresult (*)(CUdeviceptr, size_t, unsigned int, size_t, size_t);
  auto memsetD16 = Entry<D16>("cuMemsetD16");
  auto memsetD16Async = Entry<D16Async>("cuMemsetD16Async");
  auto memsetD2D16 = Entry<D2D16>("cuMemsetD2D16");
  auto memsetD2D32 = Entry<D2D32>("cuMemsetD2D32");
  const CUdeviceptr cd = reinterpret_cast<CUdeviceptr>(c);
  EXPECT(memsetD16(cd, 0x1234, 1000) == CUDA_SUCCESS);
  EXPECT(memsetD16Async(cd + 2000, 0x4242, 500, st) == CUDA_SUCCESS);
  CHECK(cudaStreamSynchronize(st));
  CHECK(cudaMemcpy(out.data(), c, in.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 1000; ++i) {
    uint16_t v;
    std::memcpy(&v, &out[2 * i], 2);
    EXPECT(v == (i < 1000 ? 0x1234 : 0));
  }
  for (size_t i = 2000; i < 3000; ++i) EXPECT(out[i] == 0x42);
  for (size_t i = 3000; i < in.size(); ++i) EXPECT(out[i] == in[i]);
  // 2-D over a's first slice: 16-bit on rows 0..4 (30 elements), 32-bit on rows 10..13 (7).
  const CUdeviceptr ad = reinterpret_cast<CUdeviceptr>(a.ptr);
  EXPECT(memsetD2D16(ad, a.pitch, 0xbeef, 30, 5) == CUDA_SUCCESS);
  EXPECT(memsetD2D32(ad + 10 * a.pitch + 8, a.pitch, 0x01020304u, 7, 4) == CUDA_SUCCESS);
  EXPECT(memsetD2D32(ad + 16 * a.pitch, a.pitch, 0x09090909u, 3, 2) == CUDA_SUCCESS);
  CHECK(cudaMemcpy2D(slice.data(), W, a.ptr, a.pitch, W, H, cudaMemcpyDeviceToHost));
  for (size_t y = 0; y < H; ++y)
    for (size_t x = 0; x < W; ++x) {
      unsigned char want = At(x, y, 0, 1);
      if (y < 5 && x < 60) want = (x % 2 == 0) ? 0xef : 0xbe;
      if (y >= 10 && y < 14 && x >= 8 && x < 8 + 28) want = static_cast<unsigned char>(4 - (x - 8) % 4);
      if (y >= 16 && y < 18 && x < 12) want = 0x09;
      EXPECT(slice[y * W + x] == want);
    }

  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(c));
  CHECK(cudaFree(d));
  CHECK(cudaFree(a.ptr));
  CHECK(cudaFree(b.ptr));
  CHECK(cudaStreamDestroy(st));
  std::printf("PASS copies_3d\n");
  return 0;
}
