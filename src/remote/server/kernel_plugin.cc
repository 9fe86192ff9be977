#include "remote/server/kernel_plugin.h"

#include <dlfcn.h>

#include <chrono>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::server {

StatusOr<std::unique_ptr<KernelPlugin>> KernelPlugin::Load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    return Status::InvalidArgument(fmt::format("cannot load emulated kernels {}: {}", path, dlerror()));
  }
  std::unique_ptr<KernelPlugin> p(new KernelPlugin(handle));
  auto fn = reinterpret_cast<gpool_emulated_kernels_fn>(dlsym(handle, "gpool_emulated_kernels"));
  if (!fn) {
    return Status::InvalidArgument(fmt::format(
        "emulated kernels plugin {} does not export gpool_emulated_kernels()", path));
  }
  size_t n = 0;
  const gpool_emu_kernel* table = fn(&n);
  for (size_t i = 0; i < n; ++i) p->kernels_[table[i].name] = table[i].fn;
  return p;
}

KernelPlugin::~KernelPlugin() { dlclose(handle_); }

gpool_emu_kernel_fn KernelPlugin::Find(const std::string& mangled) const {
  auto it = kernels_.find(mangled);
  return it == kernels_.end() ? nullptr : it->second;
}

Status CheckParams(std::string_view name, const fatbin::KernelInfo& layout,
                   std::span<const std::byte> params) {
  for (const auto& p : layout.params) {
    if (uint64_t(p.offset) + p.size > params.size()) {
      return Status::InvalidArgument(fmt::format(
          "kernel {}: parameter buffer of {} bytes is too short for its layout", name,
          params.size()));
    }
  }
  return Status::Ok();
}

Status RunKernel(const KernelCall& c, uint64_t* ns) {
  *ns = 0;
  GPOOL_RETURN_IF_ERROR(CheckParams(c.name, *c.layout, c.params));
  std::vector<unsigned> offsets, sizes;
  for (const auto& p : c.layout->params) {
    offsets.push_back(p.offset);
    sizes.push_back(p.size);
  }
  char error[256] = {0};
  gpool_emu_launch el{};
  el.grid = {c.grid[0], c.grid[1], c.grid[2]};
  el.block = {c.block[0], c.block[1], c.block[2]};
  el.shared_mem = c.shared_mem;
  el.params = reinterpret_cast<const unsigned char*>(c.params.data());
  el.param_offsets = offsets.data();
  el.param_sizes = sizes.data();
  el.param_count = static_cast<unsigned>(offsets.size());
  el.symbol = c.symbol;
  el.ctx = c.ctx;
  el.error = error;
  el.error_capacity = sizeof(error);
  auto t0 = std::chrono::steady_clock::now();
  int rc = c.fn(&el);
  *ns = static_cast<uint64_t>((std::chrono::steady_clock::now() - t0).count());
  if (rc != 0) {
    error[sizeof(error) - 1] = 0;
    return Status::Aborted(fmt::format("kernel {} failed: {}", c.name, error));
  }
  return Status::Ok();
}

}  // namespace gpool::remote::server
