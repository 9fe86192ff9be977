// gpool's remoting protocol (version 9; see kVersion): operations, message layouts, framing.
//
// One transport message carries a batch: a header {magic u32 'GPR1', version u16, frames u16}
// followed by frames {op u16, flags u16, length u32, payload}. Batching lets the client send a
// start-up registration storm, or thousands of launches, in one write. A request whose op has
// kAsync in OpInfo gets no reply; its error is kept by the server and returned, as
// ReplyHead::async_error, with the next reply (CUDA reports asynchronous errors at the next
// synchronizing call the same way). A synchronous request gets exactly one reply frame, op|kReply,
// in its own message, in request order.
//
// Every field is spelled out below; none is a copied CUDA struct, so layouts of cudaDeviceProp
// and friends may change without breaking the wire. Error codes are CUDA runtime error numbers
// (cudaError_t values, stable across releases). Device pointers are the server's 64-bit
// addresses; stream and event ids are chosen by the client (0 = the device's default stream) so
// creating one needs no round trip.
//
// Decode* functions check lengths, counts and enum ranges and return InvalidArgument naming the
// op and field; the server closes only the offending session. The protocol is meant to grow to
// driver-API remoting (cuModule*, cuGetProcAddress) by adding ops, never by changing these.
// Thread safety: plain values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "remote/protocol/wire.h"

namespace gpool::remote::proto {

inline constexpr uint32_t kMagic = 0x31525047;  // "GPR1" little-endian
// Version 2 added DeviceSetLimit, DeviceGetLimit, SetDeviceFlags, GetDeviceFlags and PeerAccess;
// version 3 Memcpy2DAsync and Memset2D (2-D copies to the device and 2-D memsets, posted) and
// FuncSetAttribute; version 4 SessionEnd (the server ends a session whose lease expired);
// version 5 LaunchCooperative; version 6 GetModuleInfo (a module's kernel layouts and variable
// addresses in one round trip) and the server-local `device` in GetSymbol and GetModuleInfo (a
// module's variables exist once per device; changed in place before version 6 shipped, so no
// version 7); version 7 bare read replies (kBareReplyMinBytes); version 8 gave two ops of
// version 1 their meaning: the client sends UnregisterModule when a module is unregistered
// (__cudaUnregisterFatBinary: a library dlclose'd) and the server frees the module, and
// DeviceReset resets the device (allocations, streams, events, limits, flags, loaded module
// copies) where it used to only synchronize it; a version 7 server would keep every module and
// leave a reset device as it was. Every message carries the version and both sides demand their
// own, so a client and a server of different versions fail at Hello with "protocol version N not
// supported", never at the first op the other side does not know. Version 9 added virtual memory
// management (MemAddressReserve ... MemGranularity: cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess and their inverses).
inline constexpr uint16_t kVersion = 9;
inline constexpr uint16_t kReply = 0x8000;
inline constexpr size_t kMaxFramesPerMessage = 65535;
// Large copies are cut into chunks of this size and pipelined.
inline constexpr size_t kCopyChunkBytes = size_t{4} << 20;
// Bare read replies. A MemcpyD2H of at least kBareReplyMinBytes that succeeded, answered while
// the session has no deferred error to report, may be answered (over a transport where a head
// costs a receive: Connection::HeadCostsARecv, i.e. UCX) with its bytes alone: a message of
// exactly the read's size, with no message header and no frame. The client knows the size of
// every read it waits for, and no framed reply to such a read has that size: a framed success
// carries the same bytes plus headers, and a framed failure carries no data and at most
// 2 x kMaxReplyTextBytes of text (AddReply truncates longer texts). Why: over UCX a framed reply
// is two messages, a small head and then the bulk bytes, whose receive the client can post only
// after it has the head; the bare reply is one message received straight into place, as a plain
// ucp program would send it (docs/benchmarks.md, "Remoting", bare replies).
inline constexpr size_t kBareReplyMinBytes = size_t{64} << 10;
inline constexpr size_t kMaxReplyTextBytes = size_t{4} << 10;

enum class Op : uint16_t {
  kHello = 1,
  kAttach,
  kPing,
  kGetDeviceProps,
  kGetAttribute,
  kMemGetInfo,
  kMalloc,
  kFree,
  kMemcpyH2D,
  kMemcpyD2H,
  kMemcpyD2D,
  kMemset,
  kMemcpy2D,
  kRegisterModule,
  kRegisterFunction,
  kRegisterVar,
  kUnregisterModule,  // posted; sent by clients since version 8
  kGetParamInfo,
  kLaunch,
  kStreamCreate,
  kStreamDestroy,
  kStreamSync,
  kStreamQuery,
  kStreamWaitEvent,
  kEventCreate,
  kEventRecord,
  kEventSync,
  kEventQuery,
  kEventElapsed,
  kEventDestroy,
  kDeviceSync,
  kFuncAttributes,
  kOccupancy,
  kGetSymbol,
  kDeviceReset,  // replied; a real reset since version 8 (Backend::DeviceReset)
  kDeviceSetLimit,  // version 2
  kDeviceGetLimit,
  kSetDeviceFlags,
  kGetDeviceFlags,
  kPeerAccess,
  kMemcpy2DAsync,  // version 3
  kMemset2D,
  kFuncSetAttribute,
  kSessionEnd,  // version 4
  kLaunchCooperative,  // version 5
  kGetModuleInfo,  // version 6
  kMemAddressReserve,  // version 9: virtual memory management, all replied
  kMemAddressFree,
  kMemCreate,
  kMemRelease,
  kMemMap,
  kMemUnmap,
  kMemSetAccess,
  kMemGranularity,
  kMaxOp,  // one past the last; new ops go above this line
};

struct OpInfo {
  const char* name;
  bool async;  // no reply; errors deferred to the next reply
};
// Returns nullptr for an op outside [kHello, kMaxOp).
const OpInfo* GetOpInfo(uint16_t op);
const char* OpName(uint16_t op);

// ---- message bodies. Each has kOp and Visit(v) listing its fields in wire order. ----

#define GPOOL_MSG(NAME) static constexpr Op kOp = Op::k##NAME

struct Hello {
  GPOOL_MSG(Hello);
  uint16_t version = kVersion;
  std::string token;      // lease token; empty when the server runs --insecure
  std::string client;     // "host:pid prog" for logs
  std::string transport;  // data transport the client wants: "tcp" or "ucx"
  template <class V> void Visit(V& v) { v(version, "version"); v(token, "token"); v(client, "client"); v(transport, "transport"); }
};
struct HelloReply {
  uint64_t session = 0;
  uint64_t nonce = 0;        // proves the data connection comes from this client
  std::string data_address;  // where the session's worker listens
  uint32_t device_count = 0;
  uint64_t mem_limit = 0;    // 0 = none
  template <class V> void Visit(V& v) { v(session, "session"); v(nonce, "nonce"); v(data_address, "data_address"); v(device_count, "device_count"); v(mem_limit, "mem_limit"); }
};
struct Attach {
  GPOOL_MSG(Attach);
  uint64_t session = 0, nonce = 0;
  template <class V> void Visit(V& v) { v(session, "session"); v(nonce, "nonce"); }
};
struct Empty {
  template <class V> void Visit(V&) {}
};
struct Ping {
  GPOOL_MSG(Ping);
  template <class V> void Visit(V&) {}
};
struct DeviceArg {
  uint32_t device = 0;
  template <class V> void Visit(V& v) { v(device, "device"); }
};
struct GetDeviceProps : DeviceArg { GPOOL_MSG(GetDeviceProps); };
struct MemGetInfo : DeviceArg { GPOOL_MSG(MemGetInfo); };
struct DeviceSync : DeviceArg { GPOOL_MSG(DeviceSync); };
struct DeviceReset : DeviceArg { GPOOL_MSG(DeviceReset); };

// Device properties, field by field (cudaDeviceProp is filled from these on the client).
struct DeviceProps {
  std::string name;
  std::string uuid;  // 16 raw bytes
  uint64_t total_global_mem = 0, shared_mem_per_block = 0, mem_pitch = 0, total_const_mem = 0;
  uint64_t texture_alignment = 0, shared_mem_per_mp = 0, shared_mem_per_block_optin = 0;
  int32_t regs_per_block = 0, warp_size = 0, max_threads_per_block = 0;
  std::array<int32_t, 3> max_threads_dim{}, max_grid_size{};
  int32_t clock_rate = 0, major = 0, minor = 0, multi_processor_count = 0;
  int32_t integrated = 0, can_map_host_memory = 0, concurrent_kernels = 0, ecc_enabled = 0;
  int32_t pci_bus_id = 0, pci_device_id = 0, pci_domain_id = 0, async_engine_count = 0;
  int32_t unified_addressing = 0, memory_clock_rate = 0, memory_bus_width = 0, l2_cache_size = 0;
  int32_t max_threads_per_mp = 0, regs_per_mp = 0, managed_memory = 0, max_blocks_per_mp = 0;
  template <class V> void Visit(V& v) {
    v(name, "name"); v(uuid, "uuid");
    v(total_global_mem, "total_global_mem"); v(shared_mem_per_block, "shared_mem_per_block");
    v(mem_pitch, "mem_pitch"); v(total_const_mem, "total_const_mem");
    v(texture_alignment, "texture_alignment"); v(shared_mem_per_mp, "shared_mem_per_mp");
    v(shared_mem_per_block_optin, "shared_mem_per_block_optin");
    v(regs_per_block, "regs_per_block"); v(warp_size, "warp_size");
    v(max_threads_per_block, "max_threads_per_block");
    for (auto& x : max_threads_dim) v(x, "max_threads_dim");
    for (auto& x : max_grid_size) v(x, "max_grid_size");
    v(clock_rate, "clock_rate"); v(major, "major"); v(minor, "minor");
    v(multi_processor_count, "multi_processor_count"); v(integrated, "integrated");
    v(can_map_host_memory, "can_map_host_memory"); v(concurrent_kernels, "concurrent_kernels");
    v(ecc_enabled, "ecc_enabled"); v(pci_bus_id, "pci_bus_id"); v(pci_device_id, "pci_device_id");
    v(pci_domain_id, "pci_domain_id"); v(async_engine_count, "async_engine_count");
    v(unified_addressing, "unified_addressing"); v(memory_clock_rate, "memory_clock_rate");
    v(memory_bus_width, "memory_bus_width"); v(l2_cache_size, "l2_cache_size");
    v(max_threads_per_mp, "max_threads_per_mp"); v(regs_per_mp, "regs_per_mp");
    v(managed_memory, "managed_memory"); v(max_blocks_per_mp, "max_blocks_per_mp");
  }
};
struct GetAttribute {
  GPOOL_MSG(GetAttribute);
  uint32_t device = 0;
  int32_t attr = 0;  // cudaDeviceAttr number (equal to the driver's CUdevice_attribute)
  template <class V> void Visit(V& v) { v(device, "device"); v(attr, "attr"); }
};
struct IntValue {
  int32_t value = 0;
  template <class V> void Visit(V& v) { v(value, "value"); }
};
struct MemInfo {
  uint64_t free = 0, total = 0;
  template <class V> void Visit(V& v) { v(free, "free"); v(total, "total"); }
};
struct Malloc {
  GPOOL_MSG(Malloc);
  uint32_t device = 0;
  uint64_t size = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(size, "size"); }
};
struct Pointer {
  uint64_t ptr = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); }
};
struct Free {
  GPOOL_MSG(Free);
  uint64_t ptr = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); }
};
// Host-to-device data travels in the frame; the client sends `data` as a separate gather part.
struct MemcpyH2D {
  GPOOL_MSG(MemcpyH2D);
  uint64_t dst = 0, stream = 0;
  wire::ByteSpan data;
  template <class V> void Visit(V& v) { v(dst, "dst"); v(stream, "stream"); v(data, "data"); }
};
struct MemcpyD2H {
  GPOOL_MSG(MemcpyD2H);
  uint64_t src = 0, size = 0, stream = 0;
  template <class V> void Visit(V& v) { v(src, "src"); v(size, "size"); v(stream, "stream"); }
};
struct Data {
  wire::ByteSpan data;
  template <class V> void Visit(V& v) { v(data, "data"); }
};
struct MemcpyD2D {
  GPOOL_MSG(MemcpyD2D);
  uint64_t dst = 0, src = 0, size = 0, stream = 0;
  template <class V> void Visit(V& v) { v(dst, "dst"); v(src, "src"); v(size, "size"); v(stream, "stream"); }
};
struct Memset {
  GPOOL_MSG(Memset);
  uint64_t dst = 0;
  uint32_t value = 0;
  uint64_t size = 0, stream = 0;
  template <class V> void Visit(V& v) { v(dst, "dst"); v(value, "value"); v(size, "size"); v(stream, "stream"); }
};
enum class CopyKind : uint8_t { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };
// A 2-D copy: `height` rows of `width` bytes. Host rows travel packed (pitch = width) in `data`
// for kHostToDevice and in the reply's Data for kDeviceToHost; the pitch on the host side is the
// client's business.
struct Memcpy2D {
  GPOOL_MSG(Memcpy2D);
  uint8_t kind = 0;
  uint64_t dst = 0, dpitch = 0, src = 0, spitch = 0, width = 0, height = 0, stream = 0;
  wire::ByteSpan data;
  template <class V> void Visit(V& v) {
    v(kind, "kind"); v(dst, "dst"); v(dpitch, "dpitch"); v(src, "src"); v(spitch, "spitch");
    v(width, "width"); v(height, "height"); v(stream, "stream"); v(data, "data");
  }
};
// The same 2-D copy posted without a reply (protocol v3): kHostToDevice or kDeviceToDevice only
// (a device-to-host copy needs a reply: Memcpy2D). Its error is deferred to the next reply.
struct Memcpy2DAsync : Memcpy2D {
  GPOOL_MSG(Memcpy2DAsync);
};
// cudaMemset2D(Async) as one request (protocol v3): `height` rows of `width` bytes, `pitch` apart,
// set to the low byte of `value`. Posted; its error is deferred to the next reply.
struct Memset2D {
  GPOOL_MSG(Memset2D);
  uint64_t dst = 0, pitch = 0;
  uint32_t value = 0;
  uint64_t width = 0, height = 0, stream = 0;
  template <class V> void Visit(V& v) {
    v(dst, "dst"); v(pitch, "pitch"); v(value, "value"); v(width, "width"); v(height, "height");
    v(stream, "stream");
  }
};
struct RegisterModule {
  GPOOL_MSG(RegisterModule);
  uint64_t module = 0;
  wire::ByteSpan image;  // the whole fatbin (header + entries)
  template <class V> void Visit(V& v) { v(module, "module"); v(image, "image"); }
};
struct RegisterFunction {
  GPOOL_MSG(RegisterFunction);
  uint64_t module = 0, func = 0;
  std::string name;  // mangled device name
  template <class V> void Visit(V& v) { v(module, "module"); v(func, "func"); v(name, "name"); }
};
struct RegisterVar {
  GPOOL_MSG(RegisterVar);
  uint64_t module = 0, var = 0;
  std::string name;
  uint64_t size = 0;
  uint8_t constant = 0;
  template <class V> void Visit(V& v) { v(module, "module"); v(var, "var"); v(name, "name"); v(size, "size"); v(constant, "constant"); }
};
struct UnregisterModule {
  GPOOL_MSG(UnregisterModule);
  uint64_t module = 0;
  template <class V> void Visit(V& v) { v(module, "module"); }
};
struct FuncArg {
  uint64_t func = 0;
  template <class V> void Visit(V& v) { v(func, "func"); }
};
struct GetParamInfo : FuncArg { GPOOL_MSG(GetParamInfo); };
struct FuncAttributes : FuncArg { GPOOL_MSG(FuncAttributes); };
struct ParamSlot {
  uint32_t offset = 0, size = 0;
  template <class V> void Visit(V& v) { v(offset, "offset"); v(size, "size"); }
};
struct ParamInfo {
  std::vector<ParamSlot> params;
  template <class V> void Visit(V& v) { v(params, "params"); }
};
struct FuncAttrs {
  uint64_t shared_size_bytes = 0, const_size_bytes = 0, local_size_bytes = 0;
  int32_t max_threads_per_block = 0, num_regs = 0, ptx_version = 0, binary_version = 0;
  int32_t max_dynamic_shared_size_bytes = 0;
  template <class V> void Visit(V& v) {
    v(shared_size_bytes, "shared_size_bytes"); v(const_size_bytes, "const_size_bytes");
    v(local_size_bytes, "local_size_bytes"); v(max_threads_per_block, "max_threads_per_block");
    v(num_regs, "num_regs"); v(ptx_version, "ptx_version"); v(binary_version, "binary_version");
    v(max_dynamic_shared_size_bytes, "max_dynamic_shared_size_bytes");
  }
};
struct Launch {
  GPOOL_MSG(Launch);
  uint64_t func = 0;
  std::array<uint32_t, 3> grid{}, block{};
  uint32_t shmem = 0;
  uint32_t device = 0;  // used when stream == 0
  uint64_t stream = 0;
  wire::ByteSpan params;  // packed at the offsets ParamInfo gave
  template <class V> void Visit(V& v) {
    v(func, "func");
    for (auto& x : grid) v(x, "grid");
    for (auto& x : block) v(x, "block");
    v(shmem, "shmem"); v(device, "device"); v(stream, "stream"); v(params, "params");
  }
};
struct StreamCreate {
  GPOOL_MSG(StreamCreate);
  uint32_t device = 0;
  uint64_t stream = 0;
  uint32_t flags = 0;
  int32_t priority = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(stream, "stream"); v(flags, "flags"); v(priority, "priority"); }
};
struct StreamArg {
  uint64_t stream = 0;
  uint32_t device = 0;  // for stream 0
  template <class V> void Visit(V& v) { v(stream, "stream"); v(device, "device"); }
};
struct StreamDestroy : StreamArg { GPOOL_MSG(StreamDestroy); };
struct StreamSync : StreamArg { GPOOL_MSG(StreamSync); };
struct StreamQuery : StreamArg { GPOOL_MSG(StreamQuery); };
struct StreamWaitEvent {
  GPOOL_MSG(StreamWaitEvent);
  uint64_t stream = 0;
  uint32_t device = 0;
  uint64_t event = 0;
  template <class V> void Visit(V& v) { v(stream, "stream"); v(device, "device"); v(event, "event"); }
};
struct EventCreate {
  GPOOL_MSG(EventCreate);
  uint32_t device = 0;
  uint64_t event = 0;
  uint32_t flags = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(event, "event"); v(flags, "flags"); }
};
struct EventRecord {
  GPOOL_MSG(EventRecord);
  uint64_t event = 0, stream = 0;
  uint32_t device = 0;
  template <class V> void Visit(V& v) { v(event, "event"); v(stream, "stream"); v(device, "device"); }
};
struct EventArg {
  uint64_t event = 0;
  template <class V> void Visit(V& v) { v(event, "event"); }
};
struct EventSync : EventArg { GPOOL_MSG(EventSync); };
struct EventQuery : EventArg { GPOOL_MSG(EventQuery); };
struct EventDestroy : EventArg { GPOOL_MSG(EventDestroy); };
struct EventElapsed {
  GPOOL_MSG(EventElapsed);
  uint64_t start = 0, end = 0;
  template <class V> void Visit(V& v) { v(start, "start"); v(end, "end"); }
};
struct FloatValue {
  float value = 0;
  template <class V> void Visit(V& v) { v(value, "value"); }
};
struct Occupancy {
  GPOOL_MSG(Occupancy);
  uint64_t func = 0;
  int32_t block_size = 0;
  uint64_t shmem = 0;
  uint32_t flags = 0;
  template <class V> void Visit(V& v) { v(func, "func"); v(block_size, "block_size"); v(shmem, "shmem"); v(flags, "flags"); }
};
// A variable's address and size on `device` (server-local): each device that loads a module has
// its own copy of the module's __device__ and __constant__ variables (protocol v6 added `device`).
struct GetSymbol {
  GPOOL_MSG(GetSymbol);
  uint64_t var = 0;
  uint32_t device = 0;
  template <class V> void Visit(V& v) { v(var, "var"); v(device, "device"); }
};
struct Symbol {
  uint64_t ptr = 0, size = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); v(size, "size"); }
};
// cudaDeviceSetLimit/GetLimit: `limit` is the cudaLimit number (equal to the driver's CUlimit).
struct DeviceSetLimit {
  GPOOL_MSG(DeviceSetLimit);
  uint32_t device = 0;
  int32_t limit = 0;
  uint64_t value = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(limit, "limit"); v(value, "value"); }
};
struct DeviceGetLimit {
  GPOOL_MSG(DeviceGetLimit);
  uint32_t device = 0;
  int32_t limit = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(limit, "limit"); }
};
struct U64Value {
  uint64_t value = 0;
  template <class V> void Visit(V& v) { v(value, "value"); }
};
// cudaSetDeviceFlags/GetDeviceFlags: cudaDevice* flags (equal to the driver's CU_CTX_* flags) of
// the device's primary context. GetDeviceFlags replies a U64Value.
struct SetDeviceFlags {
  GPOOL_MSG(SetDeviceFlags);
  uint32_t device = 0;
  uint32_t flags = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(flags, "flags"); }
};
struct GetDeviceFlags : DeviceArg { GPOOL_MSG(GetDeviceFlags); };
// cudaDeviceEnablePeerAccess (enable 1) / cudaDeviceDisablePeerAccess (enable 0): kernels on
// `device` may then reach memory of `peer`, another device of the same server.
struct PeerAccess {
  GPOOL_MSG(PeerAccess);
  uint32_t device = 0, peer = 0;
  uint8_t enable = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(peer, "peer"); v(enable, "enable"); }
};
// cudaFuncSetAttribute on `device`: `attr` is the cudaFuncAttribute number (equal to the driver's
// CUfunction_attribute for the settable ones). Posted: the client checks what it can against the
// device's properties first, and the server's refusal surfaces at the next synchronizing call.
struct FuncSetAttribute {
  GPOOL_MSG(FuncSetAttribute);
  uint64_t func = 0;
  uint32_t device = 0;
  int32_t attr = 0;
  int32_t value = 0;
  template <class V> void Visit(V& v) { v(func, "func"); v(device, "device"); v(attr, "attr"); v(value, "value"); }
};
// Server -> client only, unsolicited: the server ends the session (its lease expired). Sent as a
// reply frame (kSessionEnd | kReply, ReplyHead then this empty body) whose head's error and
// message say why (cudaErrorNotPermitted, "lease for GPU H:P/0 expired at ..."); the server closes
// the connection after it and the worker exits. The client reports that message at the call that
// receives it and fails every later call on that server with it. A client never sends it.
struct SessionEnd {
  GPOOL_MSG(SessionEnd);
  template <class V> void Visit(V&) {}
};
// cudaLaunchCooperativeKernel (and cudaLaunchKernelExC with cudaLaunchAttributeCooperative): a
// Launch, fields and all, that the server must launch cooperatively (cuda: the driver's
// cooperative launch attribute, so grid-wide synchronization works; emulated: as any launch,
// since the whole grid runs at once on the CPU). Posted, like Launch.
struct LaunchCooperative : Launch {
  GPOOL_MSG(LaunchCooperative);
};
// Everything the client needs of a module before it launches its kernels or uses its variables,
// in one round trip (protocol v6): the parameter layout of every function the session registered
// in `module` (RegisterFunction) and the address and size of every variable (RegisterVar) on
// `device` (server-local: each device has its own copy of the variables; the layouts are the same
// on every device), each with its own result, so one kernel the driver cannot describe (no cuFuncGetParamInfo) or
// one variable it cannot find fails alone. Replies ModuleInfo; a module the session never
// registered (or unregistered) is the reply's error, naming the module id. GetParamInfo and
// GetSymbol still answer one function or variable.
struct GetModuleInfo {
  GPOOL_MSG(GetModuleInfo);
  uint64_t module = 0;
  uint32_t device = 0;
  template <class V> void Visit(V& v) { v(module, "module"); v(device, "device"); }
};
struct FunctionInfo {
  uint64_t func = 0;
  int32_t error = 0;    // 0: `params` is the layout; else why the server cannot give one
  std::string message;  // names the kernel and the reason
  std::vector<ParamSlot> params;
  template <class V> void Visit(V& v) {
    v(func, "func"); v(error, "error"); v(message, "message"); v(params, "params");
  }
};
struct VarInfo {
  uint64_t var = 0;
  int32_t error = 0;  // 0: ptr and size are valid
  std::string message;
  uint64_t ptr = 0, size = 0;
  template <class V> void Visit(V& v) {
    v(var, "var"); v(error, "error"); v(message, "message"); v(ptr, "ptr"); v(size, "size");
  }
};
struct ModuleInfo {
  std::vector<FunctionInfo> functions;  // in registration order
  std::vector<VarInfo> vars;
  template <class V> void Visit(V& v) { v(functions, "functions"); v(vars, "vars"); }
};
// Virtual memory management (protocol v9), the driver's cuMem* calls of the same names, each
// replied so that its error reaches the call. Addresses are the server's; a reservation is
// address space only, a handle (MemCreate's U64Value, the server's id) is physical memory on
// `device`, which counts against the session's memory limit from MemCreate until it is released
// and unmapped everywhere. `device` of MemAddressReserve only picks the context the server works
// in (address space is per process on a GPU). MemSetAccess `flags` are CUmemAccess_flags (0 none,
// 1 read, 3 read-write) for `device`. MemGranularity replies a U64Value in bytes (`recommended`:
// CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, else MINIMUM).
struct MemAddressReserve {
  GPOOL_MSG(MemAddressReserve);
  uint32_t device = 0;
  uint64_t size = 0, alignment = 0, hint = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(size, "size"); v(alignment, "alignment"); v(hint, "hint"); }
};
struct MemAddressFree {
  GPOOL_MSG(MemAddressFree);
  uint64_t ptr = 0, size = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); v(size, "size"); }
};
struct MemCreate {
  GPOOL_MSG(MemCreate);
  uint32_t device = 0;
  uint64_t size = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(size, "size"); }
};
struct MemRelease {
  GPOOL_MSG(MemRelease);
  uint64_t handle = 0;
  template <class V> void Visit(V& v) { v(handle, "handle"); }
};
struct MemMap {
  GPOOL_MSG(MemMap);
  uint64_t ptr = 0, size = 0, offset = 0, handle = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); v(size, "size"); v(offset, "offset"); v(handle, "handle"); }
};
struct MemUnmap {
  GPOOL_MSG(MemUnmap);
  uint64_t ptr = 0, size = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); v(size, "size"); }
};
struct MemSetAccess {
  GPOOL_MSG(MemSetAccess);
  uint64_t ptr = 0, size = 0;
  uint32_t device = 0, flags = 0;
  template <class V> void Visit(V& v) { v(ptr, "ptr"); v(size, "size"); v(device, "device"); v(flags, "flags"); }
};
struct MemGranularity {
  GPOOL_MSG(MemGranularity);
  uint32_t device = 0;
  uint8_t recommended = 0;
  template <class V> void Visit(V& v) { v(device, "device"); v(recommended, "recommended"); }
};
#undef GPOOL_MSG

// Every reply starts with this: the op's own result, then the first deferred error of earlier
// asynchronous ops (0 if none), each with a message that names what failed.
struct ReplyHead {
  int32_t error = 0;
  std::string message;
  int32_t async_error = 0;
  std::string async_message;
  template <class V> void Visit(V& v) { v(error, "error"); v(message, "message"); v(async_error, "async_error"); v(async_message, "async_message"); }
};

// ---- encoding ----

struct EncodeVisitor {
  wire::Writer* w;
  template <typename T>
    requires std::is_arithmetic_v<T>
  void operator()(T& x, const char*) { w->Put(x); }
  void operator()(std::string& s, const char*) { w->PutString(s); }
  void operator()(wire::ByteSpan& b, const char*) { w->PutBlob(b); }
  template <typename T>
  void operator()(std::vector<T>& xs, const char*) {
    w->Put<uint32_t>(static_cast<uint32_t>(xs.size()));
    for (auto& x : xs) x.Visit(*this);
  }
};
struct DecodeVisitor {
  wire::Reader* r;
  template <typename T>
    requires std::is_arithmetic_v<T>
  void operator()(T& x, const char* f) { x = r->Get<T>(f); }
  void operator()(std::string& s, const char* f) { r->GetStringInto(&s, f); }
  void operator()(wire::ByteSpan& b, const char* f) { b = r->GetBlob(f); }
  template <typename T>
  void operator()(std::vector<T>& xs, const char* f) {
    uint32_t n = r->Get<uint32_t>(f);
    // Each element takes at least one byte, so a count beyond the bytes left is malformed.
    if (n > r->remaining()) { r->Fail(std::string("count of '") + f + "' exceeds frame"); return; }
    xs.resize(n);
    for (auto& x : xs) { x.Visit(*this); if (!r->ok()) return; }
  }
};

// Builds one transport message of frames. Frames are appended; Finish() patches the count.
class BatchWriter {
 public:
  BatchWriter() { Reset(); }
  // Not copyable or movable: w_ points at buf_.
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;
  void Reset();
  // Appends a frame for `op` whose payload is everything the callback writes.
  template <class Body>
  void Add(uint16_t op, Body& body) {
    size_t at = BeginFrame(op);
    EncodeVisitor v{&w_};
    body.Visit(v);
    EndFrame(at);
  }
  template <class Msg>
  void AddRequest(Msg& m) { Add(static_cast<uint16_t>(Msg::kOp), m); }
  // Reply frame: head then body.
  template <class Body>
  void AddReply(uint16_t op, ReplyHead& head, Body& body) {
    ClampText(head);
    size_t at = BeginFrame(op | kReply);
    PutHead(head);
    EncodeVisitor v{&w_};
    body.Visit(v);
    EndFrame(at);
  }
  // Adds a frame whose last field is a blob that is NOT copied: the payload is written up to and
  // including the blob's length prefix, and the caller sends `blob` as the next gather part.
  // Must be the last frame of the message.
  template <class Msg>
  void AddRequestWithTail(Msg& m, wire::ByteSpan blob) {
    size_t at = BeginFrame(static_cast<uint16_t>(Msg::kOp));
    TailVisitor v{{&w_}, blob};
    m.Visit(v);
    PatchLength(at, w_.size() - at - kFrameHeader + blob.size());
    ++frames_;
  }
  // Reply whose body ends in a blob sent, uncopied, as the next gather part (see above).
  template <class Body>
  void AddReplyWithTail(uint16_t op, ReplyHead& head, Body& body, wire::ByteSpan blob) {
    ClampText(head);
    size_t at = BeginFrame(op | kReply);
    PutHead(head);
    TailVisitor v{{&w_}, blob};
    body.Visit(v);
    PatchLength(at, w_.size() - at - kFrameHeader + blob.size());
    ++frames_;
  }
  size_t frames() const { return frames_; }
  // Frames added since construction (Reset keeps counting): a caller compares two readings to
  // learn whether anything was added in between.
  uint64_t added() const { return added_; }
  size_t bytes() const { return buf_.size(); }
  bool empty() const { return frames_ == 0; }
  // Patches the frame count and returns the encoded message.
  wire::ByteSpan Finish();

  static constexpr size_t kHeader = 8;
  static constexpr size_t kFrameHeader = 8;

 private:
  struct TailVisitor : EncodeVisitor {
    wire::ByteSpan tail;
    using EncodeVisitor::operator();
    void operator()(wire::ByteSpan&, const char*) { w->Put<uint64_t>(tail.size()); }
  };
  // Caps a reply's texts at kMaxReplyTextBytes each (see kBareReplyMinBytes): a longer one is cut
  // and says so.
  static void ClampText(ReplyHead& head) {
    if (head.message.size() > kMaxReplyTextBytes) [[unlikely]] Clamp(head.message);
    if (head.async_message.size() > kMaxReplyTextBytes) [[unlikely]] Clamp(head.async_message);
  }
  static void Clamp(std::string& text);
  // Encodes `head` as ReplyHead::Visit with an EncodeVisitor would, in one append (the visitor's
  // four appends, each reloading the buffer's size after its store, were ~10% of the server's
  // CPU per no-op call, bench/call_cpu_bench; protocol_test checks the bytes are the same).
  void PutHead(const ReplyHead& head);
  size_t BeginFrame(uint16_t op);
  void EndFrame(size_t at) { PatchLength(at, w_.size() - at - kFrameHeader); ++frames_; }
  void PatchLength(size_t at, size_t len);

  wire::Buffer buf_;
  wire::Writer w_{&buf_};
  size_t frames_ = 0;
  uint64_t added_ = 0;
};

struct Frame {
  uint16_t op = 0;  // with kReply set for replies
  wire::ByteSpan payload;
  // Bytes at the end of the payload that are not in `payload` because the receiver placed them
  // elsewhere (the contents of the frame's final blob; see ParseMessage's detached_tail).
  size_t detached = 0;
};

// Splits a transport message into frames, checking magic, version, counts and lengths.
// `detached_tail` bytes of the last frame's payload are not in `message`: the receiver took the
// message's last bytes straight into their destination (Connection::RecvSplit). Decode such a
// frame with DecodeReplyDetached.
// Fills `frames` (cleared first; a vector reused across messages stops allocating, which a
// round trip's hot path wants: one per message at each end). On error `frames` holds the frames
// before the bad one.
Status ParseMessage(wire::ByteSpan message, std::vector<Frame>* frames, size_t detached_tail = 0);
// The same, into a new vector (for paths that run once per connection, and for tests).
StatusOr<std::vector<Frame>> ParseMessage(wire::ByteSpan message, size_t detached_tail = 0);
// ParseMessage's slow path, exposed so that tests and the fuzzer can check the two agree:
// ParseMessage tries a fast parse that only accepts well-formed messages and leaves anything
// else to this one, which checks field by field and names what is wrong.
Status ParseMessageChecked(wire::ByteSpan message, std::vector<Frame>* frames,
                           size_t detached_tail = 0);

// Decodes a request body, requiring the payload to be consumed exactly.
template <class Msg>
Status DecodeBody(const Frame& f, Msg* m) {
  wire::Reader r(f.payload);
  DecodeVisitor v{&r};
  m->Visit(v);
  if (r.ok() && r.remaining() != 0) r.Fail("trailing bytes");
  if (!r.ok()) return r.status().WithContext(std::string("decoding ") + OpName(f.op));
  return Status::Ok();
}
// Decodes like DecodeVisitor, except that a blob must be the frame's last field, decodes as an
// empty span, and its length prefix must equal `detached`: its bytes were received elsewhere.
struct DetachedBlobVisitor : DecodeVisitor {
  size_t detached;
  using DecodeVisitor::operator();
  void operator()(wire::ByteSpan& b, const char* field) {
    uint64_t n = r->Get<uint64_t>(field);
    if (r->ok() && (n != detached || r->remaining() != 0)) {
      r->Fail(std::string("detached blob '") + field + "' does not end the frame");
    }
    b = {};
  }
};
// Decodes a request whose body ends in a blob of exactly f.detached bytes that were received
// elsewhere (a host-to-device chunk received in place): that blob decodes as an empty span, and
// its length prefix must equal f.detached.
template <class Msg>
Status DecodeBodyDetached(const Frame& f, Msg* m) {
  wire::Reader r(f.payload);
  DetachedBlobVisitor v{{&r}, f.detached};
  m->Visit(v);
  if (r.ok() && r.remaining() != 0) r.Fail("trailing bytes");
  if (!r.ok()) return r.status().WithContext(std::string("decoding ") + OpName(f.op));
  return Status::Ok();
}
// Decodes a reply: head, then body.
template <class Body>
Status DecodeReply(const Frame& f, ReplyHead* head, Body* body) {
  wire::Reader r(f.payload);
  DecodeVisitor v{&r};
  head->Visit(v);
  body->Visit(v);
  if (r.ok() && r.remaining() != 0) r.Fail("trailing bytes");
  if (!r.ok()) return r.status().WithContext(std::string("decoding reply to ") + OpName(f.op));
  return Status::Ok();
}
// Decodes a reply whose body ends in a blob of exactly f.detached bytes that were received
// elsewhere: that blob decodes as an empty span, and its length prefix must equal f.detached.
template <class Body>
Status DecodeReplyDetached(const Frame& f, ReplyHead* head, Body* body) {
  wire::Reader r(f.payload);
  DetachedBlobVisitor v{{&r}, f.detached};
  head->Visit(v);
  body->Visit(v);
  if (r.ok() && r.remaining() != 0) r.Fail("trailing bytes");
  if (!r.ok()) return r.status().WithContext(std::string("decoding reply to ") + OpName(f.op));
  return Status::Ok();
}

}  // namespace gpool::remote::proto
