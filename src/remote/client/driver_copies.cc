// The driver stand-in's copies and memsets: 1-D (cuMemcpy*, cuMemsetD8/D32), pitched
// allocations, 2-D copies and memsets, peer copies and peer access (see driver_state.h for the
// state; 3-D and batched copies and 16-bit memsets are driver_copies3d.cc, on top of these). NVIDIA's runtime turns cudaMemcpy(Async), cudaMemset(Async), cudaMallocPitch,
// cudaMemcpy2D(Async), cudaMemset2D(Async) and cudaMemcpyPeer(Async) into these calls. Arrays
// (CU_MEMORYTYPE_ARRAY) are not remoted: a copy to or from one fails loudly.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "remote/client/driver_graphs.h"

namespace gpool::remote::client::driver {

// ---- the 1-D copies (declared in driver_state.h: other files' calls use them too)
CUresult RouteTo(const char* call, uint64_t ptr, CUstream s, Route* out) {
  int sdev;
  uint64_t sid;
  if (CUresult r = ResolveStream(s, call, &sdev, &sid)) return r;
  int dev;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    dev = D().DeviceOfLocked(ptr);
  }
  if (dev < 0) dev = sdev;
  CUresult err;
  out->link = D().Link(dev, &err, call);
  if (!out->link) return err;
  out->stream = dev == sdev ? sid : 0;
  out->on_stream = dev == sdev;
  return CUDA_SUCCESS;
}

// Whether [p, p+n) lies inside one page-locked allocation (cuMemAllocHost, cuMemHostAlloc).
bool IsPageLocked(const void* p, size_t n) {
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = D().host_allocs.upper_bound(p);
  if (it == D().host_allocs.begin()) return false;
  --it;
  const auto* base = static_cast<const char*>(it->first);
  const auto* at = static_cast<const char*>(p);
  return at >= base && at + n <= base + it->second.size;
}

// Host-to-device bytes to `dst` (its device's server; the current device's if unknown).
// On a capturing stream each of these is a memcpy node instead (graph::Op; the host side read or
// written when the graph is launched, as CUDA does).
CUresult CaptureCopy(const char* call, CUstream s, graph::CopyDir dir, uint64_t dst, uint64_t src,
                     size_t n) {
  graph::Op op;
  op.kind = graph::Kind::kMemcpy;
  op.dir = dir;
  op.dst = dst;
  op.src = src;
  op.n = n;
  return CaptureOp(call, s, std::move(op));
}

CUresult CopyH2D(const char* call, uint64_t dst, const void* src, size_t n, CUstream s) {
  if (Capturing(s)) {
    return CaptureCopy(call, s, graph::CopyDir::kH2D, dst, reinterpret_cast<uint64_t>(src), n);
  }
  Route r;
  if (CUresult e = RouteTo(call, dst, s, &r)) return e;
  std::lock_guard<std::mutex> lk(r.link->mu());
  return FromStatus(
      r.link->CopyToDevice(dst, wire::ByteSpan(static_cast<const std::byte*>(src), n), r.stream),
      call);
}

// Device-to-host. `async_call` (the Async forms) into page-locked memory, on a stream of the
// copy's own device: returns once the requests are out, as CUDA's does; the data lands by the
// next synchronizing call that reaches the link (the link's pending reads), as the runtime
// stand-in's cudaMemcpyAsync does. So a burst of small copies costs one round trip, not one each
// (NVIDIA's runtime turns cudaMemcpyAsync into these calls). Otherwise complete when the call
// returns (for the Async forms a stronger order than CUDA's, which the program cannot tell from a
// fast copy): into pageable memory CUDA's own copy is synchronous, and a stream of another device
// would not make its sync wait for this link's reads.
CUresult CopyD2H(const char* call, void* dst, uint64_t src, size_t n, CUstream s,
                 bool async_call) {
  if (Capturing(s)) {
    return CaptureCopy(call, s, graph::CopyDir::kD2H, reinterpret_cast<uint64_t>(dst), src, n);
  }
  Route r;
  if (CUresult e = RouteTo(call, src, s, &r)) return e;
  const bool async = async_call && r.on_stream && IsPageLocked(dst, n);
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(r.link->mu());
  if (Status st = r.link->CopyFromDevice(static_cast<std::byte*>(dst), src, n, r.stream, &h, async);
      !st.ok()) {
    return FromStatus(st, call);
  }
  return FromReply(h, r.link, call);
}

CUresult CopyD2D(const char* call, uint64_t dst, uint64_t src, size_t n, CUstream s) {
  if (Capturing(s)) return CaptureCopy(call, s, graph::CopyDir::kD2D, dst, src, n);
  int sdev;
  uint64_t sid;
  if (CUresult r = ResolveStream(s, call, &sdev, &sid)) return r;
  int from, to;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    from = D().DeviceOfLocked(src);
    to = D().DeviceOfLocked(dst);
  }
  if (from < 0) from = sdev;
  if (to < 0) to = from;
  CUresult err;
  ServerLink* ls = D().Link(from, &err, call);
  if (!ls) return err;
  ServerLink* ld = D().Link(to, &err, call);
  if (!ld) return err;
  if (ls == ld) {
    proto::MemcpyD2D m{.dst = dst, .src = src, .size = n, .stream = from == sdev ? sid : 0};
    return Post(ls, m, call);
  }
  // Between servers: relayed through this process, 16 MiB at a time.
  std::vector<std::byte> buf(std::min<size_t>(n, size_t{16} << 20));
  for (size_t off = 0; off < n; off += buf.size()) {
    size_t len = std::min(buf.size(), n - off);
    if (CUresult r = CopyD2H(call, buf.data(), src + off, len, s)) return r;
    if (CUresult r = CopyH2D(call, dst + off, buf.data(), len, s)) return r;
  }
  return CUDA_SUCCESS;
}

namespace {

// Whether every byte of a `width`-byte element `value` is the same; *byte: the low one.
bool Bytewise(uint32_t value, unsigned width, uint8_t* byte) {
  *byte = value & 0xff;
  return width == 1 || (width == 2 && value == 0x0101u * *byte) || value == 0x01010101u * *byte;
}

// `count` elements of `width` bytes holding `value`, for a pattern the protocol cannot set.
std::vector<std::byte> Pattern(uint32_t value, unsigned width, size_t count) {
  std::vector<std::byte> out(count * width);
  for (size_t i = 0; i < count; ++i) std::memcpy(out.data() + i * width, &value, width);
  return out;
}

}  // namespace

// A memset of `count` elements of `width` bytes (1, 2 or 4). A pattern whose bytes differ is
// written as host-to-device data (the protocol's Memset sets bytes): its whole size crosses.
CUresult MemsetD(const char* call, uint64_t dst, uint32_t value, size_t count, unsigned width,
                 CUstream s) {
  if (Capturing(s)) {
    graph::Op op;
    op.kind = graph::Kind::kMemset;
    op.dst = dst;
    op.value = value;
    op.elem = width;
    op.width = count;
    return CaptureOp(call, s, std::move(op));
  }
  uint8_t byte;
  if (!Bytewise(value, width, &byte)) {
    std::vector<std::byte> pattern = Pattern(value, width, count);
    return CopyH2D(call, dst, pattern.data(), pattern.size(), s);
  }
  Route r;
  if (CUresult e = RouteTo(call, dst, s, &r)) return e;
  proto::Memset m{.dst = dst, .value = byte, .size = count * width, .stream = r.stream};
  return Post(r.link, m, call);
}

namespace {


// The pitch cuMemAllocPitch gives: rows rounded up to 512 bytes, the texture alignment both
// backends report.
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

}  // namespace

// A 2-D copy: host-to-device and
// device-to-device within a server posted (their errors at the next synchronizing call);
// device-to-host a read, asynchronous for `async_call` into page-locked memory on a stream of the
// source's device (the rows land by the next synchronizing call), else complete on return;
// between servers each row relayed through this process.
CUresult Copy2D(const char* call, const CUDA_MEMCPY2D* p, CUstream s, bool async_call) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMCPY2D");
  if (Capturing(s)) return CaptureRefuse(call, s, "a 2-D copy");
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

// Unified addressing: the direction from where each pointer lies (a device allocation of the
// program, else host memory). Host to host is a memcpy once the stream's earlier work is done
// (CUDA orders it on the stream too). NCCL copies this way at communicator creation.
CUresult CopyUnified(const char* call, uint64_t dst, uint64_t src, size_t n, CUstream s) {
  if (CUresult r = Ready(call)) return r;
  bool dst_dev, src_dev;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    dst_dev = D().DeviceOfLocked(dst) >= 0;
    src_dev = D().DeviceOfLocked(src) >= 0;
  }
  if (!dst_dev && !src_dev && Capturing(s)) {
    return CaptureCopy(call, s, graph::CopyDir::kH2H, dst, src, n);
  }
  if (dst_dev && src_dev) return CopyD2D(call, dst, src, n, s);
  if (dst_dev) return CopyH2D(call, dst, reinterpret_cast<const void*>(src), n, s);
  if (src_dev) return CopyD2H(call, reinterpret_cast<void*>(dst), src, n, s);
  if (s) {
    if (CUresult r = cuStreamSynchronize(s)) return r;
  }
  if (n > 0) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

// A 2-D memset of `height` rows of `width_elems` elements of `width` bytes: one posted request
// (proto::Memset2D) however many rows when every byte of the pattern is the same, else the rows
// written as a 2-D host-to-device copy of the pattern (its whole size crosses).
CUresult Memset2D(const char* call, CUdeviceptr dst, size_t pitch, uint32_t value, unsigned width,
                  size_t width_elems, size_t height, CUstream s) {
  if (Capturing(s)) return CaptureRefuse(call, s, "a 2-D memset");
  const size_t row = width_elems * width;
  if (row == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && pitch < row) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("pitch {} below the row width {} bytes", pitch, row));
  }
  uint8_t byte;
  if (!Bytewise(value, width, &byte)) {
    std::vector<std::byte> pattern = Pattern(value, width, width_elems * height);
    CUDA_MEMCPY2D p{};
    p.srcMemoryType = CU_MEMORYTYPE_HOST;
    p.srcHost = pattern.data();
    p.srcPitch = row;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dst;
    p.dstPitch = pitch;
    p.WidthInBytes = row;
    p.Height = height;
    return Copy2D(call, &p, s, /*async_call=*/false);
  }
  Route r;
  if (CUresult e = RouteTo(call, dst, s, &r)) return e;
  proto::Memset2D m{.dst = dst, .pitch = height > 1 ? pitch : row, .value = byte,
                    .width = row, .height = height, .stream = r.stream};
  return Post(r.link, m, call);
}

}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

// ---- 1-D copies and memsets

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemcpyHtoD_v2")) return r;  // synchronous
  return CopyH2D("cuMemcpyHtoD_v2", dst, src, n, nullptr);
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemcpyDtoH_v2")) return r;  // synchronous
  return CopyD2H("cuMemcpyDtoH_v2", dst, src, n, nullptr);
}
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemcpyDtoD_v2")) return r;  // synchronous
  return CopyD2D("cuMemcpyDtoD_v2", dst, src, n, nullptr);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyH2D("cuMemcpyHtoDAsync_v2", dst, src, n, s);
}
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyD2H("cuMemcpyDtoHAsync_v2", dst, src, n, s, /*async_call=*/true);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyD2D("cuMemcpyDtoDAsync_v2", dst, src, n, s);
}
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemcpy")) return r;  // synchronous
  return CopyUnified("cuMemcpy", dst, src, n, nullptr);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyUnified("cuMemcpyAsync", dst, src, n, s);
}
CUresult cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemsetD8_v2")) return r;  // synchronous
  return MemsetD("cuMemsetD8_v2", dst, uc, n, 1, nullptr);
}
CUresult cuMemsetD32(CUdeviceptr dst, unsigned int ui, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemsetD32_v2")) return r;  // synchronous
  return MemsetD("cuMemsetD32_v2", dst, ui, n, 4, nullptr);
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s) {
  return MemsetD("cuMemsetD8Async", dst, uc, n, 1, s);
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s) {
  return MemsetD("cuMemsetD32Async", dst, ui, n, 4, s);
}

// cuda.h's macros give these their versioned export names (cuMemAllocPitch_v2, cuMemcpy2D_v2,
// cuMemcpy2DAsync_v2, cuMemsetD2D8_v2, ...).
CUresult cuMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                         unsigned int element_bytes) {
  if (!dptr || !pitch) return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE, "null output");
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) {
    return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE,
                fmt::format("element size {} is not 4, 8 or 16 bytes", element_bytes));
  }
  if (width > SIZE_MAX - kPitchAlign) {
    return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE, fmt::format("width {}", width));
  }
  const size_t p = (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  if (height != 0 && p > SIZE_MAX / height) {
    return Fail("cuMemAllocPitch", CUDA_ERROR_INVALID_VALUE,
                fmt::format("{} rows of pitch {} overflow the address space", height, p));
  }
  if (CUresult r = cuMemAlloc(dptr, p * height)) return r;
  *pitch = p;
  return CUDA_SUCCESS;
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D* p) {
  if (CUresult r = CaptureUnsafe("cuMemcpy2D_v2")) return r;  // synchronous
  return Copy2D("cuMemcpy2D", p, nullptr, false);
}
CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* p) {
  if (CUresult r = CaptureUnsafe("cuMemcpy2DUnaligned_v2")) return r;  // synchronous
  return Copy2D("cuMemcpy2DUnaligned", p, nullptr, false);
}
CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* p, CUstream s) {
  return Copy2D("cuMemcpy2DAsync", p, s, true);
}
CUresult cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                      size_t height) {
  if (CUresult r = CaptureUnsafe("cuMemsetD2D8_v2")) return r;  // synchronous
  return Memset2D("cuMemsetD2D8", dst, pitch, value, 1, width, height, nullptr);
}
CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                           size_t height, CUstream s) {
  return Memset2D("cuMemsetD2D8Async", dst, pitch, value, 1, width, height, s);
}

// Peer copies: each pointer's device is known from its allocation (unified addressing), so the
// contexts only check; between servers the bytes are relayed through this process (CopyD2D).
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  if (CUresult r = CaptureUnsafe("cuMemcpyPeer")) return r;  // synchronous
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
// (proto::PeerAccess), which answers
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

GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD_v2_ptds", cuMemcpyHtoD, (CUdeviceptr d, const void* s, size_t n), (d, s, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH_v2_ptds", cuMemcpyDtoH, (void* d, CUdeviceptr s, size_t n), (d, s, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD_v2_ptds", cuMemcpyDtoD, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync_v2_ptsz", cuMemcpyHtoDAsync,
                   (CUdeviceptr d, const void* s, size_t n, CUstream st), (d, s, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync_v2_ptsz", cuMemcpyDtoHAsync,
                   (void* d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync_v2_ptsz", cuMemcpyDtoDAsync,
                   (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy_ptds, "cuMemcpy_ptds", cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyAsync_ptsz, "cuMemcpyAsync_ptsz", cuMemcpyAsync,
                   (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD8_v2_ptds, "cuMemsetD8_v2_ptds", cuMemsetD8, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD32_v2_ptds, "cuMemsetD32_v2_ptds", cuMemsetD32, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD8Async_ptsz, "cuMemsetD8Async_ptsz", cuMemsetD8Async,
                   (CUdeviceptr d, unsigned char v, size_t n, CUstream st), (d, v, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD32Async_ptsz, "cuMemsetD32Async_ptsz", cuMemsetD32Async,
                   (CUdeviceptr d, unsigned int v, size_t n, CUstream st), (d, v, n, st))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy2D_v2_ptds, "cuMemcpy2D_v2_ptds", cuMemcpy2D,
                   (const CUDA_MEMCPY2D* p), (p))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy2DUnaligned_v2_ptds, "cuMemcpy2DUnaligned_v2_ptds",
                   cuMemcpy2DUnaligned, (const CUDA_MEMCPY2D* p), (p))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync_v2_ptsz", cuMemcpy2DAsync,
                   (const CUDA_MEMCPY2D* p, CUstream s), (p, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D8_v2_ptds, "cuMemsetD2D8_v2_ptds", cuMemsetD2D8,
                   (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h), (d, p, v, w, h))
GPOOL_DRIVER_ALIAS(CUresult, cuMemsetD2D8Async_ptsz, "cuMemsetD2D8Async_ptsz", cuMemsetD2D8Async,
                   (CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s),
                   (d, p, v, w, h, s))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyPeer_ptds, "cuMemcpyPeer_ptds", cuMemcpyPeer,
                   (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n), (d, dc, s, sc, n))
GPOOL_DRIVER_ALIAS(CUresult, cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync_ptsz", cuMemcpyPeerAsync,
                   (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st),
                   (d, dc, s, sc, n, st))

}  // extern "C"
#pragma GCC visibility pop
