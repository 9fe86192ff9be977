#include "remote/protocol/messages.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace gpool::remote::proto {
namespace {

constexpr OpInfo kOps[] = {
    {"?", false},
    {"Hello", false},
    {"Attach", false},
    {"Ping", false},
    {"GetDeviceProps", false},
    {"GetAttribute", false},
    {"MemGetInfo", false},
    {"Malloc", false},
    {"Free", false},
    {"MemcpyH2D", true},
    {"MemcpyD2H", false},
    {"MemcpyD2D", true},
    {"Memset", true},
    {"Memcpy2D", false},  // always replied to; posted 2-D copies are Memcpy2DAsync
    {"RegisterModule", true},
    {"RegisterFunction", true},
    {"RegisterVar", true},
    {"UnregisterModule", true},
    {"GetParamInfo", false},
    {"Launch", true},
    {"StreamCreate", true},
    {"StreamDestroy", true},
    {"StreamSync", false},
    {"StreamQuery", false},
    {"StreamWaitEvent", true},
    {"EventCreate", true},
    {"EventRecord", true},
    {"EventSync", false},
    {"EventQuery", false},
    {"EventElapsed", false},
    {"EventDestroy", true},
    {"DeviceSync", false},
    {"FuncAttributes", false},
    {"Occupancy", false},
    {"GetSymbol", false},
    {"DeviceReset", false},
    {"DeviceSetLimit", false},
    {"DeviceGetLimit", false},
    {"SetDeviceFlags", false},
    {"GetDeviceFlags", false},
    {"PeerAccess", false},
    {"Memcpy2DAsync", true},  // version 3
    {"Memset2D", true},
    {"FuncSetAttribute", true},
    {"SessionEnd", false},  // server -> client only; version 4
    {"LaunchCooperative", true},  // version 5
    {"GetModuleInfo", false},  // version 6
    {"MemAddressReserve", false},  // version 9
    {"MemAddressFree", false},
    {"MemCreate", false},
    {"MemRelease", false},
    {"MemMap", false},
    {"MemUnmap", false},
    {"MemSetAccess", false},
    {"MemGranularity", false},
};
static_assert(std::size(kOps) == static_cast<size_t>(Op::kMaxOp), "OpInfo table out of date");

}  // namespace

const OpInfo* GetOpInfo(uint16_t op) {
  op &= static_cast<uint16_t>(~kReply);
  if (op < static_cast<uint16_t>(Op::kHello) || op >= static_cast<uint16_t>(Op::kMaxOp)) {
    return nullptr;
  }
  return &kOps[op];
}

const char* OpName(uint16_t op) {
  const OpInfo* info = GetOpInfo(op);
  return info ? info->name : "unknown-op";
}

// Little-endian stores (see wire::Writer::Put) at `p`, which the caller has appended room for.
namespace {
template <class T>
std::byte* Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
  return p + sizeof v;
}
}  // namespace

// The header and frame headers go in one append each, not a Put per field: every Put reloads
// the buffer's size and room after its store (a std::byte store may alias them).
void BatchWriter::Reset() {
  buf_.clear();
  frames_ = 0;
  std::byte* p = buf_.Append(kHeader);
  p = Store<uint32_t>(p, kMagic);
  p = Store<uint16_t>(p, kVersion);
  Store<uint16_t>(p, 0);  // the frame count, patched by Finish
}

void BatchWriter::Clamp(std::string& text) {
  constexpr std::string_view kCut = " ... (cut)";
  text.resize(kMaxReplyTextBytes - kCut.size());
  text.append(kCut);
}

void BatchWriter::PutHead(const ReplyHead& head) {
  const size_t n = 16 + head.message.size() + head.async_message.size();
  std::byte* p = buf_.Append(n);
  p = Store<int32_t>(p, head.error);
  p = Store<uint32_t>(p, static_cast<uint32_t>(head.message.size()));
  if (!head.message.empty()) std::memcpy(p, head.message.data(), head.message.size());
  p += head.message.size();
  p = Store<int32_t>(p, head.async_error);
  p = Store<uint32_t>(p, static_cast<uint32_t>(head.async_message.size()));
  if (!head.async_message.empty()) {
    std::memcpy(p, head.async_message.data(), head.async_message.size());
  }
}

size_t BatchWriter::BeginFrame(uint16_t op) {
  ++added_;
  const size_t at = buf_.size();
  std::byte* p = buf_.Append(kFrameHeader);
  p = Store<uint16_t>(p, op);
  p = Store<uint16_t>(p, 0);  // flags
  Store<uint32_t>(p, 0);      // the length, patched by EndFrame
  return at;
}

void BatchWriter::PatchLength(size_t at, size_t len) {
  uint32_t l = static_cast<uint32_t>(len);
  std::memcpy(buf_.data() + at + 4, &l, 4);
}

wire::ByteSpan BatchWriter::Finish() {
  uint16_t n = static_cast<uint16_t>(frames_);
  std::memcpy(buf_.data() + 6, &n, 2);
  return wire::ByteSpan(buf_.data(), buf_.size());
}

namespace {

// ParseMessage for a well-formed message, the one every call and reply is: plain loads with one
// bounds check per frame header, no Reader (its per-field checks and Status were ~15% of the
// server's CPU per no-op call, bench/call_cpu_bench). False on anything wrong, leaving the
// message to ParseMessageChecked, which says what.
bool ParseWellFormed(wire::ByteSpan message, std::vector<Frame>* frames, size_t detached_tail) {
  const std::byte* p = message.data();
  const size_t size = message.size();
  if (size < 8) return false;
  uint32_t magic;
  uint16_t version, count;
  std::memcpy(&magic, p, 4);
  std::memcpy(&version, p + 4, 2);
  std::memcpy(&count, p + 6, 2);
  if (magic != kMagic || version != kVersion || count == 0) return false;
  size_t pos = 8;
  for (uint16_t i = 0; i < count; ++i) {
    if (size - pos < 8) return false;
    uint16_t op, flags;
    uint32_t len;
    std::memcpy(&op, p + pos, 2);
    std::memcpy(&flags, p + pos + 2, 2);
    std::memcpy(&len, p + pos + 4, 4);
    pos += 8;
    const size_t detached = i + 1 == count ? detached_tail : 0;
    if (flags != 0 || GetOpInfo(op) == nullptr || len > size - pos + detached || len < detached) {
      return false;
    }
    frames->push_back(Frame{.op = op, .payload = message.subspan(pos, len - detached),
                            .detached = detached});
    pos += len - detached;
  }
  return pos == size;
}

}  // namespace

// ParseMessage's checks one by one, naming what is wrong.
Status ParseMessageChecked(wire::ByteSpan message, std::vector<Frame>* frames,
                           size_t detached_tail) {
  frames->clear();
  wire::Reader r(message);
  uint32_t magic = r.Get<uint32_t>("magic");
  uint16_t version = r.Get<uint16_t>("version");
  uint16_t count = r.Get<uint16_t>("frames");
  if (!r.ok()) return r.status().WithContext("message header");
  if (magic != kMagic) {
    return Status::InvalidArgument(fmt::format("bad magic 0x{:08x} (not a gpool peer?)", magic));
  }
  if (version != kVersion) {
    return Status::InvalidArgument(
        fmt::format("protocol version {} not supported (this side speaks {})", version, kVersion));
  }
  if (count == 0) return Status::InvalidArgument("message with no frames");
  frames->reserve(count);
  for (uint16_t i = 0; i < count; ++i) {
    Frame f;
    f.op = r.Get<uint16_t>("op");
    uint16_t flags = r.Get<uint16_t>("flags");
    uint32_t len = r.Get<uint32_t>("length");
    if (!r.ok()) return r.status().WithContext(fmt::format("frame {}", i));
    if (GetOpInfo(f.op) == nullptr) {
      return Status::InvalidArgument(fmt::format("frame {}: unknown op {}", i, f.op));
    }
    if (flags != 0) {
      return Status::InvalidArgument(fmt::format("frame {}: reserved flags 0x{:x} set", i, flags));
    }
    size_t detached = i + 1 == count ? detached_tail : 0;
    if (len > r.remaining() + detached || len < detached) {
      return Status::InvalidArgument(
          fmt::format("frame {} ({}): length {} exceeds the {} bytes left", i, OpName(f.op), len,
                      r.remaining() + detached));
    }
    f.payload = message.subspan(r.position(), len - detached);
    f.detached = detached;
    r.Skip(len - detached, "payload");
    frames->push_back(f);
  }
  if (r.remaining() != 0) {
    return Status::InvalidArgument(fmt::format("{} trailing bytes after the last frame",
                                               r.remaining()));
  }
  return Status::Ok();
}

Status ParseMessage(wire::ByteSpan message, std::vector<Frame>* frames, size_t detached_tail) {
  frames->clear();
  if (ParseWellFormed(message, frames, detached_tail)) [[likely]] return Status::Ok();
  Status s = ParseMessageChecked(message, frames, detached_tail);
  // Both parsers take the same messages (protocol_test checks each refusal through both).
  if (s.ok()) s = Status::Internal("ParseMessage: the fast parser refused a message the checked one took");
  return s;
}

StatusOr<std::vector<Frame>> ParseMessage(wire::ByteSpan message, size_t detached_tail) {
  std::vector<Frame> frames;
  GPOOL_RETURN_IF_ERROR(ParseMessage(message, &frames, detached_tail));
  return frames;
}

}  // namespace gpool::remote::proto
