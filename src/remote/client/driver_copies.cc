// The driver stand-in's pitched allocations, 2-D copies and memsets, and peer copies (see
// driver_api.cc for the 1-D copies they build on, driver_state.h for the state). NVIDIA's runtime
// turns cudaMallocPitch, cudaMemcpy2D(Async), cudaMemset2D(Async) and cudaMemcpyPeer(Async) into
// these calls. Arrays (CU_MEMORYTYPE_ARRAY) are not remoted: a copy to or from one fails loudly.
#include <cuda.h>

#include <cstring>
#include <vector>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

// The pitch cuMemAllocPitch gives: rows rounded up to 512 bytes, the runtime stand-in's choice
// (cudaMallocPitch) and the texture alignment both backends report.
constexpr size_t kPitchAlign = 512;

// Where one side of a 2-D copy lies: device memory (an address) or host memory (a pointer).
struct Side {
  bool device = false;
  uint64_t addr = 0;  // device address, or the host pointer as an integer
  size_t pitch = 0;
};

CUresult SideOf(const char* call, CUmemorytype type, const void* host, CUdeviceptr dev,
                size_t x, size_t y, size_t pitch, Side* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      out->device = false;
      out->addr = reinterpret_cast<uint64_t>(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
      out->device = true;
      out->addr = dev;
      break;
    case CU_MEMORYTYPE_UNIFIED: {  // where the address lies: a device allocation, else the host
      std::lock_guard<std::mutex> lk(D().mu);
      out->device = D().DeviceOfLocked(dev) >= 0;
      out->addr = dev;
      break;
    }
    case CU_MEMORYTYPE_ARRAY:
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                  "CUDA arrays are not remoted by gpool (a 2-D copy to or from one)");
    default:
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("memory type {} is not a CUmemorytype", static_cast<int>(type)));
  }
  out->addr += y * pitch + x;
  out->pitch = pitch;
  return CUDA_SUCCESS;
}

// A 2-D copy, as the runtime stand-in does it (cudart_api.cc, Memcpy2D): host-to-device and
// device-to-device within a server posted (their errors at the next synchronizing call);
// device-to-host a read, asynchronous for `async_call` into page-locked memory on a stream of the
// source's device (the rows land by the next synchronizing call), else complete on return;
// between servers each row relayed through this process.
CUresult Copy2D(const char* call, const CUDA_MEMCPY2D* p, CUstream s, bool async_call) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMCPY2D");
  const size_t width = p->WidthInBytes, height = p->Height;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  Side src, dst;
  if (CUresult r = SideOf(call, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
                          p->srcY, p->srcPitch, &src)) {
    return r;
  }
  if (CUresult r = SideOf(call, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes,
                          p->dstY, p->dstPitch, &dst)) {
    return r;
  }
  if ((height > 1 && (src.pitch < width || dst.pitch < width))) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("pitch below the row width {} (source pitch {}, destination pitch {})",
                            width, src.pitch, dst.pitch));
  }
  // One row's pitch where the rows are one: height 1 copies ignore the pitches.
  if (height == 1) src.pitch = dst.pitch = width;
  if (!src.device && !dst.device) {
    // Host to host, in the stream's order: after its earlier work, as CUDA does.
    if (CUresult r = cuStreamSynchronize(s)) return r;
    for (size_t row = 0; row < height; ++row) {
      std::memmove(reinterpret_cast<char*>(dst.addr + row * dst.pitch),
                   reinterpret_cast<const char*>(src.addr + row * src.pitch), width);
    }
    return CUDA_SUCCESS;
  }
  if (dst.device && src.device) {
    int from, to;
    {
      std::lock_guard<std::mutex> lk(D().mu);
      from = D().DeviceOfLocked(src.addr);
      to = D().DeviceOfLocked(dst.addr);
    }
    const bool two_servers = from >= 0 && to >= 0 &&
                             D().env.devices[from].server != D().env.devices[to].server;
    if (two_servers) {
      for (size_t row = 0; row < height; ++row) {
        if (CUresult r = CopyD2D(call, dst.addr + row * dst.pitch, src.addr + row * src.pitch,
                                 width, s)) {
          return r;
        }
      }
      return CUDA_SUCCESS;
    }
    Route r;
    if (CUresult e = RouteTo(call, src.addr, s, &r)) return e;
    proto::Memcpy2DAsync m;
    m.kind = static_cast<uint8_t>(proto::CopyKind::kDeviceToDevice);
    m.dst = dst.addr;
    m.dpitch = dst.pitch;
    m.src = src.addr;
    m.spitch = src.pitch;
    m.width = width;
    m.height = height;
    m.stream = r.stream;
    return Post(r.link, m, call);
  }
  if (dst.device) {
    Route r;
    if (CUresult e = RouteTo(call, dst.addr, s, &r)) return e;
    std::lock_guard<std::mutex> lk(r.link->mu());
    return FromStatus(r.link->CopyToDevice2D(dst.addr, dst.pitch,
                                             reinterpret_cast<const std::byte*>(src.addr),
                                             src.pitch, width, height, r.stream),
                      call);
  }
  Route r;
  if (CUresult e = RouteTo(call, src.addr, s, &r)) return e;
  auto* host = reinterpret_cast<std::byte*>(dst.addr);
  const bool async =
      async_call && r.on_stream && IsPageLocked(host, (height - 1) * dst.pitch + width);
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(r.link->mu());
  if (Status st = r.link->CopyFromDevice2D(host, dst.pitch, src.addr, src.pitch, width, height,
                                           r.stream, &h, async);
      !st.ok()) {
    return FromStatus(st, call);
  }
  return FromReply(h, r.link, call);
}

// A 2-D memset of bytes: one posted request (proto::Memset2D) however many rows.
CUresult Memset2D8(const char* call, CUdeviceptr dst, size_t pitch, unsigned char value,
                   size_t width, size_t height, CUstream s) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && pitch < width) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("pitch {} below the row width {}", pitch, width));
  }
  Route r;
  if (CUresult e = RouteTo(call, dst, s, &r)) return e;
  proto::Memset2D m{.dst = dst, .pitch = height > 1 ? pitch : width, .value = value,
                    .width = width, .height = height, .stream = r.stream};
  return Post(r.link, m, call);
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

// cuda.h's macros give these their versioned export names (cuMemAllocPitch_v2, cuMemcpy2D_v2,
// cuMemcpy2DAsync_v2, cuMemsetD2D8_v2, ...).
CUresult cuMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                         unsigned int element_bytes) {
  if (!dptr || !pitch) return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE, "null output");
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) {
    return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE,
                fmt::format("element size {} is not 4, 8 or 16 bytes", element_bytes));
  }
  const size_t p = (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  if (CUresult r = cuMemAlloc(dptr, p * height)) return r;
  *pitch = p;
  return CUDA_SUCCESS;
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D* p) { return Copy2D("cuMemcpy2D", p, nullptr, false); }
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* p) {
  return Copy2D("cuMemcpy2DUnaligned", p, nullptr, false);
}
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* p, CUstream s) {
  return Copy2D("cuMemcpy2DAsync", p, s, true);
}
CUresult cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                      size_t height) {
  return Memset2D8("cuMemsetD2D8", dst, pitch, value, width, height, nullptr);
}
CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                           size_t height, CUstream s) {
  return Memset2D8("cuMemsetD2D8Async", dst, pitch, value, width, height, s);
}

// Peer copies: each pointer's device is known from its allocation (unified addressing), so the
// contexts only check; between servers the bytes are relayed through this process (CopyD2D).
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  return CopyD2D("cuMemcpyPeer", dst, src, n, nullptr);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n,
                           CUstream s) {
  if (n == 0) return CUDA_SUCCESS;
  return CopyD2D("cuMemcpyPeerAsync", dst, src, n, s);
}

// Devices of one server can reach each other's memory (the server enables peer access between its
// contexts); across servers no kernel can reach the other host's memory, so 0 there (copies
// between them still work, relayed).
CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (!can) return Fail("cuDeviceCanAccessPeer", CUDA_ERROR_INVALID_VALUE, "null output");
  if (CUresult r = Ready("cuDeviceCanAccessPeer")) return r;
  const int n = D().device_count();
  if (dev < 0 || dev >= n || peer < 0 || peer >= n) {
    return Fail("cuDeviceCanAccessPeer", CUDA_ERROR_INVALID_DEVICE,
                fmt::format("device {} or peer {} is not one of the {} device(s) GPOOL_DEVICES "
                            "lists", dev, peer, n));
  }
  *can = dev != peer && D().env.devices[dev].server == D().env.devices[peer].server;
  return CUDA_SUCCESS;
}

// Peer access of the current context's device to `peer_ctx`'s device: forwarded to their server
// (proto::PeerAccess, as the runtime stand-in's cudaDeviceEnablePeerAccess), which answers
// already-enabled / not-enabled. Across servers refused with CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
// saying why.
static CUresult PeerAccess(const char* call, CUcontext peer_ctx, unsigned int flags, bool enable) {
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  Ctx* peer_rec;
  if (CUresult r = FindCtx(call, peer_ctx, &peer_rec)) return r;
  const int peer = peer_rec->device;
  if (peer == dev) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE,
                fmt::format("the peer context is of the current device {}", dev));
  }
  if (flags != 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags {:#x} (must be 0)", flags));
  }
  if (D().env.devices[dev].server != D().env.devices[peer].server) {
    return Fail(call, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                fmt::format("device {} ({}) and device {} ({}) are on different GPU servers: "
                            "kernels on one cannot reach the other's memory (copies between them "
                            "work, relayed through the client)",
                            dev, D().env.devices[dev].server, peer, D().env.devices[peer].server));
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::PeerAccess q{.device = D().Index(dev), .peer = D().Index(peer),
                      .enable = static_cast<uint8_t>(enable)};
  return Call(l, q, call);
}
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  return PeerAccess("cuCtxEnablePeerAccess", peer, flags, true);
}
CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  return PeerAccess("cuCtxDisablePeerAccess", peer, 0, false);
}

// Per-thread default stream variants (every default stream is the device's stream 0 here).
#define GPOOL_SAME(ret, name, exported, target, params, args) \
  ret name params __asm__(exported);                          \
  ret name params { return target args; }
GPOOL_SAME(CUresult, cuMemcpy2D_v2_ptds, "cuMemcpy2D_v2_ptds", cuMemcpy2D,
           (const CUDA_MEMCPY2D* p), (p))
GPOOL_SAME(CUresult, cuMemcpy2DUnaligned_v2_ptds, "cuMemcpy2DUnaligned_v2_ptds",
           cuMemcpy2DUnaligned, (const CUDA_MEMCPY2D* p), (p))
GPOOL_SAME(CUresult, cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync_v2_ptsz", cuMemcpy2DAsync,
           (const CUDA_MEMCPY2D* p, CUstream s), (p, s))
GPOOL_SAME(CUresult, cuMemsetD2D8_v2_ptds, "cuMemsetD2D8_v2_ptds", cuMemsetD2D8,
           (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h), (d, p, v, w, h))
GPOOL_SAME(CUresult, cuMemsetD2D8Async_ptsz, "cuMemsetD2D8Async_ptsz", cuMemsetD2D8Async,
           (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s),
           (d, p, v, w, h, s))
GPOOL_SAME(CUresult, cuMemcpyPeer_ptds, "cuMemcpyPeer_ptds", cuMemcpyPeer,
           (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n), (d, dc, s, sc, n))
GPOOL_SAME(CUresult, cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync_ptsz", cuMemcpyPeerAsync,
           (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),
           (d, dc, s, sc, n, st))
#undef GPOOL_SAME

}  // extern "C"
#pragma GCC visibility pop
