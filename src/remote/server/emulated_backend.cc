// The emulated GPU: device memory is an anonymous host mapping, kernels are CPU functions from a
// plugin (emulated_kernels.h), and every operation runs to completion when issued, so streams and
// events are trivially ordered. Kernel parameter layouts come from the module's fatbin, parsed by
// remote/fatbin (the role the driver's cuFuncGetParamInfo plays on a real GPU). As on a GPU, where
// each device's context loads its own copy of a module, every device has its own copy of each
// module variable, in that device's memory range, and a kernel launched on a device sees that
// device's copies.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"
#include "remote/server/backend.h"
#include "remote/server/emulated_vmm.h"
#include "remote/server/free_ranges.h"
#include "remote/server/kernel_plugin.h"

namespace gpool::remote::server {

Result Err(int32_t code, std::string message) { return Result{code, std::move(message)}; }

namespace {

constexpr uint64_t kAlign = 256;

// First-fit allocator over one device's address range. Free ranges are coalesced.
class RangeAllocator {
 public:
  RangeAllocator(uint64_t base, uint64_t size) : base_(base), size_(size) { free_.Add(base, size); }
  uint64_t Alloc(uint64_t asked) {
    uint64_t size = (std::max<uint64_t>(asked, 1) + kAlign - 1) / kAlign * kAlign;
    // Sizes are multiples of kAlign from an aligned base: every free range starts aligned.
    uint64_t at = free_.FindFirst(size, 1);
    if (at == 0) return 0;
    free_.Take(at, size);
    used_[at] = size;
    asked_[at] = asked;
    in_use_ += size;
    return at;
  }
  // Returns the freed size, 0 if `p` is not the start of an allocation.
  uint64_t Free(uint64_t p) {
    auto it = used_.find(p);
    if (it == used_.end()) return 0;
    uint64_t size = it->second;
    used_.erase(it);
    asked_.erase(p);
    in_use_ -= size;
    free_.Give(p, size);
    return size;
  }
  // True when [p, p+n) lies inside one allocation (its asked size, not the rounded one).
  bool Contains(uint64_t p, uint64_t n) const {
    auto it = asked_.upper_bound(p);
    if (it == asked_.begin()) return false;
    --it;
    return p >= it->first && p + n <= it->first + std::max<uint64_t>(it->second, 1);
  }
  bool Owns(uint64_t p) const { return p >= base_ && p < base_ + size_; }
  // The start of every allocation (the caller may Free them while walking the copy).
  std::vector<uint64_t> Starts() const {
    std::vector<uint64_t> out;
    out.reserve(used_.size());
    for (const auto& [p, size] : used_) out.push_back(p);
    return out;
  }
  uint64_t in_use() const { return in_use_; }
  uint64_t size() const { return size_; }

 private:
  uint64_t base_, size_, in_use_ = 0;
  FreeRanges free_;
  std::map<uint64_t, uint64_t> used_, asked_;
};

struct EmuModule {
  std::vector<std::byte> image;
  bool parsed = false;
  Status parse_status;
  fatbin::Module layouts;
  std::map<std::string, uint64_t, std::less<>> vars;  // name -> var id
};
struct EmuFunction {
  uint64_t module;
  std::string name;
  gpool_emu_kernel_fn fn = nullptr;
  // cudaFuncSetAttribute's settable values, per function whatever the device (the emulated
  // devices are alike). A launch asking for more dynamic shared memory than the maximum fails as
  // on a GPU, so a program that forgets to opt in fails here too.
  int32_t max_dynamic_shared = 48 << 10;
  int32_t carveout = -1;
};
struct EmuVar {
  uint64_t module;
  std::string name;
  uint64_t size;
  std::vector<uint64_t> ptrs;  // per device: its copy, allocated in that device's range
};

class EmulatedBackend final : public Backend {
 public:
  EmulatedBackend(EmulatedOptions o, void* arena, std::unique_ptr<KernelPlugin> plugin)
      : o_(std::move(o)), vmm_(o_.va_hint, o_.va_bytes), plugin_(std::move(plugin)) {
    arena_ = static_cast<std::byte*>(arena);
    for (int d = 0; d < o_.devices; ++d) {
      uint64_t base = reinterpret_cast<uint64_t>(arena_) + uint64_t(d) * o_.memory_bytes;
      alloc_.emplace_back(base, o_.memory_bytes);
    }
  }
  ~EmulatedBackend() override { munmap(arena_, o_.memory_bytes * o_.devices); }

  std::string_view name() const override { return "emulated"; }
  int DeviceCount() override { return o_.devices; }

  Result CheckDev(uint32_t dev) {
    if (dev >= static_cast<uint32_t>(o_.devices)) {
      return Err(kErrInvalidDevice, fmt::format("device {} does not exist (server has {})", dev,
                                                o_.devices));
    }
    return {};
  }

  Result GetProps(uint32_t dev, proto::DeviceProps* p) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    p->name = fmt::format("gpool emulated GPU {}", dev);
    p->uuid = std::string(16, '\0');
    p->uuid[0] = static_cast<char>(dev);
    for (int i = 0; i < 8; ++i) p->uuid[8 + i] = static_cast<char>(o_.uuid_seed >> (8 * i));
    p->total_global_mem = o_.memory_bytes;
    p->shared_mem_per_block = 48 << 10;
    p->shared_mem_per_block_optin = 227 << 10;
    p->shared_mem_per_mp = 228 << 10;
    p->mem_pitch = INT32_MAX;
    p->total_const_mem = 64 << 10;
    p->texture_alignment = 512;
    p->regs_per_block = 65536;
    p->regs_per_mp = 65536;
    p->warp_size = 32;
    p->max_threads_per_block = 1024;
    p->max_threads_dim = {1024, 1024, 64};
    p->max_grid_size = {INT32_MAX, 65535, 65535};
    p->clock_rate = 1000000;
    p->major = 9;
    p->minor = 0;
    p->multi_processor_count = 4;
    p->concurrent_kernels = 1;
    p->pci_bus_id = static_cast<int32_t>(dev);
    p->async_engine_count = 2;
    p->unified_addressing = 1;
    p->memory_clock_rate = 1000000;
    p->memory_bus_width = 256;
    p->l2_cache_size = 4 << 20;
    p->max_threads_per_mp = 2048;
    p->max_blocks_per_mp = 32;
    return {};
  }

  Result GetAttribute(uint32_t dev, int32_t attr, int32_t* value) override {
    proto::DeviceProps p;
    if (Result r = GetProps(dev, &p); !r.ok()) return r;
    // cudaDeviceAttr numbers for the attributes the emulated device describes; others read 0.
    switch (attr) {
      case 1: *value = p.max_threads_per_block; break;
      case 2: case 3: case 4: *value = p.max_threads_dim[attr - 2]; break;
      case 5: case 6: case 7: *value = p.max_grid_size[attr - 5]; break;
      case 8: *value = static_cast<int32_t>(p.shared_mem_per_block); break;
      case 9: *value = static_cast<int32_t>(p.total_const_mem); break;
      case 10: *value = p.warp_size; break;
      case 12: *value = p.regs_per_block; break;
      case 13: *value = p.clock_rate; break;
      case 16: *value = p.multi_processor_count; break;
      case 31: *value = p.concurrent_kernels; break;
      case 33: *value = p.pci_bus_id; break;
      case 36: *value = p.memory_clock_rate; break;
      case 37: *value = p.memory_bus_width; break;
      case 38: *value = p.l2_cache_size; break;
      case 39: *value = p.max_threads_per_mp; break;
      case 40: *value = p.async_engine_count; break;
      case 41: *value = p.unified_addressing; break;
      case 75: *value = p.major; break;
      case 76: *value = p.minor; break;
      case 81: *value = static_cast<int32_t>(p.shared_mem_per_mp); break;
      case 82: *value = p.regs_per_mp; break;
      case 95: *value = 1; break;  // cudaDevAttrCooperativeLaunch: the whole grid runs at once
      case 97: *value = static_cast<int32_t>(p.shared_mem_per_block_optin); break;
      case 106: *value = p.max_blocks_per_mp; break;
      default: *value = 0;
    }
    return {};
  }

  Result MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    *total = alloc_[dev].size();
    *free = *total - std::min(*total, alloc_[dev].in_use() + vmm_.bytes_on(dev));
    return {};
  }

  Result Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    // Memory handles (cuMemCreate) share the device's memory with allocations.
    const bool room = alloc_[dev].in_use() + vmm_.bytes_on(dev) + size <= alloc_[dev].size();
    *ptr = room ? alloc_[dev].Alloc(size) : 0;
    if (*ptr == 0) {
      return Err(kErrMemoryAllocation,
                 fmt::format("emulated device {} is out of memory ({} bytes asked, {} of {} in use)",
                             dev, size, alloc_[dev].in_use(), alloc_[dev].size()));
    }
    return {};
  }

  Result Free(uint64_t ptr) override {
    if (var_copies_.count(ptr)) {
      return Err(kErrInvalidDevicePointer,
                 fmt::format("cudaFree(0x{:x}): the storage of a module variable, not an "
                             "allocation", ptr));
    }
    for (auto& a : alloc_) {
      if (!a.Owns(ptr)) continue;
      uint64_t size = a.Free(ptr);
      if (size == 0) break;
      // Give big blocks' pages back now; small ones are reused soon.
      if (size >= (1u << 20)) madvise(reinterpret_cast<void*>(ptr), size, MADV_DONTNEED);
      return {};
    }
    return Err(kErrInvalidDevicePointer, fmt::format("cudaFree(0x{:x}): not an allocation", ptr));
  }

  Result CheckRange(uint64_t p, uint64_t n, const char* what) {
    if (n == 0) return {};
    // Reserved address space holds no allocations: what is mapped there, with access, counts.
    if (vmm_.Reserved(p)) return vmm_.Check(p, n, what);
    // Variables' copies are allocations of their devices too (RegisterVar).
    for (auto& a : alloc_) {
      if (a.Contains(p, n)) return {};
    }
    return Err(kErrInvalidValue,
               fmt::format("{}: device range 0x{:x}+{} is not inside one allocation", what, p, n));
  }
  Result CheckStream(uint64_t stream) {
    if (stream != 0 && !streams_.count(stream)) {
      return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", stream));
    }
    return {};
  }

  Result CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (Result r = CheckRange(dst, src.size(), "host-to-device copy"); !r.ok()) return r;
    if (!src.empty()) std::memcpy(reinterpret_cast<void*>(dst), src.data(), src.size());
    return {};
  }
  // Device memory is host memory and every operation has completed when its call returns (the
  // session runs the frames before a chunk first), so a chunk is received straight into place.
  std::span<std::byte> H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) override {
    if (!CheckStream(stream).ok() || !CheckRange(dst, size, "").ok()) return {};
    return {reinterpret_cast<std::byte*>(dst), size};
  }
  Result CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) override {
    if (data.data() == reinterpret_cast<const std::byte*>(dst)) return {};  // already in place
    return CopyH2D(dst, data, stream);
  }
  Result CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (Result r = CheckRange(src, size, "device-to-host copy"); !r.ok()) return r;
    if (size) std::memcpy(dst, reinterpret_cast<const void*>(src), size);
    return {};
  }
  // The default pipelined read is a HostView, which knows no stream: a read on an unknown
  // stream is refused here, and then fails in CopyD2H as the cuda backend's does.
  bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) override {
    return CheckStream(stream).ok() && Backend::StartD2H(src, size, stream, slot);
  }
  std::span<const std::byte> HostView(uint64_t src, uint64_t size) override {
    if (!CheckRange(src, size, "").ok()) return {};
    return {reinterpret_cast<const std::byte*>(src), size};
  }
  Result CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (Result r = CheckRange(src, size, "device-to-device copy (source)"); !r.ok()) return r;
    if (Result r = CheckRange(dst, size, "device-to-device copy (destination)"); !r.ok()) return r;
    if (size) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), size);
    return {};
  }
  Result Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (Result r = CheckRange(dst, size, "memset"); !r.ok()) return r;
    if (size) std::memset(reinterpret_cast<void*>(dst), value, size);
    return {};
  }
  Result Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height,
                  uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (width == 0 || height == 0) return {};
    if (pitch < width) return Err(kErrInvalidValue, "2-D memset: pitch < width");
    // The rows span [dst, dst + (height-1)*pitch + width): one check for all of them.
    if (height - 1 > (UINT64_MAX - width) / pitch) {
      return Err(kErrInvalidValue, fmt::format("2-D memset: {} rows of pitch {} overflow", height, pitch));
    }
    if (Result r = CheckRange(dst, (height - 1) * pitch + width, "2-D memset"); !r.ok()) return r;
    for (uint64_t row = 0; row < height; ++row) {
      std::memset(reinterpret_cast<void*>(dst + row * pitch), value, width);
    }
    return {};
  }
  Result Copy2D(const proto::Memcpy2D& c, std::byte* host_out) override {
    if (Result r = CheckStream(c.stream); !r.ok()) return r;
    if (c.height == 0 || c.width == 0) return {};
    auto kind = static_cast<proto::CopyKind>(c.kind);
    bool dev_src = kind != proto::CopyKind::kHostToDevice;
    bool dev_dst = kind != proto::CopyKind::kDeviceToHost;
    if (dev_src && c.spitch < c.width) return Err(kErrInvalidValue, "2-D copy: spitch < width");
    if (dev_dst && c.dpitch < c.width) return Err(kErrInvalidValue, "2-D copy: dpitch < width");
    if (kind == proto::CopyKind::kHostToDevice && c.data.size() != c.width * c.height) {
      return Err(kErrInvalidValue, "2-D copy: packed host data size != width*height");
    }
    for (uint64_t row = 0; row < c.height; ++row) {
      const std::byte* s;
      std::byte* d;
      if (dev_src) {
        if (Result r = CheckRange(c.src + row * c.spitch, c.width, "2-D copy (source)"); !r.ok()) return r;
        s = reinterpret_cast<const std::byte*>(c.src + row * c.spitch);
      } else {
        s = c.data.data() + row * c.width;
      }
      if (dev_dst) {
        if (Result r = CheckRange(c.dst + row * c.dpitch, c.width, "2-D copy (destination)"); !r.ok()) return r;
        d = reinterpret_cast<std::byte*>(c.dst + row * c.dpitch);
      } else {
        d = host_out + row * c.width;
      }
      std::memmove(d, s, c.width);
    }
    return {};
  }

  Result LoadModule(uint64_t module, std::span<const std::byte> image) override {
    EmuModule& m = modules_[module];
    m.image.assign(image.begin(), image.end());
    return {};
  }
  EmuModule* Parsed(uint64_t module) {
    auto it = modules_.find(module);
    if (it == modules_.end()) return nullptr;
    EmuModule& m = it->second;
    if (!m.parsed) {
      m.parsed = true;
      auto mod = fatbin::ParseImage(m.image, {.target_arch = 90});  // fatbin, cubin or PTX (cuModuleLoadData)
      if (mod.ok()) {
        m.layouts = std::move(*mod);
      } else {
        m.parse_status = mod.status();
      }
    }
    return &m;
  }
  Result RegisterFunction(uint64_t module, uint64_t func, const std::string& name) override {
    if (!modules_.count(module)) {
      return Err(kErrInvalidResourceHandle, fmt::format("function {}: unknown module {}", name, module));
    }
    EmuFunction f{module, name, plugin_ ? plugin_->Find(name) : nullptr};
    functions_[func] = std::move(f);
    return {};
  }
  Result RegisterVar(uint64_t module, uint64_t var, const std::string& name, uint64_t size,
                     bool) override {
    auto it = modules_.find(module);
    if (it == modules_.end()) {
      return Err(kErrInvalidResourceHandle, fmt::format("variable {}: unknown module {}", name, module));
    }
    if (auto old = vars_.find(var); old != vars_.end()) {  // registered again: replaced
      FreeCopies(old->second);
      vars_.erase(old);
    }
    // Each device gets its own zeroed copy in its memory range, as each GPU context loads its own
    // copy of the module; the program initialises them with cudaMemcpyToSymbol on each device
    // (static initialisers in device code are not emulated).
    if (size > o_.memory_bytes) {
      return Err(kErrMemoryAllocation, fmt::format("variable {} of {} bytes exceeds an emulated "
                                                   "device ({} bytes)", name, size, o_.memory_bytes));
    }
    EmuVar v{module, name, size, {}};
    for (uint32_t d = 0; d < alloc_.size(); ++d) {
      uint64_t p = alloc_[d].Alloc(size);
      if (p == 0) {
        FreeCopies(v);
        return Err(kErrMemoryAllocation,
                   fmt::format("variable {} of {} bytes: emulated device {} is out of memory", name,
                               size, d));
      }
      std::memset(reinterpret_cast<void*>(p), 0, std::max<uint64_t>(size, 1));
      var_copies_.insert(p);
      v.ptrs.push_back(p);
    }
    vars_[var] = std::move(v);
    it->second.vars[name] = var;
    return {};
  }
  void FreeCopies(const EmuVar& v) {
    for (uint32_t d = 0; d < v.ptrs.size(); ++d) {
      alloc_[d].Free(v.ptrs[d]);
      var_copies_.erase(v.ptrs[d]);
    }
  }
  // Its functions and variables die with it (the variables' copies are freed on every device).
  Result UnloadModule(uint64_t module) override {
    modules_.erase(module);
    std::erase_if(functions_, [&](auto& kv) { return kv.second.module == module; });
    std::erase_if(vars_, [&](auto& kv) {
      if (kv.second.module != module) return false;
      FreeCopies(kv.second);
      return true;
    });
    return {};
  }
  Result Lookup(uint64_t func, EmuFunction** f) {
    auto it = functions_.find(func);
    if (it == functions_.end()) {
      return Err(kErrInvalidDeviceFunction, fmt::format("unknown function id {}", func));
    }
    *f = &it->second;
    return {};
  }
  Result Layout(EmuFunction* f, const fatbin::KernelInfo** info) {
    EmuModule* m = Parsed(f->module);
    if (!m->parse_status.ok()) {
      return Err(kErrInvalidKernelImage, fmt::format("kernel {}: cannot read its module: {}",
                                                     f->name, m->parse_status.ToString()));
    }
    auto k = m->layouts.kernels.find(f->name);
    if (k == m->layouts.kernels.end()) {
      return Err(kErrInvalidDeviceFunction,
                 fmt::format("kernel {} is not in its module's device code", f->name));
    }
    *info = &k->second;
    return {};
  }
  Result GetParamInfo(uint64_t func, proto::ParamInfo* out) override {
    EmuFunction* f = nullptr;
    const fatbin::KernelInfo* info = nullptr;
    if (Result r = Lookup(func, &f); !r.ok()) return r;
    if (!o_.answer_param_info) {
      return Err(kErrNotSupported,
                 fmt::format("kernel {}: cuFuncGetParamInfo is not available (emulating a driver "
                             "older than CUDA 12.4: --emulated-no-param-info)", f->name));
    }
    if (Result r = Layout(f, &info); !r.ok()) return r;
    for (const auto& p : info->params) out->params.push_back({p.offset, p.size});
    return {};
  }
  Result GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    auto it = vars_.find(var);
    if (it == vars_.end()) return Err(kErrInvalidValue, fmt::format("unknown symbol id {}", var));
    *ptr = it->second.ptrs[dev];
    *size = it->second.size;
    return {};
  }
  Result FuncAttributes(uint64_t func, proto::FuncAttrs* out) override {
    EmuFunction* f = nullptr;
    if (Result r = Lookup(func, &f); !r.ok()) return r;
    out->max_threads_per_block = 1024;
    out->num_regs = 32;
    out->ptx_version = 90;
    out->binary_version = 90;
    out->max_dynamic_shared_size_bytes = f->max_dynamic_shared;
    return {};
  }
  Result FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    EmuFunction* f = nullptr;
    if (Result r = Lookup(func, &f); !r.ok()) return r;
    constexpr int32_t kMaxDynamicShared = 8, kCarveout = 9, kFirstCluster = 10, kLastCluster = 15;
    constexpr int32_t kNonPortableClusters = 14, kClusterPolicy = 15;
    if (attr == kMaxDynamicShared) {
      proto::DeviceProps p;
      (void)GetProps(dev, &p);
      if (value < 0 || static_cast<uint64_t>(value) > p.shared_mem_per_block_optin) {
        return Err(kErrInvalidValue,
                   fmt::format("cudaFuncSetAttribute({}, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                               "{}): want 0..{} (the device's opt-in maximum)",
                               f->name, value, p.shared_mem_per_block_optin));
      }
      f->max_dynamic_shared = value;
      return {};
    }
    if (attr == kCarveout) {
      if (value < -1 || value > 100) {
        return Err(kErrInvalidValue,
                   fmt::format("cudaFuncSetAttribute({}, cudaFuncAttributePreferredSharedMemoryCarveout, "
                               "{}): want -1..100", f->name, value));
      }
      f->carveout = value;  // a hint; the CPU kernels have no carveout to apply it to
      return {};
    }
    // Allowing non-portable cluster sizes (14) and a cluster scheduling preference (15) ask for
    // nothing: accepted, as on a GPU (cuBLAS sets 14 at cublasCreate). The others require
    // clusters.
    if (attr == kNonPortableClusters || attr == kClusterPolicy) return {};
    if (attr >= kFirstCluster && attr <= kLastCluster) {
      return Err(kErrNotSupported,
                 fmt::format("cudaFuncSetAttribute({}, cluster attribute {}): the emulated backend "
                             "has no thread block clusters", f->name, attr));
    }
    return Err(kErrInvalidValue,
               fmt::format("cudaFuncSetAttribute({}, attribute {}): not a settable attribute", f->name, attr));
  }
  Result Occupancy(uint64_t func, int32_t block_size, uint64_t, int32_t* blocks) override {
    EmuFunction* f = nullptr;
    if (Result r = Lookup(func, &f); !r.ok()) return r;
    if (block_size <= 0 || block_size > 1024) {
      return Err(kErrInvalidValue, fmt::format("block size {} out of range", block_size));
    }
    *blocks = std::min(32, 2048 / block_size);
    return {};
  }

  // The whole grid runs at once on the CPU, so every launch is a valid cooperative one.
  Result LaunchCooperative(const proto::Launch& l, uint64_t* ns) override { return Launch(l, ns); }
  Result Launch(const proto::Launch& l, uint64_t* ns) override {
    if (Result r = CheckStream(l.stream); !r.ok()) return r;
    // The launch runs on its stream's device (the default stream: the device it names), and its
    // kernel sees that device's copies of the module's variables.
    const uint32_t dev = l.stream != 0 ? streams_[l.stream] : l.device;
    if (Result r = CheckDev(dev); !r.ok()) return r;
    EmuFunction* f = nullptr;
    const fatbin::KernelInfo* info = nullptr;
    if (Result r = Lookup(l.func, &f); !r.ok()) return r;
    if (!o_.launch_log.empty()) RecordLaunch(*f, l);
    if (!f->fn) {
      return Err(kErrInvalidDeviceFunction,
                 fmt::format("emulated backend has no CPU implementation of kernel {} "
                             "(load one with --emulated-kernels)", f->name));
    }
    if (l.shmem > static_cast<uint32_t>(f->max_dynamic_shared)) {
      return Err(kErrInvalidValue,
                 fmt::format("launch of {} with {} bytes of dynamic shared memory: the kernel's "
                             "maximum is {} (cudaFuncSetAttribute with "
                             "cudaFuncAttributeMaxDynamicSharedMemorySize raises it)",
                             f->name, l.shmem, f->max_dynamic_shared));
    }
    if (Result r = Layout(f, &info); !r.ok()) return r;
    if (Result r = CheckReservedParams(*f, *info, l.params); !r.ok()) return r;
    SymbolScope scope{this, f->module, dev};  // lives until RunKernel returns: kernels run now
    Status s = RunKernel({.fn = f->fn, .name = f->name, .layout = info,
                          .grid = {l.grid[0], l.grid[1], l.grid[2]},
                          .block = {l.block[0], l.block[1], l.block[2]}, .shared_mem = l.shmem,
                          .params = l.params, .symbol = &EmulatedBackend::SymbolThunk,
                          .ctx = &scope},
                         ns);
    if (s.ok()) return {};
    return Err(s.code() == StatusCode::kInvalidArgument ? kErrInvalidValue : kErrLaunchFailure,
               s.message());
  }
  // A pointer parameter into reserved address space where nothing accessible is mapped would
  // fault the CPU kernel (and with it the session's worker); a GPU reports an illegal address.
  // Only the parameters themselves are checked: a kernel that reaches past a mapping from a good
  // pointer still faults.
  Result CheckReservedParams(const EmuFunction& f, const fatbin::KernelInfo& info,
                             std::span<const std::byte> params) {
    for (size_t i = 0; i < info.params.size(); ++i) {
      const auto& slot = info.params[i];
      if (slot.size != 8 || slot.offset + 8 > params.size()) continue;
      uint64_t v;
      std::memcpy(&v, params.data() + slot.offset, 8);
      if (!vmm_.Reserved(v)) continue;
      if (Result r = vmm_.Check(v, 1, "launch"); !r.ok()) {
        return Err(kErrIllegalAddress, fmt::format("kernel {}: parameter {} is 0x{:x}, which a "
                                                   "GPU could not reach: {}", f.name, i, v,
                                                   r.message));
      }
    }
    return {};
  }

  // Virtual memory management (emulated_vmm.h); the device's memory is shared with allocations.
  Result MemGranularity(uint32_t dev, bool, uint64_t* bytes) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    *bytes = EmulatedVmm::kGranularity;  // NVIDIA GPUs' minimum and recommended alike
    return {};
  }
  Result MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment, uint64_t hint,
                           uint64_t* ptr) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    return vmm_.Reserve(size, alignment, hint, ptr);
  }
  Result MemAddressFree(uint64_t ptr, uint64_t size) override {
    return vmm_.FreeReservation(ptr, size);
  }
  Result MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    if (alloc_[dev].in_use() + vmm_.bytes_on(dev) + size > alloc_[dev].size()) {
      return Err(kErrMemoryAllocation,
                 fmt::format("cuMemCreate: emulated device {} is out of memory ({} bytes asked, "
                             "{} of {} in use)", dev, size,
                             alloc_[dev].in_use() + vmm_.bytes_on(dev), alloc_[dev].size()));
    }
    return vmm_.Create(dev, size, handle);
  }
  Result MemRelease(uint64_t handle, std::vector<uint64_t>* gone) override {
    return vmm_.Release(handle, gone);
  }
  Result MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) override {
    return vmm_.Map(ptr, size, offset, handle);
  }
  Result MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) override {
    return vmm_.Unmap(ptr, size, gone);
  }
  Result MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    return vmm_.SetAccess(ptr, size, dev, flags);
  }

  // One line per launch, written with a single O_APPEND write so that the workers of concurrent
  // sessions do not interleave lines: "launch module=M device=D kernel=NAME grid=X,Y,Z
  // block=X,Y,Z shmem=N params=HEX" (D: the server's device index). The kernel name is escaped (%XX for anything but [A-Za-z0-9_$.]), the
  // parameter bytes are hex. A log that cannot be written is said once on stderr; the launch goes on.
  void RecordLaunch(const EmuFunction& f, const proto::Launch& l) {
    std::string name;
    for (unsigned char c : f.name) {
      if (std::isalnum(c) || c == '_' || c == '$' || c == '.') {
        name += static_cast<char>(c);
      } else {
        name += fmt::format("%{:02X}", c);
      }
    }
    std::string hex;
    hex.reserve(l.params.size() * 2);
    for (std::byte b : l.params) hex += fmt::format("{:02x}", static_cast<unsigned>(b));
    std::string line = fmt::format("launch module={} device={} kernel={} grid={},{},{} "
                                   "block={},{},{} shmem={} params={}\n", f.module, l.device,
                                   name, l.grid[0], l.grid[1],
                                   l.grid[2], l.block[0], l.block[1], l.block[2], l.shmem, hex);
    int fd = open(o_.launch_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ssize_t n = fd >= 0 ? write(fd, line.data(), line.size()) : -1;
    int err = errno;
    if (fd >= 0) close(fd);
    if (n != static_cast<ssize_t>(line.size()) && !launch_log_said_) {
      launch_log_said_ = true;
      fmt::print(stderr, "gpool gpu-server: --emulated-launch-log {}: cannot append: {}\n",
                 o_.launch_log, std::strerror(err));
    }
  }
  bool launch_log_said_ = false;
  // What a running kernel's variable lookups resolve against: its module, on its device.
  struct SymbolScope {
    EmulatedBackend* self;
    uint64_t module;
    uint32_t dev;
  };
  static void* SymbolThunk(void* ctx, const char* name) {
    auto* scope = static_cast<SymbolScope*>(ctx);
    auto& modules = scope->self->modules_;
    auto m = modules.find(scope->module);
    if (m == modules.end()) return nullptr;
    auto v = m->second.vars.find(name);
    if (v == m->second.vars.end()) return nullptr;
    return reinterpret_cast<void*>(scope->self->vars_.at(v->second).ptrs[scope->dev]);
  }

  Result StreamCreate(uint32_t dev, uint64_t id, uint32_t, int32_t) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    if (id == 0) return Err(kErrInvalidValue, "stream id 0 is reserved");
    streams_[id] = dev;
    return {};
  }
  Result StreamDestroy(uint64_t id) override {
    if (!streams_.erase(id)) return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", id));
    return {};
  }
  Result StreamSync(uint32_t, uint64_t id) override { return CheckStream(id); }
  Result StreamQuery(uint32_t, uint64_t id) override { return CheckStream(id); }
  Result StreamWaitEvent(uint32_t, uint64_t stream, uint64_t event) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    if (!events_.count(event)) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return {};
  }
  Result EventCreate(uint32_t dev, uint64_t id, uint32_t) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    events_[id] = Event{.dev = dev};
    return {};
  }
  Result EventRecord(uint32_t, uint64_t event, uint64_t stream) override {
    if (Result r = CheckStream(stream); !r.ok()) return r;
    auto it = events_.find(event);
    if (it == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    it->second.recorded = true;
    it->second.at = std::chrono::steady_clock::now();
    return {};
  }
  Result EventSync(uint64_t event) override {
    if (!events_.count(event)) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return {};
  }
  Result EventQuery(uint64_t event) override { return EventSync(event); }
  Result EventElapsed(uint64_t start, uint64_t end, float* ms) override {
    auto a = events_.find(start), b = events_.find(end);
    if (a == events_.end() || b == events_.end()) {
      return Err(kErrInvalidResourceHandle, "cudaEventElapsedTime: unknown event");
    }
    if (!a->second.recorded || !b->second.recorded) {
      return Err(kErrInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
    }
    *ms = std::chrono::duration<float, std::milli>(b->second.at - a->second.at).count();
    return {};
  }
  Result EventDestroy(uint64_t event) override {
    if (!events_.erase(event)) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return {};
  }
  Result DeviceSync(uint32_t dev) override { return CheckDev(dev); }
  // Everything ran when issued, so nothing is waited for. The device's copies of the module
  // variables are zeroed: their initial value here, since static initialisers in device code are
  // not emulated (RegisterVar), so a "reloaded" module reads as a freshly loaded one; their
  // storage and addresses stay (the client forgets its cached addresses anyway). Limit: function
  // attributes (cudaFuncSetAttribute) are kept once per function for every device here, so they
  // survive the reset of one device, where a GPU's reloaded module would start from defaults.
  Result DeviceReset(uint32_t dev) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    for (uint64_t p : alloc_[dev].Starts()) {
      if (!var_copies_.count(p)) (void)Free(p);
    }
    for (const auto& [id, v] : vars_) {
      std::memset(reinterpret_cast<void*>(v.ptrs[dev]), 0, std::max<uint64_t>(v.size, 1));
    }
    std::erase_if(streams_, [&](const auto& kv) { return kv.second == dev; });
    std::erase_if(events_, [&](const auto& kv) { return kv.second.dev == dev; });
    limits_.erase(dev);
    flags_.erase(dev);
    std::erase_if(peer_access_, [&](const auto& p) { return p.first == dev || p.second == dev; });
    return {};
  }

  // Limits and device flags are kept per device for this session (one backend per session), so
  // GetLimit/GetDeviceFlags return what was set. The CPU kernels have no device stack, heap,
  // printf FIFO or child launches, so those limits change nothing they do, but a program that
  // sizes itself from them reads back its own values. What the emulated GPU cannot have is
  // refused as CUDA refuses it on such a device: a persisting L2 cache (it has none; its
  // cudaDevAttrMaxPersistingL2CacheSize reads 0), an L2 fetch granularity outside CUDA's range,
  // an unknown limit.
  Result SetLimit(uint32_t dev, int32_t limit, uint64_t value) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    if (limit < 0 || limit >= kLimitCount) {
      return Err(kErrUnsupportedLimit, fmt::format("cudaDeviceSetLimit: unknown limit {}", limit));
    }
    if (limit == kLimitPersistingL2 && value != 0) {
      return Err(kErrUnsupportedLimit,
                 fmt::format("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, {}): the emulated "
                             "GPU has no persisting L2 cache", value));
    }
    if (limit == kLimitL2Fetch && value > 128) {
      return Err(kErrInvalidValue,
                 fmt::format("cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, {}): want 0..128 "
                             "bytes", value));
    }
    Limits(dev)[limit] = value;
    return {};
  }
  Result GetLimit(uint32_t dev, int32_t limit, uint64_t* value) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    if (limit < 0 || limit >= kLimitCount) {
      return Err(kErrUnsupportedLimit, fmt::format("cudaDeviceGetLimit: unknown limit {}", limit));
    }
    *value = Limits(dev)[limit];
    return {};
  }
  // cudaDevice* flags: one scheduling policy (auto 0, spin 1, yield 2, blocking sync 4) plus
  // cudaDeviceMapHost (8), cudaDeviceLmemResizeToMax (0x10), cudaDeviceSyncMemops (0x80). Kept,
  // not acted on: emulated operations complete when issued, so there is no wait to schedule.
  Result SetDeviceFlags(uint32_t dev, uint32_t flags) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    uint32_t sched = flags & 0x07;
    if ((flags & ~uint32_t{0x9f}) != 0 || (sched != 0 && sched != 1 && sched != 2 && sched != 4)) {
      return Err(kErrInvalidValue, fmt::format("cudaSetDeviceFlags(0x{:x}): invalid flags", flags));
    }
    Flags(dev) = flags;
    return {};
  }
  Result GetDeviceFlags(uint32_t dev, uint32_t* flags) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    *flags = Flags(dev);
    return {};
  }
  // Every emulated device's memory is this process's memory, so a kernel on one can always reach
  // another's: only CUDA's bookkeeping (already enabled, not enabled) is kept.
  Result PeerAccess(uint32_t dev, uint32_t peer, bool enable) override {
    if (Result r = CheckDev(dev); !r.ok()) return r;
    if (Result r = CheckDev(peer); !r.ok()) return r;
    if (dev == peer) {
      return Err(kErrInvalidDevice, fmt::format("peer access from device {} to itself", dev));
    }
    bool on = peer_access_.count({dev, peer}) != 0;
    if (enable && on) {
      return Err(kErrPeerAccessAlreadyEnabled,
                 fmt::format("peer access from device {} to {} is already enabled", dev, peer));
    }
    if (!enable && !on) {
      return Err(kErrPeerAccessNotEnabled,
                 fmt::format("peer access from device {} to {} is not enabled", dev, peer));
    }
    if (enable) {
      peer_access_.insert({dev, peer});
    } else {
      peer_access_.erase({dev, peer});
    }
    return {};
  }

 private:
  // cudaLimit numbers (cuda_driver_check.cc holds them equal to CUlimit's).
  static constexpr int kLimitL2Fetch = 5, kLimitPersistingL2 = 6, kLimitCount = 7;
  // CUDA's documented defaults: stack 1 KiB per thread, printf FIFO 1 MiB, malloc heap 8 MiB,
  // device-runtime sync depth 2 and pending launches 2048; L2 fetch granularity 32 B.
  static constexpr std::array<uint64_t, kLimitCount> kDefaultLimits = {1024, 1 << 20, 8 << 20, 2,
                                                                       2048, 32, 0};
  std::array<uint64_t, kLimitCount>& Limits(uint32_t dev) {
    return limits_.try_emplace(dev, kDefaultLimits).first->second;
  }
  uint32_t& Flags(uint32_t dev) { return flags_[dev]; }

  std::unordered_map<uint32_t, std::array<uint64_t, kLimitCount>> limits_;
  std::unordered_map<uint32_t, uint32_t> flags_;
  std::set<std::pair<uint32_t, uint32_t>> peer_access_;  // (device, peer) enabled
  struct Event {
    uint32_t dev = 0;  // created on (DeviceReset destroys its device's)
    bool recorded = false;
    std::chrono::steady_clock::time_point at;
  };
  EmulatedOptions o_;
  EmulatedVmm vmm_;  // reservations, handles and mappings (emulated_vmm.h)
  std::unique_ptr<KernelPlugin> plugin_;  // null: no kernels (launches fail, naming the kernel)
  std::byte* arena_;
  std::vector<RangeAllocator> alloc_;
  std::unordered_map<uint64_t, EmuModule> modules_;
  std::unordered_map<uint64_t, EmuFunction> functions_;
  std::unordered_map<uint64_t, EmuVar> vars_;
  std::set<uint64_t> var_copies_;  // addresses of the variables' copies (not cudaFree-able)
  std::unordered_map<uint64_t, uint32_t> streams_;
  std::unordered_map<uint64_t, Event> events_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeEmulatedBackend(const EmulatedOptions& options) {
  if (options.devices < 1 || options.devices > 64) {
    return Status::InvalidArgument(fmt::format("emulated devices {} out of [1, 64]", options.devices));
  }
  uint64_t total = options.memory_bytes * options.devices;
  void* hint = reinterpret_cast<void*>(options.address_hint);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_FIXED_NOREPLACE
  if (hint) flags |= MAP_FIXED_NOREPLACE;
#endif
  void* arena = mmap(hint, total, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (arena == MAP_FAILED && hint) {
    arena = mmap(nullptr, total, PROT_READ | PROT_WRITE, flags & ~MAP_FIXED_NOREPLACE, -1, 0);
  }
  if (arena == MAP_FAILED) {
    return Status::ResourceExhausted(fmt::format("cannot map {} bytes of emulated device memory: {}",
                                                 total, std::strerror(errno)));
  }
  // Transparent huge pages: the first touch of device memory then faults once per 2 MiB instead
  // of once per 4 KiB. On the (virtualized, loaded) build machine a 4 KiB fault cost ~25 us, so a
  // first 256 MiB copy ran at ~40 MB/s on faults alone. Advisory: ignored where THP is off.
  (void)madvise(arena, total, MADV_HUGEPAGE);
  std::unique_ptr<KernelPlugin> plugin;
  if (!options.kernels_plugin.empty()) {
    auto loaded = KernelPlugin::Load(options.kernels_plugin);
    if (!loaded.ok()) {
      munmap(arena, total);
      return loaded.status();
    }
    plugin = std::move(*loaded);
  }
  return std::unique_ptr<Backend>(
      std::make_unique<EmulatedBackend>(options, arena, std::move(plugin)));
}

}  // namespace gpool::remote::server
