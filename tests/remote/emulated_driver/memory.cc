// The emulated CUDA driver's device memory: cuMemGetInfo, allocations, pinned host memory, and
// the copies and memsets (1-D and 2-D), checked when submitted and queued or, with pageable host
// memory, completed before they return. See emulated_driver.cc for what the library is.
#include "emulated_driver.h"

#include <cstdlib>
#include <cstring>

using namespace gpool::remote::emulated_driver;  // NOLINT: the entry points below are C

// cuda.h's #defines give the entry points their exported (versioned) names: cuMemAlloc here is
// cuMemAlloc_v2.
extern "C" {

CUresult CUDAAPI cuMemGetInfo(size_t* free, size_t* total) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemGetInfo"); r) return r;
  *total = S().memory;
  *free = S().memory - InUse(Current()->dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemAlloc"); r) return r;
  if (bytes == 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc", "0 bytes");
  uint64_t p = 0;
  if (CUresult r = Allocate("cuMemAlloc", bytes, false, &p); r) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemFree"); r) return r;
  auto it = S().blocks.find(dptr);
  if (it == S().blocks.end() || it->second.variable) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree", "0x{:x} is not an allocation", dptr);
  }
  if (CUresult r = Synced(); r) return r;  // queued work may still use it
  Release(it);
  return CUDA_SUCCESS;
}

// Pinned host memory is plain host memory; there is no cuMemFreeHost in the table, so it lives
// as long as the process (the backend keeps its staging buffers that long).
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemHostAlloc"); r) return r;
  if (flags & ~unsigned{CU_MEMHOSTALLOC_PORTABLE}) {
    return NotImplemented("cuMemHostAlloc", fmt::format("flags 0x{:x}", flags));
  }
  *pp = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*pp) return Fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc", "{} bytes", bytes);
  S().pinned[reinterpret_cast<uint64_t>(*pp)] = bytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyHtoDAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (Pinned(src, n)) {
    Submit([=] { std::memcpy(Ptr(dst), src, n); });
  } else {  // pageable: read now (CUDA stages it before returning)
    auto copy = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                         static_cast<const std::byte*>(src) + n);
    Submit([=] { std::memcpy(Ptr(dst), copy->data(), n); });
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyDtoHAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, src, n); r) return r;
  if (n) SubmitHost(Pinned(dst, n), [=] { std::memcpy(dst, Ptr(src), n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyDtoDAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, src, n); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n) Submit([=] { std::memmove(Ptr(dst), Ptr(src), n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemsetD8Async";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n) Submit([=] { std::memset(Ptr(dst), uc, n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char uc, size_t width,
                                   size_t height, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemsetD2D8Async";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRows(call, dst, pitch, width, height); r) return r;
  Submit([=] {
    for (size_t row = 0; row < height && width; ++row) std::memset(Ptr(dst + row * pitch), uc, width);
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D* c, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpy2DAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  // One side's first byte, checking a device side's rows; host sides are the caller's.
  auto side = [&](CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y,
                  size_t pitch, const char* which, uint64_t* at) -> CUresult {
    if (pitch < c->WidthInBytes && c->Height > 1) {
      return Fail(CUDA_ERROR_INVALID_VALUE, call, "{} pitch {} < width {}", which, pitch, c->WidthInBytes);
    }
    if (type == CU_MEMORYTYPE_HOST) {
      *at = reinterpret_cast<uint64_t>(host) + y * pitch + x;
      return CUDA_SUCCESS;
    }
    if (type != CU_MEMORYTYPE_DEVICE) {
      return NotImplemented(call, fmt::format("{} memory type {}", which, static_cast<int>(type)));
    }
    *at = dev + y * pitch + x;
    return CheckRows(call, *at, pitch, c->WidthInBytes, c->Height);
  };
  uint64_t src = 0, dst = 0;
  if (CUresult r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY,
                        c->srcPitch, "source", &src); r) {
    return r;
  }
  if (CUresult r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY,
                        c->dstPitch, "destination", &dst); r) {
    return r;
  }
  // Host sides: each must be pinned for the copy to be queued (else it completes now).
  auto pinned = [&](CUmemorytype type, uint64_t at, size_t pitch) {
    return type != CU_MEMORYTYPE_HOST ||
           Pinned(Ptr(at), c->Height ? (c->Height - 1) * pitch + c->WidthInBytes : 0);
  };
  bool queued = pinned(c->srcMemoryType, src, c->srcPitch) && pinned(c->dstMemoryType, dst, c->dstPitch);
  size_t width = c->WidthInBytes, height = c->Height, sp = c->srcPitch, dp = c->dstPitch;
  SubmitHost(queued, [=] {
    for (size_t row = 0; row < height && width; ++row) {
      std::memmove(Ptr(dst + row * dp), Ptr(src + row * sp), width);
    }
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
