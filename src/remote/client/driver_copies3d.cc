// The driver stand-in's 3-D copies, batched copies and 16- and 32-bit memsets (2-D included), on
// top of the 1-D and 2-D paths of driver_copies.cc. NVIDIA's runtime turns cudaMemcpy3D(Async)
// and cudaMemcpy3DPeer(Async) on linear memory, and cudaMemcpyBatchAsync, into these calls.
// A 3-D copy is a 2-D copy of its slices' rows: one, of Height x Depth rows, when the slices
// follow each other without a gap on both sides (srcHeight == dstHeight == Height), else one per
// slice. Arrays (CU_MEMORYTYPE_ARRAY) are not remoted and fail loudly there, as in 2-D.
// Not here: cuMemcpy3DBatchAsync (operands that may be arrays, element strides), a loud stub.
#include <cuda.h>

#include <cstdint>

#include "remote/client/driver_graphs.h"

namespace gpool::remote::client::driver {
namespace {

// One side of a 3-D copy, as the 2-D copy's fields take it.
struct Side3D {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  size_t x, y, z, pitch, height;
};

CUresult Copy3D(const char* call, const Side3D& src, const Side3D& dst, size_t width,
                size_t height, size_t depth, CUstream s, bool async_call) {
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  if (depth > 1 && (src.height < height || dst.height < height)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("a copy of {} rows per slice over {} slices needs srcHeight and "
                            "dstHeight of at least {} (got {} and {})",
                            height, depth, height, src.height, dst.height));
  }
  // Rows of all slices evenly spaced on both sides: one 2-D copy.
  const bool one = depth == 1 || (src.height == height && dst.height == height);
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = src.type;
  p.srcHost = src.host;
  p.srcDevice = src.device;
  p.srcXInBytes = src.x;
  p.srcPitch = src.pitch;
  p.dstMemoryType = dst.type;
  p.dstHost = const_cast<void*>(dst.host);
  p.dstDevice = dst.device;
  p.dstXInBytes = dst.x;
  p.dstPitch = dst.pitch;
  p.WidthInBytes = width;
  p.Height = one ? height * depth : height;
  for (size_t z = 0; z < (one ? 1 : depth); ++z) {
    p.srcY = src.y + (src.z + z) * src.height;
    p.dstY = dst.y + (dst.z + z) * dst.height;
    if (CUresult r = Copy2D(call, &p, s, async_call)) return r;
  }
  return CUDA_SUCCESS;
}

CUresult Copy3DOf(const char* call, const CUDA_MEMCPY3D* p, CUstream s, bool async_call) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMCPY3D");
  if (p->srcLOD != 0 || p->dstLOD != 0 || p->reserved0 != nullptr || p->reserved1 != nullptr) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                "srcLOD and dstLOD must be 0 and reserved0 and reserved1 NULL");
  }
  return Copy3D(call,
                {p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
                 p->srcPitch, p->srcHeight},
                {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
                 p->dstPitch, p->dstHeight},
                p->WidthInBytes, p->Height, p->Depth, s, async_call);
}

// Contexts name no address space here: every device address is unique in the process (the
// client's allocations of all devices), so a peer copy is a copy between two addresses.
CUresult Copy3DPeerOf(const char* call, const CUDA_MEMCPY3D_PEER* p, CUstream s, bool async_call) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMCPY3D_PEER");
  if (p->srcLOD != 0 || p->dstLOD != 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "srcLOD and dstLOD must be 0");
  }
  return Copy3D(call,
                {p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ,
                 p->srcPitch, p->srcHeight},
                {p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ,
                 p->dstPitch, p->dstHeight},
                p->WidthInBytes, p->Height, p->Depth, s, async_call);
}

// cuMemcpyBatchAsync: `count` copies between addresses on stream `s` (not the legacy default
// stream, as CUDA requires), in order here (CUDA leaves their order open). The attributes only
// say how the sources may be read, which changes nothing here: every copy reads its source
// within the call or in the stream's order. *fail_idx (12.8's form): the failing copy's index,
// or SIZE_MAX for an error not tied to one copy.
CUresult CopyBatch(const char* call, CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                   size_t count, CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,
                   size_t* fail_idx, CUstream s) {
  if (fail_idx) *fail_idx = SIZE_MAX;
  if (count == 0 || !dsts || !srcs || !sizes) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "no copies (count 0 or a null array)");
  }
  if (s == nullptr || s == CU_STREAM_LEGACY) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                "the legacy default stream cannot take a batch of copies (CUDA refuses it too)");
  }
  if (num_attrs == 0 || num_attrs > count || !attrs || !attr_idxs) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("{} attributes for {} copies (at least 1, at most one per copy)",
                            num_attrs, count));
  }
  for (size_t k = 0; k < num_attrs; ++k) {
    if ((k == 0 && attr_idxs[0] != 0) || (k > 0 && attr_idxs[k] <= attr_idxs[k - 1]) ||
        attr_idxs[k] >= count) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("attrsIdxs[{}] = {}: the indices start at 0 and increase below {}",
                              k, attr_idxs[k], count));
    }
    if (attrs[k].srcAccessOrder < CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
        attrs[k].srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("attrs[{}].srcAccessOrder {} is not a CUmemcpySrcAccessOrder", k,
                              static_cast<int>(attrs[k].srcAccessOrder)));
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (CUresult r = CopyUnified(call, dsts[i], srcs[i], sizes[i], s)) {
      if (fail_idx) *fail_idx = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

#pragma GCC visibility push(default)
extern "C" {

CUresult cuMemcpy3D(const CUDA_MEMCPY3D* p) {
  if (CUresult r = CaptureUnsafe("cuMemcpy3D_v2")) return r;  // synchronous
  return Copy3DOf("cuMemcpy3D_v2", p, nullptr, false);
}
CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D* p, CUstream s) {
  return Copy3DOf("cuMemcpy3DAsync_v2", p, s, true);
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  if (CUresult r = CaptureUnsafe("cuMemcpy3DPeer")) return r;  // synchronous
  return Copy3DPeerOf("cuMemcpy3DPeer", p, nullptr, false);
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  return Copy3DPeerOf("cuMemcpy3DPeerAsync", p, s, true);
}
CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,
                            CUstream s) {
  return CopyBatch("cuMemcpyBatchAsync_v2", dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs,
                   nullptr, s);
}
CUresult cuMemsetD16(CUdeviceptr dst, unsigned short us, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemsetD16_v2")) return r;  // synchronous
  return MemsetD("cuMemsetD16_v2", dst, us, n, 2, nullptr);
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short us, size_t n, CUstream s) {
  return MemsetD("cuMemsetD16Async", dst, us, n, 2, s);
}
CUresult cuMemsetD2D16(CUdeviceptr dst, size_t pitch, unsigned short us, size_t width,
                       size_t height) {
  if (CUresult r = CaptureUnsafe("cuMemsetD2D16_v2")) return r;  // synchronous
  return Memset2D("cuMemsetD2D16_v2", dst, pitch, us, 2, width, height, nullptr);
}
CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short us, size_t width,
                            size_t height, CUstream s) {
  return Memset2D("cuMemsetD2D16Async", dst, pitch, us, 2, width, height, s);
}
CUresult cuMemsetD2D32(CUdeviceptr dst, size_t pitch, unsigned int ui, size_t width,
                       size_t height) {
  if (CUresult r = CaptureUnsafe("cuMemsetD2D32_v2")) return r;  // synchronous
  return Memset2D("cuMemsetD2D32_v2", dst, pitch, ui, 4, width, height, nullptr);
}
CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int ui, size_t width,
                            size_t height, CUstream s) {
  return Memset2D("cuMemsetD2D32Async", dst, pitch, ui, 4, width, height, s);
}

// CUDA 12.8's form of the batch (exported unversioned): with the failing copy's index.
CUresult gpool_cuMemcpyBatchAsync_v12080(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                         size_t count, CUmemcpyAttributes* attrs,
                                         size_t* attr_idxs, size_t num_attrs, size_t* fail_idx,
                                         CUstream s) __asm__("cuMemcpyBatchAsync");
CUresult gpool_cuMemcpyBatchAsync_v12080(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                         size_t count, CUmemcpyAttributes* attrs,
                                         size_t* attr_idxs, size_t num_attrs, size_t* fail_idx,
                                         CUstream s) {
  return CopyBatch("cuMemcpyBatchAsync", dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs,
                   fail_idx, s);
}

GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy3D_v2_ptds, "cuMemcpy3D_v2_ptds", cuMemcpy3D,
                   (const CUDA_MEMCPY3D* p), (p))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy3DAsync_v2_ptsz, "cuMemcpy3DAsync_v2_ptsz", cuMemcpy3DAsync,
                   (const CUDA_MEMCPY3D* p, CUstream s), (p, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy3DPeer_ptds, "cuMemcpy3DPeer_ptds", cuMemcpy3DPeer,
                   (const CUDA_MEMCPY3D_PEER* p), (p))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy3DPeerAsync_ptsz, "cuMemcpy3DPeerAsync_ptsz", cuMemcpy3DPeerAsync,
                   (const CUDA_MEMCPY3D_PEER* p, CUstream s), (p, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyBatchAsync_v2_ptsz, "cuMemcpyBatchAsync_v2_ptsz", cuMemcpyBatchAsync,
                   (CUdeviceptr* d, CUdeviceptr* s, size_t* n, size_t c, CUmemcpyAttributes* a,
            size_t* i, size_t na, CUstream st),
                   (d, s, n, c, a, i, na, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyBatchAsync_ptsz, "cuMemcpyBatchAsync_ptsz",
                   gpool_cuMemcpyBatchAsync_v12080,
                   (CUdeviceptr* d, CUdeviceptr* s, size_t* n, size_t c, CUmemcpyAttributes* a,
            size_t* i, size_t na, size_t* f, CUstream st),
                   (d, s, n, c, a, i, na, f, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD16_v2_ptds, "cuMemsetD16_v2_ptds", cuMemsetD16,
                   (CUdeviceptr d, unsigned short v, size_t n), (d, v, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD16Async_ptsz, "cuMemsetD16Async_ptsz", cuMemsetD16Async,
                   (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D16_v2_ptds, "cuMemsetD2D16_v2_ptds", cuMemsetD2D16,
                   (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h), (d, p, v, w, h))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D16Async_ptsz, "cuMemsetD2D16Async_ptsz", cuMemsetD2D16Async,
                   (CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s),
                   (d, p, v, w, h, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D32_v2_ptds, "cuMemsetD2D32_v2_ptds", cuMemsetD2D32,
                   (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h), (d, p, v, w, h))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D32Async_ptsz, "cuMemsetD2D32Async_ptsz", cuMemsetD2D32Async,
                   (CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s),
                   (d, p, v, w, h, s))

}  // extern "C"
#pragma GCC visibility pop
