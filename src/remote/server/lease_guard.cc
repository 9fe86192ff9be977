#include "remote/server/lease_guard.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpool::remote::server {

std::vector<DeviceGrant> OneGrantPerDevice(std::vector<DeviceGrant> grants) {
  std::map<uint32_t, DeviceGrant> by_device;
  for (DeviceGrant& g : grants) {
    uint32_t dev = g.device;
    by_device[dev] = std::move(g);
  }
  std::vector<DeviceGrant> out;
  for (auto& [dev, g] : by_device) out.push_back(std::move(g));
  return out;
}

std::vector<LedgerClaim> LedgerClaims(const std::vector<DeviceGrant>& grants,
                                      const std::vector<uint64_t>& totals) {
  std::vector<LedgerClaim> claims;
  for (const DeviceGrant& g : grants) {
    claims.push_back({.device = g.device,
                      .lease_id = g.lease_id,
                      .limit = g.memory_bytes,
                      .device_total = g.device < totals.size() ? totals[g.device] : 0,
                      .gpu = g.gpu,
                      .lease_name = g.lease_name});
  }
  return claims;
}

LeaseGuardBackend::LeaseGuardBackend(Backend* inner, std::vector<DeviceGrant> grants,
                                     LeaseLedger* ledger, int entry, bool every_device)
    : inner_(inner), ledger_(ledger), entry_(entry), every_device_(every_device) {
  for (DeviceGrant& g : grants) {
    uint32_t dev = g.device;
    grants_[dev] = std::move(g);
  }
}

Result LeaseGuardBackend::Check(uint32_t dev, const char* call) const {
  if (every_device_ || grants_.count(dev) != 0) return Result::Ok();
  // The server's own HOST:PORT, as the leases name it.
  const std::string& any = grants_.begin()->second.gpu;
  std::string server = any.substr(0, any.rfind('/'));
  std::string granted;
  for (const auto& [d, g] : grants_) granted += (granted.empty() ? "" : ", ") + g.gpu;
  return Err(kErrNotPermitted,
             fmt::format("{} on GPU {}/{} refused: this session's lease covers only {}", call,
                         server, dev, granted));
}

Result LeaseGuardBackend::GetProps(uint32_t dev, proto::DeviceProps* out) {
  if (Result r = Check(dev, "cudaGetDeviceProperties"); !r.ok()) return r;
  Result r = inner_->GetProps(dev, out);
  auto g = grants_.find(dev);
  if (r.ok() && g != grants_.end() && g->second.memory_bytes) {
    out->total_global_mem = std::min<uint64_t>(out->total_global_mem, g->second.memory_bytes);
  }
  return r;
}

Result LeaseGuardBackend::GetAttribute(uint32_t dev, int32_t attr, int32_t* value) {
  if (Result r = Check(dev, "cudaDeviceGetAttribute"); !r.ok()) return r;
  return inner_->GetAttribute(dev, attr, value);
}

// The lease's limit and what its sessions together left of it (or, without a limit, the GPU's
// memory less the leases' reservations and what sessions without a limit hold).
Result LeaseGuardBackend::MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) {
  if (Result r = Check(dev, "cudaMemGetInfo"); !r.ok()) return r;
  Result r = inner_->MemGetInfo(dev, free, total);
  uint64_t limit = 0, room = 0;
  if (r.ok() && ledger_->Room(entry_, dev, &limit, &room)) {
    *total = std::min(*total, limit);
    *free = std::min(*free, room);
  }
  return r;
}

Result LeaseGuardBackend::Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) {
  if (Result r = Check(dev, "cudaMalloc"); !r.ok()) return r;
  auto g = grants_.find(dev);
  if (g == grants_.end()) return inner_->Malloc(dev, size, ptr);  // every_device_: not ours
  if (Status taken = ledger_->Take(entry_, dev, size); !taken.ok()) {
    return Err(kErrMemoryAllocation,
               fmt::format("cudaMalloc({} bytes) on GPU {} refused: {}", size, g->second.gpu,
                           taken.message()));
  }
  Result r = inner_->Malloc(dev, size, ptr);
  if (r.ok()) {
    allocations_[*ptr] = {dev, size};
  } else {
    ledger_->Give(entry_, dev, size);
  }
  return r;
}

Result LeaseGuardBackend::Free(uint64_t ptr) {
  Result r = inner_->Free(ptr);
  if (r.ok()) {
    auto it = allocations_.find(ptr);
    if (it != allocations_.end()) {
      ledger_->Give(entry_, it->second.first, it->second.second);
      allocations_.erase(it);
    }
  }
  return r;
}

Result LeaseGuardBackend::GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) {
  if (Result r = Check(dev, "symbol lookup (cudaMemcpyToSymbol, cudaGetSymbolAddress...)"); !r.ok()) {
    return r;
  }
  return inner_->GetSymbol(var, dev, ptr, size);
}

Result LeaseGuardBackend::Launch(const proto::Launch& l, uint64_t* ns) {
  // A launch on a stream runs on that stream's device, checked when the stream was created.
  if (l.stream == 0) {
    if (Result r = Check(l.device, "kernel launch"); !r.ok()) return r;
  }
  return inner_->Launch(l, ns);
}
Result LeaseGuardBackend::LaunchCooperative(const proto::Launch& l, uint64_t* ns) {
  if (l.stream == 0) {
    if (Result r = Check(l.device, "cooperative kernel launch"); !r.ok()) return r;
  }
  return inner_->LaunchCooperative(l, ns);
}

Result LeaseGuardBackend::StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) {
  if (Result r = Check(dev, "cudaStreamCreate"); !r.ok()) return r;
  return inner_->StreamCreate(dev, id, flags, priority);
}

Result LeaseGuardBackend::StreamSync(uint32_t dev, uint64_t id) {
  if (Result r = Check(dev, "cudaStreamSynchronize"); !r.ok()) return r;
  return inner_->StreamSync(dev, id);
}

Result LeaseGuardBackend::StreamQuery(uint32_t dev, uint64_t id) {
  if (Result r = Check(dev, "cudaStreamQuery"); !r.ok()) return r;
  return inner_->StreamQuery(dev, id);
}

Result LeaseGuardBackend::StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) {
  if (Result r = Check(dev, "cudaStreamWaitEvent"); !r.ok()) return r;
  return inner_->StreamWaitEvent(dev, stream, event);
}

Result LeaseGuardBackend::EventCreate(uint32_t dev, uint64_t id, uint32_t flags) {
  if (Result r = Check(dev, "cudaEventCreate"); !r.ok()) return r;
  return inner_->EventCreate(dev, id, flags);
}

Result LeaseGuardBackend::EventRecord(uint32_t dev, uint64_t event, uint64_t stream) {
  if (Result r = Check(dev, "cudaEventRecord"); !r.ok()) return r;
  return inner_->EventRecord(dev, event, stream);
}

Result LeaseGuardBackend::DeviceSync(uint32_t dev) {
  if (Result r = Check(dev, "cudaDeviceSynchronize"); !r.ok()) return r;
  return inner_->DeviceSync(dev);
}

// The device's allocations are gone once the reset succeeded: its lease's memory is free again.
// (After a failed one some may remain, so they stay counted: the limit errs on the safe side.)
Result LeaseGuardBackend::DeviceReset(uint32_t dev) {
  if (Result r = Check(dev, "cudaDeviceReset"); !r.ok()) return r;
  Result r = inner_->DeviceReset(dev);
  if (r.ok()) {
    std::erase_if(allocations_, [&](const auto& kv) { return kv.second.first == dev; });
    ledger_->GiveAll(entry_, dev);
    // Memory handles belong to no context and survive the reset: still the lease's.
    for (const auto& [h, ds] : handles_) {
      if (ds.first == dev) (void)ledger_->Take(entry_, dev, ds.second);
    }
  }
  return r;
}

Result LeaseGuardBackend::SetLimit(uint32_t dev, int32_t limit, uint64_t value) {
  if (Result r = Check(dev, "cudaDeviceSetLimit"); !r.ok()) return r;
  return inner_->SetLimit(dev, limit, value);
}

Result LeaseGuardBackend::GetLimit(uint32_t dev, int32_t limit, uint64_t* value) {
  if (Result r = Check(dev, "cudaDeviceGetLimit"); !r.ok()) return r;
  return inner_->GetLimit(dev, limit, value);
}

Result LeaseGuardBackend::SetDeviceFlags(uint32_t dev, uint32_t flags) {
  if (Result r = Check(dev, "cudaSetDeviceFlags"); !r.ok()) return r;
  return inner_->SetDeviceFlags(dev, flags);
}

Result LeaseGuardBackend::GetDeviceFlags(uint32_t dev, uint32_t* flags) {
  if (Result r = Check(dev, "cudaGetDeviceFlags"); !r.ok()) return r;
  return inner_->GetDeviceFlags(dev, flags);
}

Result LeaseGuardBackend::PeerAccess(uint32_t dev, uint32_t peer, bool enable) {
  const char* call = enable ? "cudaDeviceEnablePeerAccess" : "cudaDeviceDisablePeerAccess";
  if (Result r = Check(dev, call); !r.ok()) return r;
  if (Result r = Check(peer, call); !r.ok()) return r;
  return inner_->PeerAccess(dev, peer, enable);
}

Result LeaseGuardBackend::FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) {
  if (Result r = Check(dev, "cudaFuncSetAttribute"); !r.ok()) return r;
  return inner_->FuncSetAttribute(func, dev, attr, value);
}

Result LeaseGuardBackend::MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) {
  if (Result r = Check(dev, "cuMemGetAllocationGranularity"); !r.ok()) return r;
  return inner_->MemGranularity(dev, recommended, bytes);
}

Result LeaseGuardBackend::MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment,
                                            uint64_t hint, uint64_t* ptr) {
  if (Result r = Check(dev, "cuMemAddressReserve"); !r.ok()) return r;
  return inner_->MemAddressReserve(dev, size, alignment, hint, ptr);
}

Result LeaseGuardBackend::MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) {
  if (Result r = Check(dev, "cuMemCreate"); !r.ok()) return r;
  auto g = grants_.find(dev);
  if (g == grants_.end()) return inner_->MemCreate(dev, size, handle);  // every_device_: not ours
  if (Status taken = ledger_->Take(entry_, dev, size); !taken.ok()) {
    return Err(kErrMemoryAllocation,
               fmt::format("cuMemCreate({} bytes) on GPU {} refused: {}", size, g->second.gpu,
                           taken.message()));
  }
  Result r = inner_->MemCreate(dev, size, handle);
  if (r.ok()) {
    handles_[*handle] = {dev, size};
  } else {
    ledger_->Give(entry_, dev, size);
  }
  return r;
}

void LeaseGuardBackend::GiveHandles(const std::vector<uint64_t>& gone) {
  for (uint64_t h : gone) {
    auto it = handles_.find(h);
    if (it == handles_.end()) continue;
    ledger_->Give(entry_, it->second.first, it->second.second);
    handles_.erase(it);
  }
}

Result LeaseGuardBackend::MemRelease(uint64_t handle, std::vector<uint64_t>* gone) {
  size_t before = gone->size();
  Result r = inner_->MemRelease(handle, gone);
  GiveHandles({gone->begin() + static_cast<ptrdiff_t>(before), gone->end()});
  return r;
}

Result LeaseGuardBackend::MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) {
  size_t before = gone->size();
  Result r = inner_->MemUnmap(ptr, size, gone);
  GiveHandles({gone->begin() + static_cast<ptrdiff_t>(before), gone->end()});
  return r;
}

Result LeaseGuardBackend::MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) {
  if (Result r = Check(dev, "cuMemSetAccess"); !r.ok()) return r;
  return inner_->MemSetAccess(ptr, size, dev, flags);
}

}  // namespace gpool::remote::server
