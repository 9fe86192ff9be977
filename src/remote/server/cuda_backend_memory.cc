// The cuda backend's memory (the class: cuda_backend_internal.h; the design: cuda_backend.cc):
// allocations and the device ranges tracked to route and check copies (owner_), copies in every
// direction, memsets, and the pinned staging buffers: host-to-device copies through two of them
// per device, so that the network receive of one chunk overlaps the DMA of the previous one (and
// H2DTarget/CommitH2D receive a chunk straight into one); device-to-host replies through two
// others (StartD2H/FinishD2H), so that the DMA of the next chunk overlaps the network send of
// this one.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "remote/server/cuda_backend_internal.h"

#ifdef GPOOL_HAVE_CUDA_H
namespace gpool::remote::server::cuda {

// The device owning a device pointer (allocations and module globals are tracked).
uint32_t CudaBackend::DevOf(uint64_t p) {
  auto it = owner_.upper_bound(p);
  if (it != owner_.begin()) {
    --it;
    if (p < it->first + it->second.first) return it->second.second;
  }
  return current_ == UINT32_MAX ? 0 : current_;
}
// A copy that starts inside a tracked allocation must end inside it, as the emulated backend
// demands (the driver would let it run on into the next allocation of the same 2 MiB page).
// Addresses outside every tracked range are left to the driver to judge.
Result CudaBackend::CheckRange(uint64_t p, uint64_t n, const char* what) {
  auto it = owner_.upper_bound(p);
  if (n == 0 || it == owner_.begin()) return {};
  --it;
  uint64_t end = it->first + it->second.first;
  // Mappings (cuMemMap) back to back are one range, as on a GPU.
  for (auto next = std::next(it); vmm_maps_.count(it->first) && next != owner_.end() &&
                                  next->first == end && vmm_maps_.count(next->first);
       it = next++) {
    end += next->second.first;
  }
  if (p < end && n > end - p) {
    return Err(kErrInvalidValue, fmt::format("{}: device range 0x{:x}+{} runs past the end of "
                                             "its allocation 0x{:x}+{}", what, p, n, it->first,
                                             it->second.first));
  }
  return {};
}
Result CudaBackend::MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) {
  if (Result r = Use(dev); !r.ok()) return r;
  size_t f = 0, t = 0;
  Result r = R("cuMemGetInfo", cu_.cuMemGetInfo(&f, &t));
  *free = f;
  *total = t;
  return r;
}
Result CudaBackend::Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) {
  if (Result r = Use(dev); !r.ok()) return r;
  CUdeviceptr p = 0;
  // The driver's code as it is (CUDA_ERROR_OUT_OF_MEMORY is cudaErrorMemoryAllocation): a
  // context with a sticky fault refuses with that fault, which is what the program must see.
  if (Result r = R("cuMemAlloc", cu_.cuMemAlloc(&p, std::max<uint64_t>(size, 1))); !r.ok()) {
    return r;
  }
  *ptr = p;
  owner_[p] = {std::max<uint64_t>(size, 1), dev};
  return {};
}
Result CudaBackend::Free(uint64_t ptr) {
  auto it = owner_.find(ptr);
  if (it == owner_.end()) return Err(kErrInvalidDevicePointer, fmt::format("cudaFree(0x{:x}): not an allocation", ptr));
  if (Result r = Use(it->second.second); !r.ok()) return r;
  // Forgotten only once freed: a refused free (a module variable's address, a faulted context)
  // leaves the range tracked.
  if (Result r = R("cuMemFree", cu_.cuMemFree(ptr)); !r.ok()) return r;
  owner_.erase(it);
  return {};
}
// The staging pair of the device whose context is current (`dev`): the buffers and their
// events belong to that context, since an event can be recorded only on a stream of its own
// context. The buffers are PORTABLE anyway, so a copy never runs from memory that another
// context sees as pageable.
// `reads`: the pair device-to-host reads are pipelined through (StartD2H), apart from the
// writes' pair so that each keeps its own order.
Result CudaBackend::GetStaging(uint32_t dev, StagingPair** out, bool reads) {
  StagingPair& st = (reads ? read_staging_ : staging_)[dev];
  *out = &st;
  if (st.buf[0]) return {};
  for (int i = 0; i < 2; ++i) {
    if (Result r = R("cuMemHostAlloc", cu_.cuMemHostAlloc(&st.buf[i], kStagingBytes, CU_MEMHOSTALLOC_PORTABLE)); !r.ok()) return r;
    if (Result r = R("cuEventCreate", cu_.cuEventCreate(&st.done[i], CU_EVENT_DISABLE_TIMING)); !r.ok()) return r;
  }
  return {};
}
Result CudaBackend::CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) {
  if (Result r = CheckRange(dst, src.size(), "host-to-device copy"); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
  StagingPair* st = nullptr;
  if (Result r = GetStaging(current_, &st); !r.ok()) return r;
  for (size_t off = 0; off < src.size(); off += kStagingBytes) {
    size_t n = std::min(kStagingBytes, src.size() - off);
    int i = st->next;
    st->next ^= 1;
    // Wait until this buffer's previous DMA is done, refill it, and queue its copy.
    if (Result r = R("cuEventSynchronize", cu_.cuEventSynchronize(st->done[i])); !r.ok()) return r;
    std::memcpy(st->buf[i], src.data() + off, n);
    if (Result r = R("cuMemcpyHtoDAsync", cu_.cuMemcpyHtoDAsync(dst + off, st->buf[i], n, s)); !r.ok()) return r;
    if (Result r = R("cuEventRecord", cu_.cuEventRecord(st->done[i], s)); !r.ok()) return r;
  }
  return {};
}
// A chunk is received into the next staging buffer of its device (once that buffer's previous
// DMA is done) and copied from there, saving CopyH2D's memcpy into staging. The destination is
// checked first, as CopyH2D does; nothing is written to device memory before CommitH2D.
std::span<std::byte> CudaBackend::H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) {
  CUstream s = nullptr;
  StagingPair* st = nullptr;
  if (size > kStagingBytes || !CheckRange(dst, size, "").ok() ||
      !Stream(stream, DevOf(dst), &s).ok() || !GetStaging(current_, &st).ok()) {
    return {};
  }
  if (!R("cuEventSynchronize", cu_.cuEventSynchronize(st->done[st->next])).ok()) return {};
  target_ = st;
  return {static_cast<std::byte*>(st->buf[st->next]), size};
}
Result CudaBackend::CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) {
  StagingPair* st = target_;
  target_ = nullptr;
  if (st == nullptr || data.data() != static_cast<const std::byte*>(st->buf[st->next])) {
    return CopyH2D(dst, data, stream);
  }
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
  int i = st->next;
  st->next ^= 1;
  if (Result r = R("cuMemcpyHtoDAsync", cu_.cuMemcpyHtoDAsync(dst, st->buf[i], data.size(), s)); !r.ok()) return r;
  return R("cuEventRecord", cu_.cuEventRecord(st->done[i], s));
}
Result CudaBackend::CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) {
  if (Result r = CheckRange(src, size, "device-to-host copy"); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(src), &s); !r.ok()) return r;
  if (Result r = R("cuMemcpyDtoHAsync", cu_.cuMemcpyDtoHAsync(dst, src, size, s)); !r.ok()) return r;
  return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
}
// A chunk of a device-to-host reply is read into staging buffer `slot` of its device's read
// pair by DMA on its stream; the session starts the next chunk's read before it sends this one
// (session.cc, ServeReads), so the DMA of one chunk overlaps the network send of the previous.
bool CudaBackend::StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) {
  CUstream s = nullptr;
  StagingPair* st = nullptr;
  if (size == 0 || size > kStagingBytes || !CheckRange(src, size, "").ok() ||
      !Stream(stream, DevOf(src), &s).ok() || !GetStaging(current_, &st, /*reads=*/true).ok()) {
    return false;
  }
  const int i = slot & 1;
  Read& rd = reads_[i];
  rd = Read{.pair = st, .dev = current_, .size = size, .r = {}};
  rd.r = R("cuMemcpyDtoHAsync", cu_.cuMemcpyDtoHAsync(st->buf[i], src, size, s));
  if (rd.r.ok()) rd.r = R("cuEventRecord", cu_.cuEventRecord(st->done[i], s));
  return true;
}
Result CudaBackend::FinishD2H(int slot, std::span<const std::byte>* data) {
  const int i = slot & 1;
  Read rd = std::exchange(reads_[i], Read{});
  *data = {};
  if (rd.pair == nullptr) return Err(kErrUnknown, fmt::format("FinishD2H: no read in slot {}", i));
  if (!rd.r.ok()) return rd.r;
  if (Result r = Use(rd.dev); !r.ok()) return r;
  if (Result r = R("cuEventSynchronize", cu_.cuEventSynchronize(rd.pair->done[i])); !r.ok()) return r;
  *data = {static_cast<const std::byte*>(rd.pair->buf[i]), rd.size};
  return {};
}
std::span<const std::byte> CudaBackend::HostView(uint64_t, uint64_t) { return {}; }
Result CudaBackend::CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) {
  if (Result r = CheckRange(src, size, "device-to-device copy (source)"); !r.ok()) return r;
  if (Result r = CheckRange(dst, size, "device-to-device copy (destination)"); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(src), &s); !r.ok()) return r;
  return R("cuMemcpyDtoDAsync", cu_.cuMemcpyDtoDAsync(dst, src, size, s));
}
Result CudaBackend::Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) {
  if (Result r = CheckRange(dst, size, "memset"); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
  return R("cuMemsetD8Async", cu_.cuMemsetD8Async(dst, value, size, s));
}
Result CudaBackend::Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width,
                             uint64_t height, uint64_t stream) {
  if (width == 0 || height == 0) return {};
  if (pitch < width) return Err(kErrInvalidValue, "2-D memset: pitch < width");
  if (height - 1 > (UINT64_MAX - width) / pitch) {
    return Err(kErrInvalidValue, fmt::format("2-D memset: {} rows of pitch {} overflow", height, pitch));
  }
  if (Result r = CheckRange(dst, (height - 1) * pitch + width, "2-D memset"); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
  return R("cuMemsetD2D8Async", cu_.cuMemsetD2D8Async(dst, pitch, value, width, height, s));
}
Result CudaBackend::Copy2D(const proto::Memcpy2D& c, std::byte* host_out) {
  auto kind = static_cast<proto::CopyKind>(c.kind);
  CUstream s = nullptr;
  uint64_t devp = kind == proto::CopyKind::kHostToDevice ? c.dst : c.src;
  if (c.width == 0 || c.height == 0) return {};
  // Each device side's rows span (height-1)*pitch + width bytes, which must stay inside one
  // allocation (as on the emulated backend, which checks every row).
  auto span = [&](uint64_t pitch, const char* what, uint64_t* bytes) -> Result {
    if (pitch < c.width) return Err(kErrInvalidValue, fmt::format("2-D copy: {} pitch < width", what));
    if (c.height - 1 > (UINT64_MAX - c.width) / pitch) {
      return Err(kErrInvalidValue, fmt::format("2-D copy: {} rows overflow", what));
    }
    *bytes = (c.height - 1) * pitch + c.width;
    return {};
  };
  uint64_t bytes = 0;
  if (kind != proto::CopyKind::kHostToDevice) {
    if (Result r = span(c.spitch, "source", &bytes); !r.ok()) return r;
    if (Result r = CheckRange(c.src, bytes, "2-D copy (source)"); !r.ok()) return r;
  }
  if (kind != proto::CopyKind::kDeviceToHost) {
    if (Result r = span(c.dpitch, "destination", &bytes); !r.ok()) return r;
    if (Result r = CheckRange(c.dst, bytes, "2-D copy (destination)"); !r.ok()) return r;
  }
  if (Result r = Stream(c.stream, DevOf(devp), &s); !r.ok()) return r;
  CUDA_MEMCPY2D m{};
  m.WidthInBytes = c.width;
  m.Height = c.height;
  if (kind == proto::CopyKind::kHostToDevice) {
    if (c.data.size() != c.width * c.height) return Err(kErrInvalidValue, "2-D copy: packed size");
    m.srcMemoryType = CU_MEMORYTYPE_HOST;
    m.srcHost = c.data.data();
    m.srcPitch = c.width;
  } else {
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m.srcDevice = c.src;
    m.srcPitch = c.spitch;
  }
  if (kind == proto::CopyKind::kDeviceToHost) {
    m.dstMemoryType = CU_MEMORYTYPE_HOST;
    m.dstHost = host_out;
    m.dstPitch = c.width;
  } else {
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m.dstDevice = c.dst;
    m.dstPitch = c.dpitch;
  }
  if (Result r = R("cuMemcpy2DAsync", cu_.cuMemcpy2DAsync(&m, s)); !r.ok()) return r;
  // Device to device stays queued on its stream like CopyD2D; with host memory on one side (the
  // message buffer, the reply's staging) the copy must be done before that memory is reused.
  if (kind == proto::CopyKind::kDeviceToDevice) return {};
  return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
}

}  // namespace gpool::remote::server::cuda
#endif  // GPOOL_HAVE_CUDA_H
