// The driver stand-in's modules and launches (see driver_api.cc and driver_state.h).
//
// cuModuleLoadData* takes a fatbin, cubin or PTX image (fatbin::ImageFromPointer finds its
// extent) and copies it; at the first lookup of one of its kernels or variables (EnsureLoaded,
// lazy loading as CUDA's default) it posts it to the current context's server as a module
// (RegisterModule): the `cuda` backend loads it with the real driver, the `emulated` one parses
// it and runs its kernels from the CPU plugin. The client parses the image too (then), so that
// cuModuleGetFunction and cuModuleGetGlobal answer CUDA_ERROR_NOT_FOUND for names the module
// lacks, as the driver does, and launches pack `kernelParams` at the kernel's parameter offsets
// without a round trip; when
// the client cannot parse the image (a form its parser does not know) it asks the server for the
// layout (GetParamInfo) at the kernel's first launch. The module's variables (from the client's
// parse) are registered with it; a function at its first lookup (RegisterFunction, posted); a
// variable's address is one GetSymbol round trip, at its first lookup.
// Limits: JIT options of cuModuleLoadDataEx are accepted and ignored (no JIT on the client; the
// server's driver compiles PTX itself); a module belongs to the server of the device of the
// context that loaded it: its functions launch on any device of that server, and launching them
// on a device of another server is refused.
#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "remote/client/driver_graphs.h"
#include "remote/client/managed_guard.h"

namespace gpool::remote::client::driver {

CUresult LoadModule(const char* call, CUmodule* out, const void* image, int dev) {
  if (!out || !image) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null module or image pointer");
  if (dev < 0) {
    if (CUresult r = CurrentDevice(call, &dev)) return r;
  }
  auto bytes = fatbin::ImageFromPointer(image);
  if (!bytes.ok()) return Fail(call, CUDA_ERROR_INVALID_IMAGE, bytes.status().message());
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  // The image is copied (the program may free its buffer after the call, as CUDA allows); it is
  // parsed and sent when first used (EnsureLoaded).
  auto m = std::make_unique<Module>();
  m->device = dev;
  m->link = l;
  m->image.assign(bytes->begin(), bytes->end());
  Module* rec = m.release();
  {
    std::lock_guard<std::mutex> lk(D().mu);
    rec->id = D().next_id++;
    D().modules.insert(rec);
  }
  D().modules_loaded.fetch_add(1, std::memory_order_relaxed);
  *out = reinterpret_cast<CUmodule>(rec);
  return FromStatus(l->status(), call);
}

CUresult EnsureLoaded(const char* call, Module* m) {
  std::call_once(m->load_once, [&] {
    auto parsed = fatbin::ParseImage(m->image, {.target_arch = 90});
    if (parsed.ok()) {
      m->parsed = std::move(*parsed);
    } else {
      m->parse_status = parsed.status();  // the server may still load it; said at lookup
    }
    {
      std::lock_guard<std::mutex> lk(D().mu);
      for (const auto& [name, size] : m->parsed.globals) m->globals[name].id = D().next_id++;
    }
    // The module and all its variables (a kernel may use any of them before the program looks
    // one up; the emulated backend resolves a kernel's variables among those registered), in one
    // batch. The image is not needed on the client after this.
    std::lock_guard<std::mutex> lk(m->link->mu());
    proto::RegisterModule q{.module = m->id, .image = m->image};
    (void)m->link->Post(q);
    for (const auto& [name, g] : m->globals) {
      proto::RegisterVar v{.module = m->id, .var = g.id, .name = name,
                           .size = m->parsed.globals.at(name), .constant = 0};
      (void)m->link->Post(v);
    }
    m->sent = true;
    D().modules_sent.fetch_add(1, std::memory_order_relaxed);
    m->load_result = FromStatus(m->link->status(), call);
    // A library keeps its image when the program's devices span several servers: a kernel of it
    // launched on another server loads a copy there (LibraryKernelOn).
    bool several = false;
    for (const DeviceRef& d : D().env.devices) several |= d.server != D().env.devices[0].server;
    if (!(m->library && several)) std::vector<std::byte>().swap(m->image);
  });
  return m->load_result;
}

namespace {

CUresult FindModule(const char* call, CUmodule hmod, Module** out) {
  if (CUresult r = Ready(call)) return r;
  auto* m = reinterpret_cast<Module*>(hmod);
  std::lock_guard<std::mutex> lk(D().mu);
  if (!D().modules.count(m)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("module {} is not a loaded module",
                static_cast<const void*>(hmod)));
  }
  *out = m;
  return CUDA_SUCCESS;
}

// Packs kernelParams at the layout's offsets, or takes CU_LAUNCH_PARAM_BUFFER_POINTER's buffer.
CUresult PackParams(const char* call, Function* f, void** params, void** extra,
                    std::vector<std::byte>* buf) {
  if (extra) {
    const void* ptr = nullptr;
    size_t size = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        ptr = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        std::memcpy(&size, extra[i + 1], sizeof size);
        have_size = true;
      } else {
        return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("kernel {}: unknown `extra` "
                    "entry {}", f->name, extra[i]));
      }
    }
    if (params) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("kernel {}: both kernelParams and "
                  "extra given", f->name));
    }
    if (!ptr || !have_size) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("kernel {}: `extra` needs "
                  "CU_LAUNCH_PARAM_BUFFER_POINTER and CU_LAUNCH_PARAM_BUFFER_SIZE", f->name));
    }
    const auto* p = static_cast<const std::byte*>(ptr);
    buf->assign(p, p + size);
    return CUDA_SUCCESS;
  }
  if (!f->has_layout) {
    proto::GetParamInfo q;
    q.func = f->id;
    proto::ParamInfo info;
    if (CUresult r = Call(f->module->link, q, &info, call)) {
      return Fail(call, r, fmt::format("kernel {}: no parameter layout (the client's parse: {}; "
                  "the server could not say either)", f->name, f->module->parse_status.ok()
                  ? "kernel not in the image" : f->module->parse_status.message()));
    }
    std::lock_guard<std::mutex> lk(D().mu);
    f->params = std::move(info.params);
    f->has_layout = true;
  }
  size_t total = 0;
  for (const auto& p : f->params) total = std::max<size_t>(total, p.offset + p.size);
  buf->assign(total, std::byte{0});
  for (size_t i = 0; i < f->params.size(); ++i) {
    if (!params || !params[i]) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("kernel {}: parameter {} of {} "
                  "missing from kernelParams", f->name, i, f->params.size()));
    }
    std::memcpy(buf->data() + f->params[i].offset, params[i], f->params[i].size);
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule("cuModuleLoadData", module, image);
}
CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*,
                            void**) {
  return LoadModule("cuModuleLoadDataEx", module, image);
}
CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return LoadModule("cuModuleLoadFatBinary", module, fatCubin);
}

// Modules are parsed and sent to the server at the first lookup of one of their kernels or
// variables (see Module in driver_state.h); NVIDIA's runtime asks this at start-up.
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  const char* call = "cuModuleUnload";
  Module* m;
  if (CUresult r = FindModule(call, hmod, &m)) return r;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    D().modules.erase(m);
    for (auto& [name, f] : m->functions) D().functions.erase(f.get());
    // Its __managed__ variables' addresses may be other allocations' from now on.
    for (const std::string& name : m->managed) {
      auto sym = m->globals[name].symbols.find(m->device);
      if (sym != m->globals[name].symbols.end()) {
        gpool::remote::client::managed::Unregister(sym->second.ptr, m->device);
      }
    }
  }
  // Posted: ordered after the work already queued, which may use the module. A module never
  // used was never sent.
  CUresult r = CUDA_SUCCESS;
  if (m->sent) {
    proto::UnregisterModule q{.module = m->id};
    r = Post(m->link, q, call);
  }
  delete m;
  return r;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  const char* call = "cuModuleGetFunction";
  if (!hfunc || !name) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null function or name");
  Module* m;
  if (CUresult r = FindModule(call, hmod, &m)) return r;
  if (CUresult r = EnsureLoaded(call, m)) return r;
  std::unique_lock<std::mutex> lk(D().mu);
  if (auto it = m->functions.find(name); it != m->functions.end()) {
    *hfunc = reinterpret_cast<CUfunction>(it->second.get());
    return CUDA_SUCCESS;
  }
  auto k = m->parsed.kernels.find(name);
  if (m->parse_status.ok() && k == m->parsed.kernels.end()) {
    lk.unlock();
    return Fail(call, CUDA_ERROR_NOT_FOUND, fmt::format("module has no kernel named {}", name));
  }
  auto f = std::make_unique<Function>();
  f->module = m;
  f->name = name;
  f->id = D().next_id++;
  if (k != m->parsed.kernels.end()) {
    for (const auto& p : k->second.params) f->params.push_back({p.offset, p.size});
    f->has_layout = true;
  }
  Function* rec = f.get();
  m->functions[name] = std::move(f);
  D().functions.insert(rec);
  lk.unlock();
  proto::RegisterFunction q{.module = m->id, .func = rec->id, .name = rec->name};
  *hfunc = reinterpret_cast<CUfunction>(rec);
  return Post(m->link, q, call);
}

// A variable's address and size on device `dev` of module `m`'s server, or, when `dev` is -1: a
// module's variables are its context's device's; a library's (cuLibraryGetGlobal) are the
// current context's device's copy when that device is on the library's server (each device has
// its own copy), otherwise the library's own device's (no copy on another server yet).
static CUresult GetGlobal(const char* call, CUmodule hmod, const char* name, int dev,
                          CUdeviceptr* dptr, size_t* bytes) {
  if (!name) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null name");
  Module* m;
  if (CUresult r = FindModule(call, hmod, &m)) return r;
  if (CUresult r = EnsureLoaded(call, m)) return r;
  CUcontext cur = nullptr;
  int cur_dev = -1;
  if (dev >= 0) {
    // as given
  } else if (m->library && cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != nullptr &&
             CurrentDevice(call, &cur_dev) == CUDA_SUCCESS &&
             D().env.devices[cur_dev].server == D().env.devices[m->device].server) {
    dev = cur_dev;
  } else {
    dev = m->device;
  }
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = m->globals.find(name);
    if (it == m->globals.end()) {
      // Libraries probe for optional variables (cuFFT asks each of its modules for `lut_sp`):
      // when the client read the image, "not there" is an answer, given without a message.
      if (m->parse_status.ok()) return CUDA_ERROR_NOT_FOUND;
      return Fail(call, CUDA_ERROR_NOT_FOUND, fmt::format("module has no variable named {} (the "
                  "client could not read its image: {})", name, m->parse_status.message()));
    }
    if (auto known = it->second.symbols.find(dev); known != it->second.symbols.end()) {
      if (dptr) *dptr = known->second.ptr;
      if (bytes) *bytes = known->second.size;
      return CUDA_SUCCESS;
    }
    id = it->second.id;
  }
  // One round trip per module and device for all its variables (GetModuleInfo, as the runtime
  // stand-in does), not one per variable: the addresses of the others are kept for their lookups.
  proto::GetModuleInfo q{.module = m->id, .device = D().Index(dev)};
  proto::ModuleInfo info;
  if (CUresult r = Call(m->link, q, &info, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  std::unordered_map<uint64_t, Global*> by_id;
  for (auto& [n, g] : m->globals) by_id[g.id] = &g;
  const proto::VarInfo* mine = nullptr;
  for (const proto::VarInfo& vi : info.vars) {
    if (vi.var == id) mine = &vi;
    auto it = by_id.find(vi.var);
    if (vi.error == 0 && it != by_id.end()) {
      it->second->symbols[dev] = proto::Symbol{.ptr = vi.ptr, .size = vi.size};
    }
  }
  if (!mine) {
    return Fail(call, CUDA_ERROR_NOT_FOUND, fmt::format("{}: the server did not report variable "
                "{} of the module", m->link->address(), name));
  }
  if (mine->error != 0) {
    return Fail(call, ToCU(mine->error), fmt::format("{}: {}", m->link->address(), mine->message));
  }
  const proto::Symbol& sym = m->globals[name].symbols[dev];
  if (dptr) *dptr = sym.ptr;
  if (bytes) *bytes = sym.size;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return GetGlobal("cuModuleGetGlobal_v2", hmod, name, -1, dptr, bytes);
}

// A __managed__ variable (NVIDIA's runtime asks at library load for each one): its address as
// device memory of the library's device, said once per variable, since managed memory is not
// remoted: the library's kernels may launch on that device only (LaunchKernel refuses the others,
// naming the variables), and host access cannot work. NVIDIA's runtime stores the address in the
// variable's host shadow, so the program's host code reads the server's address, which this
// process never sees: the guard (managed_guard.h) reserves the range here and turns the fault
// into a FATAL line naming the variable.
CUresult cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  const char* call = "cuLibraryGetManaged";
  Module* m;
  if (CUresult r = FindModule(call, reinterpret_cast<CUmodule>(lib), &m)) return r;
  if (!name) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null name");
  CUdeviceptr ptr = 0;
  size_t size = 0;
  if (CUresult r = GetGlobal(call, reinterpret_cast<CUmodule>(lib), name, m->device, &ptr,
                             &size)) {
    return r;
  }
  if (dptr) *dptr = ptr;
  if (bytes) *bytes = size;
  bool first;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    first = std::find(m->managed.begin(), m->managed.end(), name) == m->managed.end();
    if (first) m->managed.push_back(name);
  }
  if (first) {
    gpool::remote::client::managed::Registration g =
        gpool::remote::client::managed::Register(name, ptr, size, m->device);
    Say(fmt::format("warning: __managed__ variable {} is registered as device memory of one GPU "
                    "(device {}): managed memory is not remoted, so host access to it stops the "
                    "program and its library's kernels may run on that device only",
                    name, m->device));
    // The address is also host memory here (a host access then reads or writes that memory
    // instead of faulting, and nothing can stop it), or the kernel would not reserve it.
    if (g.reserve == gpool::remote::client::managed::Reserve::kMappedHere) {
      Say(fmt::format("warning: __managed__ variable {}'s device range is also host memory of this "
                      "process ({}): host access to it is not stopped, and reads this process's "
                      "memory there, not the variable", name, g.detail));
    } else if (g.reserve == gpool::remote::client::managed::Reserve::kUnavailable) {
      Say(fmt::format("warning: __managed__ variable {}'s device range cannot be reserved in this "
                      "process ({}): host access to it may not be stopped", name, g.detail));
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream s, void** params, void** extra) {
  return LaunchKernel("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

// The launch attributes that change nothing a program can observe when ignored are accepted:
// priority, the L2 access policy window, the memory synchronization domain, the cluster
// scheduling preference, programmatic stream serialization (it only allows the next kernel to
// start early: launching it after is stricter), and a 1x1x1 cluster. A cooperative launch is
// made cooperative on the server (proto::LaunchCooperative). The others (clusters of more
// blocks, programmatic and completion events, device-updatable nodes, ...) are refused, naming
// the attribute, since ignoring them would change results.
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  const char* call = "cuLaunchKernelEx";
  if (!config) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null launch configuration");
  if (config->numAttrs > 0 && !config->attrs) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "numAttrs > 0 with null attrs");
  }
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        if (a.value.clusterDim.x * a.value.clusterDim.y * a.value.clusterDim.z > 1) {
          return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                      fmt::format("cluster dimension {}x{}x{}: thread block clusters other than "
                                  "1x1x1 are not remoted", a.value.clusterDim.x,
                                  a.value.clusterDim.y, a.value.clusterDim.z));
        }
        break;
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        cooperative = a.value.cooperative != 0;
        break;
      default:
        return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                    fmt::format("launch attribute {} is not supported by gpool",
                                static_cast<int>(a.id)));
    }
  }
  return LaunchKernel(call, f, config->gridDimX, config->gridDimY, config->gridDimZ,
                      config->blockDimX, config->blockDimY, config->blockDimZ,
                      config->sharedMemBytes, config->hStream, params, extra, cooperative);
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream s, void** params) {
  return LaunchKernel("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shmem, s, params,
                      nullptr, /*cooperative=*/true);
}
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream s,
                                        void** params);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream s,
                                        void** params) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params);
}
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  return cuLaunchKernelEx(config, f, params, extra);
}

}  // extern "C"
#pragma GCC visibility pop

namespace gpool::remote::client::driver {

// LaunchKernel's per-thread parameter buffer; the flag, trivially destructible, stays readable
// until the thread ends, after the buffer is destroyed.
namespace {
thread_local bool t_params_gone = false;
struct ParamsBuffer {
  std::vector<std::byte> v;
  ~ParamsBuffer() { t_params_gone = true; }
};
thread_local ParamsBuffer t_params;
}  // namespace

CUresult LaunchKernel(const char* call, CUfunction f, unsigned int gx, unsigned int gy,
                      unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                      unsigned int shmem, CUstream s, void** params, void** extra,
                      bool cooperative) {
  if (CUresult r = Ready(call)) return r;
  auto* fn = reinterpret_cast<Function*>(f);
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!D().functions.count(fn)) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("function {} is not a live "
                  "function (cuModuleGetFunction)", static_cast<const void*>(f)));
    }
  }
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("kernel {}: grid {}x{}x{}, block "
                "{}x{}x{}: no dimension may be 0", fn->name, gx, gy, gz, bx, by, bz));
  }
  if (Capturing(s)) {
    // Captured: a kernel node with the parameters packed now (CUDA copies them at capture too).
    graph::Op op;
    op.kind = graph::Kind::kKernel;
    op.func = f;
    op.grid[0] = gx;
    op.grid[1] = gy;
    op.grid[2] = gz;
    op.block[0] = bx;
    op.block[1] = by;
    op.block[2] = bz;
    op.shmem = shmem;
    op.cooperative = cooperative;
    if (CUresult r = PackParams(call, fn, params, extra, &op.params)) return r;
    return CaptureOp(call, s, std::move(op));
  }
  // The launch runs on the stream's device (a default stream's: the current context's). The
  // module's server holds it for all its devices, so any device of that server will do; its
  // attributes set so far go there first (once per device). Another server has no copy.
  int dev;
  uint64_t sid;
  if (CUresult r = ResolveStream(s, call, &dev, &sid)) return r;
  {
    // A library with __managed__ variables runs on their device only (cuLibraryGetManaged).
    std::unique_lock<std::mutex> lk(D().mu);
    if (!fn->module->managed.empty() && dev != fn->module->device) {
      std::string names;
      for (const auto& n : fn->module->managed) names += (names.empty() ? "" : ", ") + n;
      const int own = fn->module->device;
      lk.unlock();
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                  fmt::format("launch of kernel {} on device {} refused: its module has "
                              "__managed__ variable(s) {}, which gpool keeps as device memory of "
                              "device {} only (managed memory is not remoted), so a kernel on "
                              "another device would not see them", fn->name, dev, names, own));
    }
  }
  std::vector<std::pair<int32_t, int32_t>> replay;
  if (dev != fn->module->device) {
    CUresult err;
    ServerLink* l = D().Link(dev, &err, call);
    if (!l) return err;
    if (l != fn->module->link && !fn->module->library) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("kernel {} of a module loaded on "
                  "device {} launched on device {}, which another server serves: a module lives "
                  "on the server of the device it was loaded on", fn->name, fn->module->device,
                  dev));
    }
    if (l != fn->module->link) {
      // A library's kernel is context-independent: it runs from the library's copy on this
      // device's server (driver_libraries.cc).
      if (CUresult r = LibraryKernelOn(call, fn, dev, l, &fn)) return r;
    } else {
      std::lock_guard<std::mutex> lk(D().mu);
      if (!fn->attrs.empty() && fn->attr_devices.insert(dev).second) {
        replay.assign(fn->attrs.begin(), fn->attrs.end());
      }
    }
  }
  for (const auto& [attr, value] : replay) {
    proto::FuncSetAttribute a{.func = fn->id, .device = D().Index(dev), .attr = attr,
                              .value = value};
    if (CUresult r = Post(fn->module->link, a, call)) return r;
  }
  // Per thread and reused; a launch from an exit handler, after the thread's thread_local
  // objects are destroyed, uses its own.
  std::vector<std::byte> own;
  std::vector<std::byte>& buf = t_params_gone ? own : t_params.v;
  if (CUresult r = PackParams(call, fn, params, extra, &buf)) return r;
  proto::Launch m{.func = fn->id, .grid = {gx, gy, gz}, .block = {bx, by, bz}, .shmem = shmem,
                  .device = D().Index(dev), .stream = sid, .params = buf};
  if (cooperative) {
    // The server launches it with the driver's cooperative attribute (grid-wide sync works;
    // a grid too large to be resident is refused there).
    proto::LaunchCooperative c;
    static_cast<proto::Launch&>(c) = m;
    return Post(fn->module->link, c, call);
  }
  return Post(fn->module->link, m, call);
}

CUresult PackKernelParams(const char* call, CUfunction f, void** params, void** extra,
                          std::vector<std::byte>* out) {
  if (CUresult r = Ready(call)) return r;
  auto* fn = reinterpret_cast<Function*>(f);
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!D().functions.count(fn)) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("function {} is not a live "
                  "function (cuModuleGetFunction, cuLibraryGetKernel)",
                  static_cast<const void*>(f)));
    }
  }
  return PackParams(call, fn, params, extra, out);
}

}  // namespace gpool::remote::client::driver

#pragma GCC visibility push(default)
extern "C" {

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shmem, CUstream s, void** params, void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

}  // extern "C"
#pragma GCC visibility pop
