// What a session's leases grant, and the backend wrapper that enforces it.
//
// A lease names one GPU (HOST:PORT/INDEX) and its limits. A session may hold several (one per GPU
// of this server that an aggregated program uses): it may then use exactly those devices, each
// within its own lease's memory. LeaseGuardBackend sits between the Session and the real backend
// and refuses (cudaErrorNotPermitted, naming the GPU and the leases) any call on another device,
// and any allocation beyond that device's lease (cudaErrorMemoryAllocation). The memory counts
// for the lease, across all its sessions at once, and sessions without a limit share what no
// lease reserved on the GPU: the server's LeaseLedger keeps both across the worker processes, and
// the guard takes and gives back every allocation there. Calls addressed by
// pointer or by id (copies, frees, events, streams) need no check: this session's worker has only
// the pointers it allocated on granted devices and the streams it created on them.
// A variable's address is asked for one device (GetSymbol, GetModuleInfo), checked like any
// device call: a session cannot learn, or then write, an ungranted device's copy of a module's
// variables. Limits: modules are loaded per device lazily by the backend. Thread safety: like any backend, one session thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "remote/server/backend.h"
#include "remote/server/lease_ledger.h"
#include "remote/server/session.h"

namespace gpool::remote::server {

struct DeviceGrant {
  uint32_t device = 0;
  uint64_t memory_bytes = 0;  // 0: no limit below the device's own
  double compute_share = 1.0;
  std::string gpu;  // "HOST:PORT/INDEX" as the lease names it, for messages
  // Shared by every session of the lease (its token's signature): memory and compute share are
  // the lease's across them. Empty: this session's own (--insecure).
  std::string lease_id;
  std::string lease_name;  // "the lease of tenant a (job j)", for messages
};

// The outcome of checking a Hello's lease tokens.
struct SessionGrant {
  SessionLimits limits;             // session-wide (--session-mem-limit, the compute share)
  std::vector<DeviceGrant> devices;  // empty: every device (--insecure)
  // The earliest expiry of the leases (Unix seconds; 0: none) and the GPU whose lease it is: the
  // session ends then (SessionDeadline), whatever it is doing.
  int64_t expires_at = 0;
  std::string expiring_gpu;
};

class LeaseGuardBackend final : public Backend {
 public:
  // `inner` and `ledger` outlive this; `grants` is non-empty; `entry` is this session's in
  // `ledger`, joined with the grants' claims (LedgerClaims). `every_device` (--insecure): no
  // device is refused (one beyond the grants, e.g. beyond the backend's count, is the backend's
  // to answer), only memory is accounted.
  LeaseGuardBackend(Backend* inner, std::vector<DeviceGrant> grants, LeaseLedger* ledger,
                    int entry, bool every_device = false);

  std::string_view name() const override { return inner_->name(); }
  int DeviceCount() override { return inner_->DeviceCount(); }
  Result GetProps(uint32_t dev, proto::DeviceProps* out) override;
  Result GetAttribute(uint32_t dev, int32_t attr, int32_t* value) override;
  Result MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) override;
  Result Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) override;
  Result Free(uint64_t ptr) override;
  Result CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) override {
    return inner_->CopyH2D(dst, src, stream);
  }
  std::span<std::byte> H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) override {
    return inner_->H2DTarget(dst, size, stream);
  }
  Result CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) override {
    return inner_->CommitH2D(dst, data, stream);
  }
  Result CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) override {
    return inner_->CopyD2H(dst, src, size, stream);
  }
  bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) override {
    return inner_->StartD2H(src, size, stream, slot);
  }
  Result FinishD2H(int slot, std::span<const std::byte>* data) override {
    return inner_->FinishD2H(slot, data);
  }
  std::span<const std::byte> HostView(uint64_t src, uint64_t size) override {
    return inner_->HostView(src, size);
  }
  Result CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) override {
    return inner_->CopyD2D(dst, src, size, stream);
  }
  Result Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) override {
    return inner_->Memset(dst, value, size, stream);
  }
  Result Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height,
                  uint64_t stream) override {
    return inner_->Memset2D(dst, pitch, value, width, height, stream);
  }
  Result Copy2D(const proto::Memcpy2D& c, std::byte* host_out) override {
    return inner_->Copy2D(c, host_out);
  }
  Result LoadModule(uint64_t module, std::span<const std::byte> image) override {
    return inner_->LoadModule(module, image);
  }
  Result RegisterFunction(uint64_t module, uint64_t func, const std::string& name) override {
    return inner_->RegisterFunction(module, func, name);
  }
  Result RegisterVar(uint64_t module, uint64_t var, const std::string& name, uint64_t size,
                     bool constant) override {
    return inner_->RegisterVar(module, var, name, size, constant);
  }
  Result UnloadModule(uint64_t module) override { return inner_->UnloadModule(module); }
  Result GetParamInfo(uint64_t func, proto::ParamInfo* out) override {
    return inner_->GetParamInfo(func, out);
  }
  Result GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) override;
  Result FuncAttributes(uint64_t func, proto::FuncAttrs* out) override {
    return inner_->FuncAttributes(func, out);
  }
  Result Occupancy(uint64_t func, int32_t block_size, uint64_t shmem, int32_t* blocks) override {
    return inner_->Occupancy(func, block_size, shmem, blocks);
  }
  Result Launch(const proto::Launch& l, uint64_t* ns) override;
  Result LaunchCooperative(const proto::Launch& l, uint64_t* ns) override;
  uint64_t TakeKernelTime(uint32_t dev) override { return inner_->TakeKernelTime(dev); }
  Result StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) override;
  Result StreamDestroy(uint64_t id) override { return inner_->StreamDestroy(id); }
  Result StreamSync(uint32_t dev, uint64_t id) override;
  Result StreamQuery(uint32_t dev, uint64_t id) override;
  Result StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) override;
  Result EventCreate(uint32_t dev, uint64_t id, uint32_t flags) override;
  Result EventRecord(uint32_t dev, uint64_t event, uint64_t stream) override;
  Result EventSync(uint64_t event) override { return inner_->EventSync(event); }
  Result EventQuery(uint64_t event) override { return inner_->EventQuery(event); }
  Result EventElapsed(uint64_t start, uint64_t end, float* ms) override {
    return inner_->EventElapsed(start, end, ms);
  }
  Result EventDestroy(uint64_t event) override { return inner_->EventDestroy(event); }
  Result DeviceSync(uint32_t dev) override;
  Result DeviceReset(uint32_t dev) override;
  Result SetLimit(uint32_t dev, int32_t limit, uint64_t value) override;
  Result GetLimit(uint32_t dev, int32_t limit, uint64_t* value) override;
  Result SetDeviceFlags(uint32_t dev, uint32_t flags) override;
  Result GetDeviceFlags(uint32_t dev, uint32_t* flags) override;
  Result PeerAccess(uint32_t dev, uint32_t peer, bool enable) override;
  Result FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) override;
  // Virtual memory management: a handle's memory is taken from the lease as cudaMalloc's is, at
  // MemCreate, and given back when the backend says it is gone; mapping and address space are
  // the session's own (by address or handle) and pass.
  Result MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) override;
  Result MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment, uint64_t hint,
                           uint64_t* ptr) override;
  Result MemAddressFree(uint64_t ptr, uint64_t size) override {
    return inner_->MemAddressFree(ptr, size);
  }
  Result MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) override;
  Result MemRelease(uint64_t handle, std::vector<uint64_t>* gone) override;
  Result MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) override {
    return inner_->MemMap(ptr, size, offset, handle);
  }
  Result MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) override;
  Result MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) override;

 private:
  // Ok when `dev` is granted; else cudaErrorNotPermitted naming it and the granted GPUs.
  Result Check(uint32_t dev, const char* call) const;

  Backend* inner_;
  std::map<uint32_t, DeviceGrant> grants_;
  LeaseLedger* ledger_;
  int entry_;
  bool every_device_;
  std::unordered_map<uint64_t, std::pair<uint32_t, uint64_t>> allocations_;  // ptr -> dev, size
  std::unordered_map<uint64_t, std::pair<uint32_t, uint64_t>> handles_;  // handle -> dev, size
  // Gives back to the ledger the memory of handles the backend freed.
  void GiveHandles(const std::vector<uint64_t>& gone);
};

// One grant per device (of several for one device, the last: as the guard keeps them).
std::vector<DeviceGrant> OneGrantPerDevice(std::vector<DeviceGrant> grants);
// What the session claims in the ledger for its grants; `totals[d]` is device d's memory as the
// backend reports it (0: unknown).
std::vector<LedgerClaim> LedgerClaims(const std::vector<DeviceGrant>& grants,
                                      const std::vector<uint64_t>& totals);

}  // namespace gpool::remote::server
