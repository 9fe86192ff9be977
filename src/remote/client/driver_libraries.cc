// The driver stand-in's libraries and kernels (cuLibrary*, cuKernel*): CUDA 12+'s
// context-independent modules, which NVIDIA's runtime uses to register a program's kernels
// (cuLibraryLoadData at start-up, cuLibraryGetKernel and cuKernelGetFunction at a kernel's first
// launch), whatever cuModuleGetLoadingMode answers.
//
// Here a library is a module (driver_modules.cc) and a kernel is that module's function: a
// CUlibrary is the CUmodule of the same record, a CUkernel the CUfunction, so cuLibraryGetModule
// and cuKernelGetFunction return their argument, checked. Limit: a library is loaded on one
// device, the current context's, or device 0 when no context is current (the runtime loads before
// it makes one current), not on every device as in CUDA; a program that launches a library's
// kernel on another device is refused by the launch, naming the device.
#include <cuda.h>

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
  if (r == CUDA_SUCCESS && library) *library = reinterpret_cast<CUlibrary>(m);
  return r;
}
CUresult cuLibraryUnload(CUlibrary library) {
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

}  // extern "C"
#pragma GCC visibility pop
