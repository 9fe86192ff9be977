// gpool's stand-in for libcudart.so.13: the CUDA runtime API, implemented by remoting each call
// to GPU servers (see runtime.h for the state and docs/remoting.md for the design).
//
// Signatures come from the real CUDA 13 headers, so the compiler checks each definition against
// cuda_runtime_api.h. Calls that return nothing to the program (launches, async copies, memsets,
// event records, stream waits, registrations) are queued and sent without waiting; their errors
// surface at the next synchronizing call. Calls gpool does not implement are weak stubs
// (cudart_stubs.cc) that fail loudly. Thread safety: as CUDA's: any thread may call anything;
// the current device and the last error are per thread.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "remote/client/runtime.h"
#include "remote/client/unsupported.h"

namespace gpool::remote::client {
namespace {

using proto::kCopyChunkBytes;
constexpr int kVersion = 13000;

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;
struct CallConfig {
  dim3 grid, block;
  size_t shmem;
  void* stream;
};
thread_local std::vector<CallConfig> t_configs;

cudaError_t Ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

void Say(const std::string& s) { fmt::print(stderr, "gpool: {}\n", s); }

class Runtime {
 public:
  static Runtime& Get() {
    static Runtime* r = new Runtime();  // never destroyed: atexit-time CUDA calls stay valid
    return *r;
  }

  std::mutex mu;
  std::vector<DeviceRef> devices;
  std::string env_error;  // why there are no devices
  std::string token, transport = "tcp";
  std::map<std::string, std::unique_ptr<ServerLink>> links;
  // Servers whose session could not be had, and what every call on them returns: the code of
  // the first attempt (a refused lease: cudaErrorNotPermitted, each time).
  std::map<std::string, cudaError_t> link_errors;
  // Registered modules and their functions and variables (see ModuleRec for who owns them);
  // an unregistered module's are in none of these.
  std::unordered_map<uint64_t, std::shared_ptr<ModuleRec>> modules;
  // Every handle __cudaRegisterFatBinary gave out, to its module id, or 0 once unregistered:
  // __cudaUnregisterFatBinary looks a handle up here instead of reading through it, and a handle
  // is never freed (8 bytes per registration), so its address is never given out again and a
  // stray or repeated unregistration can neither read freed memory nor hit a newer module.
  std::unordered_map<void**, uint64_t> handles;
  std::unordered_map<const void*, std::shared_ptr<FunctionRec>> functions;  // by host stub
  std::unordered_map<const FunctionRec*, std::shared_ptr<FunctionRec>> function_recs;  // by cudaKernel_t
  std::unordered_map<const void*, std::shared_ptr<VarRec>> vars;  // by host shadow
  std::map<uint64_t, AllocRec> allocs;
  std::map<const void*, size_t> host_allocs;       // cudaMallocHost/cudaHostAlloc
  std::map<const void*, unsigned> host_alloc_flags;  // their flags (cudaHostGetFlags)
  std::map<const void*, size_t> host_registered;   // cudaHostRegister
  std::set<StreamRec*> streams;
  std::set<EventRec*> events;
  std::unordered_map<int, proto::DeviceProps> props;
  std::map<std::pair<int, int>, int> attrs;
  uint64_t next_id = 1;
  std::atomic<bool> any_managed{false};  // a module registered a __managed__ variable

  Runtime() {
    PoolEnv env = ReadPoolEnv();  // GPOOL_DEVICES, GPOOL_LEASE, GPOOL_TRANSPORT (pool.h)
    devices = std::move(env.devices);
    env_error = std::move(env.env_error);
    token = std::move(env.token);
    transport = std::move(env.transport);
  }

  // Returns the link serving `dev`, connecting (and sending registrations) on first use.
  // Caller holds mu.
  ServerLink* LinkLocked(int dev, cudaError_t* err) {
    if (dev < 0 || dev >= static_cast<int>(devices.size())) {
      *err = devices.empty() ? cudaErrorNoDevice : cudaErrorInvalidDevice;
      if (devices.empty()) Say(env_error);
      return nullptr;
    }
    const DeviceRef& ref = devices[dev];
    auto it = links.find(ref.server);
    if (it != links.end()) {
      if (it->second->broken()) {
        // A session its server ended (lease expired) stays refused, as at connect.
        *err = it->second->status().code() == StatusCode::kPermissionDenied
                   ? cudaErrorNotPermitted
                   : cudaErrorDevicesUnavailable;
        return nullptr;
      }
      return it->second.get();
    }
    if (auto failed = link_errors.find(ref.server); failed != link_errors.end()) {
      *err = failed->second;
      return nullptr;
    }
    auto link = ConnectServer(PoolEnv{.token = token, .transport = transport}, ref.server);
    if (!link.ok()) {
      Say(link.status().message());
      *err = link.status().code() == StatusCode::kPermissionDenied ? cudaErrorNotPermitted
                                                                    : cudaErrorDevicesUnavailable;
      link_errors[ref.server] = *err;
      return nullptr;
    }
    ServerLink* l = link->get();
    links[ref.server] = std::move(*link);
    for (size_t d = 0; d < devices.size(); ++d) {
      if (devices[d].server == ref.server && devices[d].index >= l->device_count()) {
        Say(fmt::format("GPOOL_DEVICES entry {}/{}: the server has {} device(s)", ref.server,
                        devices[d].index, l->device_count()));
      }
    }
    if (ref.index >= l->device_count()) {
      *err = cudaErrorInvalidDevice;
      return nullptr;
    }
    // The start-up registration storm goes out in one batch.
    std::lock_guard<std::mutex> lk(l->mu());
    for (auto& [id, m] : modules) PostModule(l, *m);
    for (auto& [h, f] : functions) PostFunction(l, *f);
    for (auto& [h, v] : vars) PostVar(l, *v);
    if (!l->Flush().ok()) {
      *err = cudaErrorDevicesUnavailable;
      return nullptr;
    }
    return l;
  }
  ServerLink* Link(int dev, cudaError_t* err) {
    std::lock_guard<std::mutex> lk(mu);
    return LinkLocked(dev, err);
  }
  uint32_t Index(int dev) { return devices[dev].index; }

  void PostModule(ServerLink* l, const ModuleRec& m) {
    proto::RegisterModule r{.module = m.id, .image = m.image};
    (void)l->Post(r);
  }
  void PostFunction(ServerLink* l, const FunctionRec& f) {
    proto::RegisterFunction r{.module = f.module, .func = f.id, .name = f.name};
    (void)l->Post(r);
  }
  void PostVar(ServerLink* l, const VarRec& v) {
    proto::RegisterVar r{.module = v.module, .var = v.id, .name = v.name, .size = v.size,
                         .constant = static_cast<uint8_t>(v.constant)};
    (void)l->Post(r);
  }

  // Finds the allocation holding `p`: returns its device or -1.
  int DeviceOf(const void* p, uint64_t* base = nullptr) {
    uint64_t a = reinterpret_cast<uint64_t>(p);
    std::lock_guard<std::mutex> lk(mu);
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return -1;
    --it;
    if (a >= it->first && a < it->first + std::max<uint64_t>(it->second.size, 1)) {
      if (base) *base = it->first;
      return it->second.device;
    }
    return -1;
  }
};

Runtime& R() { return Runtime::Get(); }

// Asynchronous errors that a reply brought to the host-function thread (HostCalls), kept for the
// program: its next reply from that server reports them, as CUDA reports an asynchronous error at
// the program's next synchronizing call. A leaf lock: taken with a link's mutex held.
struct DeferredError {
  int32_t code = 0;
  std::string message;
};
struct DeferredErrors {
  std::mutex mu;
  std::map<const ServerLink*, DeferredError> by_link;
};
// Never destroyed (as Runtime and HostCalls): the host-function thread and other program threads
// may still make calls while exit() runs the library's destructors, and a destroyed map read
// then printed freed bytes as the error's message.
DeferredErrors& Deferred() {
  static DeferredErrors* d = new DeferredErrors();
  return *d;
}
std::atomic<bool> g_any_deferred{false};  // Deferred() may be non-empty (spares replies the lock)
void DeferAsyncError(const ServerLink* l, const proto::ReplyHead& h) {
  std::lock_guard<std::mutex> lk(Deferred().mu);
  Deferred().by_link.try_emplace(l, DeferredError{h.async_error, h.async_message});
  g_any_deferred.store(true);
}

// Turns a reply into the call's result, printing server messages for real errors.
cudaError_t FromReply(const proto::ReplyHead& h, ServerLink* l) {
  if (h.async_error == 0 && g_any_deferred.load()) {
    DeferredErrors& d = Deferred();
    std::lock_guard<std::mutex> lk(d.mu);
    if (auto it = d.by_link.find(l); it != d.by_link.end()) {
      Say(fmt::format("asynchronous error on {}: {}", l->address(), it->second.message));
      auto code = static_cast<cudaError_t>(it->second.code);
      d.by_link.erase(it);
      g_any_deferred.store(!d.by_link.empty());
      return code;
    }
  }
  if (h.async_error != 0) {
    Say(fmt::format("asynchronous error on {}: {}", l->address(), h.async_message));
    return static_cast<cudaError_t>(h.async_error);
  }
  if (h.error != 0 && h.error != cudaErrorNotReady && !h.message.empty()) {
    Say(fmt::format("{}: {}", l->address(), h.message));
  }
  return static_cast<cudaError_t>(h.error);
}
cudaError_t FromStatus(const Status& s) {
  if (s.ok()) return cudaSuccess;
  static std::once_flag once;
  std::call_once(once, [&] { Say(s.message() + "; CUDA calls on it now fail"); });
  // PermissionDenied: the server ended the session (its lease expired).
  return s.code() == StatusCode::kPermissionDenied ? cudaErrorNotPermitted
                                                   : cudaErrorDevicesUnavailable;
}

// A synchronous call on `l`. `head`, when given, receives the reply's head: its own `error`,
// apart from an earlier asynchronous error, which the result reports first.
template <class Msg, class Body>
cudaError_t Call(ServerLink* l, Msg& m, Body* body, proto::ReplyHead* head = nullptr) {
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l->mu());
  Status s = l->Call(m, &h, body);
  if (!s.ok()) return FromStatus(s);
  if (head) *head = h;
  return FromReply(h, l);
}
template <class Msg>
cudaError_t Call(ServerLink* l, Msg& m) {
  proto::Empty none;
  return Call(l, m, &none);
}
template <class Msg>
cudaError_t Post(ServerLink* l, Msg& m) {
  std::lock_guard<std::mutex> lk(l->mu());
  return FromStatus(l->Post(m));
}

bool IsDefaultStream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

// ---- host functions on streams (cudaLaunchHostFunc, cudaStreamAddCallback)
//
// CUDA's rule: a host function runs once the stream's earlier work is done, and the stream's
// later work waits for it. Here: the call posts an internal event, recorded on the stream after
// the earlier work, and queues the function for one helper thread of the process, which polls
// the event (EventQuery round trips, 50 us growing to 1 ms apart, so it never holds a link for
// long) and then runs the function in this process. The later work is held in the CLIENT: any
// call that puts work on the stream (ResolveStream with gate) blocks the calling thread until
// every host function queued on that stream has returned; nothing of it reaches the server
// before. That is stronger than CUDA in one way, and the limit to know: the submitting thread
// blocks, where CUDA's would return at once and only the GPU would wait. A program whose host
// function waits for the host thread's own later progress would deadlock here (CUDA also forbids
// a host function to make CUDA calls; one that does is not gated, so it cannot block itself).
// Default streams: work on a device's default stream (legacy or per-thread, id 0 alike) waits for
// host functions queued on any stream of that device, and work on any stream of the device for
// those queued on its default stream: more ordering than CUDA's (non-blocking streams need not
// wait), never less. Host functions run one at a time in the order they were queued, whatever
// their streams (CUDA too runs them on one thread per context). cudaStreamQuery says
// cudaErrorNotReady while a host function of the stream is queued, and cudaDeviceSynchronize waits
// for those of the device. An asynchronous error the helper's query brings back is kept for the
// program (DeferAsyncError) and given to cudaStreamAddCallback's callback as its status.
// Thread safety: all methods are thread-safe (one mutex); the thread is never joined (the process
// may exit with host functions still queued, as with CUDA when it does not synchronize).
thread_local bool t_host_fn_thread = false;
class HostCalls {
 public:
  struct Job {
    int device = 0;
    uint64_t stream = 0;  // id on the server; 0: the device's default stream
    ServerLink* link = nullptr;
    uint64_t event = 0;   // the internal event recorded after the stream's earlier work
    cudaHostFn_t fn = nullptr;          // cudaLaunchHostFunc
    cudaStreamCallback_t cb = nullptr;  // cudaStreamAddCallback
    cudaStream_t handle = nullptr;      // the program's stream, for cb
    void* data = nullptr;
  };
  static HostCalls& Get() {
    static HostCalls* h = new HostCalls();  // never destroyed: its thread may outlive exit()
    return *h;
  }
  void Enqueue(const Job& j) {
    std::lock_guard<std::mutex> lk(mu_);
    ++pending_[{j.device, j.stream}];
    total_.fetch_add(1);
    jobs_.push_back(j);
    if (!started_) {
      started_ = true;
      std::thread([this] { Loop(); }).detach();
    }
    work_cv_.notify_one();
  }
  // Blocks until no queued host function orders work of (dev, stream) (see above).
  void WaitStream(int dev, uint64_t stream) {
    if (total_.load() == 0 || t_host_fn_thread) return;
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return !BlocksLocked(dev, stream); });
  }
  // Blocks until no host function of `dev` is queued.
  void WaitDevice(int dev) {
    if (total_.load() == 0 || t_host_fn_thread) return;
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return !BlocksLocked(dev, 0); });
  }
  bool Pending(int dev, uint64_t stream) {
    if (total_.load() == 0) return false;
    std::lock_guard<std::mutex> lk(mu_);
    return BlocksLocked(dev, stream);
  }

 private:
  bool BlocksLocked(int dev, uint64_t stream) {
    if (pending_.count({dev, stream}) || pending_.count({dev, 0})) return true;
    if (stream != 0) return false;
    auto it = pending_.lower_bound({dev, 0});
    return it != pending_.end() && it->first.first == dev;
  }
  // Waits for the job's event: its status is the stream's (an asynchronous error included).
  static cudaError_t WaitEvent(const Job& j) {
    auto pause = std::chrono::microseconds(50);
    for (;;) {
      proto::EventQuery q;
      q.event = j.event;
      proto::Empty none;
      proto::ReplyHead h;
      Status s;
      {
        std::lock_guard<std::mutex> lk(j.link->mu());
        s = j.link->Call(q, &h, &none);
      }
      if (!s.ok()) return cudaErrorDevicesUnavailable;
      if (h.async_error != 0) {
        DeferAsyncError(j.link, h);
        return static_cast<cudaError_t>(h.async_error);
      }
      if (h.error != cudaErrorNotReady) return static_cast<cudaError_t>(h.error);
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }
  void Loop() {
    t_host_fn_thread = true;
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return !jobs_.empty(); });
        j = jobs_.front();
        jobs_.pop_front();
      }
      cudaError_t status = WaitEvent(j);
      if (j.fn) j.fn(j.data);
      if (j.cb) j.cb(j.handle, status, j.data);
      {
        proto::EventDestroy d;
        d.event = j.event;
        std::lock_guard<std::mutex> lk(j.link->mu());
        (void)j.link->Post(d);
      }
      std::lock_guard<std::mutex> lk(mu_);
      auto it = pending_.find({j.device, j.stream});
      if (--it->second == 0) pending_.erase(it);
      total_.fetch_sub(1);
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> jobs_;
  std::map<std::pair<int, uint64_t>, int> pending_;  // queued, not yet returned, per stream
  std::atomic<int> total_{0};  // sum of pending_ (lets the gate skip the lock when idle)
  bool started_ = false;
};

// Resolves a stream to (device, id); the default stream is the current device's. `gate`: the
// caller is about to put work on the stream, which must wait for its queued host functions.
cudaError_t ResolveStream(cudaStream_t s, int* dev, uint64_t* id, bool gate = true) {
  if (IsDefaultStream(s)) {
    *dev = t_device;
    *id = 0;
  } else {
    auto* rec = reinterpret_cast<StreamRec*>(s);
    std::lock_guard<std::mutex> lk(R().mu);
    if (!R().streams.count(rec)) return cudaErrorInvalidResourceHandle;
    *dev = rec->device;
    *id = rec->id;
  }
  if (gate) HostCalls::Get().WaitStream(*dev, *id);
  return cudaSuccess;
}
EventRec* FindEvent(cudaEvent_t e) {
  auto* rec = reinterpret_cast<EventRec*>(e);
  std::lock_guard<std::mutex> lk(R().mu);
  return R().events.count(rec) ? rec : nullptr;
}

// ---- copies ----

cudaError_t CopyH2D(ServerLink* l, uint64_t dst, const std::byte* src, size_t n, uint64_t stream) {
  std::lock_guard<std::mutex> lk(l->mu());
  return FromStatus(l->CopyToDevice(dst, wire::ByteSpan(src, n), stream));
}

// `async`: returns once the requests are out; the data lands by the next synchronizing call.
cudaError_t CopyD2H(ServerLink* l, std::byte* dst, uint64_t src, size_t n, uint64_t stream,
                    bool async = false) {
  std::lock_guard<std::mutex> lk(l->mu());
  proto::ReplyHead h;
  if (Status s = l->CopyFromDevice(dst, src, n, stream, &h, async); !s.ok()) return FromStatus(s);
  return FromReply(h, l);
}

// True when [p, p+n) lies inside one range of `ranges` (start -> size). Caller holds R().mu.
bool InRange(const std::map<const void*, size_t>& ranges, const void* p, size_t n) {
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return false;
  --it;
  const char* b = static_cast<const char*>(it->first);
  return static_cast<const char*>(p) >= b && static_cast<const char*>(p) + n <= b + it->second;
}
// True when [p, p+n) overlaps a range of `ranges`. Caller holds R().mu.
bool Overlaps(const std::map<const void*, size_t>& ranges, const void* p, size_t n) {
  const char* a = static_cast<const char*>(p);
  auto it = ranges.lower_bound(p);
  if (it != ranges.end() && static_cast<const char*>(it->first) < a + n) return true;
  if (it == ranges.begin()) return false;
  --it;
  return static_cast<const char*>(it->first) + it->second > a;
}

// True when [p, p+n) lies in page-locked memory as the program sees it: from cudaMallocHost/
// cudaHostAlloc ("pinned") or cudaHostRegister.
// Whether devices a and b sit on one server (one link: a sync on one reaches work on the other).
bool SameServer(int a, int b) {
  std::lock_guard<std::mutex> lk(R().mu);
  return R().devices[a].server == R().devices[b].server;
}

bool IsPinned(const void* p, size_t n) {
  std::lock_guard<std::mutex> lk(R().mu);
  return InRange(R().host_allocs, p, n) || InRange(R().host_registered, p, n);
}

// `async_call`: cudaMemcpyAsync and friends. As in CUDA, a device-to-host copy into pinned memory
// is then truly asynchronous; into pageable memory it completes before the call returns.
cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                   bool async_call = false) {
  uint64_t unused;
  int ddev = R().DeviceOf(dst, &unused), sdev = R().DeviceOf(src, &unused);
  if (kind == cudaMemcpyDefault) {
    kind = ddev >= 0 ? (sdev >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                     : (sdev >= 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  int sdevice = 0;
  uint64_t sid = 0;
  if (cudaError_t e = ResolveStream(stream, &sdevice, &sid); e != cudaSuccess) return e;
  cudaError_t err = cudaSuccess;
  auto stream_for = [&](int dev) -> uint64_t {
    return sid != 0 && SameServer(dev, sdevice) ? sid : 0;
  };
  switch (kind) {
    case cudaMemcpyHostToHost:
      if (n) std::memmove(dst, src, n);
      return cudaSuccess;
    case cudaMemcpyHostToDevice: {
      if (ddev < 0) ddev = R().DeviceOf(dst);  // e.g. symbol storage: route by current device
      if (ddev < 0) ddev = t_device;
      ServerLink* l = R().Link(ddev, &err);
      if (!l) return err;
      return CopyH2D(l, reinterpret_cast<uint64_t>(dst), static_cast<const std::byte*>(src), n,
                     stream_for(ddev));
    }
    case cudaMemcpyDeviceToHost: {
      if (sdev < 0) sdev = t_device;
      ServerLink* l = R().Link(sdev, &err);
      if (!l) return err;
      // Asynchronous only when the program's stream is on the copy's server: a sync of a stream
      // elsewhere goes to another link and would not wait for this one's reply.
      return CopyD2H(l, static_cast<std::byte*>(dst), reinterpret_cast<uint64_t>(src), n,
                     stream_for(sdev), async_call && IsPinned(dst, n) && SameServer(sdev, sdevice));
    }
    case cudaMemcpyDeviceToDevice: {
      if (sdev < 0) sdev = t_device;
      if (ddev < 0) ddev = sdev;
      ServerLink* ls = R().Link(sdev, &err);
      if (!ls) return err;
      ServerLink* ld = R().Link(ddev, &err);
      if (!ld) return err;
      if (ls == ld) {
        proto::MemcpyD2D m{.dst = reinterpret_cast<uint64_t>(dst),
                           .src = reinterpret_cast<uint64_t>(src), .size = n,
                           .stream = stream_for(sdev)};
        return Post(ls, m);
      }
      // Between servers: relayed through this client, chunk by chunk.
      std::vector<std::byte> buf(std::min(n, kCopyChunkBytes * 4));
      for (size_t off = 0; off < n; off += buf.size()) {
        size_t len = std::min(buf.size(), n - off);
        if (cudaError_t e = CopyD2H(ls, buf.data(), reinterpret_cast<uint64_t>(src) + off, len, 0);
            e != cudaSuccess) {
          return e;
        }
        if (cudaError_t e = CopyH2D(ld, reinterpret_cast<uint64_t>(dst) + off, buf.data(), len, 0);
            e != cudaSuccess) {
          return e;
        }
      }
      return cudaSuccess;
    }
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
}

// A memset's server (that of the device owning `p`, else the current device's) and its stream
// there: `stream` when it belongs to that device, else the default stream.
cudaError_t MemsetTarget(const void* p, cudaStream_t stream, ServerLink** l, uint64_t* on) {
  int dev = R().DeviceOf(p);
  if (dev < 0) dev = t_device;
  int sdev;
  uint64_t sid;
  if (cudaError_t e = ResolveStream(stream, &sdev, &sid); e != cudaSuccess) return e;
  cudaError_t err;
  *l = R().Link(dev, &err);
  if (!*l) return err;
  *on = sdev == dev ? sid : 0;
  return cudaSuccess;
}

cudaError_t Memset(void* p, int value, size_t n, cudaStream_t stream) {
  ServerLink* l;
  uint64_t on;
  if (cudaError_t e = MemsetTarget(p, stream, &l, &on); e != cudaSuccess) return e;
  proto::Memset m{.dst = reinterpret_cast<uint64_t>(p), .value = static_cast<uint32_t>(value & 0xff),
                  .size = n, .stream = on};
  return Post(l, m);
}

// cudaMemcpy2D(Async). Host-to-device and device-to-device copies return nothing: posted on the
// stream (Memcpy2DAsync), their errors surface at the next synchronizing call, as 1-D copies'.
// Device-to-host: `async_call` into pinned or registered memory returns once the requests are
// out and the rows land by the next synchronizing call; otherwise it completes before returning.
// Between devices of two servers the rows are relayed through this client, one 1-D copy each
// (synchronously: the data must pass through this process).
cudaError_t Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                     size_t height, cudaMemcpyKind kind, cudaStream_t stream,
                     bool async_call = false) {
  if (width == 0 || height == 0) return cudaSuccess;
  if ((dpitch < width) || (spitch < width)) return cudaErrorInvalidPitchValue;
  int ddev = R().DeviceOf(dst), sdev = R().DeviceOf(src);
  if (kind == cudaMemcpyDefault) {
    kind = ddev >= 0 ? (sdev >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                     : (sdev >= 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  if (kind == cudaMemcpyHostToHost) {
    for (size_t r = 0; r < height; ++r) {
      std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    }
    return cudaSuccess;
  }
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
      kind != cudaMemcpyDeviceToDevice) {
    return cudaErrorInvalidMemcpyDirection;
  }
  int dev = kind == cudaMemcpyHostToDevice ? ddev : sdev;
  if (dev < 0) dev = t_device;
  if (kind == cudaMemcpyDeviceToDevice && ddev >= 0 && sdev >= 0 &&
      R().devices[ddev].server != R().devices[sdev].server) {
    for (size_t r = 0; r < height; ++r) {  // rows relayed between servers
      cudaError_t e = Memcpy(static_cast<char*>(dst) + r * dpitch,
                             static_cast<const char*>(src) + r * spitch, width, kind, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  int sd;
  uint64_t sid;
  if (cudaError_t e = ResolveStream(stream, &sd, &sid); e != cudaSuccess) return e;
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return err;
  const uint64_t on = sd == dev ? sid : 0;
  if (kind == cudaMemcpyHostToDevice) {
    std::lock_guard<std::mutex> lk(l->mu());
    return FromStatus(l->CopyToDevice2D(reinterpret_cast<uint64_t>(dst), dpitch,
                                        static_cast<const std::byte*>(src), spitch, width, height,
                                        on));
  }
  if (kind == cudaMemcpyDeviceToHost) {
    // The host rows span [dst, dst + (height-1)*dpitch + width). Asynchronous only when a sync
    // of the stream reaches this link (see Memcpy).
    bool async =
        async_call && IsPinned(dst, (height - 1) * dpitch + width) && SameServer(sd, dev);
    proto::ReplyHead h;
    std::lock_guard<std::mutex> lk(l->mu());
    Status s = l->CopyFromDevice2D(static_cast<std::byte*>(dst), dpitch,
                                   reinterpret_cast<uint64_t>(src), spitch, width, height, on, &h,
                                   async);
    if (!s.ok()) return FromStatus(s);
    return FromReply(h, l);
  }
  proto::Memcpy2DAsync m;
  m.kind = static_cast<uint8_t>(proto::CopyKind::kDeviceToDevice);
  m.dst = reinterpret_cast<uint64_t>(dst);
  m.dpitch = dpitch;
  m.src = reinterpret_cast<uint64_t>(src);
  m.spitch = spitch;
  m.width = width;
  m.height = height;
  m.stream = on;
  return Post(l, m);
}

// cudaMemset2D(Async): one posted request (Memset2D) however many rows.
cudaError_t Memset2D(void* p, size_t pitch, int value, size_t width, size_t height,
                     cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  if (pitch < width) return cudaErrorInvalidPitchValue;
  ServerLink* l;
  uint64_t on;
  if (cudaError_t e = MemsetTarget(p, stream, &l, &on); e != cudaSuccess) return e;
  proto::Memset2D m{.dst = reinterpret_cast<uint64_t>(p), .pitch = pitch,
                    .value = static_cast<uint32_t>(value & 0xff), .width = width,
                    .height = height, .stream = on};
  return Post(l, m);
}

// ---- module info: one GetModuleInfo round trip per module per server device (protocol v6) ----

// Caches what the server said of each of module `m`'s functions (a layout or the reason it has
// none, for the whole server: layouts are the same on each of its devices) and variables (an
// address or the error, for device `at` only: each device has its own copy). Caller holds R().mu.
void CacheModuleInfo(const ModuleRec& m, ServerDevice at, proto::ModuleInfo& info) {
  ServerLink* l = at.link;
  std::unordered_map<uint64_t, FunctionRec*> functions;
  for (const auto& f : m.functions) functions[f->id] = f.get();
  for (proto::FunctionInfo& fi : info.functions) {
    auto it = functions.find(fi.func);
    if (it == functions.end()) continue;  // not this module's on the client (server bug): ignored
    if (fi.error == 0) {
      it->second->params[l] = std::move(fi.params);
    } else {
      it->second->no_layout[l] = std::move(fi.message);
    }
  }
  std::unordered_map<uint64_t, VarRec*> vars;
  for (const auto& v : m.vars) vars[v->id] = v.get();
  for (const proto::VarInfo& vi : info.vars) {
    auto it = vars.find(vi.var);
    if (it == vars.end()) continue;
    if (vi.error == 0) {
      it->second->symbol[at] = proto::Symbol{.ptr = vi.ptr, .size = vi.size};
    } else {
      it->second->failure[at] = VarRec::Failure{vi.error, vi.message};
    }
  }
}

// Fetches module `m`'s info for server device `at` (its kernels' layouts, its variables'
// addresses on that device) and caches it, unless `known()` (called under R().mu) says the
// caller's answer is cached by now: checked again under the module's fetch lock, so threads
// racing to the module's first launch or symbol use on `at` send one request. A launch needs
// only the layouts, cached per server, so launches on a server's other devices fetch nothing
// more; a symbol use on another device fetches that device's addresses. A function or variable
// registered after the fetch costs one more. The info is cached even when the reply carries an
// earlier asynchronous error (returned, as any call would).
template <class Known>
cudaError_t FetchModuleInfo(ModuleRec* m, ServerDevice at, Known known) {
  std::lock_guard<std::mutex> fetch(m->fetch_mu);
  {
    std::lock_guard<std::mutex> lk(R().mu);
    if (known()) return cudaSuccess;
  }
  ServerLink* l = at.link;
  proto::GetModuleInfo q{.module = m->id, .device = at.index};
  proto::ModuleInfo info;
  proto::ReplyHead h;
  {
    std::lock_guard<std::mutex> lk(l->mu());
    Status s = l->Call(q, &h, &info);
    if (!s.ok()) return FromStatus(s);
  }
  if (h.error == 0) {
    std::lock_guard<std::mutex> lk(R().mu);
    if (!m->unregistered) CacheModuleInfo(*m, at, info);
  }
  return FromReply(h, l);
}

// The module of a function or variable, or null (saying why) when it is gone. Caller holds R().mu.
std::shared_ptr<ModuleRec> LiveModule(uint64_t id, const std::string& what) {
  auto it = R().modules.find(id);
  if (it != R().modules.end()) return it->second;
  Say(fmt::format("{}: its module was unregistered (__cudaUnregisterFatBinary)", what));
  return nullptr;
}

// ---- symbols ----

// The address of the current device's own copy of the variable (each device has one): from its
// module's info, fetched once per server device (FetchModuleInfo).
cudaError_t SymbolAddress(const void* symbol, uint64_t* ptr, uint64_t* size, ServerLink** link) {
  cudaError_t err;
  ServerLink* l = R().Link(t_device, &err);
  if (!l) return err;
  const ServerDevice at{l, R().Index(t_device)};
  std::shared_ptr<VarRec> v;  // held: another thread may unregister its module meanwhile
  std::shared_ptr<ModuleRec> m;
  auto cached = [&]() -> cudaError_t {  // caller holds R().mu
    if (auto a = v->symbol.find(at); a != v->symbol.end()) {
      *ptr = a->second.ptr;
      *size = a->second.size;
      *link = l;
      return cudaSuccess;
    }
    if (auto f = v->failure.find(at); f != v->failure.end()) {
      Say(fmt::format("{}/{}: {}", l->address(), at.index, f->second.message));
      return static_cast<cudaError_t>(f->second.code);
    }
    return cudaErrorUnknown;  // not known yet
  };
  auto known = [&] { return v->symbol.count(at) || v->failure.count(at); };
  {
    std::lock_guard<std::mutex> lk(R().mu);
    auto it = R().vars.find(symbol);
    if (it == R().vars.end()) return cudaErrorInvalidSymbol;
    v = it->second;
    m = LiveModule(v->module, "variable " + v->name);
    if (!m) return cudaErrorInvalidSymbol;
    if (known()) return cached();
  }
  if (cudaError_t e = FetchModuleInfo(m.get(), at, known); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lk(R().mu);
  // Unregistered meanwhile (at exit, by another thread): nothing was cached.
  if (!LiveModule(v->module, "variable " + v->name)) return cudaErrorInvalidSymbol;
  if (known()) return cached();
  Say(fmt::format("variable {}: GPU server {} did not list it in its module's info for device {}",
                  v->name, l->address(), at.index));
  return cudaErrorInvalidSymbol;
}

// Symbols live on the current device's server. The copy runs on `stream` when that stream is the
// current device's (a stream of another device cannot order work on this one: the default stream
// is used, as before).
// *same_server: whether the stream's device is on the current device's server (a sync of it
// then goes to the same link).
cudaError_t SymbolStream(cudaStream_t stream, uint64_t* id, bool* same_server = nullptr) {
  int sd;
  uint64_t sid;
  if (cudaError_t e = ResolveStream(stream, &sd, &sid); e != cudaSuccess) return e;
  *id = sd == t_device ? sid : 0;
  if (same_server != nullptr) *same_server = SameServer(sd, t_device);
  return cudaSuccess;
}

cudaError_t ToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                     cudaMemcpyKind kind, cudaStream_t stream) {
  uint64_t ptr, size;
  ServerLink* l;
  if (cudaError_t e = SymbolAddress(symbol, &ptr, &size, &l); e != cudaSuccess) return e;
  if (offset + count > size) return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDefault) kind = R().DeviceOf(src) >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  uint64_t sid;
  if (cudaError_t e = SymbolStream(stream, &sid); e != cudaSuccess) return e;
  if (kind == cudaMemcpyHostToDevice) {
    return CopyH2D(l, ptr + offset, static_cast<const std::byte*>(src), count, sid);
  }
  if (kind != cudaMemcpyDeviceToDevice) return cudaErrorInvalidMemcpyDirection;
  proto::MemcpyD2D m{.dst = ptr + offset, .src = reinterpret_cast<uint64_t>(src), .size = count,
                     .stream = sid};
  return Post(l, m);
}

// `async_call`: cudaMemcpyFromSymbolAsync. As cudaMemcpyAsync: into pinned or registered memory
// the call returns once the request is out and the data lands by the next synchronizing call;
// into pageable memory it completes before returning.
cudaError_t FromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async_call = false) {
  uint64_t ptr, size;
  ServerLink* l;
  if (cudaError_t e = SymbolAddress(symbol, &ptr, &size, &l); e != cudaSuccess) return e;
  if (offset + count > size) return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDefault) kind = R().DeviceOf(dst) >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
  uint64_t sid;
  bool same_server = false;
  if (cudaError_t e = SymbolStream(stream, &sid, &same_server); e != cudaSuccess) return e;
  if (kind == cudaMemcpyDeviceToHost) {
    // Asynchronous only when a sync of `stream` reaches this link (see Memcpy).
    return CopyD2H(l, static_cast<std::byte*>(dst), ptr + offset, count, sid,
                   async_call && IsPinned(dst, count) && same_server);
  }
  if (kind != cudaMemcpyDeviceToDevice) return cudaErrorInvalidMemcpyDirection;
  proto::MemcpyD2D m{.dst = reinterpret_cast<uint64_t>(dst), .src = ptr + offset, .size = count,
                     .stream = sid};
  return Post(l, m);
}

// ---- launches ----

// Held by the caller for as long as it uses it (its module may be unregistered meanwhile).
std::shared_ptr<FunctionRec> FindFunction(const void* f) {
  std::lock_guard<std::mutex> lk(R().mu);
  auto it = R().functions.find(f);
  if (it != R().functions.end()) return it->second;
  // A cudaKernel_t from __cudaGetKernel.
  auto rec = R().function_recs.find(static_cast<const FunctionRec*>(f));
  if (rec != R().function_recs.end()) return rec->second;
  return nullptr;
}

// The client-side fatbin parser's layout of `f`, for a server that cannot give one (`why`: its
// reason), cached for `l` (said once per server). Caller holds R().mu.
cudaError_t FallbackLayout(FunctionRec* f, ServerLink* l, ModuleRec& m, const std::string& why) {
  // Said once per server: an operator should know layouts come from the client's parser (a
  // driver without cuFuncGetParamInfo, or an emulated server testing that case).
  static auto& told = *new std::set<const ServerLink*>();  // never destroyed: see Deferred()
  if (told.insert(l).second) {
    Say(fmt::format("GPU server {} cannot report kernel parameter layouts ({}); using the "
                    "client's fatbin parser", l->address(), why));
  }
  if (!m.parsed) {
    m.parsed = true;
    auto mod = fatbin::ParseFatbin(m.image);
    if (mod.ok()) m.layouts = std::move(*mod); else m.parse_status = mod.status();
  }
  auto k = m.layouts.kernels.find(f->name);
  if (!m.parse_status.ok() || k == m.layouts.kernels.end()) {
    Say(fmt::format("kernel {}: no parameter layout (server: {}; fatbin: {})", f->name, why,
                    m.parse_status.ok() ? "kernel not found" : m.parse_status.message()));
    return cudaErrorInvalidDeviceFunction;
  }
  std::vector<proto::ParamSlot>& slots = f->params[l];
  for (const auto& p : k->second.params) slots.push_back({p.offset, p.size});
  return cudaSuccess;
}

// Parameter layout for a launch on server device `at`: the server's driver first, from the
// module's info (fetched once per server: layouts do not differ between its devices); the
// client-side fatbin parser when the server cannot say.
cudaError_t Layout(FunctionRec* f, ServerDevice at, std::vector<proto::ParamSlot>* out) {
  ServerLink* l = at.link;
  std::shared_ptr<ModuleRec> m;
  auto known = [&] { return f->params.count(l) || f->no_layout.count(l); };
  // Caller holds R().mu. Whether `out` was filled (else: no answer from the module info yet).
  auto cached = [&](cudaError_t* e) {
    if (auto it = f->params.find(l); it != f->params.end()) {
      *out = it->second;
      *e = cudaSuccess;
      return true;
    }
    if (auto why = f->no_layout.find(l); why != f->no_layout.end()) {
      *e = FallbackLayout(f, l, *m, why->second);
      if (*e == cudaSuccess) *out = f->params[l];
      return true;
    }
    return false;
  };
  cudaError_t e = cudaSuccess;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    m = LiveModule(f->module, "kernel " + f->name);
    if (!m) return cudaErrorInvalidDeviceFunction;
    if (cached(&e)) return e;
  }
  if (e = FetchModuleInfo(m.get(), at, known); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lk(R().mu);
  // Unregistered meanwhile (at exit, by another thread): nothing was cached.
  if (!LiveModule(f->module, "kernel " + f->name)) return cudaErrorInvalidDeviceFunction;
  if (cached(&e)) return e;
  Say(fmt::format("kernel {}: GPU server {} did not list it in its module's info", f->name,
                  l->address()));
  return cudaErrorInvalidDeviceFunction;
}

// A module with __managed__ variables: each variable is one device variable on one GPU server
// (managed memory is not remoted), so its kernels run on one device only, the first they were
// launched on; a launch on another would see another copy of the variables (or none) and compute
// wrong results, so it is refused, loudly. Conservative: the kernel may not use them at all.
cudaError_t CheckManaged(const FunctionRec* f, int dev) {
  if (!R().any_managed.load(std::memory_order_relaxed)) return cudaSuccess;
  std::lock_guard<std::mutex> lk(R().mu);
  auto it = R().modules.find(f->module);
  if (it == R().modules.end() || it->second->managed.empty()) return cudaSuccess;
  ModuleRec& m = *it->second;
  if (m.managed_device < 0) m.managed_device = dev;
  if (m.managed_device == dev) return cudaSuccess;
  std::string names;
  for (const auto& n : m.managed) names += (names.empty() ? "" : ", ") + n;
  Say(fmt::format("launch of kernel {} on device {} refused: its module has __managed__ "
                  "variable(s) {}, which gpool keeps as device memory of device {} only (managed "
                  "memory is not remoted), so a kernel on another device would not see them",
                  f->name, dev, names, m.managed_device));
  return cudaErrorNotSupported;
}

// `cooperative`: cudaLaunchCooperativeKernel (proto::LaunchCooperative; the server launches it
// with the driver's cooperative attribute, or, emulated, as any launch: the whole grid runs).
cudaError_t Launch(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                   cudaStream_t stream, bool cooperative = false) {
  std::shared_ptr<FunctionRec> f = FindFunction(func);
  if (!f) return cudaErrorInvalidDeviceFunction;
  int dev;
  uint64_t sid;
  if (cudaError_t e = ResolveStream(stream, &dev, &sid); e != cudaSuccess) return e;
  if (cudaError_t e = CheckManaged(f.get(), dev); e != cudaSuccess) return e;
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return err;
  thread_local std::vector<proto::ParamSlot> slots;
  thread_local std::vector<std::byte> buf;
  if (cudaError_t e = Layout(f.get(), {l, R().Index(dev)}, &slots); e != cudaSuccess) return e;
  size_t total = 0;
  for (const auto& p : slots) total = std::max<size_t>(total, p.offset + p.size);
  buf.assign(total, std::byte{0});
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!args || !args[i]) return cudaErrorInvalidValue;
    std::memcpy(buf.data() + slots[i].offset, args[i], slots[i].size);
  }
  proto::Launch m{.func = f->id, .grid = {grid.x, grid.y, grid.z},
                  .block = {block.x, block.y, block.z}, .shmem = static_cast<uint32_t>(shmem),
                  .device = R().Index(dev), .stream = sid, .params = buf};
  if (cooperative) {
    proto::LaunchCooperative c;
    static_cast<proto::Launch&>(c) = m;
    return Post(l, c);
  }
  return Post(l, m);
}

cudaError_t SyncDevice(int dev) {
  HostCalls::Get().WaitDevice(dev);
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return err;
  proto::DeviceSync q;
  q.device = R().Index(dev);
  return Call(l, q);
}

// After a reset of program device `dev` (server device `at`): its allocations, streams and
// events are gone, and its copies of the module variables will be elsewhere.
void ForgetDevice(int dev, ServerDevice at) {
  std::lock_guard<std::mutex> lk(R().mu);
  Runtime& r = R();
  std::erase_if(r.allocs, [&](const auto& kv) { return kv.second.device == dev; });
  std::erase_if(r.streams, [&](StreamRec* s) {
    if (s->device != dev) return false;
    delete s;
    return true;
  });
  std::erase_if(r.events, [&](EventRec* e) {
    if (e->device != dev) return false;
    delete e;
    return true;
  });
  for (auto& [host, v] : r.vars) {
    v->symbol.erase(at);
    v->failure.erase(at);
  }
}

const proto::DeviceProps* Props(int dev, cudaError_t* err) {
  {
    std::lock_guard<std::mutex> lk(R().mu);
    auto it = R().props.find(dev);
    if (it != R().props.end()) return &it->second;
  }
  ServerLink* l = R().Link(dev, err);
  if (!l) return nullptr;
  proto::GetDeviceProps q;
  q.device = R().Index(dev);
  proto::DeviceProps p;
  *err = Call(l, q, &p);
  if (*err != cudaSuccess) return nullptr;
  std::lock_guard<std::mutex> lk(R().mu);
  return &(R().props[dev] = std::move(p));
}

// The PCI address device `dev` shows the program (pool.h, PoolPciAddress).
cudaError_t PciOf(int dev, PciAddr* out) {
  int n = static_cast<int>(R().devices.size());
  if (dev < 0 || dev >= n) return n == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice;
  std::vector<std::pair<int, int>> own(n);
  for (int d = 0; d <= dev; ++d) {
    if (R().devices[d].server != R().devices[dev].server) continue;
    cudaError_t err = cudaSuccess;
    const proto::DeviceProps* p = Props(d, &err);
    if (!p) return err;
    own[d] = {p->pci_bus_id, p->pci_device_id};
  }
  *out = PoolPciAddress(R().devices, own, dev);
  return cudaSuccess;
}
}  // namespace

int Unsupported(const char* name, const char* why) {
  static std::mutex mu;
  static auto& said = *new std::set<std::string>();  // never destroyed: see Deferred()
  {
    std::lock_guard<std::mutex> lk(mu);
    if (said.insert(name).second) {
      Say(fmt::format("{} is not supported by the gpool client runtime{}{} (returning "
                      "cudaErrorNotSupported)", name, *why ? ": " : "", why));
    }
  }
  t_last_error = cudaErrorNotSupported;
  return cudaErrorNotSupported;
}
int Unsupported(const char* name) { return Unsupported(name, ""); }

}  // namespace gpool::remote::client

using namespace gpool::remote::client;  // NOLINT: the C API below is this file's whole point
using gpool::remote::proto::Op;
namespace proto = gpool::remote::proto;

// ---------------------------------------------------------------- registration (nvcc-generated)
// The library builds with hidden visibility; only the CUDA API below is exported.
#pragma GCC visibility push(default)
extern "C" {

void** __cudaRegisterFatBinary(void* fatCubin) {
  auto bytes = gpool::remote::fatbin::FatbinFromWrapper(fatCubin);
  auto m = std::make_shared<ModuleRec>();
  if (!bytes.ok()) {
    Say(fmt::format("__cudaRegisterFatBinary: {}", bytes.status().ToString()));
  } else {
    m->image.assign(bytes->begin(), bytes->end());
  }
  Runtime& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  m->id = r.next_id++;
  auto** handle = new void*(reinterpret_cast<void*>(m->id));  // never freed (Runtime::handles)
  for (auto& [addr, l] : r.links) {
    std::lock_guard<std::mutex> ll(l->mu());
    r.PostModule(l.get(), *m);
  }
  r.handles[handle] = m->id;
  r.modules[m->id] = std::move(m);
  return handle;
}

void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) { (void)fatCubinHandle; }

// Runs at exit, or when a library of kernels is dlclose'd (its registration code's atexit
// handler runs then). As CUDA does, the module's kernels and variables are refused from now on:
// the module and its functions and variables leave every index (a library dlopen'ed again, often
// at the same host addresses, registers new ones) and nothing cached of them is used again. Each
// connected server is told (UnregisterModule, posted: ordered after the work already queued,
// which may use the module) and frees the module's code and variables; a server connected later
// never hears of it.
void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  Runtime& r = R();
  std::shared_ptr<ModuleRec> m;  // destroyed (with its records) once the lock is released
  {
    std::lock_guard<std::mutex> lk(r.mu);
    auto h = r.handles.find(fatCubinHandle);
    auto it = h == r.handles.end() ? r.modules.end() : r.modules.find(h->second);
    if (it == r.modules.end()) {
      Say(fmt::format("__cudaUnregisterFatBinary: handle {} is not registered (never given out "
                      "by __cudaRegisterFatBinary, or unregistered already); ignored",
                      static_cast<const void*>(fatCubinHandle)));
      return;
    }
    h->second = 0;  // retired, not freed (see Runtime::handles)
    m = std::move(it->second);
    r.modules.erase(it);
    m->unregistered = true;
    for (const auto& f : m->functions) {
      if (auto at = r.functions.find(f->host_fun); at != r.functions.end() && at->second == f) {
        r.functions.erase(at);
      }
      r.function_recs.erase(f.get());
    }
    for (const auto& v : m->vars) {
      if (auto at = r.vars.find(v->host); at != r.vars.end() && at->second == v) r.vars.erase(at);
    }
    proto::UnregisterModule u{.module = m->id};
    for (auto& [addr, l] : r.links) {
      std::lock_guard<std::mutex> ll(l->mu());
      (void)l->Post(u);
    }
  }
}

// nvcc's code calls this before the program's first host access to a __managed__ variable of
// the module (__nv_init_managed_rt), to have the runtime point the variable's host shadow at the
// managed memory. gpool cannot: managed memory is not remoted (a GPU on another host cannot share
// this host's memory), and a host copy the GPU never sees would silently compute wrong results.
// Returning 0 would make the program dereference a null shadow; so it stops the program here,
// saying why. Modules without managed variables have nothing to initialise.
// The module id of a handle __cudaRegisterFatBinary gave out and that is still registered, else 0
// after saying so (naming `call`; quiet when it is null). Caller holds r.mu.
uint64_t LiveModuleOf(Runtime& r, void** handle, const char* call) {
  auto h = r.handles.find(handle);
  if (h != r.handles.end() && h->second != 0) return h->second;
  if (call != nullptr) {
    Say(fmt::format("{}: handle {} is not a registered module's (never given out by "
                    "__cudaRegisterFatBinary, or unregistered); ignored",
                    call, static_cast<const void*>(handle)));
  }
  return 0;
}

char __cudaInitModule(void** fatCubinHandle) {
  std::string names;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    auto it = R().modules.find(LiveModuleOf(R(), fatCubinHandle, "__cudaInitModule"));
    if (it != R().modules.end()) {
      for (const auto& n : it->second->managed) names += (names.empty() ? "" : ", ") + n;
    }
  }
  if (names.empty()) return 1;
  Say(fmt::format("FATAL: host access to __managed__ variable(s) {}: managed memory is not "
                  "supported by the gpool client runtime (a GPU on another host cannot share this "
                  "host's memory); stopping the program rather than let it compute with a host "
                  "copy the GPU never sees", names));
  std::abort();
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun,
                            const char* deviceName, int, uint3*, uint3*, dim3*, dim3*, int*) {
  (void)deviceFun;
  Runtime& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  const uint64_t module = LiveModuleOf(r, fatCubinHandle, "__cudaRegisterFunction");
  if (module == 0) return;
  auto f = std::make_shared<FunctionRec>();
  f->id = r.next_id++;
  f->module = module;
  f->host_fun = hostFun;
  f->name = deviceName;
  for (auto& [addr, l] : r.links) {
    std::lock_guard<std::mutex> ll(l->mu());
    r.PostFunction(l.get(), *f);
  }
  if (auto m = r.modules.find(f->module); m != r.modules.end()) m->second->functions.push_back(f);
  r.function_recs[f.get()] = f;
  r.functions[hostFun] = std::move(f);
}

void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress,
                       const char* deviceName, int, size_t size, int constant, int) {
  (void)deviceAddress;
  Runtime& r = R();
  std::lock_guard<std::mutex> lk(r.mu);
  const uint64_t module = LiveModuleOf(r, fatCubinHandle, "__cudaRegisterVar");
  if (module == 0) return;
  auto v = std::make_shared<VarRec>();
  v->id = r.next_id++;
  v->module = module;
  v->host = hostVar;
  v->name = deviceName;
  v->size = size;
  v->constant = constant != 0;
  for (auto& [addr, l] : r.links) {
    std::lock_guard<std::mutex> ll(l->mu());
    r.PostVar(l.get(), *v);
  }
  if (auto m = r.modules.find(v->module); m != r.modules.end()) m->second->vars.push_back(v);
  r.vars[hostVar] = std::move(v);
}

// A __managed__ variable: registered as a plain device variable of its module on the servers,
// so a program that declares one (or links a library that does) still starts, with a warning.
// What cannot be right fails loudly: host access stops the program (__cudaInitModule), and the
// module's kernels run on one device only (CheckManaged). The host shadow stays null.
void __cudaRegisterManagedVar(void** fatCubinHandle, void** hostVarPtrAddress, char* deviceAddress,
                              const char* deviceName, int ext, size_t size, int constant,
                              int global) {
  Say(fmt::format("warning: __managed__ variable {} is registered as device memory of one GPU: "
                  "managed memory is not remoted, so host access to it stops the program and its "
                  "module's kernels may run on one device only", deviceName));
  __cudaRegisterVar(fatCubinHandle, reinterpret_cast<char*>(hostVarPtrAddress), deviceAddress,
                    deviceName, ext, size, constant, global);
  std::lock_guard<std::mutex> lk(R().mu);
  auto it = R().modules.find(LiveModuleOf(R(), fatCubinHandle, nullptr));
  if (it != R().modules.end()) it->second->managed.push_back(deviceName);
  R().any_managed.store(true, std::memory_order_relaxed);
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  t_configs.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  if (t_configs.empty()) return Ret(cudaErrorMissingConfiguration);
  CallConfig c = t_configs.back();
  t_configs.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shmem;
  *static_cast<void**>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  std::shared_ptr<FunctionRec> f = FindFunction(hostFun);
  if (!f) return Ret(cudaErrorInvalidDeviceFunction);
  *kernel = reinterpret_cast<cudaKernel_t>(f.get());
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                               size_t sharedMem, cudaStream_t stream) {
  return Ret(Launch(kernel, gridDim, blockDim, args, sharedMem, stream));
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                    size_t sharedMem, cudaStream_t stream) {
  return Ret(Launch(kernel, gridDim, blockDim, args, sharedMem, stream));
}

// ---------------------------------------------------------------- the runtime API
cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                             size_t sharedMem, cudaStream_t stream) {
  return Ret(Launch(func, gridDim, blockDim, args, sharedMem, stream));
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                  size_t sharedMem, cudaStream_t stream) {
  return Ret(Launch(func, gridDim, blockDim, args, sharedMem, stream));
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (static_cast<int>(error)) {
#define GPOOL_CUDA_ERROR(name, num, desc) case num: return #name;
#include "remote/client/cuda_errors.inc"
#undef GPOOL_CUDA_ERROR
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (static_cast<int>(error)) {
#define GPOOL_CUDA_ERROR(name, num, desc) case num: return desc;
#include "remote/client/cuda_errors.inc"
#undef GPOOL_CUDA_ERROR
  }
  return "unrecognized error code";
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return Ret(cudaErrorInvalidValue);
  *v = kVersion;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return Ret(cudaErrorInvalidValue);
  *v = kVersion;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return Ret(cudaErrorInvalidValue);
  *count = static_cast<int>(R().devices.size());
  if (*count == 0) {
    Say(R().env_error);
    return Ret(cudaErrorNoDevice);
  }
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= static_cast<int>(R().devices.size())) {
    return Ret(R().devices.empty() ? cudaErrorNoDevice : cudaErrorInvalidDevice);
  }
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return Ret(cudaErrorInvalidValue);
  if (R().devices.empty()) {
    Say(R().env_error);
    return Ret(cudaErrorNoDevice);
  }
  *device = t_device;
  return cudaSuccess;
}
// Device flags and limits belong to the device's (primary) context, which lives on its server:
// they are forwarded, and the server applies them (cuda backend) or keeps them for the session
// (emulated), refusing what it cannot honour. Synchronous, as in CUDA, so a refusal is seen here.
cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::SetDeviceFlags q{.device = R().Index(dev), .flags = flags};
  return Ret(Call(l, q));
}
cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (!flags) return Ret(cudaErrorInvalidValue);
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::GetDeviceFlags q;
  q.device = R().Index(dev);
  proto::U64Value v;
  if (cudaError_t e = Call(l, q, &v); e != cudaSuccess) return Ret(e);
  *flags = static_cast<unsigned int>(v.value);
  return cudaSuccess;
}
cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  cudaError_t err;
  return Ret(R().Link(device, &err) ? cudaSuccess : err);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaDeviceSynchronize(void) { return Ret(SyncDevice(t_device)); }

// No profiler is attached to a pooled GPU's client: start and stop do nothing and succeed, as the
// real runtime's do without one (matrixMul and asyncAPI of cuda-samples call them).
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
// As CUDA documents it: the current device's work is waited for, then every allocation, stream
// and event the process made on it is destroyed, its limits and flags return to their defaults,
// and its module variables have their initial values again at next use. The server does it
// (DeviceReset, one round trip; Backend::DeviceReset), then the client forgets the device's
// records, so the old pointers, streams and events are refused here
// (cudaErrorInvalidValue, cudaErrorInvalidResourceHandle), and the variables' cached addresses
// on that device, fetched again at next use. The session, registrations, the other devices and
// host memory (cudaMallocHost: host memory here) stay.
cudaError_t cudaDeviceReset(void) {
  const int dev = t_device;
  HostCalls::Get().WaitDevice(dev);
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::DeviceReset q;
  q.device = R().Index(dev);
  proto::Empty none;
  proto::ReplyHead h{.error = -1};
  cudaError_t e = Call(l, q, &none, &h);
  if (h.error == 0) ForgetDevice(dev, {l, q.device});
  return Ret(e);
}
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache) { return cudaSuccess; }
cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache* c) {
  if (c) *c = cudaFuncCachePreferNone;
  return cudaSuccess;
}
cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::DeviceSetLimit q{.device = R().Index(dev), .limit = static_cast<int32_t>(limit),
                          .value = value};
  return Ret(Call(l, q));
}
cudaError_t cudaDeviceGetLimit(size_t* value, enum cudaLimit limit) {
  if (!value) return Ret(cudaErrorInvalidValue);
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::DeviceGetLimit q{.device = R().Index(dev), .limit = static_cast<int32_t>(limit)};
  proto::U64Value v;
  if (cudaError_t e = Call(l, q, &v); e != cudaSuccess) return Ret(e);
  *value = v.value;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return Ret(cudaErrorInvalidValue);
  cudaError_t err = cudaSuccess;
  const proto::DeviceProps* p = Props(device, &err);
  if (!p) return Ret(err);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%s", p->name.c_str());
  std::memcpy(prop->uuid.bytes, p->uuid.data(), std::min<size_t>(16, p->uuid.size()));
  prop->totalGlobalMem = p->total_global_mem;
  prop->sharedMemPerBlock = p->shared_mem_per_block;
  prop->regsPerBlock = p->regs_per_block;
  prop->warpSize = p->warp_size;
  prop->memPitch = p->mem_pitch;
  prop->maxThreadsPerBlock = p->max_threads_per_block;
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = p->max_threads_dim[i];
    prop->maxGridSize[i] = p->max_grid_size[i];
  }
  prop->totalConstMem = p->total_const_mem;
  prop->major = p->major;
  prop->minor = p->minor;
  prop->textureAlignment = p->texture_alignment;
  prop->multiProcessorCount = p->multi_processor_count;
  prop->integrated = p->integrated;
  prop->canMapHostMemory = 0;  // mapped host memory cannot cross the network
  prop->concurrentKernels = p->concurrent_kernels;
  prop->ECCEnabled = p->ecc_enabled;
  prop->pciBusID = p->pci_bus_id;
  prop->pciDeviceID = p->pci_device_id;
  PciAddr pci;
  if (cudaError_t e = PciOf(device, &pci); e != cudaSuccess) return Ret(e);
  prop->pciDomainID = pci.domain;  // unique per device of the program (cudaDeviceGetPCIBusId)
  prop->asyncEngineCount = p->async_engine_count;
  prop->unifiedAddressing = p->unified_addressing;
  prop->memoryBusWidth = p->memory_bus_width;
  prop->l2CacheSize = p->l2_cache_size;
  prop->maxThreadsPerMultiProcessor = p->max_threads_per_mp;
  prop->sharedMemPerMultiprocessor = p->shared_mem_per_mp;
  prop->regsPerMultiprocessor = p->regs_per_mp;
  prop->managedMemory = 0;
  prop->sharedMemPerBlockOptin = p->shared_mem_per_block_optin;
  prop->maxBlocksPerMultiProcessor = p->max_blocks_per_mp;
  // As cudaDevAttrCooperativeLaunch answers (the server's device attribute), so that the two
  // agree as the real runtime's do.
  if (cudaError_t e = cudaDeviceGetAttribute(&prop->cooperativeLaunch, cudaDevAttrCooperativeLaunch,
                                             device); e != cudaSuccess) {
    return e;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return Ret(cudaErrorInvalidValue);
  if (attr == cudaDevAttrPciDomainId) {  // gpool's domain (see cudaDeviceGetPCIBusId)
    PciAddr pci;
    if (cudaError_t e = PciOf(device, &pci); e != cudaSuccess) return Ret(e);
    *value = pci.domain;
    return cudaSuccess;
  }
  {
    std::lock_guard<std::mutex> lk(R().mu);
    auto it = R().attrs.find({device, static_cast<int>(attr)});
    if (it != R().attrs.end()) {
      *value = it->second;
      return cudaSuccess;
    }
  }
  cudaError_t err;
  ServerLink* l = R().Link(device, &err);
  if (!l) return Ret(err);
  proto::GetAttribute q{.device = R().Index(device), .attr = static_cast<int32_t>(attr)};
  proto::IntValue v;
  if (cudaError_t e = Call(l, q, &v); e != cudaSuccess) return Ret(e);
  std::lock_guard<std::mutex> lk(R().mu);
  R().attrs[{device, static_cast<int>(attr)}] = v.value;
  *value = v.value;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  cudaError_t err;
  ServerLink* l = R().Link(t_device, &err);
  if (!l) return Ret(err);
  proto::MemGetInfo q;
  q.device = R().Index(t_device);
  proto::MemInfo m;
  if (cudaError_t e = Call(l, q, &m); e != cudaSuccess) return Ret(e);
  if (free) *free = m.free;
  if (total) *total = m.total;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return Ret(cudaErrorInvalidValue);
  int n = static_cast<int>(R().devices.size());
  if (device < 0 || device >= n || peer < 0 || peer >= n) return Ret(cudaErrorInvalidDevice);
  // Devices of one server can reach each other; across servers copies are relayed.
  *can = device != peer && R().devices[device].server == R().devices[peer].server;
  return cudaSuccess;
}
// Peer access lets kernels on the current device reach a peer's memory. Between devices of one
// server it is forwarded (the cuda backend enables it on its contexts). Across servers no kernel
// can reach the other host's memory: refused with cudaErrorPeerAccessUnsupported, saying so
// (cudaDeviceCanAccessPeer says 0 there; copies between them still work, relayed).
static cudaError_t PeerAccess(int peer, unsigned int flags, bool enable) {
  const char* call = enable ? "cudaDeviceEnablePeerAccess" : "cudaDeviceDisablePeerAccess";
  int dev = t_device, n = static_cast<int>(R().devices.size());
  if (peer < 0 || peer >= n || peer == dev) return Ret(cudaErrorInvalidDevice);
  if (flags != 0) return Ret(cudaErrorInvalidValue);
  if (R().devices[dev].server != R().devices[peer].server) {
    Say(fmt::format("{}: device {} ({}) and device {} ({}) are on different GPU servers: kernels "
                    "on one cannot reach the other's memory (copies between them work, relayed "
                    "through the client)", call, dev, R().devices[dev].server, peer,
                    R().devices[peer].server));
    return Ret(cudaErrorPeerAccessUnsupported);
  }
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::PeerAccess q{.device = R().Index(dev), .peer = R().Index(peer),
                      .enable = static_cast<uint8_t>(enable)};
  return Ret(Call(l, q));
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  return PeerAccess(peer, flags, true);
}
cudaError_t cudaDeviceDisablePeerAccess(int peer) { return PeerAccess(peer, 0, false); }

// ---- memory
// cudaMalloc on device `dev` (cudaMallocAsync: the stream's device).
static cudaError_t MallocOn(int dev, void** devPtr, size_t size) {
  if (!devPtr) return Ret(cudaErrorInvalidValue);
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::Malloc q{.device = R().Index(dev), .size = size};
  proto::Pointer p;
  if (cudaError_t e = Call(l, q, &p); e != cudaSuccess) return Ret(e);
  std::lock_guard<std::mutex> lk(R().mu);
  auto next = R().allocs.lower_bound(p.ptr);
  bool clash = (next != R().allocs.end() && next->first < p.ptr + std::max<size_t>(size, 1));
  if (next != R().allocs.begin()) {
    auto prev = std::prev(next);
    clash |= prev->first + std::max<uint64_t>(prev->second.size, 1) > p.ptr;
  }
  if (clash) {
    Say(fmt::format("cudaMalloc on device {} returned 0x{:x}, which overlaps memory of another "
                    "device: servers of one program must use distinct address ranges",
                    dev, p.ptr));
    return Ret(cudaErrorMemoryAllocation);
  }
  R().allocs[p.ptr] = AllocRec{size, dev};
  *devPtr = reinterpret_cast<void*>(p.ptr);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** devPtr, size_t size) { return MallocOn(t_device, devPtr, size); }
cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (!pitch) return Ret(cudaErrorInvalidValue);
  *pitch = (width + 511) / 512 * 512;
  return cudaMalloc(devPtr, *pitch * height);
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  int dev;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    auto it = R().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == R().allocs.end()) return Ret(cudaErrorInvalidValue);
    dev = it->second.device;
  }
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::Free q{.ptr = reinterpret_cast<uint64_t>(p)};
  cudaError_t e = Call(l, q);
  std::lock_guard<std::mutex> lk(R().mu);
  R().allocs.erase(reinterpret_cast<uint64_t>(p));
  return Ret(e);
}
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return Ret(cudaErrorInvalidValue);
  // Host memory stays local; "pinned" only matters to the server's staging buffers.
  void* p = std::aligned_alloc(4096, (std::max<size_t>(size, 1) + 4095) / 4096 * 4096);
  if (!p) return Ret(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lk(R().mu);
  R().host_allocs[p] = size;
  R().host_alloc_flags[p] = cudaHostAllocDefault;
  *ptr = p;
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (flags & cudaHostAllocMapped) {
    return static_cast<cudaError_t>(Unsupported(
        "cudaHostAlloc(cudaHostAllocMapped)", "a GPU on another host cannot map this host's memory"));
  }
  if (flags & ~unsigned{cudaHostAllocPortable | cudaHostAllocWriteCombined}) {
    return Ret(cudaErrorInvalidValue);
  }
  if (cudaError_t e = cudaMallocHost(ptr, size); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lk(R().mu);
  R().host_alloc_flags[*ptr] = flags;  // Portable and WriteCombined: kept, meaningless remotely
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  std::vector<ServerLink*> links;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    if (!R().host_allocs.erase(p)) return Ret(cudaErrorInvalidValue);
    R().host_alloc_flags.erase(p);
    for (auto& [addr, l] : R().links) links.push_back(l.get());
  }
  // Like CUDA's, this synchronizes: no asynchronous copy may still be writing into the buffer.
  for (ServerLink* l : links) {
    std::lock_guard<std::mutex> lk(l->mu());
    (void)l->WaitReads();
  }
  std::free(p);
  return cudaSuccess;
}
// cudaHostRegister page-locks memory so the local GPU can DMA from it, and with flags maps it
// into the GPU's address space. Remotely, data always crosses the network through the client and
// the server's own pinned staging buffers, so page-locking the program's memory would buy
// nothing: copies from and to pageable memory work as they are. What registration still means
// here is kept: the range is remembered, so device-to-host cudaMemcpyAsync into it is
// asynchronous as into cudaMallocHost memory, cudaPointerGetAttributes calls it host memory,
// registering an overlapping range again fails with cudaErrorHostMemoryAlreadyRegistered and
// unregistering an unknown one with cudaErrorHostMemoryNotRegistered. The flags that ask for a
// device mapping (Mapped, IoMemory, and ReadOnly, which only qualifies a mapping) cannot work: a
// GPU on another host cannot reach this host's memory, so they fail loudly, naming the flag.
// cudaHostRegisterPortable (all devices) is what every registration is here.
cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (flags & cudaHostRegisterMapped) {
    return static_cast<cudaError_t>(Unsupported(
        "cudaHostRegister(cudaHostRegisterMapped)", "a GPU on another host cannot map this host's memory"));
  }
  if (flags & cudaHostRegisterIoMemory) {
    return static_cast<cudaError_t>(Unsupported(
        "cudaHostRegister(cudaHostRegisterIoMemory)", "a GPU on another host cannot map this host's I/O memory"));
  }
  if (flags & cudaHostRegisterReadOnly) {
    return static_cast<cudaError_t>(Unsupported(
        "cudaHostRegister(cudaHostRegisterReadOnly)", "it qualifies a device mapping of host memory, which a GPU on another host cannot have"));
  }
  if (!ptr || size == 0 || (flags & ~unsigned{cudaHostRegisterPortable}) != 0) {
    return Ret(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lk(R().mu);
  if (Overlaps(R().host_registered, ptr, size) || Overlaps(R().host_allocs, ptr, size)) {
    return Ret(cudaErrorHostMemoryAlreadyRegistered);
  }
  R().host_registered[ptr] = size;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* ptr) {
  std::vector<ServerLink*> links;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    if (!R().host_registered.erase(ptr)) return Ret(cudaErrorHostMemoryNotRegistered);
    for (auto& [addr, l] : R().links) links.push_back(l.get());
  }
  // The program may free the memory next: no asynchronous copy may still be writing into it.
  for (ServerLink* l : links) {
    std::lock_guard<std::mutex> lk(l->mu());
    (void)l->WaitReads();
  }
  return cudaSuccess;
}
// Mapped host memory (a device pointer to host memory) cannot exist remotely: cudaHostAlloc with
// cudaHostAllocMapped and cudaHostRegister with cudaHostRegisterMapped already refuse, so there is
// never a device pointer to return.
cudaError_t cudaHostGetDevicePointer(void**, void*, unsigned int) {
  return static_cast<cudaError_t>(Unsupported(
      "cudaHostGetDevicePointer", "mapped host memory cannot be reached by a GPU on another host"));
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* ptr) {
  if (!a) return Ret(cudaErrorInvalidValue);
  std::memset(a, 0, sizeof *a);
  uint64_t base;
  int dev = R().DeviceOf(ptr, &base);
  if (dev >= 0) {
    a->type = cudaMemoryTypeDevice;
    a->device = dev;
    a->devicePointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  std::lock_guard<std::mutex> lk(R().mu);
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  a->hostPointer = const_cast<void*>(ptr);
  if (InRange(R().host_allocs, ptr, 1) || InRange(R().host_registered, ptr, 1)) {
    a->type = cudaMemoryTypeHost;
    a->device = t_device;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return Ret(Memcpy(dst, src, count, kind, nullptr));
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  return Ret(Memcpy(dst, src, count, kind, nullptr));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return Ret(Memcpy(dst, src, count, kind, stream, /*async_call=*/true));
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count,
                                 enum cudaMemcpyKind kind, cudaStream_t stream) {
  return Ret(Memcpy(dst, src, count, kind, stream, /*async_call=*/true));
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t count) {
  return Ret(Memcpy(dst, src, count, cudaMemcpyDeviceToDevice, nullptr));
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t count,
                                cudaStream_t stream) {
  return Ret(Memcpy(dst, src, count, cudaMemcpyDeviceToDevice, stream, /*async_call=*/true));
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
  return Ret(Memcpy2D(dst, dpitch, src, spitch, width, height, kind, nullptr));
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
  return Ret(Memcpy2D(dst, dpitch, src, spitch, width, height, kind, stream, /*async_call=*/true));
}
cudaError_t cudaMemset(void* p, int value, size_t count) {
  return Ret(Memset(p, value, count, nullptr));
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  return Ret(Memset(p, value, count, stream));
}
cudaError_t cudaMemsetAsync_ptsz(void* p, int value, size_t count, cudaStream_t stream) {
  return Ret(Memset(p, value, count, stream));
}
cudaError_t cudaMemset2D(void* p, size_t pitch, int value, size_t width, size_t height) {
  return Ret(Memset2D(p, pitch, value, width, height, nullptr));
}
cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream) {
  return Ret(Memset2D(p, pitch, value, width, height, stream));
}
cudaError_t cudaMemset2DAsync_ptsz(void* p, size_t pitch, int value, size_t width, size_t height,
                                   cudaStream_t stream) {
  return Ret(Memset2D(p, pitch, value, width, height, stream));
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) {
  return Ret(ToSymbol(symbol, src, count, offset, kind, nullptr));
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count,
                                    size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return Ret(ToSymbol(symbol, src, count, offset, kind, stream));
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                 enum cudaMemcpyKind kind) {
  return Ret(FromSymbol(dst, symbol, count, offset, kind, nullptr));
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  return Ret(FromSymbol(dst, symbol, count, offset, kind, stream, /*async_call=*/true));
}
cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (!devPtr) return Ret(cudaErrorInvalidValue);
  uint64_t ptr, size;
  ServerLink* l;
  if (cudaError_t e = SymbolAddress(symbol, &ptr, &size, &l); e != cudaSuccess) return Ret(e);
  *devPtr = reinterpret_cast<void*>(ptr);
  return cudaSuccess;
}
cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (!size) return Ret(cudaErrorInvalidValue);
  uint64_t ptr, sz;
  ServerLink* l;
  if (cudaError_t e = SymbolAddress(symbol, &ptr, &sz, &l); e != cudaSuccess) return Ret(e);
  *size = sz;
  return cudaSuccess;
}

// ---- streams and events
// The priority range gpool reports (CUDA's on current GPUs: 0 least, -5 greatest). A stream's
// priority is clamped into it, as CUDA does; the cuda backend's driver clamps again to the real
// GPU's range. The emulated backend runs everything in order and ignores priorities.
constexpr int kLeastPriority = 0, kGreatestPriority = -5;
static cudaError_t CreateStream(cudaStream_t* s, unsigned flags, int priority) {
  if (!s) return Ret(cudaErrorInvalidValue);
  if ((flags & ~unsigned{cudaStreamNonBlocking}) != 0) return Ret(cudaErrorInvalidValue);
  priority = std::clamp(priority, kGreatestPriority, kLeastPriority);
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  auto* rec = new StreamRec{dev, 0, flags, priority};
  {
    std::lock_guard<std::mutex> lk(R().mu);
    rec->id = R().next_id++;
    R().streams.insert(rec);
  }
  proto::StreamCreate m{.device = R().Index(dev), .stream = rec->id, .flags = flags,
                        .priority = priority};
  *s = reinterpret_cast<cudaStream_t>(rec);
  return Ret(Post(l, m));
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return CreateStream(s, 0, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return CreateStream(s, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return CreateStream(s, flags, priority);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = kLeastPriority;
  if (greatest) *greatest = kGreatestPriority;
  return cudaSuccess;
}
// What a stream was created with, kept by the client; the default streams have flags 0 and
// priority 0 and belong to the current device.
static cudaError_t StreamInfo(cudaStream_t s, unsigned* flags, int* priority, int* device) {
  if (IsDefaultStream(s)) {
    if (flags) *flags = 0;
    if (priority) *priority = 0;
    if (device) *device = t_device;
    return cudaSuccess;
  }
  auto* rec = reinterpret_cast<StreamRec*>(s);
  std::lock_guard<std::mutex> lk(R().mu);
  if (!R().streams.count(rec)) return Ret(cudaErrorInvalidResourceHandle);
  if (flags) *flags = rec->flags;
  if (priority) *priority = rec->priority;
  if (device) *device = rec->device;
  return cudaSuccess;
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  if (!priority) return Ret(cudaErrorInvalidValue);
  return StreamInfo(s, nullptr, priority, nullptr);
}
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) {
  return cudaStreamGetPriority(s, priority);
}
cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* flags) {
  if (!flags) return Ret(cudaErrorInvalidValue);
  return StreamInfo(s, flags, nullptr, nullptr);
}
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int* flags) {
  return cudaStreamGetFlags(s, flags);
}
cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  if (!device) return Ret(cudaErrorInvalidValue);
  return StreamInfo(s, nullptr, nullptr, device);
}
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* device) {
  return cudaStreamGetDevice(s, device);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (IsDefaultStream(s)) return Ret(cudaErrorInvalidResourceHandle);
  auto* rec = reinterpret_cast<StreamRec*>(s);
  {
    std::lock_guard<std::mutex> lk(R().mu);
    if (!R().streams.erase(rec)) return Ret(cudaErrorInvalidResourceHandle);
  }
  cudaError_t err;
  ServerLink* l = R().Link(rec->device, &err);
  proto::StreamDestroy m;
  m.stream = rec->id;
  m.device = l ? R().Index(rec->device) : 0;
  delete rec;
  return l ? Ret(Post(l, m)) : Ret(err);
}
static cudaError_t StreamCall(cudaStream_t s, bool query) {
  int dev;
  uint64_t id;
  // A synchronize waits for the stream's host functions too; a query only looks.
  if (cudaError_t e = ResolveStream(s, &dev, &id, /*gate=*/!query); e != cudaSuccess) return Ret(e);
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  if (query && HostCalls::Get().Pending(dev, id)) return cudaErrorNotReady;  // a host fn waits
  // Answered here, with no round trip, when the stream's last work was a read whose reply is in
  // (ServerLink::SyncStream, QueryStream).
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l->mu());
  gpool::Status st = query ? l->QueryStream(R().Index(dev), id, &h)
                           : l->SyncStream(R().Index(dev), id, &h);
  if (!st.ok()) return Ret(FromStatus(st));
  cudaError_t e = FromReply(h, l);
  return query && e == cudaErrorNotReady ? e : Ret(e);
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return StreamCall(s, false); }
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return StreamCall(s, false); }
cudaError_t cudaStreamQuery(cudaStream_t s) { return StreamCall(s, true); }

static cudaError_t CreateEvent(cudaEvent_t* ev, unsigned flags) {
  if (!ev) return Ret(cudaErrorInvalidValue);
  cudaError_t err;
  int dev = t_device;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  auto* rec = new EventRec{dev, 0};
  {
    std::lock_guard<std::mutex> lk(R().mu);
    rec->id = R().next_id++;
    R().events.insert(rec);
  }
  proto::EventCreate m{.device = R().Index(dev), .event = rec->id, .flags = flags};
  *ev = reinterpret_cast<cudaEvent_t>(rec);
  return Ret(Post(l, m));
}
cudaError_t cudaEventCreate(cudaEvent_t* ev) { return CreateEvent(ev, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  return CreateEvent(ev, flags);
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  EventRec* e = FindEvent(ev);
  if (!e) return Ret(cudaErrorInvalidResourceHandle);
  int dev;
  uint64_t id;
  if (cudaError_t r = ResolveStream(s, &dev, &id); r != cudaSuccess) return Ret(r);
  if (R().devices[dev].server != R().devices[e->device].server) {
    return Ret(cudaErrorInvalidResourceHandle);
  }
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::EventRecord m{.event = e->id, .stream = id, .device = R().Index(dev)};
  return Ret(Post(l, m));
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t s, unsigned int) {
  return cudaEventRecord(ev, s);
}
static cudaError_t EventCall(cudaEvent_t ev, bool query) {
  EventRec* e = FindEvent(ev);
  if (!e) return Ret(cudaErrorInvalidResourceHandle);
  cudaError_t err;
  ServerLink* l = R().Link(e->device, &err);
  if (!l) return Ret(err);
  if (query) {
    proto::EventQuery q;
    q.event = e->id;
    cudaError_t r = Call(l, q);
    return r == cudaErrorNotReady ? r : Ret(r);
  }
  proto::EventSync q;
  q.event = e->id;
  return Ret(Call(l, q));
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) { return EventCall(ev, false); }
cudaError_t cudaEventQuery(cudaEvent_t ev) { return EventCall(ev, true); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return Ret(cudaErrorInvalidValue);
  EventRec* a = FindEvent(start);
  EventRec* b = FindEvent(end);
  if (!a || !b) return Ret(cudaErrorInvalidResourceHandle);
  if (R().devices[a->device].server != R().devices[b->device].server) {
    return Ret(cudaErrorInvalidResourceHandle);
  }
  cudaError_t err;
  ServerLink* l = R().Link(a->device, &err);
  if (!l) return Ret(err);
  proto::EventElapsed q{.start = a->id, .end = b->id};
  proto::FloatValue v;
  if (cudaError_t e = Call(l, q, &v); e != cudaSuccess) return Ret(e);
  *ms = v.value;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  EventRec* e = FindEvent(ev);
  if (!e) return Ret(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lk(R().mu);
    R().events.erase(e);
  }
  cudaError_t err;
  ServerLink* l = R().Link(e->device, &err);
  proto::EventDestroy m;
  m.event = e->id;
  delete e;
  return l ? Ret(Post(l, m)) : Ret(err);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int) {
  EventRec* e = FindEvent(ev);
  if (!e) return Ret(cudaErrorInvalidResourceHandle);
  int dev;
  uint64_t id;
  if (cudaError_t r = ResolveStream(s, &dev, &id); r != cudaSuccess) return Ret(r);
  if (R().devices[dev].server != R().devices[e->device].server) {
    // Across servers the client waits for the event itself, then lets the stream go on.
    return EventCall(ev, false);
  }
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::StreamWaitEvent m{.stream = id, .device = R().Index(dev), .event = e->id};
  return Ret(Post(l, m));
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  return cudaStreamWaitEvent(s, ev, flags);
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t ev, cudaStream_t s) { return cudaEventRecord(ev, s); }

// The rest of the per-thread default stream variants: what `nvcc --default-stream per-thread`
// (CUDA_API_PER_THREAD_DEFAULT_STREAM) makes a program call instead of the plain ones. Each is its
// plain call; a null stream (or cudaStreamPerThread) then means the per-thread default stream,
// which gpool maps, like the legacy one, to the device's default stream on its server (stream 0;
// see IsDefaultStream). That orders more than CUDA must (per-thread streams of two threads, and
// the per-thread stream and blocking streams, need not wait for each other), never less: one
// connection per server runs everything in program order anyway (docs/remoting.md).
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t ev, cudaStream_t s, unsigned int flags) {
  return cudaEventRecordWithFlags(ev, s, flags);
}
cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind) {
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream);
}
cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count,
                                    size_t offset, enum cudaMemcpyKind kind) {
  return cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind) {
  return cudaMemcpyFromSymbol(dst, symbol, count, offset, kind);
}
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count,
                                         size_t offset, enum cudaMemcpyKind kind,
                                         cudaStream_t stream) {
  return cudaMemcpyToSymbolAsync(symbol, src, count, offset, kind, stream);
}
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count,
                                           size_t offset, enum cudaMemcpyKind kind,
                                           cudaStream_t stream) {
  return cudaMemcpyFromSymbolAsync(dst, symbol, count, offset, kind, stream);
}
cudaError_t cudaMemset_ptds(void* p, int value, size_t count) {
  return cudaMemset(p, value, count);
}
cudaError_t cudaMemset2D_ptds(void* p, size_t pitch, int value, size_t width, size_t height) {
  return cudaMemset2D(p, pitch, value, width, height);
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return cudaStreamQuery(s); }

// ---- functions and occupancy
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr) return Ret(cudaErrorInvalidValue);
  std::shared_ptr<FunctionRec> f = FindFunction(func);
  if (!f) return Ret(cudaErrorInvalidDeviceFunction);
  cudaError_t err;
  ServerLink* l = R().Link(t_device, &err);
  if (!l) return Ret(err);
  proto::FuncAttributes q;
  q.func = f->id;
  proto::FuncAttrs a;
  if (cudaError_t e = Call(l, q, &a); e != cudaSuccess) return Ret(e);
  std::memset(attr, 0, sizeof *attr);
  attr->sharedSizeBytes = a.shared_size_bytes;
  attr->constSizeBytes = a.const_size_bytes;
  attr->localSizeBytes = a.local_size_bytes;
  attr->maxThreadsPerBlock = a.max_threads_per_block;
  attr->numRegs = a.num_regs;
  attr->ptxVersion = a.ptx_version;
  attr->binaryVersion = a.binary_version;
  attr->maxDynamicSharedSizeBytes = a.max_dynamic_shared_size_bytes;
  return cudaSuccess;
}
// Forwarded to the current device's server (posted: it returns nothing to read). What the
// client can check from the cached device properties it checks at once, as CUDA does: a dynamic
// shared memory maximum beyond the device's opt-in limit is cudaErrorInvalidValue here and now.
// What only the server knows (an attribute its backend cannot honour) surfaces at the next
// synchronizing call.
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  std::shared_ptr<FunctionRec> f = FindFunction(func);
  if (!f) return Ret(cudaErrorInvalidDeviceFunction);
  cudaError_t err;
  int dev = t_device;
  const proto::DeviceProps* p = Props(dev, &err);
  if (!p) return Ret(err);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      (value < 0 || static_cast<uint64_t>(value) > p->shared_mem_per_block_optin)) {
    return Ret(cudaErrorInvalidValue);
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout && (value < -1 || value > 100)) {
    return Ret(cudaErrorInvalidValue);
  }
  ServerLink* l = R().Link(dev, &err);
  if (!l) return Ret(err);
  proto::FuncSetAttribute m{.func = f->id, .device = R().Index(dev),
                            .attr = static_cast<int32_t>(attr), .value = value};
  return Ret(Post(l, m));
}
cudaError_t cudaFuncSetCacheConfig(const void* func, enum cudaFuncCache) {
  return FindFunction(func) ? cudaSuccess : Ret(cudaErrorInvalidDeviceFunction);
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                   int blockSize,
                                                                   size_t dynamicSMemSize,
                                                                   unsigned int flags) {
  if (!numBlocks) return Ret(cudaErrorInvalidValue);
  std::shared_ptr<FunctionRec> f = FindFunction(func);
  if (!f) return Ret(cudaErrorInvalidDeviceFunction);
  cudaError_t err;
  ServerLink* l = R().Link(t_device, &err);
  if (!l) return Ret(err);
  proto::Occupancy q{.func = f->id, .block_size = blockSize, .shmem = dynamicSMemSize,
                     .flags = flags};
  proto::IntValue v;
  if (cudaError_t e = Call(l, q, &v); e != cudaSuccess) return Ret(e);
  *numBlocks = v.value;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func,
                                                          int blockSize, size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

// ---------------------------------------------------------------- more of the runtime API
// Calls real programs (PyTorch, CUTLASS, NCCL tests, the CUDA samples) commonly make, answered
// client-side where the client knows the answer, through the protocol where the server acts.

// Stream capture (CUDA graphs) is not supported: cudaStreamBeginCapture stays a loud stub, so no
// stream is ever capturing, and these two answer cudaStreamCaptureStatusNone (what programs such
// as PyTorch's caching allocator ask before they act), filling the other outputs with zeros.
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  if (!status) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = StreamInfo(s, nullptr, nullptr, nullptr); e != cudaSuccess) return e;
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(s, status);
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     const cudaGraphNode_t** deps,
                                     const cudaGraphEdgeData** edge_data, size_t* num_deps) {
  if (!status) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = StreamInfo(s, nullptr, nullptr, nullptr); e != cudaSuccess) return e;
  *status = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (graph) *graph = nullptr;
  if (deps) *deps = nullptr;
  if (edge_data) *edge_data = nullptr;
  if (num_deps) *num_deps = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, enum cudaStreamCaptureStatus* status,
                                          unsigned long long* id, cudaGraph_t* graph,
                                          const cudaGraphNode_t** deps,
                                          const cudaGraphEdgeData** edge_data, size_t* num_deps) {
  return cudaStreamGetCaptureInfo(s, status, id, graph, deps, edge_data, num_deps);
}

// cudaHostGetFlags: the flags cudaHostAlloc was given (cudaMallocHost: cudaHostAllocDefault), for
// any pointer inside such an allocation. Memory from cudaHostRegister is refused with
// cudaErrorInvalidValue, as CUDA documents the call for cudaHostAlloc'ed memory only.
cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  if (!flags || !host) return Ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(R().mu);
  auto it = R().host_allocs.upper_bound(host);
  if (it == R().host_allocs.begin()) return Ret(cudaErrorInvalidValue);
  --it;
  if (!InRange(R().host_allocs, host, 1)) return Ret(cudaErrorInvalidValue);
  *flags = R().host_alloc_flags[it->first];
  return cudaSuccess;
}

// ---- PCI bus ids. A remote GPU's PCI address is its server's, and two servers' GPUs may well
// have the same one (two emulated servers' GPU 0 are both 0000:00:00.0). Programs use the bus id
// as a device's identity (NCCL, and cudaDeviceGetByPCIBusId to find the device again), so it must
// be unique among the program's devices. gpool's choice: bus and device numbers are the GPU's own
// on its server (what nvidia-smi there shows), and the PCI DOMAIN is the server's ordinal in
// GPOOL_DEVICES (its first appearance: the first server's GPUs are in domain 0000, the second's
// in 0001, ...); the server's own domain is not shown. Should two devices of the program still
// share an address (one GPU listed twice in GPOOL_DEVICES, or a server whose GPUs differ only in
// their domain), the later one gets domain (number of servers + its device ordinal), which no
// server uses. cudaGetDeviceProperties (pciDomainID) and cudaDeviceGetAttribute
// (cudaDevAttrPciDomainId) say the same. The function number is always 0.
cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (!pciBusId || len <= 0) return Ret(cudaErrorInvalidValue);
  PciAddr a;
  if (cudaError_t e = PciOf(device, &a); e != cudaSuccess) return Ret(e);
  std::snprintf(pciBusId, static_cast<size_t>(len), "%04x:%02x:%02x.0", a.domain, a.bus, a.device);
  return cudaSuccess;
}
// Accepts CUDA's forms: domain:bus:device.function, domain:bus:device and bus:device.function
// (hexadecimal). An id no device of the program has is cudaErrorInvalidDevice.
cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (!device || !pciBusId) return Ret(cudaErrorInvalidValue);
  unsigned v[4] = {0, 0, 0, 0};
  int used = 0;
  int colons = 0;
  for (const char* c = pciBusId; *c; ++c) colons += *c == ':';
  PciAddr want;
  unsigned function = 0;
  if (colons == 2 && std::sscanf(pciBusId, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &used) == 4 &&
      pciBusId[used] == '\0') {
    want = {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])};
    function = v[3];
  } else if (colons == 2 && std::sscanf(pciBusId, "%x:%x:%x%n", &v[0], &v[1], &v[2], &used) == 3 &&
             pciBusId[used] == '\0') {
    want = {static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2])};
  } else if (colons == 1 && std::sscanf(pciBusId, "%x:%x.%x%n", &v[0], &v[1], &v[2], &used) == 3 &&
             pciBusId[used] == '\0') {
    want = {0, static_cast<int>(v[0]), static_cast<int>(v[1])};
    function = v[2];
  } else {
    return Ret(cudaErrorInvalidValue);
  }
  if (function != 0) return Ret(cudaErrorInvalidDevice);
  for (int d = 0; d < static_cast<int>(R().devices.size()); ++d) {
    PciAddr a;
    if (cudaError_t e = PciOf(d, &a); e != cudaSuccess) return Ret(e);
    if (a == want) {
      *device = d;
      return cudaSuccess;
    }
  }
  return Ret(cudaErrorInvalidDevice);
}

// cudaChooseDevice: the first device that meets every requirement `prop` states (a compute
// capability of at least major.minor when major is set, and at least totalGlobalMem and
// multiProcessorCount when set); with none, the device of the highest compute capability (the
// first of equals). CUDA leaves the match rule unspecified; this is a documented one.
cudaError_t cudaChooseDevice(int* device, const struct cudaDeviceProp* prop) {
  if (!device || !prop) return Ret(cudaErrorInvalidValue);
  int n = static_cast<int>(R().devices.size());
  if (n == 0) {
    Say(R().env_error);
    return Ret(cudaErrorNoDevice);
  }
  int best = -1, best_cc = -1;
  for (int d = 0; d < n; ++d) {
    cudaError_t err = cudaSuccess;
    const proto::DeviceProps* p = Props(d, &err);
    if (!p) return Ret(err);
    int cc = p->major * 100 + p->minor;
    bool meets = (prop->major <= 0 || cc >= prop->major * 100 + prop->minor) &&
                 (prop->totalGlobalMem == 0 || p->total_global_mem >= prop->totalGlobalMem) &&
                 (prop->multiProcessorCount <= 0 || p->multi_processor_count >= prop->multiProcessorCount);
    if (meets) {
      *device = d;
      return cudaSuccess;
    }
    if (cc > best_cc) best = d, best_cc = cc;
  }
  *device = best;
  return cudaSuccess;
}

// ---- stream-ordered allocation without pools. cudaMallocAsync allocates at once on the stream's
// device (a synchronous Malloc): memory available now is available "when the stream reaches this
// point", so this is a valid implementation, only never overlapped with the stream's work.
// cudaFreeAsync must not free the memory before the stream's earlier work, which may use it, is
// done: it synchronizes the stream (waiting for its host functions too), then frees. So it blocks
// the calling thread, where CUDA's returns at once, and the memory goes back to the server
// immediately, not to a pool. The cuda backend would need cuMemFreeAsync (and cuMemAllocAsync)
// in its driver table and a posted op to do better; not done. Memory pools (cudaMallocFromPoolAsync,
// cudaMemPool*, cudaDeviceGetDefaultMemPool) stay loud stubs. Memory from either call may be
// freed by the other (cudaFree of cudaMallocAsync'ed memory works, as in CUDA).
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (!devPtr) return Ret(cudaErrorInvalidValue);
  int dev;
  uint64_t sid;
  if (cudaError_t e = ResolveStream(stream, &dev, &sid, /*gate=*/false); e != cudaSuccess) {
    return Ret(e);
  }
  return MallocOn(dev, devPtr, size);
}
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  return cudaMallocAsync(devPtr, size, stream);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    if (!R().allocs.count(reinterpret_cast<uint64_t>(p))) return Ret(cudaErrorInvalidValue);
  }
  if (cudaError_t e = StreamCall(stream, /*query=*/false); e != cudaSuccess) return e;
  return cudaFree(p);
}
cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t stream) { return cudaFreeAsync(p, stream); }

// ---- host functions (see HostCalls for what is guaranteed)
static cudaError_t EnqueueHostCall(cudaStream_t stream, cudaHostFn_t fn, cudaStreamCallback_t cb,
                                   void* data) {
  int dev;
  uint64_t sid;
  // Not gated: host functions already queued on the stream run first anyway (one FIFO thread).
  if (cudaError_t e = ResolveStream(stream, &dev, &sid, /*gate=*/false); e != cudaSuccess) {
    return e;
  }
  cudaError_t err;
  ServerLink* l = R().Link(dev, &err);
  if (!l) return err;
  uint64_t event;
  {
    std::lock_guard<std::mutex> lk(R().mu);
    event = R().next_id++;
  }
  proto::EventCreate c{.device = R().Index(dev), .event = event, .flags = cudaEventDisableTiming};
  proto::EventRecord r{.event = event, .stream = sid, .device = R().Index(dev)};
  {
    std::lock_guard<std::mutex> lk(l->mu());
    gpool::Status s = l->Post(c);
    if (s.ok()) s = l->Post(r);
    if (!s.ok()) return FromStatus(s);
  }
  HostCalls::Get().Enqueue({.device = dev, .stream = sid, .link = l, .event = event, .fn = fn,
                            .cb = cb, .handle = stream, .data = data});
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!fn) return Ret(cudaErrorInvalidValue);
  return Ret(EnqueueHostCall(stream, fn, nullptr, userData));
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return cudaLaunchHostFunc(stream, fn, userData);
}
// The callback gets the stream's status: cudaSuccess, or the asynchronous error of its earlier
// work (which the program's next synchronizing call on that server reports as well).
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t cb, void* userData,
                                  unsigned int flags) {
  if (!cb || flags != 0) return Ret(cudaErrorInvalidValue);
  return Ret(EnqueueHostCall(stream, nullptr, cb, userData));
}
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t cb,
                                       void* userData, unsigned int flags) {
  return cudaStreamAddCallback(stream, cb, userData, flags);
}

// ---- cooperative and extensible launches
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                        size_t sharedMem, cudaStream_t stream) {
  return Ret(Launch(func, gridDim, blockDim, args, sharedMem, stream, /*cooperative=*/true));
}
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim,
                                             void** args, size_t sharedMem, cudaStream_t stream) {
  return cudaLaunchCooperativeKernel(func, gridDim, blockDim, args, sharedMem, stream);
}
static const char* LaunchAttributeName(int id) {
  static const char* const kNames[] = {
      "cudaLaunchAttributeIgnore", "cudaLaunchAttributeAccessPolicyWindow",
      "cudaLaunchAttributeCooperative", "cudaLaunchAttributeSynchronizationPolicy",
      "cudaLaunchAttributeClusterDimension", "cudaLaunchAttributeClusterSchedulingPolicyPreference",
      "cudaLaunchAttributeProgrammaticStreamSerialization", "cudaLaunchAttributeProgrammaticEvent",
      "cudaLaunchAttributePriority", "cudaLaunchAttributeMemSyncDomainMap",
      "cudaLaunchAttributeMemSyncDomain", "cudaLaunchAttributePreferredClusterDimension",
      "cudaLaunchAttributeLaunchCompletionEvent", "cudaLaunchAttributeDeviceUpdatableKernelNode",
      "cudaLaunchAttributePreferredSharedMemoryCarveout", "cudaLaunchAttribute15",
      "cudaLaunchAttributeNvlinkUtilCentricScheduling"};
  return id >= 0 && id < static_cast<int>(std::size(kNames)) ? kNames[id] : "an unknown attribute";
}
// cudaLaunchKernelExC honours what gpool can: no attributes, cudaLaunchAttributeIgnore entries,
// cudaLaunchAttributeCooperative (0 or 1) and a cluster dimension of 1x1x1 (no clusters, which is
// what a launch without the attribute is). Any other attribute fails loudly, naming it, rather
// than being dropped: a kernel may depend on it (clusters, programmatic launches).
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (!config) return Ret(cudaErrorInvalidValue);
  if (config->numAttrs > 0 && !config->attrs) return Ret(cudaErrorInvalidValue);
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const cudaLaunchAttribute& a = config->attrs[i];
    switch (a.id) {
      case cudaLaunchAttributeIgnore:
        continue;
      case cudaLaunchAttributeCooperative:
        cooperative = a.val.cooperative != 0;
        continue;
      case cudaLaunchAttributeClusterDimension:
        if (a.val.clusterDim.x == 1 && a.val.clusterDim.y == 1 && a.val.clusterDim.z == 1) continue;
        break;
      default:
        break;
    }
    static std::mutex mu;
    static auto& names = *new std::map<int, std::string>();  // never destroyed: see Deferred()
    const char* name;
    {
      std::lock_guard<std::mutex> lk(mu);
      auto [it, added] = names.try_emplace(
          static_cast<int>(a.id), fmt::format("cudaLaunchKernelExC with {} ({})",
                                              LaunchAttributeName(static_cast<int>(a.id)),
                                              static_cast<int>(a.id)));
      name = it->second.c_str();
    }
    return static_cast<cudaError_t>(Unsupported(
        name, a.id == cudaLaunchAttributeClusterDimension
                  ? "thread block clusters other than 1x1x1 are not remoted"
                  : "gpool honours only cudaLaunchAttributeCooperative and a 1x1x1 cluster"));
  }
  return Ret(Launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                    config->stream, cooperative));
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  return cudaLaunchKernelExC(config, func, args);
}

// cudaOccupancyAvailableDynamicSMemPerBlock: the dynamic shared memory each of `numBlocks` blocks
// of `blockSize` threads may use while all of them reside on one multiprocessor of the current
// device: the multiprocessor's shared memory split numBlocks ways, less the per-block reserve (1 KiB
// from compute capability 8.0 on) and the kernel's static shared memory, capped by the kernel's
// cudaFuncAttributeMaxDynamicSharedMemorySize; 0 when the blocks cannot reside together by
// threads or block count. From the cached device properties and the kernel's attributes (one
// round trip). Registers and the hardware's allocation granularity are not modelled, so the
// answer may exceed a real GPU's by up to one granule; it never exceeds what the kernel may use.
cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func,
                                                      int numBlocks, int blockSize) {
  if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) return Ret(cudaErrorInvalidValue);
  cudaFuncAttributes fa;
  if (cudaError_t e = cudaFuncGetAttributes(&fa, func); e != cudaSuccess) return e;
  cudaError_t err = cudaSuccess;
  const proto::DeviceProps* p = Props(t_device, &err);
  if (!p) return Ret(err);
  *dynamicSmemSize = 0;
  uint64_t warp = std::max(p->warp_size, 1);
  uint64_t threads = (static_cast<uint64_t>(blockSize) + warp - 1) / warp * warp;
  if (blockSize > fa.maxThreadsPerBlock ||
      threads * static_cast<uint64_t>(numBlocks) > static_cast<uint64_t>(p->max_threads_per_mp) ||
      numBlocks > p->max_blocks_per_mp) {
    return cudaSuccess;
  }
  uint64_t reserve = p->major >= 8 ? 1024 : 0;
  uint64_t per_block = p->shared_mem_per_mp / static_cast<uint64_t>(numBlocks);
  uint64_t used = reserve + fa.sharedSizeBytes;
  if (per_block <= used) return cudaSuccess;
  *dynamicSmemSize = std::min<uint64_t>(per_block - used,
                                        static_cast<uint64_t>(std::max(fa.maxDynamicSharedSizeBytes, 0)));
  return cudaSuccess;
}

cudaError_t cudaMallocManaged(void**, size_t, unsigned int) {
  return static_cast<cudaError_t>(Unsupported("cudaMallocManaged"));
}

}  // extern "C"
#pragma GCC visibility pop
