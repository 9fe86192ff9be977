// The cuda backend's modules (the class: cuda_backend_internal.h; the design: cuda_backend.cc):
// the fatbin images the program shipped, loaded lazily into each device's context on first use;
// its functions and variables resolved per device; kernel parameter layouts (cuFuncGetParamInfo),
// attributes and occupancy.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "remote/server/cuda_backend_internal.h"

#ifdef GPOOL_HAVE_CUDA_H
namespace gpool::remote::server::cuda {

Result CudaBackend::LoadModule(uint64_t module, std::span<const std::byte> image) {
  images_[module].assign(image.begin(), image.end());
  return {};
}
Result CudaBackend::Module(uint64_t module, uint32_t dev, CUmodule* out) {
  auto key = std::make_pair(module, dev);
  auto it = loaded_.find(key);
  if (it != loaded_.end()) {
    *out = it->second;
    return Use(dev);
  }
  auto img = images_.find(module);
  if (img == images_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown module {}", module));
  if (Result r = Use(dev); !r.ok()) return r;
  if (Result r = R("cuModuleLoadData", cu_.cuModuleLoadData(out, img->second.data())); !r.ok()) return r;
  loaded_[key] = *out;
  return {};
}
Result CudaBackend::RegisterFunction(uint64_t module, uint64_t func, const std::string& name) {
  if (!images_.count(module)) return Err(kErrInvalidResourceHandle, fmt::format("function {}: unknown module", name));
  funcs_[func] = {module, name};
  return {};
}
Result CudaBackend::RegisterVar(uint64_t module, uint64_t var, const std::string& name, uint64_t,
                                bool) {
  if (!images_.count(module)) return Err(kErrInvalidResourceHandle, fmt::format("variable {}: unknown module", name));
  vars_[var] = {module, name};
  return {};
}
// Every device's copy is unloaded (after that device's queued work, which may use its kernels
// and variables); its functions and variables die with it.
Result CudaBackend::UnloadModule(uint64_t module) {
  Result first;
  std::set<uint32_t> devs;
  for (const auto& [key, m] : loaded_) {
    if (key.first == module) devs.insert(key.second);
  }
  for (uint32_t dev : devs) {
    Result r = UnloadCopy(module, dev);
    if (first.ok()) first = std::move(r);
  }
  std::erase_if(funcs_, [&](const auto& kv) { return kv.second.first == module; });
  std::erase_if(vars_, [&](const auto& kv) { return kv.second.first == module; });
  globals_.erase(module);
  images_.erase(module);
  return first;
}
// Unloads `dev`'s copy of `module` once the device's queued work is done, and drops what was
// resolved in it: its functions' handles and its variables' device ranges, which later
// allocations may reuse (a stale range would misjudge CheckRange/DevOf). The image and the
// registrations stay: Module() loads it again on next use.
Result CudaBackend::UnloadCopy(uint64_t module, uint32_t dev) {
  auto it = loaded_.find({module, dev});
  if (it == loaded_.end()) return {};
  Result r = Use(dev);
  if (r.ok()) r = R("cuCtxSynchronize", cu_.cuCtxSynchronize());
  if (Result u = R("cuModuleUnload", cu_.cuModuleUnload(it->second)); r.ok()) r = std::move(u);
  loaded_.erase(it);
  std::erase_if(cufuncs_, [&](const auto& kv) {
    auto f = funcs_.find(kv.first.first);
    return kv.first.second == dev && f != funcs_.end() && f->second.first == module;
  });
  std::set<uint64_t>& globals = globals_[module];
  std::erase_if(globals, [&](uint64_t p) {
    auto o = owner_.find(p);
    if (o == owner_.end() || o->second.second != dev) return false;
    owner_.erase(o);
    return true;
  });
  return r;
}
Result CudaBackend::Function(uint64_t func, uint32_t dev, CUfunction* out) {
  auto key = std::make_pair(func, dev);
  auto it = cufuncs_.find(key);
  if (it != cufuncs_.end()) {
    *out = it->second;
    return Use(dev);
  }
  auto f = funcs_.find(func);
  if (f == funcs_.end()) return Err(kErrInvalidDeviceFunction, fmt::format("unknown function id {}", func));
  CUmodule m = nullptr;
  if (Result r = Module(f->second.first, dev, &m); !r.ok()) return r;
  if (Result r = R("cuModuleGetFunction", cu_.cuModuleGetFunction(out, m, f->second.second.c_str())); !r.ok()) {
    // The runtime says cudaErrorInvalidDeviceFunction for a kernel the image lacks.
    if (r.code == kErrNotFound) r.code = kErrInvalidDeviceFunction;
    r.message += " (kernel " + f->second.second + ")";
    return r;
  }
  cufuncs_[key] = *out;
  return {};
}
Result CudaBackend::GetParamInfo(uint64_t func, proto::ParamInfo* out) {
  CUfunction f = nullptr;
  if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
  if (cu_.cuFuncGetParamInfo == nullptr) {
    return Err(kErrNotSupported,
               fmt::format("kernel {}: cuFuncGetParamInfo is not in this driver ({}; CUDA 12.4 "
                           "added it)", funcs_[func].second, cu_.path));
  }
  // Under lazy loading (CUDA_MODULE_LOADING=LAZY, the default) a function may not be loaded
  // yet; an attribute query loads it, so that "index out of range" below can only mean the
  // end of the list, never "not loaded" (a kernel silently taken for one without parameters).
  int ignored = 0;
  if (Result r = R("cuFuncGetAttribute", cu_.cuFuncGetAttribute(&ignored, CU_FUNC_ATTRIBUTE_NUM_REGS, f)); !r.ok()) {
    return r;
  }
  for (size_t i = 0;; ++i) {
    size_t off = 0, size = 0;
    CUresult r = cu_.cuFuncGetParamInfo(f, i, &off, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;
    if (r != CUDA_SUCCESS) return R("cuFuncGetParamInfo", r);
    out->params.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
  }
  return {};
}
// In `dev`'s own copy of the module (each context loads one, with its own variables), whatever
// device the session used last.
Result CudaBackend::GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) {
  auto v = vars_.find(var);
  if (v == vars_.end()) return Err(kErrInvalidValue, fmt::format("unknown symbol id {}", var));
  CUmodule m = nullptr;
  if (Result r = Module(v->second.first, dev, &m); !r.ok()) return r;
  CUdeviceptr p = 0;
  size_t n = 0;
  if (Result r = R("cuModuleGetGlobal", cu_.cuModuleGetGlobal(&p, &n, m, v->second.second.c_str())); !r.ok()) {
    if (r.code == kErrNotFound) r.code = kErrInvalidSymbol;  // as cudaGetSymbolAddress says it
    r.message += " (symbol " + v->second.second + ")";
    return r;
  }
  *ptr = p;
  *size = n;
  owner_[p] = {std::max<size_t>(n, 1), dev};
  globals_[v->second.first].insert(p);
  return {};
}
Result CudaBackend::FuncAttributes(uint64_t func, proto::FuncAttrs* out) {
  CUfunction f = nullptr;
  if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
  auto a = [&](CUfunction_attribute attr) {
    int v = 0;
    cu_.cuFuncGetAttribute(&v, attr, f);
    return v;
  };
  out->shared_size_bytes = a(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  out->const_size_bytes = a(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  out->local_size_bytes = a(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  out->max_threads_per_block = a(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  out->num_regs = a(CU_FUNC_ATTRIBUTE_NUM_REGS);
  out->ptx_version = a(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  out->binary_version = a(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  out->max_dynamic_shared_size_bytes = a(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  return {};
}
// The settable cudaFuncAttribute numbers equal CUfunction_attribute's (cuda_driver_check.cc).
Result CudaBackend::FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) {
  CUfunction f = nullptr;
  if (Result r = Function(func, dev, &f); !r.ok()) return r;
  return R("cuFuncSetAttribute",
           cu_.cuFuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value));
}
Result CudaBackend::Occupancy(uint64_t func, int32_t block_size, uint64_t shmem, int32_t* blocks) {
  CUfunction f = nullptr;
  if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
  int n = 0;
  Result r = R("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
               cu_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block_size, shmem, 0));
  *blocks = n;
  return r;
}

}  // namespace gpool::remote::server::cuda
#endif  // GPOOL_HAVE_CUDA_H
