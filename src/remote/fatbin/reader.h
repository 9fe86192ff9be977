// Bounds-checked little-endian reads from an untrusted byte buffer (internal to fatbin parsing).
// Every read names the layer ("fatbin", "cubin") and offset in its error. Thread-compatible.
#pragma once

#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"

namespace gpool::remote::fatbin {

class Reader {
 public:
  Reader(Bytes data, std::string_view what) : data_(data), what_(what) {}

  size_t size() const { return data_.size(); }
  bool Has(size_t offset, size_t n) const { return offset <= data_.size() && n <= data_.size() - offset; }

  Status Need(size_t offset, size_t n) const {
    if (Has(offset, n)) return Status::Ok();
    return Status::InvalidArgument(fmt::format("{}: {} bytes at offset {} run past the end ({})",
                                               what_, n, offset, data_.size()));
  }
  template <typename T>
  Status Get(size_t offset, T* out) const {
    GPOOL_RETURN_IF_ERROR(Need(offset, sizeof(T)));
    std::memcpy(out, data_.data() + offset, sizeof(T));  // host is little-endian like the format
    return Status::Ok();
  }
  Status U8(size_t o, uint8_t* v) const { return Get(o, v); }
  Status U16(size_t o, uint16_t* v) const { return Get(o, v); }
  Status U32(size_t o, uint32_t* v) const { return Get(o, v); }
  Status U64(size_t o, uint64_t* v) const { return Get(o, v); }
  StatusOr<Bytes> Sub(size_t offset, size_t n) const {
    GPOOL_RETURN_IF_ERROR(Need(offset, n));
    return data_.subspan(offset, n);
  }

 private:
  Bytes data_;
  std::string_view what_;
};

}  // namespace gpool::remote::fatbin
