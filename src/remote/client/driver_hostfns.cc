// The driver stand-in's host functions on streams (cuLaunchHostFunc, cuStreamAddCallback; NVIDIA's
// runtime maps cudaLaunchHostFunc and cudaStreamAddCallback to them; docs/remoting/driver-api.md "Runtime
// calls through NVIDIA's runtime"):
//
// CUDA's rule: a host function runs once the stream's earlier work is done, and the stream's
// later work waits for it. Here: the call posts an internal event, recorded on the stream after
// the earlier work, and queues the function for one helper thread of the process, which polls
// the event (EventQuery round trips, 50 us growing to 1 ms apart, so it never holds a link for
// long) and then runs the function in this process. The later work is held in the CLIENT: a call
// that puts work on the stream (ResolveStream with `gate`) blocks the calling thread until every
// host function queued on that stream has returned; nothing of it reaches the server before.
// That is stronger than CUDA in one way, and the limit to know: the submitting thread blocks,
// where CUDA's would return at once and only the GPU would wait; a host function that waits for
// the submitting thread's later progress deadlocks (CUDA forbids a host function to make CUDA
// calls; one that does is not gated, so it cannot block itself). Default streams: work on a
// device's default stream waits for host functions queued on any stream of the device, and work
// on any stream of the device for those queued on its default stream (more ordering than CUDA's,
// never less). Host functions run one at a time in the order they were queued (CUDA too runs
// them on one thread per context). cuStreamQuery says CUDA_ERROR_NOT_READY while a host function
// of the stream is queued, and cuCtxSynchronize waits for those of the device. An asynchronous
// error the helper's query brings back is kept for the program (DeferAsyncError: its next reply
// from that server reports it) and given to cuStreamAddCallback's callback as its status.
// Thread safety: all methods are thread-safe (one mutex); the thread is never joined (the process
// may exit with host functions still queued, as with CUDA when it does not synchronize).
#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>

#include "remote/client/driver_graphs.h"

namespace gpool::remote::client::driver {
namespace {

thread_local bool t_host_fn_thread = false;

// Asynchronous errors the helper thread's replies brought, kept per link for the program's next
// reply from that server. A leaf lock: taken with a link's mutex held.
struct DeferredErrors {
  std::mutex mu;
  std::map<const ServerLink*, std::pair<int32_t, std::string>> by_link;
  std::atomic<bool> any{false};  // by_link may be non-empty (spares replies the lock)
};
// Never destroyed (as Driver): the helper thread may still make calls while exit() runs.
DeferredErrors& Deferred() {
  static DeferredErrors* d = new DeferredErrors();
  return *d;
}

class HostCalls {
 public:
  struct Job {
    int device = 0;
    uint64_t stream = 0;  // id on the server; 0: the device's default stream
    ServerLink* link = nullptr;
    uint64_t event = 0;  // the internal event recorded after the stream's earlier work
    CUhostFn fn = nullptr;             // cuLaunchHostFunc
    CUstreamCallback cb = nullptr;     // cuStreamAddCallback
    CUstream handle = nullptr;         // the program's stream, for cb
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
  void WaitStream(int dev, uint64_t stream) {
    if (total_.load() == 0 || t_host_fn_thread) return;
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return !BlocksLocked(dev, stream); });
  }
  void WaitDevice(int dev) { WaitStream(dev, 0); }
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
  static CUresult WaitEvent(const Job& j) {
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
      if (!s.ok()) return CUDA_ERROR_DEVICE_UNAVAILABLE;
      if (h.async_error != 0) {
        DeferAsyncError(j.link, h.async_error, h.async_message);
        return ToCU(h.async_error);
      }
      if (h.error != CUDA_ERROR_NOT_READY) return ToCU(h.error);
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
      CUresult status = WaitEvent(j);
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

CUresult EnqueueHostCall(const char* call, CUstream stream, CUhostFn fn, CUstreamCallback cb,
                         void* data) {
  int dev;
  uint64_t sid;
  // Not gated: host functions already queued on the stream run first anyway (one FIFO thread).
  if (CUresult r = ResolveStream(stream, call, &dev, &sid, /*gate=*/false)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  uint64_t event;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    event = D().next_id++;
  }
  proto::EventCreate c{.device = D().Index(dev), .event = event,
                       .flags = CU_EVENT_DISABLE_TIMING};
  proto::EventRecord r{.event = event, .stream = sid, .device = D().Index(dev)};
  {
    std::lock_guard<std::mutex> lk(l->mu());
    Status s = l->Post(c);
    if (s.ok()) s = l->Post(r);
    if (!s.ok()) return FromStatus(s, call);
  }
  HostCalls::Get().Enqueue({.device = dev, .stream = sid, .link = l, .event = event, .fn = fn,
                            .cb = cb, .handle = stream, .data = data});
  return CUDA_SUCCESS;
}

}  // namespace

void HostFnGate(int dev, uint64_t stream) { HostCalls::Get().WaitStream(dev, stream); }
bool HostFnPending(int dev, uint64_t stream) { return HostCalls::Get().Pending(dev, stream); }

void DeferAsyncError(const ServerLink* l, int32_t code, const std::string& message) {
  DeferredErrors& d = Deferred();
  std::lock_guard<std::mutex> lk(d.mu);
  d.by_link.try_emplace(l, code, message);
  d.any.store(true);
}
bool TakeDeferredError(const ServerLink* l, int32_t* code, std::string* message) {
  DeferredErrors& d = Deferred();
  if (!d.any.load()) return false;
  std::lock_guard<std::mutex> lk(d.mu);
  auto it = d.by_link.find(l);
  if (it == d.by_link.end()) return false;
  *code = it->second.first;
  *message = std::move(it->second.second);
  d.by_link.erase(it);
  d.any.store(!d.by_link.empty());
  return true;
}

}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

#pragma GCC visibility push(default)
extern "C" {

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  if (!fn) return Fail("cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE, "null function");
  if (Capturing(s)) {  // a host node, run by each launch of the graph
    graph::Op op;
    op.kind = graph::Kind::kHost;
    op.fn = fn;
    op.data = data;
    return CaptureOp("cuLaunchHostFunc", s, std::move(op));
  }
  return EnqueueHostCall("cuLaunchHostFunc", s, fn, nullptr, data);
}
// The callback gets the stream's status: CUDA_SUCCESS, or the asynchronous error of its earlier
// work (which the program's next synchronizing call on that server reports as well).
CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void* data, unsigned int flags) {
  if (!cb) return Fail("cuStreamAddCallback", CUDA_ERROR_INVALID_VALUE, "null callback");
  if (flags != 0) {
    return Fail("cuStreamAddCallback", CUDA_ERROR_INVALID_VALUE,
                fmt::format("flags {:#x} (must be 0)", flags));
  }
  if (Capturing(s)) return CaptureRefuse("cuStreamAddCallback", s, "a stream callback");
  return EnqueueHostCall("cuStreamAddCallback", s, nullptr, cb, data);
}

CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data);
CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return cuLaunchHostFunc(s, fn, data);
}
CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data, unsigned int flags);
CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void* data,
                                  unsigned int flags) {
  return cuStreamAddCallback(s, cb, data, flags);
}

}  // extern "C"
#pragma GCC visibility pop
