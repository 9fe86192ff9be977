// The driver stand-in's state (libcuda.so.1; driver_api.cc, driver_modules.cc): the program's
// devices (GPOOL_DEVICES, pool.h), one session per server, contexts, modules, allocations,
// streams and events. Include only after <cuda.h>.
//
// Contexts: a device's primary context and those cuCtxCreate makes are client-side records; all
// of one device's contexts share the session's one server device (a server device is one
// context of the session's worker), so memory, modules and streams of two contexts of a device
// are not kept apart on the server. Each thread has its own context stack (cuCtxPush/Pop; the
// top is current). Handles (CUcontext, CUmodule, CUfunction, CUstream, CUevent) point at these
// records and are checked against the live sets before use, so a stale or foreign handle is
// refused with CUDA_ERROR_INVALID_HANDLE / INVALID_CONTEXT instead of being read.
// Thread safety: everything under Driver::mu, then a link's own mutex (in that order).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

// Defines `name`, exported as `exported` (a per-thread default stream variant, _ptds/_ptsz, or an
// older name of the same ABI), as a call of `target`: every default stream is the device's stream
// 0 here, so the variants are the same call. For use inside the files' extern "C" blocks.
#define GPOOL_DRIVER_ALIAS(ret, name, exported, target, params, args) \
  ret name params __asm__(exported);                                  \
  ret name params { return target args; }

#include "remote/client/link.h"
#include "remote/client/pool.h"
#include "remote/fatbin/fatbin.h"
#include "remote/protocol/messages.h"

namespace gpool::remote::client::driver {

struct Ctx {
  int device = 0;
  bool primary = false;
  unsigned flags = 0;
  // Context-local storage (the runtime's per-context state, driver_export_tables.cc): a value
  // and its destructor per key; the destructors run when the context is destroyed.
  using StorageDtor = void (*)(CUcontext, void* key, void* value);
  struct Stored {
    void* value = nullptr;
    StorageDtor dtor = nullptr;
  };
  std::map<void*, Stored> storage;
};
struct Stream {
  int device = 0;
  uint64_t id = 0;  // on the server
  unsigned flags = 0;
  int priority = 0;
};
struct Event {
  int device = 0;
  uint64_t id = 0;
  unsigned flags = 0;
};
struct Module;
struct Function {
  Module* module = nullptr;
  uint64_t id = 0;  // on the server
  std::string name;
  // The layout, from the client's parse of the image or else the server (GetModuleInfo).
  bool has_layout = false;
  std::vector<proto::ParamSlot> params;
  // Attributes set (cuFuncSetAttribute: attribute -> value) and the devices they were sent for:
  // a function launched on another device of its module's server gets them there first.
  std::map<int32_t, int32_t> attrs;
  std::set<int> attr_devices;
  // The server's answer to FuncAttributes, kept (under D().mu) until an attribute is set or its
  // device reset: libraries ask the same attributes many times (NCCL ~2,500 at its start), and
  // they change only when set.
  bool server_attrs_known = false;
  proto::FuncAttrs server_attrs;
  uint64_t attrs_set = 0;  // sets so far: an answer asked before a set is not kept after it
};
struct Global {
  uint64_t id = 0;  // on the server
  // Address and size per device (GetSymbol, fetched at the first lookup there): each device
  // has its own copy of a module's variables. Forgotten for a device at its reset.
  std::map<int, proto::Symbol> symbols;
};
// Loaded lazily, as CUDA's lazy loading (CUDA_MODULE_LOADING=LAZY, the default since 12.2) does:
// cuModuleLoadData/cuLibraryLoadData only copy the image; the client parses it and sends it to
// the server (RegisterModule, RegisterVar) at the first lookup of one of its kernels or variables
// (EnsureLoaded). A module never looked up never reaches the server. (NVIDIA's runtime, told
// lazy by cuModuleGetLoadingMode, also loads a library only when it needs one of its kernels.)
struct Module {
  uint64_t id = 0;  // on the server
  int device = 0;   // of the context it was loaded in
  ServerLink* link = nullptr;
  std::vector<std::byte> image;
  // Set once by EnsureLoaded (under load_once), read-only after.
  std::once_flag load_once;
  CUresult load_result = CUDA_SUCCESS;
  std::atomic<bool> sent{false};  // RegisterModule posted: unloading must tell the server
  Status parse_status;  // the client's parse (fatbin::ParseImage); the server parses on its own
  fatbin::Module parsed;
  std::map<std::string, std::unique_ptr<Function>> functions;  // by name, made on first lookup
  std::map<std::string, Global> globals;
  // A library (cuLibraryLoadData): its kernels may launch on any device, so the library gets a
  // copy on each further server a kernel of it launches on (LibraryKernelOn), unloaded with it.
  bool library = false;
  std::map<const ServerLink*, CUmodule> copies;  // under D().mu
  // __managed__ variables NVIDIA's runtime asked for (cuLibraryGetManaged), each device memory of
  // the library's device only (managed memory is not remoted), so the module's kernels launch on
  // that device only (LaunchKernel refuses others). Under D().mu.
  std::vector<std::string> managed;
};
struct Alloc {
  uint64_t size = 0;
  int device = 0;
  uint64_t buffer_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID: never reused in the process
  bool mapped = false;  // a cuMemMap mapping (driver_vmm.cc): only cuMemUnmap ends it
};
struct HostAlloc {
  size_t size = 0;
  uint64_t buffer_id = 0;
  unsigned flags = 0;  // cuMemHostAlloc's (cuMemHostGetFlags); cuMemAllocHost: 0
  bool registered = false;  // the program's own memory, cuMemHostRegister'ed (not ours to free)
};

class Driver {
 public:
  static Driver& Get() {
    static Driver* d = new Driver();  // never destroyed: atexit-time calls stay valid
    return *d;
  }

  std::mutex mu;
  PoolEnv env;
  std::atomic<bool> initialized{false};
  std::map<std::string, std::unique_ptr<ServerLink>> links;
  // Servers that could not be connected, and the error each call on them returns (a refused
  // session: CUDA_ERROR_NOT_PERMITTED; an unreachable server: CUDA_ERROR_DEVICE_UNAVAILABLE).
  std::map<std::string, CUresult> link_errors;
  std::vector<Ctx*> primary;       // per device; never freed
  std::vector<int> primary_refs;   // cuDevicePrimaryCtxRetain count per device
  std::set<const Ctx*> contexts;   // live: primaries and cuCtxCreate's
  std::set<const Stream*> streams;
  std::set<const Event*> events;
  std::set<const Module*> modules;
  std::set<const Function*> functions;
  std::map<uint64_t, Alloc> allocs;
  std::map<const void*, HostAlloc> host_allocs;  // cuMemAllocHost / cuMemHostAlloc
  std::unordered_map<int, proto::DeviceProps> props;
  std::map<std::pair<int, int>, int> attrs;  // (device, attribute): NVIDIA's runtime asks each
  uint64_t next_id = 1;
  // Counts for GPOOL_DRIVER_STATS (cuInit): modules and libraries loaded, and sent to a server.
  std::atomic<uint64_t> modules_loaded{0};
  std::atomic<uint64_t> modules_sent{0};

  int device_count() const { return static_cast<int>(env.devices.size()); }
  uint32_t Index(int dev) const { return env.devices[dev].index; }

  // The link serving device `dev`, connecting on first use; null with *err set (and said,
  // naming `call`) when there is none. Caller holds mu.
  ServerLink* LinkLocked(int dev, CUresult* err, const char* call);
  ServerLink* Link(int dev, CUresult* err, const char* call) {
    std::lock_guard<std::mutex> lk(mu);
    return LinkLocked(dev, err, call);
  }
  // The device holding device address `p`, or -1. Caller holds mu.
  int DeviceOfLocked(uint64_t p) const;
  // Every connected link. Caller holds mu; the links outlive the process's calls.
  std::vector<ServerLink*> LinksLocked() const;

 private:
  Driver() : env(ReadPoolEnv()) {}
};

inline Driver& D() { return Driver::Get(); }

// Waits until every asynchronous read of `links` has landed (before host memory it may write
// into is freed or unregistered). Caller holds no link's mutex.
void LandAsyncReads(const std::vector<ServerLink*>& links);

inline void Say(const std::string& s) { fmt::print(stderr, "gpool: {}\n", s); }
// Says "gpool: CALL: WHY" and returns `e`: every error the stand-in raises names its call.
CUresult Fail(const char* call, CUresult e, const std::string& why);

// A CUDA runtime error number (what the protocol carries) as the driver's CUresult.
CUresult ToCU(int32_t runtime_error);
// A reply's result (an earlier asynchronous error first), saying server messages with the call.
CUresult FromReply(const proto::ReplyHead& h, ServerLink* l, const char* call);
// A transport failure: the server is gone (or ended the session).
CUresult FromStatus(const Status& s, const char* call);

// A synchronous call: its reply's body in *body.
template <class Msg, class Body>
CUresult Call(ServerLink* l, Msg& m, Body* body, const char* call) {
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l->mu());
  Status s = l->Call(m, &h, body);
  if (!s.ok()) return FromStatus(s, call);
  return FromReply(h, l, call);
}
template <class Msg>
CUresult Call(ServerLink* l, Msg& m, const char* call) {
  proto::Empty none;
  return Call(l, m, &none, call);
}
// A posted call (no reply; errors come with the next synchronizing call).
template <class Msg>
CUresult Post(ServerLink* l, Msg& m, const char* call) {
  std::lock_guard<std::mutex> lk(l->mu());
  return FromStatus(l->Post(m), call);
}

// A module from a fatbin, cubin or PTX image (or a fatbin's registration wrapper) on device `dev`,
// or the current context's when `dev` is -1 (driver_modules.cc); errors said naming `call`.
CUresult LoadModule(const char* call, CUmodule* out, const void* image, int dev = -1);
// Parses module `m` and sends it to its server, once (the first lookup of a kernel or variable
// of it; see Module). Later callers wait for the first and get its result. Takes D().mu and the
// link's mutex: call it holding neither.
CUresult EnsureLoaded(const char* call, Module* m);
// Device `dev`'s properties (cached after the first ask); errors said naming `call`.
CUresult DevProps(const char* call, CUdevice dev, const proto::DeviceProps** out);
// A kernel launch (cuLaunchKernel, cuLaunchKernelEx; driver_modules.cc), errors naming `call`.
CUresult LaunchKernel(const char* call, CUfunction f, unsigned int gx, unsigned int gy,
                      unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                      unsigned int shmem, CUstream s, void** params, void** extra,
                      bool cooperative = false);
// Library kernel `k` (a Function of a library) for a launch on device `dev`, whose server (`link`)
// is not the library's: the same kernel of the library's copy there, loaded at the first such
// launch, with the attributes set on `k` (driver_libraries.cc). Takes D().mu: call without it.
CUresult LibraryKernelOn(const char* call, Function* k, int dev, ServerLink* link, Function** out);
// The CU_DEVICE_ATTRIBUTE_* of virtual memory management, which the stand-in answers from what
// it implements (driver_vmm.cc); false for any other attribute.
bool VmmAttribute(int attrib, int* value);
// cuGetExportTable (driver_export_tables.cc).
CUresult GetExportTable(const void** table, const CUuuid* id);

// Where an operation on device memory at `ptr`, ordered on stream `s`, goes: the server link of
// the pointer's device (the stream's device when the pointer is not one gpool allocated), and the
// stream there (the device's default stream when `s` belongs to another device).
struct Route {
  ServerLink* link = nullptr;
  uint64_t stream = 0;
  bool on_stream = false;  // `stream` is the program's: syncing `s` reaches this link and stream
};
CUresult RouteTo(const char* call, uint64_t ptr, CUstream s, Route* out);
// Whether [p, p+n) lies inside one page-locked allocation (cuMemAllocHost, cuMemHostAlloc).
bool IsPageLocked(const void* p, size_t n);
// The 1-D copies (driver_api.cc): host to device, device to host (`async_call`: the Async forms),
// device to device (relayed through this process between servers). Errors said naming `call`.
CUresult CopyH2D(const char* call, uint64_t dst, const void* src, size_t n, CUstream s);
CUresult CopyD2H(const char* call, void* dst, uint64_t src, size_t n, CUstream s,
                 bool async_call = false);
CUresult CopyD2D(const char* call, uint64_t dst, uint64_t src, size_t n, CUstream s);
// A copy between two addresses, each a device allocation of the program or host memory
// (unified addressing: cuMemcpy, cuMemcpyAsync, batched copies).
CUresult CopyUnified(const char* call, uint64_t dst, uint64_t src, size_t n, CUstream s);
// A 2-D copy (driver_copies.cc; `async_call`: the Async forms), and the memsets of `count`
// elements of `width` bytes (1, 2 or 4) and of `height` rows of `width_elems` such elements.
CUresult Copy2D(const char* call, const CUDA_MEMCPY2D* p, CUstream s, bool async_call);
CUresult MemsetD(const char* call, uint64_t dst, uint32_t value, size_t count, unsigned width,
                 CUstream s);
CUresult Memset2D(const char* call, CUdeviceptr dst, size_t pitch, uint32_t value, unsigned width,
                  size_t width_elems, size_t height, CUstream s);

// A context handle checked against the live set (CUDA_ERROR_INVALID_CONTEXT, said, if not live).
CUresult FindCtx(const char* call, CUcontext c, Ctx** out);

// cuInit done? Else CUDA_ERROR_NOT_INITIALIZED, said naming the call.
CUresult Ready(const char* call);
// The current context's device (cuInit done, a context current), else the error, said.
CUresult CurrentDevice(const char* call, int* dev);
// A stream's device and server id: a default stream (null, CU_STREAM_LEGACY,
// CU_STREAM_PER_THREAD) is the current context's device's stream 0. `gate`: the caller is about
// to put work on the stream, which must first wait for the host functions queued on it
// (driver_hostfns.cc); queries pass false.
CUresult ResolveStream(CUstream s, const char* call, int* dev, uint64_t* id, bool gate = true);

// Host functions on streams (driver_hostfns.cc). HostFnGate blocks until no host function queued
// orders work of (dev, stream) (stream 0: the device's default stream, which waits for all of
// the device's); HostFnPending says whether one does.
void HostFnGate(int dev, uint64_t stream);
bool HostFnPending(int dev, uint64_t stream);
// An asynchronous error the host-function thread received, kept for the program's next reply
// from that server (FromReply takes it).
void DeferAsyncError(const ServerLink* l, int32_t code, const std::string& message);
bool TakeDeferredError(const ServerLink* l, int32_t* code, std::string* message);

}  // namespace gpool::remote::client::driver
