// The free parts of an address range, start -> size, for the emulated GPU's first-fit allocators
// (device memory in emulated_backend.cc, virtual address reservations in emulated_vmm.cc): a
// range is carved out of the free one that holds it, and one given back merges with its free
// neighbours, so the map never holds two adjacent ranges. Thread safety: none (the owner locks).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace gpool::remote::server {

class FreeRanges {
 public:
  // Adds [start, start+size) as free; it must not touch a free range already there.
  void Add(uint64_t start, uint64_t size) {
    if (size) free_[start] = size;
  }
  // The lowest address, aligned to `align` (a power of two; 1: any), at which `size` bytes fit in
  // one free range, scanning from the lowest; 0 when none does.
  uint64_t FindFirst(uint64_t size, uint64_t align) const {
    for (const auto& [start, len] : free_) {
      uint64_t at = (start + align - 1) / align * align;
      if (at + size <= start + len) return at;
    }
    return 0;
  }
  // Whether [at, at+size) lies inside one free range.
  bool Holds(uint64_t at, uint64_t size) const {
    auto it = free_.upper_bound(at);
    if (it == free_.begin()) return false;
    --it;
    return at >= it->first && at + size <= it->first + it->second;
  }
  // Takes [at, at+size) out of the free range that holds it (Holds must be true).
  void Take(uint64_t at, uint64_t size) {
    auto it = std::prev(free_.upper_bound(at));
    uint64_t start = it->first, len = it->second;
    free_.erase(it);
    if (at > start) free_[start] = at - start;
    if (at + size < start + len) free_[at + size] = start + len - (at + size);
  }
  // Gives [start, start+size) back, merged with the free ranges right before and after it.
  void Give(uint64_t start, uint64_t size) {
    uint64_t len = size;
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + size) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        len += prev->second;
        start = prev->first;
        free_.erase(prev);
      }
    }
    free_[start] = len;
  }
  const std::map<uint64_t, uint64_t>& ranges() const { return free_; }

 private:
  std::map<uint64_t, uint64_t> free_;
};

}  // namespace gpool::remote::server
