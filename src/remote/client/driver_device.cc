// The driver stand-in's device-level calls beyond driver_api.cc's: the device reset
// (cuDevicePrimaryCtxReset, which NVIDIA's runtime calls for cudaDeviceReset; see driver_state.h
// for the records it clears), the lookup of a device by its PCI bus id, and the profiler's
// start and stop.
#include <cuda.h>
#include <cudaProfiler.h>

#include <cstdio>

#include <vector>

#include "remote/client/driver_state.h"

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

// The server resets the device first (proto::DeviceReset: its allocations, streams, events,
// limits, flags and loaded module copies, in this session); then the client forgets what lived
// there (what CUDA's cudaDeviceReset destroys): the device's allocations, streams and
// events (their handles are refused from now on), each module variable's address on the device
// (the server loads the module again at its next use, with the variables' initial values), the
// devices function attributes were sent for, and the primary context's per-context storage,
// whose destructors run as at a context's destruction (NVIDIA's runtime keeps its per-context
// state there and builds it again at its next call). The primary context's handle and retain
// count stay, as CUDA's do. Modules and libraries stay loaded: a library is not a context's.
// Limits: page-locked host memory (cuMemHostAlloc) is kept, where CUDA frees it with the
// context; other contexts of the device (cuCtxCreate) keep their records.
CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  const char* call = "cuDevicePrimaryCtxReset_v2";
  if (CUresult r = Ready(call)) return r;
  if (dev < 0 || dev >= D().device_count()) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("device {} is not one of the {} "
                "device(s) GPOOL_DEVICES lists", dev, D().device_count()));
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::DeviceReset q;
  q.device = D().Index(dev);
  if (CUresult r = Call(l, q, call)) return r;
  std::map<void*, Ctx::Stored> storage;
  Ctx* primary;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    Driver& d = D();
    // Mappings (cuMemMap) belong to no context and survive the reset, as on a GPU.
    std::erase_if(d.allocs, [&](const auto& kv) { return kv.second.device == dev && !kv.second.mapped; });
    std::vector<const Stream*> streams;
    for (const Stream* s : d.streams) {
      if (s->device == dev) streams.push_back(s);
    }
    for (const Stream* s : streams) {
      d.streams.erase(s);
      delete s;
    }
    std::vector<const Event*> events;
    for (const Event* e : d.events) {
      if (e->device == dev) events.push_back(e);
    }
    for (const Event* e : events) {
      d.events.erase(e);
      delete e;
    }
    for (const Module* cm : d.modules) {
      auto* m = const_cast<Module*>(cm);  // the live set holds const pointers to owned records
      if (m->link != l) continue;
      for (auto& [name, g] : m->globals) g.symbols.erase(dev);
      for (auto& [name, f] : m->functions) {
        f->attr_devices.erase(dev);
        f->server_attrs_known = false;
      }
    }
    primary = d.primary[dev];
    storage.swap(primary->storage);
  }
  for (const auto& [key, v] : storage) {
    if (v.dtor) v.dtor(reinterpret_cast<CUcontext>(primary), key, v.value);
  }
  return CUDA_SUCCESS;
}

// The device whose PCI bus id (cuDeviceGetPCIBusId's "dddd:bb:dd.f", or "bb:dd.f" in domain 0,
// hexadecimal, any case) is `id`. Each device of the program has its own (pool.h,
// PoolPciAddress), so at most one matches.
CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* id) {
  const char* call = "cuDeviceGetByPCIBusId";
  if (!dev || !id) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null argument");
  if (CUresult r = Ready(call)) return r;
  unsigned dom = 0, bus = 0, slot = 0, fn = 0;
  int used = 0;
  if (std::sscanf(id, "%x:%x:%x.%x%n", &dom, &bus, &slot, &fn, &used) != 4 || id[used] != 0) {
    dom = 0;
    used = 0;
    if (std::sscanf(id, "%x:%x.%x%n", &bus, &slot, &fn, &used) != 3 || id[used] != 0) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("\"{}\" is not a PCI bus id (dddd:bb:dd.f)", id));
    }
  }
  for (int d = 0; d < D().device_count(); ++d) {
    char own[32];
    if (CUresult r = cuDeviceGetPCIBusId(own, sizeof own, d)) return r;
    unsigned od = 0, ob = 0, os = 0, of = 0;
    if (std::sscanf(own, "%x:%x:%x.%x", &od, &ob, &os, &of) == 4 && od == dom && ob == bus &&
        os == slot && of == fn) {
      *dev = d;
      return CUDA_SUCCESS;
    }
  }
  return Fail(call, CUDA_ERROR_INVALID_DEVICE,
              fmt::format("no device of the program has PCI bus id {}", id));
}

// The profiler's start and stop (NVIDIA's runtime maps cudaProfilerStart/Stop to them; matrixMul
// and asyncAPI of cuda-samples call them). No profiler is ever attached to a pooled GPU's client,
// so they do nothing and succeed, as the real driver's do without one; like those, they want a
// current context.
CUresult cuProfilerStart(void) {
  int dev = 0;
  return CurrentDevice("cuProfilerStart", &dev);
}
CUresult cuProfilerStop(void) {
  int dev = 0;
  return CurrentDevice("cuProfilerStop", &dev);
}

// The CUDA 7.0 export (NVIDIA's runtime asks cuGetProcAddress for it): the same ABI.
CUresult cuDevicePrimaryCtxReset_v1(CUdevice dev) __asm__("cuDevicePrimaryCtxReset");
CUresult cuDevicePrimaryCtxReset_v1(CUdevice dev) { return cuDevicePrimaryCtxReset(dev); }

}  // extern "C"
#pragma GCC visibility pop
