#include "remote/server/emulated_vmm.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::server {

namespace {
constexpr uint64_t kVmmPage = 4096;
// (Not backend.h's Err: that lives in the emulated backend, which the emulated CUDA driver, the
// other user of this file, does not link.)
Result VmmErr(int32_t code, std::string message) { return Result{code, std::move(message)}; }
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

EmulatedVmm::~EmulatedVmm() {
  for (auto& [h, p] : phys_) close(p.fd);
  if (base_ != 0) munmap(reinterpret_cast<void*>(base_), window_bytes_);
}

Result EmulatedVmm::EnsureWindow() {
  if (base_ != 0) return {};
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  void* hint = reinterpret_cast<void*>(hint_);
#ifdef MAP_FIXED_NOREPLACE
  if (hint) flags |= MAP_FIXED_NOREPLACE;
#endif
  void* at = mmap(hint, window_bytes_, PROT_NONE, flags, -1, 0);
  if (at == MAP_FAILED && hint) {
    at = mmap(nullptr, window_bytes_, PROT_NONE, flags & ~MAP_FIXED_NOREPLACE, -1, 0);
  }
  if (at == MAP_FAILED) {
    return VmmErr(kErrMemoryAllocation, fmt::format("cannot map {} bytes of address space for "
                                                 "reservations: {}", window_bytes_,
                                                 std::strerror(errno)));
  }
  base_ = reinterpret_cast<uint64_t>(at);
  // Reservations start granule-aligned; the kernel's choice need not be.
  uint64_t first = AlignUp(base_, kGranularity);
  if (first < base_ + window_bytes_) free_.Add(first, base_ + window_bytes_ - first);
  return {};
}

Result EmulatedVmm::Reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* ptr) {
  if (size == 0 || size % kVmmPage != 0) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemAddressReserve: size {} is not a positive "
                                             "multiple of the page size ({})", size, kVmmPage));
  }
  if (alignment & (alignment - 1)) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemAddressReserve: alignment {} is not a power "
                                             "of two or 0", alignment));
  }
  if (Result r = EnsureWindow(); !r.ok()) return r;
  const uint64_t align = std::max(alignment, kGranularity);
  auto carve = [&](uint64_t at) {
    free_.Take(at, size);
    reserved_[at] = size;
    *ptr = at;
    return Result{};
  };
  // The hint is honoured when that space is free (the driver treats it as a hint too).
  if (hint != 0 && hint % align == 0 && free_.Holds(hint, size)) return carve(hint);
  if (uint64_t at = free_.FindFirst(size, align); at != 0) return carve(at);
  return VmmErr(kErrMemoryAllocation,
             fmt::format("cuMemAddressReserve: no {} bytes of address space left (aligned to {}) "
                         "in the emulated server's {}-byte window", size, align, window_bytes_));
}

Result EmulatedVmm::FreeReservation(uint64_t ptr, uint64_t size) {
  auto it = reserved_.find(ptr);
  if (it == reserved_.end() || it->second != size) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemAddressFree(0x{:x}, {}): not the start and "
                                             "size of a reservation", ptr, size));
  }
  if (auto m = maps_.lower_bound(ptr); m != maps_.end() && m->first < ptr + size) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemAddressFree(0x{:x}, {}): 0x{:x} is still "
                                             "mapped (cuMemUnmap it first)", ptr, size, m->first));
  }
  reserved_.erase(it);
  free_.Give(ptr, size);
  return {};
}

Result EmulatedVmm::Create(uint32_t dev, uint64_t size, uint64_t* handle) {
  if (size == 0 || size % kGranularity != 0) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemCreate: size {} is not a positive multiple of "
                                             "the granularity ({})", size, kGranularity));
  }
  int fd = memfd_create("gpool-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    return VmmErr(kErrMemoryAllocation, fmt::format("cuMemCreate({} bytes on device {}): memfd: {}",
                                                 size, dev, std::strerror(err)));
  }
  *handle = next_handle_++;
  phys_[*handle] = Phys{.dev = dev, .size = size, .fd = fd};
  dev_bytes_[dev] += size;
  return {};
}

void EmulatedVmm::MaybeFree(std::map<uint64_t, Phys>::iterator it, std::vector<uint64_t>* gone) {
  if (!it->second.released || it->second.maps != 0) return;
  close(it->second.fd);
  dev_bytes_[it->second.dev] -= it->second.size;
  gone->push_back(it->first);
  phys_.erase(it);
}

Result EmulatedVmm::Release(uint64_t handle, std::vector<uint64_t>* gone) {
  auto it = phys_.find(handle);
  if (it == phys_.end() || it->second.released) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemRelease: handle {} is not a live allocation "
                                             "handle (never created, or released)", handle));
  }
  it->second.released = true;
  MaybeFree(it, gone);
  return {};
}

std::map<uint64_t, uint64_t>::const_iterator EmulatedVmm::ReservationOf(uint64_t p,
                                                                         uint64_t n) const {
  auto it = reserved_.upper_bound(p);
  if (it == reserved_.begin()) return reserved_.end();
  --it;
  if (p < it->first || p - it->first > it->second || n > it->second - (p - it->first)) {
    return reserved_.end();
  }
  return it;
}

bool EmulatedVmm::Reserved(uint64_t p) const { return ReservationOf(p, 1) != reserved_.end(); }

Result EmulatedVmm::Map(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) {
  if (offset != 0) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap: offset {}: must be 0 (the driver's rule: "
                                             "currently unused, must be zero)", offset));
  }
  if (size == 0 || size % kGranularity != 0 || ptr % kGranularity != 0) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap(0x{:x}, {}): address and size must be "
                                             "multiples of the granularity ({}), size positive",
                                             ptr, size, kGranularity));
  }
  auto h = phys_.find(handle);
  if (h == phys_.end() || h->second.released) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap: handle {} is not a live allocation handle",
                                             handle));
  }
  if (size > h->second.size) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap: size {} exceeds the allocation's {} bytes",
                                             size, h->second.size));
  }
  if (ReservationOf(ptr, size) == reserved_.end()) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap(0x{:x}, {}): not inside one reservation "
                                             "(cuMemAddressReserve)", ptr, size));
  }
  auto next = maps_.lower_bound(ptr);
  bool overlap = next != maps_.end() && next->first < ptr + size;
  if (next != maps_.begin()) {
    auto prev = std::prev(next);
    overlap |= prev->first + prev->second.size > ptr;
  }
  if (overlap) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemMap(0x{:x}, {}): part of the range is already "
                                             "mapped (cuMemUnmap it first)", ptr, size));
  }
  void* at = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                  h->second.fd, 0);
  if (at == MAP_FAILED) {
    return VmmErr(kErrMemoryAllocation, fmt::format("cuMemMap(0x{:x}, {}): mmap: {}", ptr, size,
                                                 std::strerror(errno)));
  }
  maps_[ptr] = Mapping{.size = size, .handle = handle, .access = 0};
  ++h->second.maps;
  return {};
}

Result EmulatedVmm::WholeMappings(const char* call, uint64_t p, uint64_t n,
                                  std::vector<std::map<uint64_t, Mapping>::iterator>* out) {
  out->clear();
  if (n == 0) return VmmErr(kErrInvalidValue, fmt::format("{}(0x{:x}, 0): size 0", call, p));
  uint64_t at = p;
  auto it = maps_.find(p);
  while (at < p + n) {
    if (it == maps_.end() || it->first != at) {
      return VmmErr(kErrInvalidValue,
                 fmt::format("{}(0x{:x}, {}): the range must be whole mappings back to back; "
                             "0x{:x} does not start one", call, p, n, at));
    }
    if (it->first + it->second.size > p + n) {
      return VmmErr(kErrInvalidValue,
                 fmt::format("{}(0x{:x}, {}): ends inside the mapping at 0x{:x} (of {} bytes); "
                             "only whole mappings can be changed", call, p, n, it->first,
                             it->second.size));
    }
    out->push_back(it);
    at += it->second.size;
    ++it;
  }
  return {};
}

Result EmulatedVmm::Unmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) {
  std::vector<std::map<uint64_t, Mapping>::iterator> ms;
  if (Result r = WholeMappings("cuMemUnmap", ptr, size, &ms); !r.ok()) return r;
  for (auto m : ms) {
    // The reservation's own pages back: no access, no memory.
    void* at = mmap(reinterpret_cast<void*>(m->first), m->second.size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (at == MAP_FAILED) {
      return VmmErr(kErrUnknown, fmt::format("cuMemUnmap(0x{:x}): mmap: {}", m->first,
                                          std::strerror(errno)));
    }
    auto h = phys_.find(m->second.handle);
    --h->second.maps;
    MaybeFree(h, gone);
    maps_.erase(m);
  }
  return {};
}

Result EmulatedVmm::SetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) {
  constexpr uint32_t kNone = 0, kRead = 1, kReadWrite = 3;
  if (flags == kRead) {
    return VmmErr(kErrNotSupported, "cuMemSetAccess: read-only access (CU_MEM_ACCESS_FLAGS_PROT_READ) "
                                 "is not emulated; ask for read-write");
  }
  if (flags != kNone && flags != kReadWrite) {
    return VmmErr(kErrInvalidValue, fmt::format("cuMemSetAccess: flags {} (want 0, 1 or 3)", flags));
  }
  std::vector<std::map<uint64_t, Mapping>::iterator> ms;
  if (Result r = WholeMappings("cuMemSetAccess", ptr, size, &ms); !r.ok()) return r;
  for (auto m : ms) {
    uint32_t owner = phys_.at(m->second.handle).dev;
    if (owner != dev) {
      return VmmErr(kErrNotSupported,
                 fmt::format("cuMemSetAccess: access for device {} to memory of device {} at "
                             "0x{:x} (peer access to mapped memory) is not emulated", dev, owner,
                             m->first));
    }
  }
  for (auto m : ms) {
    int prot = flags == kReadWrite ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (mprotect(reinterpret_cast<void*>(m->first), m->second.size, prot) != 0) {
      return VmmErr(kErrUnknown, fmt::format("cuMemSetAccess(0x{:x}): mprotect: {}", m->first,
                                          std::strerror(errno)));
    }
    m->second.access = flags;
  }
  return {};
}

Result EmulatedVmm::Check(uint64_t p, uint64_t n, const char* what) const {
  if (n == 0) return {};
  uint64_t at = p;
  auto it = maps_.upper_bound(p);
  if (it != maps_.begin()) --it;
  while (at < p + n) {
    if (it == maps_.end() || it->first > at || it->first + it->second.size <= at) {
      return VmmErr(kErrInvalidValue,
                 fmt::format("{}: device range 0x{:x}+{}: 0x{:x} is reserved address space with "
                             "nothing mapped (cuMemMap)", what, p, n, at));
    }
    if (it->second.access != 3) {
      return VmmErr(kErrInvalidValue,
                 fmt::format("{}: device range 0x{:x}+{}: 0x{:x} is mapped without access "
                             "(cuMemSetAccess)", what, p, n, at));
    }
    at = it->first + it->second.size;
    ++it;
  }
  return {};
}

uint64_t EmulatedVmm::bytes_on(uint32_t dev) const {
  auto it = dev_bytes_.find(dev);
  return it == dev_bytes_.end() ? 0 : it->second;
}

}  // namespace gpool::remote::server
