// The emulated CUDA driver's modules, functions and launches: cuModuleLoadData (gpool's fatbin
// parser; per-load variables), cuModuleGetFunction/GetGlobal, function attributes and parameter
// layouts, occupancy, and cuLaunchKernel(Ex), which queue the plugin's CPU kernel. See
// emulated_driver.cc for what the library is.
#include "emulated_driver.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>

namespace gpool::remote::emulated_driver {
namespace {

// Blocks of `threads` threads one emulated multiprocessor holds at once (the occupancy answer,
// and the bound a cooperative grid must fit, times the multiprocessor count).
int BlocksPerMp(int threads) { return std::min(kMaxBlocksPerMp, kMaxThreadsPerMp / threads); }

void* SymbolThunk(void* ctx, const char* name) {
  auto* m = static_cast<Module*>(ctx);
  auto it = m->globals.find(name);
  return it == m->globals.end() ? nullptr : Ptr(it->second);
}

struct LaunchShape {
  unsigned grid[3], block[3], shmem;
  CUstream stream;
  bool cooperative;
};

// The packed parameter buffer: `extra`'s CU_LAUNCH_PARAM_BUFFER_POINTER (what gpool passes), or
// `kernelParams` packed at the layout's offsets.
CUresult Params(const char* call, const Func& f, void** kernelParams, void** extra,
                std::vector<std::byte>* packed, std::span<const std::byte>* out) {
  if (extra) {
    const void* buf = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buf = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = *static_cast<size_t*>(extra[i + 1]);
      } else {
        return NotImplemented(call, fmt::format("extra option {}", extra[i]));
      }
    }
    if (!buf) return Fail(CUDA_ERROR_INVALID_VALUE, call, "extra without a parameter buffer");
    *out = {static_cast<const std::byte*>(buf), size};
    return CUDA_SUCCESS;
  }
  packed->assign(f.layout->param_bytes, std::byte{0});
  for (size_t i = 0; i < f.layout->params.size(); ++i) {
    if (!kernelParams) return Fail(CUDA_ERROR_INVALID_VALUE, call, "kernel {} has parameters", f.name);
    std::memcpy(packed->data() + f.layout->params[i].offset, kernelParams[i],
                f.layout->params[i].size);
  }
  *out = *packed;
  return CUDA_SUCCESS;
}

CUresult Launch(const char* call, CUfunction h, const LaunchShape& l, void** kernelParams,
                void** extra) {
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(h);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (CUresult r = CheckStream(call, l.stream); r) return r;
  uint64_t threads = uint64_t{l.block[0]} * l.block[1] * l.block[2];
  uint64_t blocks = uint64_t{l.grid[0]} * l.grid[1] * l.grid[2];
  if (threads == 0 || threads > 1024 || blocks == 0) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call, "kernel {}: grid {}x{}x{} of blocks {}x{}x{}",
                f->name, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]);
  }
  if (l.shmem > static_cast<unsigned>(f->max_dynamic_shared)) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call,
                "kernel {}: {} bytes of dynamic shared memory over its maximum {}", f->name,
                l.shmem, f->max_dynamic_shared);
  }
  if (l.cooperative && blocks > uint64_t(BlocksPerMp(static_cast<int>(threads))) * kMultiprocessors) {
    return Fail(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, call,
                "kernel {}: {} blocks of {} threads cannot all be resident", f->name, blocks, threads);
  }
  std::vector<std::byte> packed;
  std::span<const std::byte> params;
  if (CUresult r = Params(call, *f, kernelParams, extra, &packed, &params); r) return r;
  if (!f->fn) {
    return Fail(CUDA_ERROR_NOT_FOUND, call,
                "no CPU implementation of kernel {} (GPOOL_EMULATED_DRIVER_KERNELS={})", f->name,
                std::getenv("GPOOL_EMULATED_DRIVER_KERNELS") ? std::getenv("GPOOL_EMULATED_DRIVER_KERNELS") : "");
  }
  if (gpool::Status s = gpool::remote::server::CheckParams(f->name, *f->layout, params); !s.ok()) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call, "{}", s.message());
  }
  // The driver copies the parameters at the launch; the kernel runs with the queue.
  auto copy = std::make_shared<std::vector<std::byte>>(params.begin(), params.end());
  Submit([f, l, copy] {
    uint64_t ns = 0;
    gpool::Status s = gpool::remote::server::RunKernel(
        {.fn = f->fn, .name = f->name, .layout = f->layout,
         .grid = {l.grid[0], l.grid[1], l.grid[2]}, .block = {l.block[0], l.block[1], l.block[2]},
         .shared_mem = l.shmem, .params = *copy, .symbol = &SymbolThunk, .ctx = f->module},
        &ns);
    if (!s.ok() && S().sticky == CUDA_SUCCESS) {
      // A GPU reports a faulting kernel at the next synchronizing call, and every call after.
      Fail(CUDA_ERROR_LAUNCH_FAILED, "kernel", "{} (sticky from now on)", s.message());
      S().sticky = CUDA_ERROR_LAUNCH_FAILED;
    }
  });
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpool::remote::emulated_driver

using namespace gpool::remote::emulated_driver;  // NOLINT: the entry points below are C

// cuda.h's #defines give the entry points their exported (versioned) names: cuMemAlloc here is
// cuMemAlloc_v2.
extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  Lock lock(S().mu);
  const char* call = "cuModuleLoadData";
  if (CUresult r = Ready(call); r) return r;
  namespace fb = gpool::remote::fatbin;
  // A fatbin, cubin or PTX: its extent from its own headers (ImageFromPointer reads no further).
  auto bytes = fb::ImageFromPointer(image);
  if (!bytes.ok()) return Fail(CUDA_ERROR_INVALID_IMAGE, call, "{}", bytes.status().message());
  auto parsed = fb::ParseImage(*bytes, {.target_arch = 90});
  if (!parsed.ok()) return Fail(CUDA_ERROR_INVALID_IMAGE, call, "{}", parsed.status().message());
  auto m = std::make_unique<Module>();
  m->image = std::move(*parsed);
  for (const auto& [name, bytes] : m->image.globals) {
    uint64_t p = 0;
    if (CUresult r = Allocate(call, bytes, true, &p); r) {
      for (const auto& [n, q] : m->globals) Release(S().blocks.find(q));
      return r;
    }
    m->globals[name] = p;
  }
  *module = reinterpret_cast<CUmodule>(Adopt(S().modules, std::move(m)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  Lock lock(S().mu);
  State& s = S();
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(s.modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload", "unknown module");
  Drain();  // queued launches use its functions and variables
  for (const auto& [name, p] : m->globals) Release(s.blocks.find(p));
  for (const auto& f : m->funcs) s.funcs.erase(f.get());
  s.modules.erase(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  Lock lock(S().mu);
  const char* call = "cuModuleGetFunction";
  if (CUresult r = Ready(call); r) return r;
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(S().modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown module");
  auto k = m->image.kernels.find(name);
  if (k == m->image.kernels.end()) return CUDA_ERROR_NOT_FOUND;  // a normal answer: no message
  for (const auto& f : m->funcs) {
    if (f->name == name) {
      *hfunc = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  }
  auto f = std::make_unique<Func>();
  f->module = m;
  f->name = name;
  f->layout = &k->second;
  f->fn = S().plugin ? S().plugin->Find(name) : nullptr;
  *hfunc = reinterpret_cast<CUfunction>(f.get());
  S().funcs.insert(f.get());
  m->funcs.push_back(std::move(f));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  Lock lock(S().mu);
  const char* call = "cuModuleGetGlobal";
  if (CUresult r = Ready(call); r) return r;
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(S().modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown module");
  auto g = m->globals.find(name);
  if (g == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = g->second;
  if (bytes) *bytes = m->image.globals.find(name)->second;
  return CUDA_SUCCESS;
}

// Absent from the variant built as a driver older than CUDA 12.4, which lacks it (the cuda
// backend then answers GetParamInfo "not supported" and the client lays parameters out itself).
#ifndef GPOOL_EMULATED_DRIVER_BEFORE_12_4
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuFuncGetParamInfo"); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncGetParamInfo", "unknown function");
  if (index >= f->layout->params.size()) return CUDA_ERROR_INVALID_VALUE;  // the end of the list
  *offset = f->layout->params[index].offset;
  *size = f->layout->params[index].size;
  return CUDA_SUCCESS;
}
#endif  // GPOOL_EMULATED_DRIVER_BEFORE_12_4

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction func) {
  Lock lock(S().mu);
  const char* call = "cuFuncGetAttribute";
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    default: return NotImplemented(call, fmt::format("function attribute {}", static_cast<int>(attrib)));
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction func, CUfunction_attribute attrib, int value) {
  Lock lock(S().mu);
  const char* call = "cuFuncSetAttribute";
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > kOptinShared) {
      return Fail(CUDA_ERROR_INVALID_VALUE, call, "{}: dynamic shared memory {} > {}", f->name, value, kOptinShared);
    }
    f->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  }
  if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    if (value < -1 || value > 100) return Fail(CUDA_ERROR_INVALID_VALUE, call, "carveout {}", value);
    f->carveout = value;
    return CUDA_SUCCESS;
  }
  return NotImplemented(call, fmt::format("setting function attribute {}", static_cast<int>(attrib)));
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction func,
                                                                      int block_size, size_t shmem,
                                                                      unsigned int flags) {
  Lock lock(S().mu);
  const char* call = "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags";
  if (CUresult r = Ready(call); r) return r;
  if (!LiveFunc(func)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (block_size <= 0 || block_size > 1024) return Fail(CUDA_ERROR_INVALID_VALUE, call, "block size {}", block_size);
  (void)shmem, (void)flags;  // the CPU kernels' shared memory is host memory: it bounds nothing
  *blocks = BlocksPerMp(block_size);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shmem, CUstream st, void** kernelParams, void** extra) {
  Lock lock(S().mu);
  return Launch("cuLaunchKernel", f, {{gx, gy, gz}, {bx, by, bz}, shmem, st, false}, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  Lock lock(S().mu);
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      return NotImplemented("cuLaunchKernelEx", fmt::format("launch attribute {}", static_cast<int>(a.id)));
    }
    cooperative = a.value.cooperative != 0;
  }
  const CUlaunchConfig& c = *config;
  return Launch("cuLaunchKernelEx", f,
                {{c.gridDimX, c.gridDimY, c.gridDimZ}, {c.blockDimX, c.blockDimY, c.blockDimZ},
                 c.sharedMemBytes, c.hStream, cooperative},
                kernelParams, extra);
}

}  // extern "C"
