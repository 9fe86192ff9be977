// Stream capture in the driver stand-in (driver_graphs.h; the rules in graph_model.h): while a
// stream captures, the calls that put work on it (launches, 1-D copies and memsets, host
// functions, event records and waits) add graph nodes here instead of reaching a server. The
// hooks sit at the top of those calls (driver_modules.cc, driver_copies.cc, driver_streams.cc,
// driver_hostfns.cc) and cost one atomic load while nothing captures.
//
// Limits: a default stream (legacy or per-thread) cannot capture (CUDA refuses the legacy one;
// the per-thread one is refused here too); 2-D copies and memsets, stream-ordered allocation
// and cuStreamAddCallback on a capturing stream invalidate the capture
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); work on the legacy default stream while a blocking
// stream captures is not detected as CUDA's implicit synchronization.
#include <cuda.h>

#include <algorithm>
#include <memory>

#include "remote/client/driver_graphs.h"

namespace gpool::remote::client::driver {
namespace {

thread_local graph::Mode t_mode = graph::Mode::kGlobal;

bool DefaultStream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

}  // namespace

GraphState& Graphs() {
  static GraphState* g = new GraphState();  // never destroyed, as Driver
  return *g;
}

uint64_t ThreadToken() {
  static std::atomic<uint64_t> next{1};
  thread_local uint64_t token = next.fetch_add(1);
  return token;
}
graph::Mode ThreadMode() { return t_mode; }

CUresult FromGraphResult(const char* call, const graph::Result& r) {
  CUresult e = CUDA_SUCCESS;
  switch (r.err) {
    case graph::Err::kOk: return CUDA_SUCCESS;
    case graph::Err::kInvalidValue: e = CUDA_ERROR_INVALID_VALUE; break;
    case graph::Err::kIllegalState: e = CUDA_ERROR_ILLEGAL_STATE; break;
    case graph::Err::kNotCapturing: e = CUDA_ERROR_ILLEGAL_STATE; break;
    case graph::Err::kUnmatched: e = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; break;
    case graph::Err::kWrongThread: e = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD; break;
    case graph::Err::kInvalidated: e = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; break;
    case graph::Err::kUnjoined: e = CUDA_ERROR_STREAM_CAPTURE_UNJOINED; break;
    case graph::Err::kIsolation: e = CUDA_ERROR_STREAM_CAPTURE_ISOLATION; break;
    case graph::Err::kUnsupported: e = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; break;
    case graph::Err::kCycle: e = CUDA_ERROR_INVALID_VALUE; break;
  }
  return Fail(call, e, r.why);
}

bool Capturing(CUstream s) {
  GraphState& g = Graphs();
  if (!g.capturing.load(std::memory_order_acquire) || DefaultStream(s)) return false;
  std::lock_guard<std::mutex> lk(g.mu);
  return g.captures.Of(s) != nullptr;
}

CUresult CaptureOp(const char* call, CUstream s, graph::Op op) {
  GraphState& g = Graphs();
  graph::Result r;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    r = g.captures.Append(s, std::move(op));
  }
  return FromGraphResult(call, r);
}

CUresult CaptureRefuse(const char* call, CUstream s, const char* what) {
  GraphState& g = Graphs();
  {
    std::lock_guard<std::mutex> lk(g.mu);
    g.captures.Invalidate(s, fmt::format("{} ({}) was issued on a capturing stream", call, what));
  }
  return Fail(call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
              fmt::format("{} cannot be captured by gpool's stand-in; the stream's capture is "
                          "invalidated", what));
}

CUresult CaptureUnsafe(const char* call) {
  GraphState& g = Graphs();
  if (!g.capturing.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  graph::Result r;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    r = g.captures.Unsafe(ThreadToken(), t_mode, call);
  }
  return FromGraphResult(call, r);
}

CUresult CaptureEventRecord(const char* call, CUevent e, CUstream s, bool external,
                            bool* handled) {
  GraphState& g = Graphs();
  *handled = false;
  if (!g.capturing.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::unique_lock<std::mutex> lk(g.mu);
  if (DefaultStream(s) || !g.captures.Of(s)) {
    g.captures.ForgetEvent(e);  // a plain record: the event no longer stands for capture work
    return CUDA_SUCCESS;
  }
  *handled = true;
  if (external) {
    graph::Op op;
    op.kind = graph::Kind::kEventRecord;
    op.event = e;
    graph::Result r = g.captures.Append(s, std::move(op));
    lk.unlock();
    return FromGraphResult(call, r);
  }
  g.captures.RecordEvent(e, s);
  return CUDA_SUCCESS;
}

CUresult CaptureStreamWait(const char* call, CUstream s, CUevent e, bool external,
                           bool* handled) {
  GraphState& g = Graphs();
  *handled = false;
  if (!g.capturing.load(std::memory_order_acquire) || DefaultStream(s)) return CUDA_SUCCESS;
  graph::Result r;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (external && g.captures.Of(s)) {
      graph::Op op;
      op.kind = graph::Kind::kEventWait;
      op.event = e;
      r = g.captures.Append(s, std::move(op));
      *handled = true;
    } else {
      r = g.captures.WaitEvent(s, e, handled);
    }
  }
  return FromGraphResult(call, r);
}

CUresult CaptureHostEventUse(const char* call, CUevent e) {
  GraphState& g = Graphs();
  if (!g.capturing.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  bool captured;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    captured = g.captures.HostUsesCapturedEvent(e, call);
  }
  if (!captured) return CUDA_SUCCESS;
  return Fail(call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "the event was recorded in a stream "
              "capture going on (it stands for graph work, not yet run); the capture is "
              "invalidated");
}

void CaptureForgetEvent(CUevent e) {
  GraphState& g = Graphs();
  std::lock_guard<std::mutex> lk(g.mu);
  g.captures.ForgetEvent(e);
}

void CaptureForgetStream(CUstream s) {
  GraphState& g = Graphs();
  if (!g.capturing.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(g.mu);
  graph::Capture* c = g.captures.Of(s);
  graph::Graph* owned = c && c->owns_graph && c->origin == s ? c->graph : nullptr;
  g.captures.ForgetStream(s);
  if (owned) g.graphs.erase(owned);  // the origin's capture went with the stream, and its graph
  g.capturing.store(g.captures.any(), std::memory_order_release);
}

}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

namespace {

CUresult BeginStreamCapture(const char* call, CUstream s, CUstreamCaptureMode mode, graph::Graph* into,
                      const CUgraphNode* deps, size_t ndeps) {
  if (DefaultStream(s)) {
    return Fail(call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                "a default stream (legacy or per-thread) cannot capture; capture a created stream");
  }
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("capture mode {}", static_cast<int>(mode)));
  }
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id, /*gate=*/false)) return r;
  GraphState& g = Graphs();
  std::lock_guard<std::mutex> lk(g.mu);
  if (into && !g.graphs.count(into)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, "the graph is not a live graph");
  }
  graph::Result r = g.captures.Begin(s, static_cast<graph::Mode>(mode), ThreadToken(), into);
  // A new capture graph is a live graph from the start: the program may add nodes to it
  // (cuStreamGetCaptureInfo's graph, then cuStreamUpdateCaptureDependencies) or read it.
  if (r.ok() && !into) g.graphs.insert(g.captures.Of(s)->graph);
  if (r.ok() && ndeps > 0) {
    if (!deps) {
      r = {graph::Err::kInvalidValue, "null dependencies with a non-zero count"};
    } else {
      std::vector<graph::Node*> d;
      for (size_t i = 0; i < ndeps; ++i) d.push_back(reinterpret_cast<graph::Node*>(deps[i]));
      r = g.captures.SetDeps(s, d, /*add=*/false);
    }
    if (!r.ok()) {
      if (!into) g.graphs.erase(g.captures.Of(s)->graph);
      g.captures.ForgetStream(s);
    }
  }
  g.capturing.store(g.captures.any(), std::memory_order_release);
  return FromGraphResult(call, r);
}

// The stream's capture state for cuStreamIsCapturing / cuStreamGetCaptureInfo.
CUstreamCaptureStatus CaptureStatusOf(const graph::Capture* c) {
  if (!c) return CU_STREAM_CAPTURE_STATUS_NONE;
  return c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
  return BeginStreamCapture("cuStreamBeginCapture_v2", s, mode, nullptr, nullptr, 0);
}
// Captures into the program's graph after `deps` (edge data, all default, is ignored).
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode* deps,
                                     const CUgraphEdgeData*, size_t ndeps,
                                     CUstreamCaptureMode mode) {
  if (!g) return Fail("cuStreamBeginCaptureToGraph", CUDA_ERROR_INVALID_VALUE, "null graph");
  return BeginStreamCapture("cuStreamBeginCaptureToGraph", s, mode, reinterpret_cast<graph::Graph*>(g),
                      deps, ndeps);
}

CUresult cuStreamEndCapture(CUstream s, CUgraph* out) {
  const char* call = "cuStreamEndCapture";
  if (!out) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null graph pointer");
  *out = nullptr;
  if (DefaultStream(s)) {
    return Fail(call, CUDA_ERROR_ILLEGAL_STATE, "a default stream never captures");
  }
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id, /*gate=*/false)) return r;
  GraphState& g = Graphs();
  graph::Graph* made = nullptr;
  graph::Result r;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    graph::Capture* c = g.captures.Of(s);
    graph::Graph* owned = c && c->owns_graph ? c->graph : nullptr;
    r = g.captures.End(s, ThreadToken(), &made);
    // A failed end that ended the capture freed its graph: no longer a live handle.
    if (!r.ok() && owned && !g.captures.Of(s)) g.graphs.erase(owned);
    g.capturing.store(g.captures.any(), std::memory_order_release);
  }
  if (r.ok()) *out = reinterpret_cast<CUgraph>(made);
  return FromGraphResult(call, r);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  const char* call = "cuThreadExchangeStreamCaptureMode";
  if (!mode) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null mode");
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("capture mode {}", static_cast<int>(*mode)));
  }
  graph::Mode old = t_mode;
  t_mode = static_cast<graph::Mode>(*mode);
  *mode = static_cast<CUstreamCaptureMode>(old);
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  const char* call = "cuStreamIsCapturing";
  if (!status) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null status");
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id, /*gate=*/false)) return r;
  GraphState& g = Graphs();
  std::lock_guard<std::mutex> lk(g.mu);
  *status = DefaultStream(s) ? CU_STREAM_CAPTURE_STATUS_NONE : CaptureStatusOf(g.captures.Of(s));
  return CUDA_SUCCESS;
}

// The capture's id, graph and the stream's current dependencies (valid until the stream's next
// capture call, as CUDA's). Edge data: all default (gpool makes no programmatic edges).
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id_out,
                                CUgraph* graph_out, const CUgraphNode** deps,
                                const CUgraphEdgeData** edges, size_t* ndeps) {
  const char* call = "cuStreamGetCaptureInfo_v3";
  if (!status) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null status");
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id, /*gate=*/false)) return r;
  // Default (all-zero) edge data for the dependencies: one zeroed block, grown when a stream has
  // more dependencies than it holds; the old blocks are kept (pointers given out stay valid, and
  // nothing here is destroyed at exit, when libraries still make calls).
  static std::vector<std::unique_ptr<CUgraphEdgeData[]>>* zero_blocks =
      new std::vector<std::unique_ptr<CUgraphEdgeData[]>>();
  static size_t zero_size = 0;
  GraphState& g = Graphs();
  std::lock_guard<std::mutex> lk(g.mu);
  const graph::Capture* c = DefaultStream(s) ? nullptr : g.captures.Of(s);
  *status = CaptureStatusOf(c);
  const std::vector<graph::Node*>* d = c ? g.captures.Deps(s) : nullptr;
  if (id_out) *id_out = c ? c->id : 0;
  if (graph_out) *graph_out = c ? reinterpret_cast<CUgraph>(c->graph) : nullptr;
  if (deps) {
    *deps = d && !d->empty() ? reinterpret_cast<const CUgraphNode*>(d->data()) : nullptr;
  }
  if (edges) {
    const size_t need = d ? d->size() : 0;
    if (need > zero_size) {
      zero_size = std::max<size_t>(need, 64);
      zero_blocks->push_back(std::make_unique<CUgraphEdgeData[]>(zero_size));  // zeroed
    }
    *edges = need == 0 ? nullptr : zero_blocks->back().get();
  }
  if (ndeps) *ndeps = d ? d->size() : 0;
  return CUDA_SUCCESS;
}
// The CUDA 11.3-12.2 form: the same without edge data.
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id_out,
                                   CUgraph* graph, const CUgraphNode** deps, size_t* ndeps);
CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id_out,
                                   CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  return cuStreamGetCaptureInfo(s, status, id_out, graph, deps, nullptr, ndeps);
}

// CU_STREAM_ADD_CAPTURE_DEPENDENCIES or CU_STREAM_SET_CAPTURE_DEPENDENCIES.
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps,
                                           const CUgraphEdgeData*, size_t n, unsigned int flags) {
  const char* call = "cuStreamUpdateCaptureDependencies_v2";
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags {:#x}", flags));
  }
  if (n > 0 && !deps) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null dependencies");
  std::vector<graph::Node*> d;
  for (size_t i = 0; i < n; ++i) d.push_back(reinterpret_cast<graph::Node*>(deps[i]));
  GraphState& g = Graphs();
  graph::Result r;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    r = DefaultStream(s) ? graph::Result{graph::Err::kIllegalState, "a default stream never "
                                         "captures"}
                         : g.captures.SetDeps(s, d, flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES);
  }
  return FromGraphResult(call, r);
}

// Per-thread default stream variants (a default stream never captures here).
#define GPOOL_SAME(ret, name, target, params, args) \
  ret name params;                                  \
  ret name params { return target args; }
GPOOL_SAME(CUresult, cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture,
           (CUstream s, CUstreamCaptureMode m), (s, m))
GPOOL_SAME(CUresult, cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph,
           (CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, size_t n,
            CUstreamCaptureMode m), (s, g, d, e, n, m))
GPOOL_SAME(CUresult, cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, CUgraph* g), (s, g))
GPOOL_SAME(CUresult, cuStreamIsCapturing_ptsz, cuStreamIsCapturing,
           (CUstream s, CUstreamCaptureStatus* st), (s, st))
GPOOL_SAME(CUresult, cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo,
           (CUstream s, CUstreamCaptureStatus* st, cuuint64_t* i, CUgraph* g, const CUgraphNode** d,
            const CUgraphEdgeData** e, size_t* n), (s, st, i, g, d, e, n))
GPOOL_SAME(CUresult, cuStreamGetCaptureInfo_v2_ptsz, cuStreamGetCaptureInfo_v2,
           (CUstream s, CUstreamCaptureStatus* st, cuuint64_t* i, CUgraph* g, const CUgraphNode** d,
            size_t* n), (s, st, i, g, d, n))
GPOOL_SAME(CUresult, cuStreamUpdateCaptureDependencies_v2_ptsz, cuStreamUpdateCaptureDependencies,
           (CUstream s, CUgraphNode* d, const CUgraphEdgeData* e, size_t n, unsigned int f),
           (s, d, e, n, f))
#undef GPOOL_SAME

}  // extern "C"
#pragma GCC visibility pop
