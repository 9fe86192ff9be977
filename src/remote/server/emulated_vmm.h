// Virtual memory management of the emulated GPU (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess and their inverses), done with the host's own virtual memory so that it behaves
// as the driver's does:
// - address space is one PROT_NONE window (MAP_NORESERVE, mapped at the first reservation, at a
//   per-server hint so that two aggregated servers hand out distinct addresses); a reservation is
//   a part of it;
// - a handle is a memfd of its size (physical memory: pages appear when touched);
// - a map is an mmap(MAP_SHARED | MAP_FIXED) of the memfd onto the reservation, PROT_NONE until
//   SetAccess gives read-write (a mapping starts with no access, as on a GPU), so a CPU kernel
//   and the backend's copies see the memory at those addresses, and two mappings of one handle
//   alias; an unmap puts the reservation's PROT_NONE anonymous pages back.
// The rules are the driver's: sizes, addresses and offsets in multiples of kGranularity (2 MiB,
// NVIDIA GPUs' minimum), map offset 0, maps only onto unmapped reserved space, unmaps and access
// changes of whole mappings, a handle's memory freed once it is released and unmapped
// everywhere. Limits: read-only access and access from another device are refused
// (kErrNotSupported, naming them); a CPU kernel that reaches past what is mapped faults the
// session's worker (the backend only checks pointer parameters, Backend::Launch).
// Thread safety: none; the backend's one thread.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "remote/server/backend.h"
#include "remote/server/free_ranges.h"

namespace gpool::remote::server {

class EmulatedVmm {
 public:
  static constexpr uint64_t kGranularity = uint64_t{2} << 20;

  EmulatedVmm(uint64_t window_hint, uint64_t window_bytes)
      : hint_(window_hint), window_bytes_(window_bytes) {}
  ~EmulatedVmm();
  EmulatedVmm(const EmulatedVmm&) = delete;
  EmulatedVmm& operator=(const EmulatedVmm&) = delete;

  Result Reserve(uint64_t size, uint64_t alignment, uint64_t hint, uint64_t* ptr);
  Result FreeReservation(uint64_t ptr, uint64_t size);
  Result Create(uint32_t dev, uint64_t size, uint64_t* handle);
  // *gone: the handles whose memory the call freed (released, and mapped nowhere now).
  Result Release(uint64_t handle, std::vector<uint64_t>* gone);
  Result Map(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle);
  Result Unmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone);
  Result SetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags);

  // Whether `p` lies in a reservation (then Check, not the allocations, judges a range at p).
  bool Reserved(uint64_t p) const;
  // Whether [p, p+n) is mapped with read-write access throughout (several mappings back to back
  // count as one range, as on a GPU); the error names `what`, the range and the first byte that
  // is not, and whether it is unmapped or without access.
  Result Check(uint64_t p, uint64_t n, const char* what) const;
  // Physical memory of device `dev` held by handles (released ones until unmapped).
  uint64_t bytes_on(uint32_t dev) const;

 private:
  struct Phys {
    uint32_t dev = 0;
    uint64_t size = 0;
    int fd = -1;
    int maps = 0;
    bool released = false;
  };
  struct Mapping {
    uint64_t size = 0;
    uint64_t handle = 0;
    uint32_t access = 0;  // CUmemAccess_flags: 0 none, 3 read-write
  };
  Result EnsureWindow();
  // The reservation holding [p, p+n), or reserved_.end().
  std::map<uint64_t, uint64_t>::const_iterator ReservationOf(uint64_t p, uint64_t n) const;
  // The mappings that make up exactly [p, p+n), in order; an error naming `call` otherwise.
  Result WholeMappings(const char* call, uint64_t p, uint64_t n,
                       std::vector<std::map<uint64_t, Mapping>::iterator>* out);
  // Frees a handle's memory once it is released and mapped nowhere, appending it to *gone.
  void MaybeFree(std::map<uint64_t, Phys>::iterator it, std::vector<uint64_t>* gone);

  uint64_t hint_, window_bytes_;
  uint64_t base_ = 0;  // the window, once mapped
  FreeRanges free_;                        // the window's unreserved ranges
  std::map<uint64_t, uint64_t> reserved_;  // start -> size
  std::map<uint64_t, Phys> phys_;          // by handle
  std::map<uint64_t, Mapping> maps_;       // by start address
  std::map<uint32_t, uint64_t> dev_bytes_;
  uint64_t next_handle_ = 1;
};

}  // namespace gpool::remote::server
