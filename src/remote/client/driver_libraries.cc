// The driver stand-in's libraries and kernels (cuLibrary*, cuKernel*): CUDA 12+'s
// context-independent modules, which NVIDIA's runtime uses to register a program's kernels
// (cuLibraryLoadData at start-up, cuLibraryGetKernel and cuKernelGetFunction at a kernel's first
// launch), whatever cuModuleGetLoadingMode answers.
//
// Here a library is a module (driver_modules.cc) and a kernel is that module's function: a
// CUlibrary is the CUmodule of the same record, a CUkernel the CUfunction, so cuLibraryGetModule
// and cuKernelGetFunction return their argument, checked. Limit: a library is loaded on one
// device, the current context's, or device 0 when no context is current (the runtime loads before
// it makes one current); its kernels launch on any device of the same server (the server holds a
// session's modules for all its devices), and a launch on a device of another server runs the
// kernel of the library's copy there, loaded at the first such launch (LibraryKernelOn: NCCL's
// kernels run on every GPU of a communicator). Handles stay those of the first load: the copy's
// function is used only inside the launch.
#include <cuda.h>

#include <algorithm>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

// The device a library loads on: the current context's, else device 0.
CUresult LibraryDevice(const char* call, int* dev) {
  if (CUresult r = Ready(call)) return r;
  CUcontext cur = nullptr;
  if (cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != nullptr) return CurrentDevice(call, dev);
  *dev = 0;
  return CUDA_SUCCESS;
}

CUresult FindKernel(const char* call, CUkernel k, Function** out) {
  if (CUresult r = Ready(call)) return r;
  auto* f = reinterpret_cast<Function*>(k);
  std::lock_guard<std::mutex> lk(D().mu);
  if (!D().functions.count(f)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE,
                fmt::format("kernel {} is not a kernel of a loaded library", fmt::ptr(k)));
  }
  *out = f;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult LibraryKernelOn(const char* call, Function* k, int dev, ServerLink* link, Function** out) {
  Module* lib = k->module;
  CUmodule copy = nullptr;
  std::map<int32_t, int32_t> attrs;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (auto it = lib->copies.find(link); it != lib->copies.end()) copy = it->second;
    attrs = k->attrs;
  }
  if (!copy) {
    if (CUresult r = LoadModule(call, &copy, lib->image.data(), dev)) return r;
    CUmodule extra = nullptr;
    {
      std::lock_guard<std::mutex> lk(D().mu);
      reinterpret_cast<Module*>(copy)->library = true;
      auto [it, inserted] = lib->copies.emplace(link, copy);
      if (!inserted) {  // another thread's launch made one first
        extra = copy;
        copy = it->second;
      }
    }
    if (extra) cuModuleUnload(extra);
  }
  CUfunction f = nullptr;
  if (CUresult r = cuModuleGetFunction(&f, copy, k->name.c_str())) return r;
  auto* fn = reinterpret_cast<Function*>(f);
  bool fresh;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    fresh = fn->attrs.empty();
  }
  if (fresh) {
    for (const auto& [attr, value] : attrs) {
      if (CUresult r = cuFuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value)) return r;
    }
  }
  *out = fn;
  return CUDA_SUCCESS;
}

}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

#pragma GCC visibility push(default)
extern "C" {

// JIT and library options (binary preservation, the context-independent loading hint) are
// accepted and ignored: the image is sent to the server whole, and the server's driver compiles.
CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                           CUlibraryOption*, void**, unsigned int) {
  const char* call = "cuLibraryLoadData";
  int dev;
  if (CUresult r = LibraryDevice(call, &dev)) return r;
  CUmodule m = nullptr;
  CUresult r = LoadModule(call, &m, code, dev);
  if (r == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lk(D().mu);
    reinterpret_cast<Module*>(m)->library = true;
  }
  if (r == CUDA_SUCCESS && library) *library = reinterpret_cast<CUlibrary>(m);
  return r;
}
// With the library's copies on other servers (LibraryKernelOn).
CUresult cuLibraryUnload(CUlibrary library) {
  std::map<const ServerLink*, CUmodule> copies;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto* m = reinterpret_cast<Module*>(library);
    if (D().modules.count(m)) copies.swap(m->copies);
  }
  for (auto& [link, copy] : copies) cuModuleUnload(copy);
  return cuModuleUnload(reinterpret_cast<CUmodule>(library));
}
CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (!module) return Fail("cuLibraryGetModule", CUDA_ERROR_INVALID_VALUE, "null module pointer");
  *module = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}
CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  CUfunction f = nullptr;
  CUresult r = cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(library), name);
  if (r == CUDA_SUCCESS && kernel) *kernel = reinterpret_cast<CUkernel>(f);
  return r;
}
CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return cuModuleGetGlobal(dptr, bytes, reinterpret_cast<CUmodule>(library), name);
}
CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  const char* call = "cuKernelGetFunction";
  if (!pFunc) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null function pointer");
  Function* f;
  if (CUresult r = FindKernel(call, kernel, &f)) return r;
  *pFunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}
CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  const char* call = "cuKernelGetLibrary";
  if (!pLib) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null library pointer");
  Function* f;
  if (CUresult r = FindKernel(call, kernel, &f)) return r;
  *pLib = reinterpret_cast<CUlibrary>(f->module);
  return CUDA_SUCCESS;
}
CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  const char* call = "cuKernelGetName";
  if (!name) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null name pointer");
  Function* f;
  if (CUresult r = FindKernel(call, kernel, &f)) return r;
  *name = f->name.c_str();  // lives as long as the library
  return CUDA_SUCCESS;
}


// ---- function and kernel attributes (a CUkernel is a CUfunction here)

// Read from the server (FuncAttributes, one round trip, then kept: Function::server_attrs).
// Attributes gpool does not model (cache mode, clusters, scheduling policy) are 0, what a kernel
// that sets none of them has.
CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  const char* call = "cuFuncGetAttribute";
  if (!pi) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
  Function* f;
  if (CUresult r = FindKernel(call, reinterpret_cast<CUkernel>(hfunc), &f)) return r;
  if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    *pi = -1;  // no preference set
    return CUDA_SUCCESS;
  }
  proto::FuncAttrs a;
  bool known;
  uint64_t sets;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    known = f->server_attrs_known;
    sets = f->attrs_set;
    if (known) a = f->server_attrs;
  }
  if (!known) {
    proto::FuncAttributes q;
    q.func = f->id;
    if (CUresult r = Call(f->module->link, q, &a, call)) return r;
    std::lock_guard<std::mutex> lk(D().mu);
    if (f->attrs_set == sets) {
      f->server_attrs = a;
      f->server_attrs_known = true;
    }
  }
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = a.max_threads_per_block; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = static_cast<int>(a.shared_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = static_cast<int>(a.const_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = static_cast<int>(a.local_size_bytes); break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = a.num_regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = a.ptx_version; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = a.binary_version; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = a.max_dynamic_shared_size_bytes; break;
    default: *pi = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice) {
  return cuFuncGetAttribute(pi, attrib, reinterpret_cast<CUfunction>(kernel));
}

// Forwarded to the function's server, posted:
// what the client can check against the device's properties it checks now; the server's refusal
// surfaces at the next synchronizing call. The attribute numbers are the runtime's, which the
// protocol carries (equal for the settable ones).
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  const char* call = "cuFuncSetAttribute";
  Function* f;
  if (CUresult r = FindKernel(call, reinterpret_cast<CUkernel>(hfunc), &f)) return r;
  const proto::DeviceProps* p;
  if (CUresult r = DevProps(call, f->module->device, &p)) return r;
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
      (value < 0 || static_cast<uint64_t>(value) > p->shared_mem_per_block_optin)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("dynamic shared memory {} beyond the device's {} bytes", value,
                            p->shared_mem_per_block_optin));
  }
  if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT && (value < -1 || value > 100)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("carveout {} (want -1..100)", value));
  }
  // Sent for every device the function has been launched on (its module's at least); a launch
  // on a further device sends them there first (LaunchKernel).
  std::set<int> devices;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    f->attrs[static_cast<int32_t>(attrib)] = value;
    f->server_attrs_known = false;  // asked again after the set, which the link sends first
    ++f->attrs_set;
    f->attr_devices.insert(f->module->device);
    devices = f->attr_devices;
  }
  for (int dev : devices) {
    proto::FuncSetAttribute m{.func = f->id, .device = D().Index(dev),
                              .attr = static_cast<int32_t>(attrib), .value = value};
    if (CUresult r = Post(f->module->link, m, call)) return r;
  }
  return CUDA_SUCCESS;
}
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice) {
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(kernel), attrib, val);
}
// A cache preference is a hint with no effect on results; the server's driver picks.
CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache) {
  Function* f;
  return FindKernel("cuFuncSetCacheConfig", reinterpret_cast<CUkernel>(hfunc), &f);
}
CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache, CUdevice) {
  Function* f;
  return FindKernel("cuKernelSetCacheConfig", kernel, &f);
}
CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  return cuKernelGetName(name, reinterpret_cast<CUkernel>(hfunc));
}

// The dynamic shared memory a block can have when numBlocks blocks share a multiprocessor: the
// multiprocessor's shared memory split evenly, at most the per-block opt-in limit, less the
// kernel's static shared memory. Approximate: CUDA also rounds to its allocation granularity and
// reserves 1 KiB per block on recent GPUs, which the server's properties do not carry.
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                 int numBlocks, int blockSize) {
  const char* call = "cuOccupancyAvailableDynamicSMemPerBlock";
  if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("result {}, {} blocks of {} threads", fmt::ptr(dynamicSmemSize),
                            numBlocks, blockSize));
  }
  Function* f;
  if (CUresult r = FindKernel(call, reinterpret_cast<CUkernel>(func), &f)) return r;
  const proto::DeviceProps* p;
  if (CUresult r = DevProps(call, f->module->device, &p)) return r;
  int static_shared = 0, max_threads = 0, max_dynamic = 0;
  if (CUresult r = cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func)) {
    return r;
  }
  if (CUresult r = cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func)) {
    return r;
  }
  if (CUresult r = cuFuncGetAttribute(&max_dynamic, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      func)) {
    return r;
  }
  // As a GPU computes it, approximately: the multiprocessor's
  // shared memory split numBlocks ways, less the per-block reserve (1 KiB from compute
  // capability 8.0 on) and the kernel's static shared memory, capped by the kernel's maximum
  // dynamic shared memory; 0 when the blocks cannot reside together by threads or block count.
  // Registers and the allocation granularity are not modelled.
  *dynamicSmemSize = 0;
  const uint64_t warp = std::max(p->warp_size, 1);
  const uint64_t threads = (static_cast<uint64_t>(blockSize) + warp - 1) / warp * warp;
  if (blockSize > max_threads ||
      threads * static_cast<uint64_t>(numBlocks) > static_cast<uint64_t>(p->max_threads_per_mp) ||
      numBlocks > p->max_blocks_per_mp) {
    return CUDA_SUCCESS;
  }
  const uint64_t reserve = p->major >= 8 ? 1024 : 0;
  const uint64_t per_block = p->shared_mem_per_mp / static_cast<uint64_t>(numBlocks);
  const uint64_t used = reserve + static_cast<uint64_t>(std::max(static_shared, 0));
  if (per_block <= used) return CUDA_SUCCESS;
  *dynamicSmemSize =
      std::min<uint64_t>(per_block - used, static_cast<uint64_t>(std::max(max_dynamic, 0)));
  return CUDA_SUCCESS;
}

// The server computes occupancy (Occupancy, one round trip): its driver knows the kernel.
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                              int blockSize, size_t dynamicSMemSize,
                                                              unsigned int flags) {
  const char* call = "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags";
  if (!numBlocks) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
  Function* f;
  if (CUresult r = FindKernel(call, reinterpret_cast<CUkernel>(func), &f)) return r;
  proto::Occupancy q{.func = f->id, .block_size = blockSize, .shmem = dynamicSMemSize,
                     .flags = flags};
  proto::IntValue v;
  if (CUresult r = Call(f->module->link, q, &v, call)) return r;
  *numBlocks = v.value;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                              dynamicSMemSize, 0);
}

// Clusters resident at once: the blocks the server's occupancy allows per multiprocessor, over all
// multiprocessors, in clusters of the launch's cluster size (1 when the launch sets none).
// Approximate: real GPUs also bound a cluster to one GPC, which the server's properties do not
// describe.
CUresult cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func, const CUlaunchConfig* config) {
  const char* call = "cuOccupancyMaxActiveClusters";
  if (!numClusters || !config) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result or config");
  unsigned cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster = a.value.clusterDim.x * a.value.clusterDim.y * a.value.clusterDim.z;
    }
  }
  if (cluster == 0) return Fail(call, CUDA_ERROR_INVALID_CLUSTER_SIZE, "cluster size 0");
  int per_sm = 0;
  unsigned threads = config->blockDimX * config->blockDimY * config->blockDimZ;
  if (CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
          &per_sm, func, static_cast<int>(threads), config->sharedMemBytes, 0)) {
    return r;
  }
  Function* f;
  if (CUresult r = FindKernel(call, reinterpret_cast<CUkernel>(func), &f)) return r;
  const proto::DeviceProps* p;
  if (CUresult r = DevProps(call, f->module->device, &p)) return r;
  *numClusters = per_sm * p->multi_processor_count / static_cast<int>(cluster);
  return CUDA_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop
