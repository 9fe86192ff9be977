#include "remote/protocol/wire.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpool::remote::wire {

void Buffer::Grow(size_t n) {
  const size_t capacity = std::max({2 * capacity_, size_ + n, size_t{256}});
  auto grown = std::make_unique_for_overwrite<std::byte[]>(capacity);
  if (size_ != 0) std::memcpy(grown.get(), data_.get(), size_);
  data_ = std::move(grown);
  capacity_ = capacity;
}

bool Reader::NeedFailed(size_t n, const char* field) {
  if (!status_.ok()) return false;
  Fail(fmt::format("field '{}' needs {} bytes, {} left", field, n, remaining()));
  return false;
}

void Reader::Fail(std::string message) {
  if (!status_.ok()) return;
  status_ = Status::InvalidArgument(fmt::format("at byte {}: {}", pos_, message));
}

void Reader::GetStringInto(std::string* out, const char* field, size_t max_len) {
  const uint32_t n = Get<uint32_t>(field);
  if (n == 0) {  // empty (most replies' texts), or the length could not be read (status says)
    out->clear();
    return;
  }
  if (ok() && n > max_len) {
    Fail(fmt::format("string '{}' of {} bytes exceeds limit {}", field, n, max_len));
  }
  if (!ok() || !Need(n, field)) {
    out->clear();
    return;
  }
  out->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
  pos_ += n;
}

ByteSpan Reader::GetBlob(const char* field) {
  uint64_t n = Get<uint64_t>(field);
  if (!ok() || !Need(n, field)) return {};
  ByteSpan b = in_.subspan(pos_, n);
  pos_ += n;
  return b;
}

}  // namespace gpool::remote::wire
