// Byte-level encoding for gpool's remoting protocol: little-endian fixed-width integers,
// length-prefixed strings and blobs.
//
// The format is gpool's own and never copies a CUDA struct's memory layout, so a client and a
// server built against different CUDA headers still agree. Reader checks every length against the
// bytes left and remembers the first failure (with the field offset), so decoding a malformed
// frame yields an error, never an out-of-bounds read. Thread safety: none; one Writer/Reader per
// thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpool::remote::wire {

using ByteSpan = std::span<const std::byte>;

// A growable byte buffer for encoding. Appending makes room without initialising it: a
// std::vector<std::byte> zero-fills on every resize, an out-of-line call per field encoded (~1%
// of a no-op round trip's CPU over shared memory, where one costs ~1.5 us). clear() keeps the
// capacity, so a reused buffer stops allocating. Thread safety: none.
class Buffer {
 public:
  Buffer() = default;
  // Moves leave the source empty, with no room (a defaulted move kept its size and capacity
  // over a null pointer).
  Buffer(Buffer&& o) noexcept
      : data_(std::move(o.data_)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    return *this;
  }

  // Room for `n` more bytes at the end, uninitialised, counted in size() from now on.
  std::byte* Append(size_t n) {
    if (capacity_ - size_ < n) Grow(n);
    std::byte* p = data_.get() + size_;
    size_ += n;
    return p;
  }
  void clear() { size_ = 0; }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  operator ByteSpan() const { return {data_.get(), size_}; }  // NOLINT: it reads as its bytes

 private:
  void Grow(size_t n);

  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Appends encoded values to a Buffer it does not own.
class Writer {
 public:
  explicit Writer(Buffer* out) : out_(out) {}

  template <typename T>
    requires std::is_integral_v<T> || std::is_floating_point_v<T> || std::is_enum_v<T>
  void Put(T v) {
    // x86-64 and aarch64 are little-endian; a big-endian port would swap here.
    static_assert(std::endian::native == std::endian::little);
    std::memcpy(out_->Append(sizeof(T)), &v, sizeof(T));
  }
  void PutString(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    PutRaw(s.data(), s.size());
  }
  void PutBlob(ByteSpan b) {
    Put<uint64_t>(b.size());
    PutRaw(b.data(), b.size());
  }
  void PutRaw(const void* p, size_t n) {
    if (n) std::memcpy(out_->Append(n), p, n);
  }
  size_t size() const { return out_->size(); }

 private:
  Buffer* out_;
};

// Decodes from a byte span it does not own. After the first error every Get returns zero values
// and status() reports what failed where.
class Reader {
 public:
  explicit Reader(ByteSpan in) : in_(in) {}

  template <typename T>
    requires std::is_integral_v<T> || std::is_floating_point_v<T> || std::is_enum_v<T>
  T Get(const char* field) {
    T v{};
    if (!Need(sizeof(T), field)) return v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A length-prefixed string, into *out, reusing its storage (an empty one, as replies mostly
  // carry, costs no temporary); on failure *out is cleared.
  void GetStringInto(std::string* out, const char* field, size_t max_len = 1 << 20);
  // Returns a view into the input (no copy); valid while the input lives.
  ByteSpan GetBlob(const char* field);

  void Skip(size_t n, const char* field) {
    if (Need(n, field)) pos_ += n;
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }
  void Fail(std::string message);

 private:
  // Whether `n` more bytes are there (and nothing failed yet); else records the failure.
  bool Need(size_t n, const char* field) {
    if (status_.ok() && n <= remaining()) [[likely]] return true;
    return NeedFailed(n, field);
  }
  bool NeedFailed(size_t n, const char* field);

  ByteSpan in_;
  size_t pos_ = 0;
  Status status_;
};

}  // namespace gpool::remote::wire
