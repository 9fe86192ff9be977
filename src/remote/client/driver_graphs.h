// Stream capture and CUDA graphs in the driver stand-in (driver_capture.cc, driver_graphs.cc;
// the rules in graph_model.h). Client-side: capture records a stream's work as graph nodes
// instead of sending it; a launch replays an instantiated graph's nodes on the launch stream as
// the calls they were (docs/remoting/driver-api.md, "Stream capture and graphs"). Include after <cuda.h>.
#pragma once

#include <atomic>
#include <mutex>
#include <set>

#include "remote/client/driver_state.h"
#include "remote/client/graph_model.h"

namespace gpool::remote::client::driver {

namespace graph = ::gpool::remote::client::graph;

// The process's graphs, executable graphs and captures. A leaf lock: nothing that takes D().mu
// or a link's mutex is called while `mu` is held.
struct GraphState {
  std::mutex mu;
  graph::CaptureTable captures;
  std::set<graph::Graph*> graphs;  // live CUgraph handles (owned)
  std::set<graph::Exec*> execs;    // live CUgraphExec handles (owned)
  std::atomic<bool> capturing{false};  // captures.any(), readable without mu
};
GraphState& Graphs();

// The calling thread's token (for capture ownership) and exchange mode.
uint64_t ThreadToken();
graph::Mode ThreadMode();

// A model error as the driver's CUresult, said naming `call`.
CUresult FromGraphResult(const char* call, const graph::Result& r);

// Whether `s` (a program's stream handle) is capturing. Cheap while nothing captures.
bool Capturing(CUstream s);
// Appends `op` to capturing stream `s`'s capture (instead of running it).
CUresult CaptureOp(const char* call, CUstream s, graph::Op op);
// An operation that cannot be captured, issued on capturing stream `s`: the capture is
// invalidated and the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, said.
CUresult CaptureRefuse(const char* call, CUstream s, const char* what);
// A potentially unsafe call (synchronous copy or memset, device sync, allocation, free): fails
// with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that forbid it, per
// the thread's capture mode (cuThreadExchangeStreamCaptureMode); success otherwise.
CUresult CaptureUnsafe(const char* call);
// Event hooks for cuEventRecord / cuStreamWaitEvent / destruction: *handled says the capture
// took the call (nothing is sent).
CUresult CaptureEventRecord(const char* call, CUevent e, CUstream s, bool external, bool* handled);
CUresult CaptureStreamWait(const char* call, CUstream s, CUevent e, bool external, bool* handled);
void CaptureForgetEvent(CUevent e);
// cuEventSynchronize/cuEventQuery of an event recorded in a capture going on: the capture is
// invalidated and the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, said.
CUresult CaptureHostEventUse(const char* call, CUevent e);
void CaptureForgetStream(CUstream s);

// Packs a launch's parameters as a launch would (kernelParams at the kernel's layout, or
// `extra`'s buffer), checking that `f` is a live function (driver_modules.cc).
CUresult PackKernelParams(const char* call, CUfunction f, void** params, void** extra,
                          std::vector<std::byte>* out);

}  // namespace gpool::remote::client::driver
