// A plugin of CPU kernels (emulated_kernels.h): loading it and running one launch through it.
// Shared by the emulated backend (emulated_backend.cc) and the emulated CUDA driver, the test
// stand-in for libcuda.so.1 (tests/remote/emulated_driver), so both run kernels the same way.
// Thread safety: a KernelPlugin is immutable once loaded; RunKernel runs on the caller's thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "remote/fatbin/fatbin.h"
#include "remote/server/emulated_kernels.h"

namespace gpool::remote::server {

class KernelPlugin {
 public:
  // dlopens `path` and reads its gpool_emulated_kernels() table. InvalidArgument naming the file
  // when it cannot be loaded or does not export the table.
  static StatusOr<std::unique_ptr<KernelPlugin>> Load(const std::string& path);
  ~KernelPlugin();
  KernelPlugin(const KernelPlugin&) = delete;
  KernelPlugin& operator=(const KernelPlugin&) = delete;

  // The CPU implementation of the kernel with this mangled name, or nullptr.
  gpool_emu_kernel_fn Find(const std::string& mangled) const;

 private:
  explicit KernelPlugin(void* handle) : handle_(handle) {}
  void* handle_;
  std::unordered_map<std::string, gpool_emu_kernel_fn> kernels_;
};

// One launch of a CPU kernel over its whole grid.
struct KernelCall {
  gpool_emu_kernel_fn fn = nullptr;
  std::string_view name;                         // mangled, for messages
  const fatbin::KernelInfo* layout = nullptr;    // parameter offsets and sizes
  std::array<unsigned, 3> grid{}, block{};
  unsigned shared_mem = 0;
  std::span<const std::byte> params;             // the packed parameter buffer
  void* (*symbol)(void* ctx, const char* name) = nullptr;  // the module's variables
  void* ctx = nullptr;
};

// InvalidArgument when `params` is too short for `layout` (RunKernel checks it too; a caller that
// runs the kernel later checks it when the launch is submitted).
Status CheckParams(std::string_view name, const fatbin::KernelInfo& layout,
                   std::span<const std::byte> params);

// Runs `c`, setting *ns to the kernel's CPU time. InvalidArgument: the parameter buffer is too
// short for the layout (nothing ran); Aborted: the kernel reported a failure (its message).
Status RunKernel(const KernelCall& c, uint64_t* ns);

}  // namespace gpool::remote::server
