// gpool's stand-in for libcuda.so.1: the CUDA driver API, remoted to GPU servers over the same
// links and protocol (link.h, pool.h): errors, devices, contexts,
// allocations, cuGetProcAddress. See driver_state.h for the state, driver_modules.cc for modules
// and launches, driver_streams.cc for streams and events, driver_copies.cc for copies and
// memsets, docs/remoting/driver-api.md ("The driver API") for coverage.
//
// Signatures come from the CUDA 13 cuda.h, whose macros give each definition its exported
// versioned name (cuMemAlloc here defines cuMemAlloc_v2). The per-thread default stream variants
// (_ptsz, _ptds), which cuda.h declares only for programs built with per-thread default streams,
// are defined at the end with explicit signatures; here they behave as the legacy ones (every
// default stream is the device's stream 0 on the server). Every other export of the real driver
// is a weak stub (driver_stubs.cc) that fails loudly, naming itself.
#include <cuda.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "remote/client/driver_exports.h"
#include "remote/client/driver_procs.h"
#include "remote/client/driver_graphs.h"

namespace gpool::remote::client {
namespace driver {

// The thread's context stack; back() is current. The vector is reached through a trivially
// destructible handle that stays valid to the end of the thread: libraries' exit handlers (NCCL's)
// call the driver after the thread's thread_local objects are destroyed, and then find an empty
// stack instead of a destroyed vector. The owner's destructor frees the vector (no leak per
// thread); a context pushed after that is not kept (the thread is ending).
class CtxStack {
 public:
  bool empty() const { return !v_ || v_->empty(); }
  Ctx*& back() { return v_->back(); }
  void pop_back() { v_->pop_back(); }
  void push_back(Ctx* c);
  void erase(const Ctx* c) { if (v_) std::erase(*v_, c); }
  void Free() {
    delete v_;
    v_ = nullptr;
    gone_ = true;
  }

 private:
  std::vector<Ctx*>* v_ = nullptr;
  bool gone_ = false;
};
static_assert(std::is_trivially_destructible_v<CtxStack>);
static thread_local CtxStack t_stack;
struct CtxStackOwner {
  ~CtxStackOwner() { t_stack.Free(); }
};
static thread_local CtxStackOwner t_stack_owner;
void CtxStack::push_back(Ctx* c) {
  if (!v_) {
    if (gone_) return;
    v_ = new std::vector<Ctx*>;
    (void)&t_stack_owner;  // constructs the owner, which frees the vector at thread exit
  }
  v_->push_back(c);
}

CUresult Fail(const char* call, CUresult e, const std::string& why) {
  Say(fmt::format("{}: {}", call, why));
  return e;
}

bool KnownResult(int32_t e) {
  switch (e) {
#define GPOOL_CU_ERROR(name, num, desc) case num:
#include "remote/client/cu_errors.inc"
#undef GPOOL_CU_ERROR
    return true;
  }
  return false;
}

CUresult ToCU(int32_t e) {
  switch (e) {
    case 9:   // cudaErrorInvalidConfiguration
    case 12:  // cudaErrorInvalidPitchValue
    case 21:  // cudaErrorInvalidMemcpyDirection
      return CUDA_ERROR_INVALID_VALUE;
    case 13:  // cudaErrorInvalidSymbol
      return CUDA_ERROR_NOT_FOUND;
    case 98:  // cudaErrorInvalidDeviceFunction
      return CUDA_ERROR_INVALID_HANDLE;
  }
  // Since CUDA 10.1 the runtime's numbers equal the driver's for the errors they share.
  return KnownResult(e) ? static_cast<CUresult>(e) : CUDA_ERROR_UNKNOWN;
}

CUresult FromReply(const proto::ReplyHead& h, ServerLink* l, const char* call) {
  if (h.async_error == 0) {
    int32_t code;
    std::string message;
    if (TakeDeferredError(l, &code, &message)) {
      Say(fmt::format("{}: asynchronous error on {}: {}", call, l->address(), message));
      return ToCU(code);
    }
  }
  if (h.async_error != 0) {
    Say(fmt::format("{}: asynchronous error on {}: {}", call, l->address(), h.async_message));
    return ToCU(h.async_error);
  }
  if (h.error != 0 && h.error != CUDA_ERROR_NOT_READY && !h.message.empty()) {
    Say(fmt::format("{}: {}: {}", call, l->address(), h.message));
  }
  return ToCU(h.error);
}

CUresult FromStatus(const Status& s, const char* call) {
  if (s.ok()) return CUDA_SUCCESS;
  static std::once_flag once;
  std::call_once(once, [&] { Say(fmt::format("{}: {}; CUDA calls on it now fail", call, s.message())); });
  return s.code() == StatusCode::kPermissionDenied ? CUDA_ERROR_NOT_PERMITTED
                                                   : CUDA_ERROR_DEVICE_UNAVAILABLE;
}

ServerLink* Driver::LinkLocked(int dev, CUresult* err, const char* call) {
  if (dev < 0 || dev >= device_count()) {
    *err = Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("device {} is not one of the {} "
                "device(s) GPOOL_DEVICES lists", dev, device_count()));
    return nullptr;
  }
  const DeviceRef& ref = env.devices[dev];
  if (auto it = links.find(ref.server); it != links.end()) {
    if (it->second->broken()) {
      *err = it->second->status().code() == StatusCode::kPermissionDenied
                 ? CUDA_ERROR_NOT_PERMITTED
                 : CUDA_ERROR_DEVICE_UNAVAILABLE;
      return nullptr;
    }
    return it->second.get();
  }
  if (auto it = link_errors.find(ref.server); it != link_errors.end()) {
    *err = it->second;
    return nullptr;
  }
  auto link = ConnectServer(env, ref.server);
  if (!link.ok()) {
    Say(fmt::format("{}: {}", call, link.status().message()));
    *err = link.status().code() == StatusCode::kPermissionDenied ? CUDA_ERROR_NOT_PERMITTED
                                                                  : CUDA_ERROR_DEVICE_UNAVAILABLE;
    link_errors[ref.server] = *err;
    return nullptr;
  }
  ServerLink* l = link->get();
  links[ref.server] = std::move(*link);
  if (ref.index >= l->device_count()) {
    *err = Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("GPOOL_DEVICES entry {}/{}: the "
                "server has {} device(s)", ref.server, ref.index, l->device_count()));
    return nullptr;
  }
  return l;
}

std::vector<ServerLink*> Driver::LinksLocked() const {
  std::vector<ServerLink*> out;
  for (const auto& [addr, l] : links) {
    if (l) out.push_back(l.get());
  }
  return out;
}

void LandAsyncReads(const std::vector<ServerLink*>& links) {
  for (ServerLink* l : links) {
    std::lock_guard<std::mutex> lk(l->mu());
    (void)l->WaitReads();
  }
}

int Driver::DeviceOfLocked(uint64_t p) const {
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return -1;
  --it;
  return p < it->first + std::max<uint64_t>(it->second.size, 1) ? it->second.device : -1;
}

CUresult Ready(const char* call) {
  if (D().initialized.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  return Fail(call, CUDA_ERROR_NOT_INITIALIZED, "cuInit has not been called");
}

CUresult CurrentDevice(const char* call, int* dev) {
  if (CUresult r = Ready(call)) return r;
  if (t_stack.empty() || t_stack.back() == nullptr) {
    return Fail(call, CUDA_ERROR_INVALID_CONTEXT, "no current context on this thread "
                "(cuCtxSetCurrent, cuCtxCreate or cuCtxPushCurrent first)");
  }
  *dev = t_stack.back()->device;
  return CUDA_SUCCESS;
}

CUresult ResolveStream(CUstream s, const char* call, int* dev, uint64_t* id, bool gate) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    *id = 0;
    if (CUresult r = CurrentDevice(call, dev)) return r;
  } else {
    if (CUresult r = Ready(call)) return r;
    auto* rec = reinterpret_cast<const Stream*>(s);
    std::lock_guard<std::mutex> lk(D().mu);
    if (!D().streams.count(rec)) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("stream {} is not a live stream",
                  static_cast<const void*>(s)));
    }
    *dev = rec->device;
    *id = rec->id;
  }
  if (gate) HostFnGate(*dev, *id);
  return CUDA_SUCCESS;
}

namespace {

CUresult CheckDevice(const char* call, CUdevice dev) {
  if (CUresult r = Ready(call)) return r;
  if (dev < 0 || dev >= D().device_count()) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("device {} is not one of the {} "
                "device(s) GPOOL_DEVICES lists", dev, D().device_count()));
  }
  return CUDA_SUCCESS;
}

CUresult Props(const char* call, CUdevice dev, const proto::DeviceProps** out) {
  if (CUresult r = CheckDevice(call, dev)) return r;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (auto it = D().props.find(dev); it != D().props.end()) {
      *out = &it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::GetDeviceProps q;
  q.device = D().Index(dev);
  proto::DeviceProps p;
  if (CUresult r = Call(l, q, &p, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  *out = &(D().props[dev] = std::move(p));  // unordered_map: references stay valid
  return CUDA_SUCCESS;
}

}  // namespace

CUresult FindCtx(const char* call, CUcontext c, Ctx** out) {
  auto* ctx = reinterpret_cast<Ctx*>(c);
  std::lock_guard<std::mutex> lk(D().mu);
  if (!D().contexts.count(ctx)) {
    return Fail(call, CUDA_ERROR_INVALID_CONTEXT, fmt::format("context {} is not a live context",
                static_cast<const void*>(c)));
  }
  *out = ctx;
  return CUDA_SUCCESS;
}

namespace {

CUresult CreateCtx(const char* call, CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null context pointer");
  if (CUresult r = CheckDevice(call, dev)) return r;
  auto* ctx = new Ctx{dev, false, flags};
  {
    std::lock_guard<std::mutex> lk(D().mu);
    D().contexts.insert(ctx);
  }
  t_stack.push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult DevProps(const char* call, CUdevice dev, const proto::DeviceProps** out) {
  return Props(call, dev, out);
}
}  // namespace driver

int DriverUnsupported(const char* name) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lk(mu);
  if (said.insert(name).second) {
    driver::Say(fmt::format("{} is not supported by gpool's libcuda.so.1 stand-in (returning "
                            "CUDA_ERROR_NOT_SUPPORTED)", name));
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace gpool::remote::client

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;
using gpool::remote::client::LookupProc;
using gpool::remote::client::ProcFound;
using gpool::remote::client::PoolPciAddress;

#pragma GCC visibility push(default)
extern "C" {

// ---- errors, versions, initialisation

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  switch (static_cast<int>(error)) {
#define GPOOL_CU_ERROR(name, num, desc) case num: *pStr = #name; return CUDA_SUCCESS;
#include "remote/client/cu_errors.inc"
#undef GPOOL_CU_ERROR
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  switch (static_cast<int>(error)) {
#define GPOOL_CU_ERROR(name, num, desc) case num: *pStr = desc; return CUDA_SUCCESS;
#include "remote/client/cu_errors.inc"
#undef GPOOL_CU_ERROR
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;  // the API this stand-in implements (the toolkit's headers)
  return CUDA_SUCCESS;
}

// Checks the environment and connects to every server GPOOL_DEVICES names (NVIDIA's runtime asks
// every device's name and attributes at its start anyway). A server that refuses the session (a
// bad, expired or missing lease) or cannot be reached fails cuInit, naming it, with
// CUDA_ERROR_NOT_PERMITTED or CUDA_ERROR_DEVICE_UNAVAILABLE: NVIDIA's runtime returns cuInit's
// error from the program's first call (a failure after cuInit, during its start-up, it reports as
// cudaErrorInitializationError), so the program sees cudaErrorNotPermitted for a refused lease.
// Later calls of cuInit return the same.
CUresult cuInit(unsigned int flags) {
  if (flags != 0) return Fail("cuInit", CUDA_ERROR_INVALID_VALUE, fmt::format("flags {} (want 0)", flags));
  Driver& d = D();
  if (d.device_count() == 0) return Fail("cuInit", CUDA_ERROR_NO_DEVICE, d.env.env_error);
  std::lock_guard<std::mutex> lk(d.mu);
  if (d.primary.empty()) {
    for (int i = 0; i < d.device_count(); ++i) {
      auto* c = new Ctx{i, true, 0};  // never freed: primary contexts live as long as the process
      d.primary.push_back(c);
      d.contexts.insert(c);
    }
    d.primary_refs.assign(d.device_count(), 0);
    d.initialized.store(true, std::memory_order_release);
    // GPOOL_DRIVER_STATS=1: at exit, how many modules and libraries the program loaded and how
    // many of them reached a server (lazy loading, driver_modules.cc).
    const char* stats = std::getenv("GPOOL_DRIVER_STATS");
    if (stats && std::strcmp(stats, "1") == 0) {
      std::atexit([] {
        Say(fmt::format("driver stats: {} modules and libraries loaded, {} sent to a server",
                        D().modules_loaded.load(), D().modules_sent.load()));
      });
    }
  }
  for (int i = 0; i < d.device_count(); ++i) {
    CUresult err;
    if (!d.LinkLocked(i, &err, "cuInit")) return err;
  }
  return CUDA_SUCCESS;
}

// ---- devices

CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuDeviceGetCount")) return r;
  *count = D().device_count();
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice("cuDeviceGet", ordinal)) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const proto::DeviceProps* p;
  if (CUresult r = Props("cuDeviceGetName", dev, &p)) return r;
  std::snprintf(name, static_cast<size_t>(len), "%s", p->name.c_str());
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  const proto::DeviceProps* p;
  if (CUresult r = Props("cuDeviceTotalMem_v2", dev, &p)) return r;
  *bytes = p->total_global_mem;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  const proto::DeviceProps* p;
  if (CUresult r = Props("cuDeviceGetUuid_v2", dev, &p)) return r;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, p->uuid.data(), std::min<size_t>(sizeof uuid->bytes, p->uuid.size()));
  return CUDA_SUCCESS;
}
// The PCI address the device shows the program, in the driver's form "dddd:bb:dd.0": bus and
// device numbers are the GPU's own on its server, the domain gpool's for its server, unique per
// device of the program (pool.h, PoolPciAddress; the NVML stand-in says the same). NCCL asks at
// communicator creation and refuses two ranks on one bus id.
CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  const char* call = "cuDeviceGetPCIBusId";
  if (!pciBusId || len <= 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null or empty buffer");
  int domain = 0, bus = 0, device = 0;
  if (CUresult r = cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev)) return r;
  if (CUresult r = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev)) return r;
  if (CUresult r = cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev)) return r;
  std::snprintf(pciBusId, static_cast<size_t>(len), "%04x:%02x:%02x.0", domain, bus, device);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  const char* call = "cuDeviceGetAttribute";
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice(call, dev)) return r;
  if (VmmAttribute(attrib, pi)) return CUDA_SUCCESS;
  if (attrib == CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID) {  // gpool's domain (cuDeviceGetPCIBusId)
    std::vector<std::pair<int, int>> own(D().device_count());
    for (int d = 0; d <= dev; ++d) {
      if (D().env.devices[d].server != D().env.devices[dev].server) continue;
      if (CUresult r = cuDeviceGetAttribute(&own[d].first, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d)) return r;
      if (CUresult r = cuDeviceGetAttribute(&own[d].second, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d)) {
        return r;
      }
    }
    *pi = PoolPciAddress(D().env.devices, own, dev).domain;
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (auto it = D().attrs.find({dev, static_cast<int>(attrib)}); it != D().attrs.end()) {
      *pi = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  // The attribute numbers are cudaDeviceAttr's, which the protocol carries. Cached: a device's
  // attributes do not change during a session.
  proto::GetAttribute q{.device = D().Index(dev), .attr = static_cast<int32_t>(attrib)};
  proto::IntValue v;
  if (CUresult r = Call(l, q, &v, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  D().attrs[{dev, static_cast<int>(attrib)}] = v.value;
  *pi = v.value;
  return CUDA_SUCCESS;
}

// ---- contexts

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxRetain", dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  ++D().primary_refs[dev];
  *pctx = reinterpret_cast<CUcontext>(D().primary[dev]);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxRelease_v2", dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  if (D().primary_refs[dev] == 0) {
    return Fail("cuDevicePrimaryCtxRelease_v2", CUDA_ERROR_INVALID_CONTEXT,
                fmt::format("device {}'s primary context is not retained", dev));
  }
  --D().primary_refs[dev];  // the context itself stays (its server state lives with the session)
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxGetState", dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  *flags = D().primary[dev]->flags;
  *active = D().primary_refs[dev] > 0;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxSetFlags_v2", dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  D().primary[dev]->flags = flags;  // scheduling hints: nothing to schedule on the client
  return CUDA_SUCCESS;
}
CUresult cuCtxCreate(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (params && (params->numExecAffinityParams > 0 || params->cigParams)) {
    return Fail("cuCtxCreate_v4", CUDA_ERROR_NOT_SUPPORTED,
                "execution affinity and CIG contexts are not supported by gpool");
  }
  return CreateCtx("cuCtxCreate_v4", pctx, flags, dev);
}
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateCtx("cuCtxCreate_v2", pctx, flags, dev);
}
CUresult cuCtxDestroy(CUcontext c) {
  const char* call = "cuCtxDestroy_v2";
  if (CUresult r = Ready(call)) return r;
  Ctx* ctx;
  if (CUresult r = FindCtx(call, c, &ctx)) return r;
  if (ctx->primary) {
    return Fail(call, CUDA_ERROR_INVALID_CONTEXT, "a primary context cannot be destroyed "
                "(cuDevicePrimaryCtxRelease)");
  }
  std::map<void*, Ctx::Stored> storage;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    D().contexts.erase(ctx);
    storage.swap(ctx->storage);
  }
  // The runtime's per-context state goes with the context (its destructors may call back in).
  for (const auto& [key, v] : storage) {
    if (v.dtor) v.dtor(c, key, v.value);
  }
  // Off this thread's stack (other threads' stacks may still name it: CUDA leaves that undefined;
  // here their calls find it gone and fail).
  t_stack.erase(ctx);
  delete ctx;
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext c) {
  if (CUresult r = Ready("cuCtxPushCurrent_v2")) return r;
  Ctx* ctx;
  if (CUresult r = FindCtx("cuCtxPushCurrent_v2", c, &ctx)) return r;
  t_stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext* pctx) {
  if (CUresult r = Ready("cuCtxPopCurrent_v2")) return r;
  if (t_stack.empty()) {
    return Fail("cuCtxPopCurrent_v2", CUDA_ERROR_INVALID_CONTEXT, "the context stack is empty");
  }
  if (pctx) *pctx = reinterpret_cast<CUcontext>(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c) {
  if (CUresult r = Ready("cuCtxSetCurrent")) return r;
  if (c == nullptr) {  // unbinds the current context
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  Ctx* ctx;
  if (CUresult r = FindCtx("cuCtxSetCurrent", c, &ctx)) return r;
  if (t_stack.empty()) {
    t_stack.push_back(ctx);
  } else {
    t_stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuCtxGetCurrent")) return r;
  *pctx = t_stack.empty() ? nullptr : reinterpret_cast<CUcontext>(t_stack.back());
  return CUDA_SUCCESS;
}
// Libraries (cuRAND's generator creation) call this to learn whether a context is current at
// all, before the runtime has made one: no context is an answer here, not an error, so it is
// returned without a message.
CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuCtxGetDevice")) return r;
  if (t_stack.empty() || t_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  int dev;
  if (CUresult r = CurrentDevice("cuCtxGetDevice", &dev)) return r;
  *device = dev;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  if (CUresult r = CurrentDevice("cuCtxGetFlags", &dev)) return r;
  *flags = t_stack.back()->flags;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetApiVersion(CUcontext c, unsigned int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuCtxGetApiVersion")) return r;
  if (c) {
    Ctx* ctx;
    if (CUresult r = FindCtx("cuCtxGetApiVersion", c, &ctx)) return r;
  }
  *version = 3020;  // what CUDA reports for contexts made through this API since 3.2
  return CUDA_SUCCESS;
}
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;  // as CUDA 13 GPUs report
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) {
  const char* call = "cuCtxSynchronize";
  if (CUresult r = CaptureUnsafe(call)) return r;
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  HostFnGate(dev, 0);  // the device's host functions first
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::DeviceSync q;
  q.device = D().Index(dev);
  return Call(l, q, call);
}
// The current context's device's limits (stack size, printf FIFO, malloc heap, ...), kept by its
// server (DeviceSetLimit/DeviceGetLimit; the CUlimit numbers are the runtime's cudaLimit ones).
CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  const char* call = "cuCtxSetLimit";
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::DeviceSetLimit q{.device = D().Index(dev), .limit = static_cast<int32_t>(limit),
                          .value = value};
  return Call(l, q, call);
}
CUresult cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  const char* call = "cuCtxGetLimit";
  if (!pvalue) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
  // CIG (graphics-shared) contexts: gpool makes none, so both are off, and a context's shared
  // memory is the whole multiprocessor's (cuBLASLt asks, and with 0 finds no kernel that fits).
  if (limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED) {
    if (CUresult r = Ready(call)) return r;
    *pvalue = 0;
    return CUDA_SUCCESS;
  }
  if (limit == CU_LIMIT_SHMEM_SIZE) {
    int dev;
    if (CUresult r = CurrentDevice(call, &dev)) return r;
    const proto::DeviceProps* p;
    if (CUresult r = Props(call, dev, &p)) return r;
    *pvalue = p->shared_mem_per_mp;
    return CUDA_SUCCESS;
  }
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::DeviceGetLimit q{.device = D().Index(dev), .limit = static_cast<int32_t>(limit)};
  proto::U64Value v;
  if (CUresult r = Call(l, q, &v, call)) return r;
  *pvalue = v.value;
  return CUDA_SUCCESS;
}

// ---- memory

CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  const char* call = "cuMemAlloc_v2";
  if (!dptr) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pointer for the address");
  if (bytesize == 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, "0 bytes");
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::Malloc q{.device = D().Index(dev), .size = bytesize};
  proto::Pointer p;
  if (CUresult r = Call(l, q, &p, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  auto next = D().allocs.lower_bound(p.ptr);
  bool clash = next != D().allocs.end() && next->first < p.ptr + bytesize;
  if (next != D().allocs.begin()) {
    auto prev = std::prev(next);
    clash |= prev->first + std::max<uint64_t>(prev->second.size, 1) > p.ptr;
  }
  if (clash) {
    return Fail(call, CUDA_ERROR_OUT_OF_MEMORY, fmt::format("device {} returned 0x{:x}, which "
                "overlaps memory of another device: servers of one program must use distinct "
                "address ranges", dev, p.ptr));
  }
  D().allocs[p.ptr] = Alloc{bytesize, dev, D().next_id++};
  *dptr = p.ptr;
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr dptr) {
  const char* call = "cuMemFree_v2";
  if (CUresult r = CaptureUnsafe(call)) return r;
  if (CUresult r = Ready(call)) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  int dev;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = D().allocs.find(dptr);
    if (it == D().allocs.end()) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x} is not an allocation's "
                  "start", dptr));
    }
    if (it->second.mapped) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x} is mapped by cuMemMap, "
                  "not allocated (cuMemUnmap it)", dptr));
    }
    dev = it->second.device;
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::Free q{.ptr = dptr};
  CUresult r = Call(l, q, call);
  std::lock_guard<std::mutex> lk(D().mu);
  D().allocs.erase(dptr);
  return r;
}
CUresult cuMemGetInfo(size_t* free, size_t* total) {
  const char* call = "cuMemGetInfo_v2";
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemGetInfo q;
  q.device = D().Index(dev);
  proto::MemInfo m;
  if (CUresult r = Call(l, q, &m, call)) return r;
  if (free) *free = m.free;
  if (total) *total = m.total;
  return CUDA_SUCCESS;
}
// Page-locked host memory is ordinary host memory on the client (only a server's staging buffers
// are truly pinned); the records let cuMemFreeHost refuse what it did not give.
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuMemHostAlloc")) return r;
  void* p = std::aligned_alloc(4096, (std::max<size_t>(bytesize, 1) + 4095) / 4096 * 4096);
  if (!p) return Fail("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY, fmt::format("{} bytes", bytesize));
  std::lock_guard<std::mutex> lk(D().mu);
  D().host_allocs[p] = HostAlloc{bytesize, D().next_id++, flags};
  *pp = p;
  return CUDA_SUCCESS;
}
// The flags cuMemHostAlloc was given, for any pointer inside such an allocation; other memory is
// refused with CUDA_ERROR_INVALID_VALUE, as the driver documents the call for its own
// allocations only.
CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (!flags || !p) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = Ready("cuMemHostGetFlags")) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = D().host_allocs.upper_bound(p);
  if (it != D().host_allocs.begin()) {
    --it;
    const auto* base = static_cast<const char*>(it->first);
    if (static_cast<const char*>(p) < base + std::max<size_t>(it->second.size, 1) &&
        !it->second.registered) {
      *flags = it->second.flags;
      return CUDA_SUCCESS;
    }
  }
  return Fail("cuMemHostGetFlags", CUDA_ERROR_INVALID_VALUE,
              fmt::format("{} is not inside memory from cuMemHostAlloc or cuMemAllocHost", p));
}
CUresult cuMemAllocHost(void** pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }
CUresult cuMemFreeHost(void* p) {
  if (CUresult r = Ready("cuMemFreeHost")) return r;
  std::vector<ServerLink*> links;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = D().host_allocs.find(p);
    if (it == D().host_allocs.end() || it->second.registered) {
      return Fail("cuMemFreeHost", CUDA_ERROR_INVALID_VALUE, fmt::format("{} is not from "
                  "cuMemAllocHost/cuMemHostAlloc", p));
    }
    D().host_allocs.erase(it);
    links = D().LinksLocked();
  }
  // Like CUDA's, this synchronizes: no asynchronous copy (CopyD2H) may still be writing into it.
  LandAsyncReads(links);
  std::free(p);
  return CUDA_SUCCESS;
}

// ---- entry points

// The newest version of `symbol` not after `cudaVersion`, per-thread where asked (driver_procs.h);
// an export cuda.h declares no versions for (cuProfilerStart, ...) by its own name. Unimplemented
// entry points resolve to their loud stubs, so a library that fetches everything at start-up
// loads, and fails, naming the call, only when it uses one.
static CUresult GetProc(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult* status, bool default_per_thread) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~cuuint64_t{3}) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto found = LookupProc(symbol, cudaVersion, flags, default_per_thread);
  const char* name = found.found == ProcFound::kSuccess ? found.symbol : nullptr;
  if (found.found == ProcFound::kSymbolNotFound) name = symbol;  // an export by its own name?
  if (name) {
    for (size_t i = 0; i < gpool::remote::client::kDriverExportCount; ++i) {
      if (std::strcmp(gpool::remote::client::kDriverExports[i].name, name) == 0) {
        *pfn = gpool::remote::client::kDriverExports[i].fn;
        break;
      }
    }
  }
  if (status) {
    *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
              : found.found == ProcFound::kVersionNotSufficient
                  ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  return GetProc(symbol, pfn, cudaVersion, flags, status, false);
}
// CUDA 11.3's form, without the status.
CUresult cuGetProcAddress_v1(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)
    __asm__("cuGetProcAddress");
CUresult cuGetProcAddress_v1(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return GetProc(symbol, pfn, cudaVersion, flags, nullptr, false);
}

// NVIDIA's runtime (libcudart.so.13 and libcudart_static.a) asks for private tables by UUID
// before its first call. None is provided yet: each table asked for is named once on stderr, so
// a run shows which a program's runtime needs (docs/remoting/driver-api.md, "Export tables").
CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  return GetExportTable(ppExportTable, pExportTableId);
}

// ---- the per-thread default stream variants (see the top of the file) and older exports whose
// ABI is the current one's

// Older names, same ABI (their differences are in semantics gpool does not model).
GPOOL_DRIVER_ALIAS(CUresult, cuCtxDestroy_v1, "cuCtxDestroy", cuCtxDestroy, (CUcontext c), (c))
GPOOL_DRIVER_ALIAS(CUresult, cuCtxPushCurrent_v1, "cuCtxPushCurrent", cuCtxPushCurrent, (CUcontext c), (c))
GPOOL_DRIVER_ALIAS(CUresult, cuCtxPopCurrent_v1, "cuCtxPopCurrent", cuCtxPopCurrent, (CUcontext* c), (c))
GPOOL_DRIVER_ALIAS(CUresult, cuStreamDestroy_v1, "cuStreamDestroy", cuStreamDestroy, (CUstream s), (s))
GPOOL_DRIVER_ALIAS(CUresult, cuEventDestroy_v1, "cuEventDestroy", cuEventDestroy, (CUevent e), (e))
GPOOL_DRIVER_ALIAS(CUresult, cuDevicePrimaryCtxRelease_v1, "cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease, (CUdevice d), (d))
GPOOL_DRIVER_ALIAS(CUresult, cuDevicePrimaryCtxSetFlags_v1, "cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags,
                   (CUdevice d, unsigned int f), (d, f))
GPOOL_DRIVER_ALIAS(CUresult, cuDeviceGetUuid_v1, "cuDeviceGetUuid", cuDeviceGetUuid, (CUuuid* u, CUdevice d), (u, d))
GPOOL_DRIVER_ALIAS(CUresult, cuEventElapsedTime_v1, "cuEventElapsedTime", cuEventElapsedTime, (float* ms, CUevent a, CUevent b),
                   (ms, a, b))

}  // extern "C"
#pragma GCC visibility pop
