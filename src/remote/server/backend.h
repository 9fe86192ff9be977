// The device side of a GPU server session, behind one interface: `cuda` (a real GPU through the
// driver API) and `emulated` (host memory and CPU kernels, for machines without a GPU).
//
// Ids of modules, functions, variables, streams and events are the client's; a backend maps them
// to its own handles. Stream id 0 is the device's default stream. Results carry CUDA runtime error
// numbers and a message naming what failed, because they travel back to the program unchanged.
// Memory limits are the Session's job, not the backend's. Thread safety: a backend is used by its
// session's one thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/protocol/messages.h"

namespace gpool::remote::server {

// CUDA runtime error numbers used by the server (values of cudaError_t).
enum CudaErr : int32_t {
  kSuccess = 0,
  kErrInvalidValue = 1,
  kErrMemoryAllocation = 2,
  kErrInvalidDevicePointer = 17,
  kErrInvalidMemcpyDirection = 21,
  kErrInvalidDeviceFunction = 98,
  kErrInvalidDevice = 101,
  kErrInvalidKernelImage = 200,
  kErrInvalidResourceHandle = 400,
  kErrNotFound = 500,
  kErrNotReady = 600,
  kErrIllegalAddress = 700,
  kErrLaunchFailure = 719,
  kErrNotSupported = 801,
  kErrNotPermitted = 800,
  kErrUnknown = 999,
  kErrInvalidSymbol = 13,
  kErrUnsupportedLimit = 215,
  kErrPeerAccessUnsupported = 217,
  kErrPeerAccessAlreadyEnabled = 704,
  kErrPeerAccessNotEnabled = 705,
};

struct Result {
  int32_t code = kSuccess;
  std::string message;
  bool ok() const { return code == kSuccess; }
  static Result Ok() { return {}; }
};
Result Err(int32_t code, std::string message);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int DeviceCount() = 0;
  virtual Result GetProps(uint32_t dev, proto::DeviceProps* out) = 0;
  virtual Result GetAttribute(uint32_t dev, int32_t attr, int32_t* value) = 0;
  virtual Result MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) = 0;

  virtual Result Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) = 0;
  virtual Result Free(uint64_t ptr) = 0;
  // `src` is valid only during the call; the backend copies (or stages) it before returning.
  virtual Result CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) = 0;
  // Receive-in-place of a host-to-device chunk, in two steps around the network receive:
  // H2DTarget checks the destination and stream and returns where the chunk's `size` bytes should
  // be received (emulated: the device memory itself; cuda: a pinned staging buffer), or an empty
  // span when it cannot (bad destination, too large: the session then receives the bytes and
  // calls CopyH2D, which reports the error). Once they are in, CommitH2D(dst, that span, stream)
  // completes the copy as CopyH2D would. One target at a time. Default: never in place.
  virtual std::span<std::byte> H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) {
    (void)dst, (void)size, (void)stream;
    return {};
  }
  virtual Result CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) {
    return CopyH2D(dst, data, stream);
  }
  // Completes before returning.
  virtual Result CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) = 0;
  // Device-to-host read of one reply's bytes in two steps, so that the session starts reading the
  // next chunk before it sends this one (cuda: the DMA into pinned staging buffer `slot` runs
  // while the previous chunk goes out on the network). StartD2H checks the source and stream and
  // starts the read in pipeline slot `slot` (0 or 1; one read per slot until its FinishD2H), or
  // returns false when it cannot (bad range or stream, too large): the session then takes
  // CopyD2H, which reports the error (or copies one too large for staging). FinishD2H waits for the slot's read and sets
  // *data to its bytes, valid until the slot's next StartD2H. Default (emulated): HostView, no
  // copy and nothing to wait for.
  virtual bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) {
    (void)stream;
    d2h_view_[slot & 1] = HostView(src, size);
    return d2h_view_[slot & 1].size() == size && size != 0;
  }
  virtual Result FinishD2H(int slot, std::span<const std::byte>* data) {
    *data = d2h_view_[slot & 1];
    return {};
  }
  // When device memory is host-addressable (emulated), returns a view for zero-copy sends after
  // syncing `stream`; otherwise an empty span.
  virtual std::span<const std::byte> HostView(uint64_t src, uint64_t size) = 0;
  virtual Result CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) = 0;
  virtual Result Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) = 0;
  virtual Result Copy2D(const proto::Memcpy2D& c, std::byte* host_out) = 0;
  // cudaMemset2D: `height` rows of `width` bytes, `pitch` apart. Default: one Memset per row
  // (right for any backend and for decorators, which check each row through their Memset); the
  // emulated backend checks the whole range once, the cuda one calls cuMemsetD2D8Async.
  virtual Result Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width,
                          uint64_t height, uint64_t stream) {
    if (width == 0 || height == 0) return {};
    if (pitch < width) return Err(kErrInvalidValue, "2-D memset: pitch < width");
    for (uint64_t row = 0; row < height; ++row) {
      if (Result r = Memset(dst + row * pitch, value, width, stream); !r.ok()) return r;
    }
    return {};
  }

  virtual Result LoadModule(uint64_t module, std::span<const std::byte> image) = 0;
  virtual Result RegisterFunction(uint64_t module, uint64_t func, const std::string& name) = 0;
  virtual Result RegisterVar(uint64_t module, uint64_t var, const std::string& name,
                             uint64_t size, bool constant) = 0;
  virtual Result UnloadModule(uint64_t module) = 0;
  virtual Result GetParamInfo(uint64_t func, proto::ParamInfo* out) = 0;
  // The address and size of variable `var` on device `dev`. A module's __device__ and
  // __constant__ variables exist once per device (each device's context loads its own copy of
  // the module), so the answer differs per device: cuda resolves it in `dev`'s copy of the
  // module, emulated gives each device its own storage.
  virtual Result GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) = 0;
  virtual Result FuncAttributes(uint64_t func, proto::FuncAttrs* out) = 0;
  virtual Result Occupancy(uint64_t func, int32_t block_size, uint64_t shmem, int32_t* blocks) = 0;
  // Sets *ns to kernel time to charge for compute shares now: the emulated backend's CPU kernel
  // time of this launch; for the cuda backend, time of earlier launches that it had to wait for
  // (it caps each session's queue of timed launches per device, see cuda_backend.cc).
  virtual Result Launch(const proto::Launch& l, uint64_t* ns) = 0;
  // A cooperative launch (cudaLaunchCooperativeKernel): all blocks resident at once, so that
  // grid-wide synchronization works. Default: refused, naming the call.
  virtual Result LaunchCooperative(const proto::Launch& l, uint64_t* ns) {
    (void)l;
    *ns = 0;
    return Err(kErrNotSupported, "cudaLaunchCooperativeKernel: this backend cannot launch cooperatively");
  }
  // Kernel time (ns) of launches on `dev` that completed since the last call, for a backend that
  // learns it only after the fact (cuda: timing events, harvested without blocking). The session
  // charges it before admitting its next launch. Default: none (the emulated backend reports each
  // kernel's time from Launch).
  virtual uint64_t TakeKernelTime(uint32_t dev) {
    (void)dev;
    return 0;
  }

  virtual Result StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) = 0;
  virtual Result StreamDestroy(uint64_t id) = 0;
  virtual Result StreamSync(uint32_t dev, uint64_t id) = 0;
  virtual Result StreamQuery(uint32_t dev, uint64_t id) = 0;
  virtual Result StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) = 0;
  virtual Result EventCreate(uint32_t dev, uint64_t id, uint32_t flags) = 0;
  virtual Result EventRecord(uint32_t dev, uint64_t event, uint64_t stream) = 0;
  virtual Result EventSync(uint64_t event) = 0;
  virtual Result EventQuery(uint64_t event) = 0;
  virtual Result EventElapsed(uint64_t start, uint64_t end, float* ms) = 0;
  virtual Result EventDestroy(uint64_t event) = 0;
  virtual Result DeviceSync(uint32_t dev) = 0;
  // cudaDeviceReset of device `dev` for this session, as CUDA documents it: waits for the
  // device's work, then destroys every allocation, stream and event the session made on it,
  // returns its limits and flags to their defaults and ends its peer access, and drops its
  // loaded copies of the modules, so that module variables have their initial values again at
  // next use (registrations stay: the modules are loaded again lazily). Other devices are
  // untouched. Default: refused, naming the call and the backend.
  virtual Result DeviceReset(uint32_t dev) {
    return Err(kErrNotSupported, fmt_unsupported("cudaDeviceReset", static_cast<int32_t>(dev)));
  }

  // cudaDeviceSetLimit/GetLimit (`limit`: the cudaLimit number) and cudaSetDeviceFlags/
  // GetDeviceFlags (cudaDevice* flags) of device `dev`, for this session. A backend must either
  // apply them (cuda: cuCtxSetLimit, cuDevicePrimaryCtxSetFlags) or keep them so that Get returns
  // what Set set, refusing what it cannot honour (emulated). The defaults refuse loudly, naming the
  // call and the backend, so a backend without them never pretends.
  virtual Result SetLimit(uint32_t dev, int32_t limit, uint64_t value) {
    (void)dev, (void)value;
    return Err(kErrNotSupported, fmt_unsupported("cudaDeviceSetLimit", limit));
  }
  virtual Result GetLimit(uint32_t dev, int32_t limit, uint64_t* value) {
    (void)dev, (void)value;
    return Err(kErrNotSupported, fmt_unsupported("cudaDeviceGetLimit", limit));
  }
  virtual Result SetDeviceFlags(uint32_t dev, uint32_t flags) {
    (void)dev;
    return Err(kErrNotSupported, fmt_unsupported("cudaSetDeviceFlags", static_cast<int32_t>(flags)));
  }
  virtual Result GetDeviceFlags(uint32_t dev, uint32_t* flags) {
    (void)dev, (void)flags;
    return Err(kErrNotSupported, fmt_unsupported("cudaGetDeviceFlags", 0));
  }
  // cudaFuncSetAttribute of `func` on `dev` (`attr`: the cudaFuncAttribute number). A backend
  // applies it (cuda: cuFuncSetAttribute) or keeps it so that FuncAttributes and launches honour
  // it (emulated: the dynamic shared memory maximum); what it cannot honour it refuses.
  virtual Result FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) {
    (void)func, (void)dev, (void)value;
    return Err(kErrNotSupported, fmt_unsupported("cudaFuncSetAttribute", attr));
  }
  // cudaDeviceEnablePeerAccess/DisablePeerAccess from `dev` to `peer` (both of this server), with
  // CUDA's errors: already enabled, not enabled, a device that cannot reach the other.
  virtual Result PeerAccess(uint32_t dev, uint32_t peer, bool enable) {
    (void)dev, (void)enable;
    return Err(kErrNotSupported, fmt_unsupported(enable ? "cudaDeviceEnablePeerAccess"
                                                        : "cudaDeviceDisablePeerAccess",
                                                 static_cast<int32_t>(peer)));
  }

  // Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess and
  // their inverses), with the driver's rules: sizes, addresses and offsets in multiples of
  // MemGranularity's minimum, a map only onto reserved, unmapped address space (offset 0, as the
  // driver demands), an unmap or access change of whole mappings only, and no access until
  // MemSetAccess gives it. Physical memory of a handle lives until it is released and unmapped
  // everywhere: MemRelease and MemUnmap append to *gone the handles whose memory that call freed
  // (the session's memory limit and the lease ledger count them free again). Copies, memsets and launches reach mapped memory with
  // access as any allocation; a copy into an unmapped part of a reservation is refused. Defaults:
  // refused, naming the call and the backend.
  virtual Result MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) {
    (void)recommended, (void)bytes;
    return Err(kErrNotSupported, fmt_unsupported("cuMemGetAllocationGranularity", static_cast<int32_t>(dev)));
  }
  virtual Result MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment, uint64_t hint,
                                   uint64_t* ptr) {
    (void)size, (void)alignment, (void)hint, (void)ptr;
    return Err(kErrNotSupported, fmt_unsupported("cuMemAddressReserve", static_cast<int32_t>(dev)));
  }
  virtual Result MemAddressFree(uint64_t ptr, uint64_t size) {
    (void)ptr, (void)size;
    return Err(kErrNotSupported, fmt_unsupported("cuMemAddressFree", 0));
  }
  virtual Result MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) {
    (void)size, (void)handle;
    return Err(kErrNotSupported, fmt_unsupported("cuMemCreate", static_cast<int32_t>(dev)));
  }
  virtual Result MemRelease(uint64_t handle, std::vector<uint64_t>* gone) {
    (void)handle, (void)gone;
    return Err(kErrNotSupported, fmt_unsupported("cuMemRelease", 0));
  }
  virtual Result MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) {
    (void)ptr, (void)size, (void)offset, (void)handle;
    return Err(kErrNotSupported, fmt_unsupported("cuMemMap", 0));
  }
  virtual Result MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) {
    (void)ptr, (void)size, (void)gone;
    return Err(kErrNotSupported, fmt_unsupported("cuMemUnmap", 0));
  }
  virtual Result MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) {
    (void)ptr, (void)size, (void)flags;
    return Err(kErrNotSupported, fmt_unsupported("cuMemSetAccess", static_cast<int32_t>(dev)));
  }

 private:
  std::string fmt_unsupported(const char* call, int32_t arg) const {
    return std::string(call) + "(" + std::to_string(arg) + ") is not supported by the " +
           std::string(name()) + " backend";
  }
  std::span<const std::byte> d2h_view_[2];  // the default StartD2H's views, per slot
};

struct EmulatedOptions {
  int devices = 1;
  uint64_t memory_bytes = uint64_t{16} << 30;  // per device
  std::string kernels_plugin;                  // .so exporting gpool_emulated_kernels()
  // When set, every launch (run or not) is appended to this file as one line (see
  // FormatLaunchRecord), so tests can check what reached the server: `--emulated-launch-log`.
  std::string launch_log;
  // Preferred start of the device address range, so that two servers aggregated by one client
  // hand out distinct pointers. 0 lets the kernel choose.
  uint64_t address_hint = 0;
  // Where and how much address space cuMemAddressReserve hands out (one PROT_NONE window mapped
  // at start, MAP_NORESERVE: it costs no memory). The hint is per port too, for the same reason;
  // 0 lets the kernel choose.
  uint64_t va_hint = 0;
  uint64_t va_bytes = uint64_t{32} << 30;
  // Mixed into the devices' UUIDs (bytes 8..15), so that two servers' emulated GPUs differ as
  // real GPUs do (NVML and the driver stand-in find a device by UUID); the server sets it from
  // its bound address, so it is stable across its sessions. 0: the UUID is the device index only.
  uint64_t uuid_seed = 0;
  // For testing clients against old drivers: when false, GetParamInfo answers
  // cudaErrorNotSupported, as a `cuda` server whose driver lacks cuFuncGetParamInfo (older than
  // CUDA 12.4) would, so clients take their own fatbin-parser path for kernel parameter layouts.
  // Launches still read the layout from the module's fatbin here (the role of the driver's own
  // knowledge), so a client layout that differs from it fails the launch or the kernel's checks.
  // `gpool gpu-server --emulated-no-param-info`.
  bool answer_param_info = true;
};
StatusOr<std::unique_ptr<Backend>> MakeEmulatedBackend(const EmulatedOptions& options);

// The real GPU through libcuda.so.1 (dlopen), one context per device in this process. Call only
// in the session's worker process (after fork).
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend();

}  // namespace gpool::remote::server
