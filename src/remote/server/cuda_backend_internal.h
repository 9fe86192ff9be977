// The real-GPU backend's class (the `cuda` backend; its design: cuda_backend.cc's head comment),
// internal to src/remote/server: the declaration shared by the files that define its members,
// one seam each:
//   cuda_backend.cc         the driver's loading, construction, devices, contexts (reset, limits,
//                           flags, peer access), streams, events, launches and their kernel time;
//   cuda_backend_memory.cc  allocations, range checks, copies, memsets, the staging buffers, the
//                           pipelined device-to-host reads and in-place host-to-device writes;
//   cuda_backend_modules.cc modules, functions, variables, kernel attributes and occupancy;
//   cuda_backend_vmm.cc     virtual memory management (cuMemCreate, cuMemMap, ...).
// Only those files include it: it needs cuda.h, which only the gpool_remote_server target has on
// its include path (and then defines GPOOL_HAVE_CUDA_H). Everything here is in namespace
// gpool::remote::server::cuda, so that in a unity batch its names cannot meet the same names in
// the anonymous namespaces of the target's other sources (emulated_backend.cc, ...).
#pragma once

#ifdef GPOOL_HAVE_CUDA_H
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "remote/server/backend.h"
#include "remote/server/cuda_driver.h"

namespace gpool::remote::server::cuda {

// The driver entry points of cuda_driver.h, resolved with dlsym by their exported (versioned)
// names. Member names are the macro-expanded ones (cuMemAlloc_v2), like every call site's.
struct Driver {
#define GPOOL_CU_FIELD(name, symbol, fallback, ...) CUresult (*name)(__VA_ARGS__) = nullptr;
  GPOOL_CU_FUNCS(GPOOL_CU_FIELD)
#undef GPOOL_CU_FIELD
  void* handle = nullptr;
  std::string path;

  // dlopen()s libcuda.so.1 and resolves every entry point (cuda_backend.cc).
  Status Load();
};

inline constexpr size_t kStagingBytes = size_t{4} << 20;
// Timed launches one session may have queued per device before Launch waits for the oldest: deep
// enough to hide launch latency for short kernels, short enough that a backlogged session's
// uncharged GPU work stays small against the arbiter's 2 ms slice for kernels of ~100 us.
inline constexpr size_t kMaxTimedInFlight = 16;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(Driver d) : cu_(d) {}

  Status Init();

  std::string_view name() const override { return "cuda"; }
  int DeviceCount() override { return static_cast<int>(devs_.size()); }

  // Devices (cuda_backend.cc).
  Result GetProps(uint32_t dev, proto::DeviceProps* p) override;
  Result GetAttribute(uint32_t dev, int32_t attr, int32_t* value) override;

  // Memory (cuda_backend_memory.cc).
  Result MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) override;
  Result Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) override;
  Result Free(uint64_t ptr) override;
  Result CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) override;
  std::span<std::byte> H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) override;
  Result CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) override;
  Result CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) override;
  bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) override;
  Result FinishD2H(int slot, std::span<const std::byte>* data) override;
  std::span<const std::byte> HostView(uint64_t, uint64_t) override;
  Result CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) override;
  Result Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) override;
  Result Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height,
                  uint64_t stream) override;
  Result Copy2D(const proto::Memcpy2D& c, std::byte* host_out) override;

  // Modules, functions and variables (cuda_backend_modules.cc).
  Result LoadModule(uint64_t module, std::span<const std::byte> image) override;
  Result RegisterFunction(uint64_t module, uint64_t func, const std::string& name) override;
  Result RegisterVar(uint64_t module, uint64_t var, const std::string& name, uint64_t,
                     bool) override;
  Result UnloadModule(uint64_t module) override;
  Result GetParamInfo(uint64_t func, proto::ParamInfo* out) override;
  Result GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) override;
  Result FuncAttributes(uint64_t func, proto::FuncAttrs* out) override;
  Result FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) override;
  Result Occupancy(uint64_t func, int32_t block_size, uint64_t shmem, int32_t* blocks) override;

  // Launches and their kernel time (cuda_backend.cc).
  Result Launch(const proto::Launch& l, uint64_t* ns) override;
  Result LaunchCooperative(const proto::Launch& l, uint64_t* ns) override;
  uint64_t TakeKernelTime(uint32_t dev) override;

  // Streams, events, contexts (cuda_backend.cc).
  Result StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) override;
  Result StreamDestroy(uint64_t id) override;
  Result StreamSync(uint32_t dev, uint64_t id) override;
  Result StreamQuery(uint32_t dev, uint64_t id) override;
  Result StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) override;
  Result EventCreate(uint32_t dev, uint64_t id, uint32_t flags) override;
  Result EventRecord(uint32_t dev, uint64_t event, uint64_t stream) override;
  Result EventSync(uint64_t event) override;
  Result EventQuery(uint64_t event) override;
  Result EventElapsed(uint64_t start, uint64_t end, float* ms) override;
  Result EventDestroy(uint64_t event) override;
  Result DeviceSync(uint32_t dev) override;
  Result DeviceReset(uint32_t dev) override;
  Result SetLimit(uint32_t dev, int32_t limit, uint64_t value) override;
  Result GetLimit(uint32_t dev, int32_t limit, uint64_t* value) override;
  Result SetDeviceFlags(uint32_t dev, uint32_t flags) override;
  Result PeerAccess(uint32_t dev, uint32_t peer, bool enable) override;
  Result GetDeviceFlags(uint32_t dev, uint32_t* flags) override;

  // Virtual memory management (cuda_backend_vmm.cc).
  Result MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) override;
  Result MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment, uint64_t hint,
                           uint64_t* ptr) override;
  Result MemAddressFree(uint64_t ptr, uint64_t size) override;
  Result MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) override;
  Result MemRelease(uint64_t handle, std::vector<uint64_t>* gone) override;
  Result MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) override;
  Result MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) override;
  Result MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) override;

 private:
  struct Dev {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
  };
  struct StagingPair {
    void* buf[2] = {nullptr, nullptr};
    CUevent done[2] = {nullptr, nullptr};  // recorded after each buffer's copy
    int next = 0;
  };
  struct Read {  // a StartD2H in flight, per slot, until FinishD2H
    StagingPair* pair = nullptr;
    uint32_t dev = 0;
    uint64_t size = 0;
    Result r;  // a failure to queue it, reported by FinishD2H
  };
  struct Timed {
    CUevent start = nullptr, end = nullptr;
  };
  struct DevTiming {
    std::vector<CUevent> pool;  // created with timing enabled, not in use
    std::deque<Timed> pending;  // recorded around a launch, oldest first
  };
  // A VMM allocation handle as the backend tracks it (cuda_backend_vmm.cc).
  struct VmmHandle {
    uint32_t dev = 0;
    uint64_t size = 0;
    int maps = 0;
    bool released = false;
  };

  // Errors, devices, contexts, streams (cuda_backend.cc).
  std::string Msg(const char* call, CUresult r);
  Result R(const char* call, CUresult r);
  Result Use(uint32_t dev);
  Result Stream(uint64_t id, uint32_t dev, CUstream* s);
  Result Exists(uint32_t dev);
  template <class Keep>
  void ResetContextState(uint32_t dev, Keep& keep);
  // Kernel time (cuda_backend.cc).
  Result LaunchOn(const proto::Launch& l, uint64_t* ns, bool cooperative);
  std::string LaunchDescription(const proto::Launch& l) const;
  Result TimingEvent(uint32_t dev, CUevent* e);
  uint64_t Harvest(DevTiming& t);
  void DropTimed(DevTiming& t);
  // Memory (cuda_backend_memory.cc).
  uint32_t DevOf(uint64_t p);
  Result CheckRange(uint64_t p, uint64_t n, const char* what);
  Result GetStaging(uint32_t dev, StagingPair** out, bool reads = false);
  // Modules (cuda_backend_modules.cc).
  Result Module(uint64_t module, uint32_t dev, CUmodule* out);
  Result UnloadCopy(uint64_t module, uint32_t dev);
  Result Function(uint64_t func, uint32_t dev, CUfunction* out);
  uint32_t Cur() { return current_ == UINT32_MAX ? 0 : current_; }
  // Virtual memory management (cuda_backend_vmm.cc).
  CUmemAllocationProp VmmProp(uint32_t dev);
  void VmmGone(std::map<uint64_t, VmmHandle>::iterator it, std::vector<uint64_t>* gone);

  std::map<uint64_t, VmmHandle> vmm_handles_;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> vmm_maps_;  // ptr -> (size, handle)
  Driver cu_;
  std::vector<Dev> devs_;
  uint32_t current_ = UINT32_MAX;
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> owner_;  // ptr -> (size, device)
  std::unordered_map<uint64_t, std::vector<std::byte>> images_;
  std::map<std::pair<uint64_t, uint32_t>, CUmodule> loaded_;
  std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> funcs_, vars_;
  std::unordered_map<uint64_t, std::set<uint64_t>> globals_;  // module -> its variables' addresses
  std::map<std::pair<uint64_t, uint32_t>, CUfunction> cufuncs_;
  std::unordered_map<uint64_t, std::pair<uint32_t, CUstream>> streams_;
  std::unordered_map<uint64_t, std::pair<uint32_t, CUevent>> events_;  // id -> (device, event)
  // cuCtxGetLimit's answer before the session first set each (device, limit): what DeviceReset
  // restores. Peer access the session enabled, (device, peer): what DeviceReset disables.
  std::map<std::pair<uint32_t, int32_t>, size_t> default_limits_;
  std::set<std::pair<uint32_t, uint32_t>> peers_;
  std::vector<StagingPair> staging_;  // per device
  std::vector<StagingPair> read_staging_;  // per device: StartD2H's buffers
  Read reads_[2];
  StagingPair* target_ = nullptr;     // H2DTarget's buffer, until CommitH2D
  std::vector<DevTiming> timing_;  // per device
};

}  // namespace gpool::remote::server::cuda

#endif  // GPOOL_HAVE_CUDA_H
