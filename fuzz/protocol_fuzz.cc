// Fuzzes the remoting protocol decoder: message framing, then every op's body (as request and as
// reply), exactly as a GPU server worker and a client decode what they receive. Any input must
// give an error or a value, never a crash, hang or unbounded allocation.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "remote/protocol/messages.h"

namespace {

using namespace gpool::remote::proto;  // NOLINT

template <class Msg>
void Body(const Frame& f) {
  Msg m;
  (void)DecodeBody(f, &m);
  ReplyHead h;
  Msg r;
  (void)DecodeReply(f, &h, &r);
}

void DecodeAs(const Frame& f) {
  switch (static_cast<Op>(f.op & ~kReply)) {
    case Op::kHello: Body<Hello>(f); Body<HelloReply>(f); break;
    case Op::kAttach: Body<Attach>(f); break;
    case Op::kGetDeviceProps: Body<GetDeviceProps>(f); Body<DeviceProps>(f); break;
    case Op::kGetAttribute: Body<GetAttribute>(f); break;
    case Op::kMalloc: Body<Malloc>(f); break;
    case Op::kMemcpyH2D: Body<MemcpyH2D>(f); break;
    case Op::kMemcpyD2H: Body<MemcpyD2H>(f); Body<Data>(f); break;
    case Op::kMemcpy2D: Body<Memcpy2D>(f); break;
    case Op::kRegisterModule: Body<RegisterModule>(f); break;
    case Op::kRegisterFunction: Body<RegisterFunction>(f); break;
    case Op::kRegisterVar: Body<RegisterVar>(f); break;
    case Op::kUnregisterModule: Body<UnregisterModule>(f); break;
    case Op::kDeviceReset: Body<DeviceReset>(f); break;
    case Op::kGetParamInfo: Body<GetParamInfo>(f); Body<ParamInfo>(f); break;
    case Op::kLaunch: Body<Launch>(f); break;
    case Op::kLaunchCooperative: Body<LaunchCooperative>(f); break;
    case Op::kFuncAttributes: Body<FuncAttrs>(f); break;
    case Op::kEventElapsed: Body<EventElapsed>(f); Body<FloatValue>(f); break;
    case Op::kDeviceSetLimit: Body<DeviceSetLimit>(f); break;
    case Op::kDeviceGetLimit: Body<DeviceGetLimit>(f); Body<U64Value>(f); break;
    case Op::kSetDeviceFlags: Body<SetDeviceFlags>(f); break;
    case Op::kGetDeviceFlags: Body<GetDeviceFlags>(f); Body<U64Value>(f); break;
    case Op::kPeerAccess: Body<PeerAccess>(f); break;
    case Op::kMemcpy2DAsync: Body<Memcpy2DAsync>(f); break;
    case Op::kMemset2D: Body<Memset2D>(f); break;
    case Op::kGetSymbol: Body<GetSymbol>(f); Body<Symbol>(f); break;
    case Op::kGetModuleInfo: Body<GetModuleInfo>(f); Body<ModuleInfo>(f); break;
    case Op::kMemAddressReserve: Body<MemAddressReserve>(f); Body<Pointer>(f); break;
    case Op::kMemAddressFree: Body<MemAddressFree>(f); break;
    case Op::kMemCreate: Body<MemCreate>(f); Body<U64Value>(f); break;
    case Op::kMemRelease: Body<MemRelease>(f); break;
    case Op::kMemMap: Body<MemMap>(f); break;
    case Op::kMemUnmap: Body<MemUnmap>(f); break;
    case Op::kMemSetAccess: Body<MemSetAccess>(f); break;
    case Op::kMemGranularity: Body<MemGranularity>(f); Body<U64Value>(f); break;
    default: Body<StreamWaitEvent>(f); Body<Memset>(f); Body<Symbol>(f); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size);
  auto frames = ParseMessage(bytes);
  // The fast parse and the checked one must take and refuse the same messages, alike.
  std::vector<Frame> checked;
  gpool::Status cs = ParseMessageChecked(bytes, &checked);
  if (cs.ok() != frames.ok() || frames.status().code() == gpool::StatusCode::kInternal) {
    __builtin_trap();
  }
  if (frames.ok()) {
    if (checked.size() != frames->size()) __builtin_trap();
    for (size_t i = 0; i < checked.size(); ++i) {
      const Frame& a = checked[i];
      const Frame& b = (*frames)[i];
      if (a.op != b.op || a.payload.data() != b.payload.data() ||
          a.payload.size() != b.payload.size() || a.detached != b.detached) {
        __builtin_trap();
      }
    }
  }
  if (frames.ok()) {
    for (const Frame& f : *frames) DecodeAs(f);
  }
  // Also decode the raw input as a single frame of each kind, skipping the framing checks.
  for (uint16_t op = 1; op < static_cast<uint16_t>(Op::kMaxOp); ++op) DecodeAs(Frame{op, bytes});
  return 0;
}
