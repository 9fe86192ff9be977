// The emulated CUDA driver's internal header (emulated_driver.cc says what the library is, what
// it cannot show, and which file holds what): the process-wide state every entry point locks, the
// objects handed out as handles, and the checks, work queue and device memory helpers that the
// entry-point files share. Nothing declared here is exported: exports.map keeps only the cu*
// entry points global.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"
#include "remote/server/emulated_vmm.h"
#include "remote/server/kernel_plugin.h"

namespace gpool::remote::emulated_driver {

using gpool::remote::fatbin::KernelInfo;
using gpool::remote::server::KernelPlugin;

inline constexpr int kLimitCount = 7;  // CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE
inline constexpr int kDefaultMaxDynamicShared = 48 << 10, kOptinShared = 227 << 10;
inline constexpr int kMultiprocessors = 4, kMaxThreadsPerMp = 2048, kMaxBlocksPerMp = 32;

// Prints why a call fails (the emulated driver's errors are ours, not a GPU's: say so) and
// returns `r`.
template <typename... Args>
CUresult Fail(CUresult r, const char* call, fmt::format_string<Args...> f, Args&&... args) {
  std::fprintf(stderr, "gpool emulated CUDA driver: %s: %s\n", call,
               fmt::format(f, std::forward<Args>(args)...).c_str());
  return r;
}
CUresult NotImplemented(const char* call, const std::string& what);

struct Block {
  uint64_t size = 0;
  int dev = 0;
  bool variable = false;  // a module variable: freed by cuModuleUnload, not cuMemFree
};
struct Ctx {
  int dev = 0;
  std::set<Ctx*> peers;  // contexts this one has peer access to
  uint64_t limits[kLimitCount] = {1024, 1 << 20, 8 << 20, 2, 2048, 32, 0};
};
struct Module;
struct Func {
  Module* module = nullptr;
  std::string name;
  const KernelInfo* layout = nullptr;
  gpool_emu_kernel_fn fn = nullptr;
  int max_dynamic_shared = kDefaultMaxDynamicShared;
  int carveout = -1;
};
struct Module {
  gpool::remote::fatbin::Module image;
  std::map<std::string, uint64_t, std::less<>> globals;  // name -> device address
  std::vector<std::unique_ptr<Func>> funcs;
};
struct Stream {
  Ctx* ctx = nullptr;
};
struct Event {
  unsigned flags = 0;
  bool recorded = false;
  int pending = 0;  // queued records not yet run
  std::chrono::steady_clock::time_point at;
};

// Objects handed out as handles, owned here; a handle is live while it is a key.
template <typename T>
using Owned = std::map<T*, std::unique_ptr<T>>;
template <typename T>
T* Adopt(Owned<T>& owned, std::unique_ptr<T> p) {
  T* raw = p.get();
  owned.emplace(raw, std::move(p));
  return raw;
}

struct State {
  std::mutex mu;
  bool initialized = false;
  int devices = 1;
  uint64_t memory = uint64_t{1} << 30;  // per device
  std::vector<uint64_t> used;            // per device
  std::vector<std::unique_ptr<Ctx>> primary;  // per device, once retained
  std::vector<unsigned> ctx_flags;       // per device
  std::map<uint64_t, Block> blocks;      // device memory: address -> block
  Owned<Module> modules;
  std::set<Func*> funcs;  // owned by their modules
  Owned<Stream> streams;
  Owned<Event> events;
  std::unique_ptr<KernelPlugin> plugin;
  std::map<uint64_t, uint64_t> pinned;  // cuMemHostAlloc'ed host memory: address -> size
  std::deque<std::function<void()>> queue;  // submitted asynchronous work, not yet run
  CUresult sticky = CUDA_SUCCESS;  // a kernel's fault: every later call fails with it
};
State& S();
// The calling thread's current context (cuCtxSetCurrent); nullptr until one is set. A function,
// not an extern thread_local: one shared between files is reached through a dynamic TLS
// relocation against its name, which puts that name in the library's dynamic symbol table.
Ctx*& Current();
using Lock = std::lock_guard<std::mutex>;

template <typename T>
bool Live(const Owned<T>& owned, T* p) {
  return owned.count(p) != 0;
}

// Checks shared by the entry points (emulated_driver.cc): each prints why it fails.
CUresult Ready(const char* call);
CUresult CheckDevice(const char* call, CUdevice d);
CUresult CheckStream(const char* call, CUstream h);
CUresult CheckRange(const char* call, uint64_t p, uint64_t n);
CUresult CheckRows(const char* call, uint64_t p, uint64_t pitch, uint64_t width, uint64_t height);
// Live handles, or nullptr.
Func* LiveFunc(CUfunction f);
Event* LiveEvent(CUevent e);
inline void* Ptr(uint64_t p) { return reinterpret_cast<void*>(p); }

// Virtual memory management's state and its results as CUresults.
gpool::remote::server::EmulatedVmm& Vmm();
CUresult VmmResult(const char* call, const gpool::remote::server::Result& r);

// The asynchronous work queue.
void Submit(std::function<void()> op);
void Drain();
CUresult Synced();
bool Pinned(const void* p, size_t n);
void SubmitHost(bool pinned, std::function<void()> op);

// Device memory: bytes in use on a device, and allocations (cuMemAlloc, module variables).
uint64_t InUse(int dev);
CUresult Allocate(const char* call, uint64_t size, bool variable, uint64_t* out);
void Release(std::map<uint64_t, Block>::iterator it);

}  // namespace gpool::remote::emulated_driver
