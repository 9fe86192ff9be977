// The emulated CUDA driver's streams and events: creation, synchronization and queries against
// the one work queue (emulated_driver.cc), event records and their timestamps. See
// emulated_driver.cc for what the library is.
#include "emulated_driver.h"

using namespace gpool::remote::emulated_driver;  // NOLINT: the entry points below are C

// cuda.h's #defines give the entry points their exported (versioned) names: cuMemAlloc here is
// cuMemAlloc_v2.
extern "C" {

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamCreateWithPriority"); r) return r;
  if (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuStreamCreateWithPriority", "flags 0x{:x}", flags);
  }
  (void)priority;  // nothing is ever queued, so there is nothing to order
  auto s = std::make_unique<Stream>();
  s->ctx = Current();
  *ph = reinterpret_cast<CUstream>(Adopt(S().streams, std::move(s)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream h) {
  Lock lock(S().mu);
  if (S().streams.erase(reinterpret_cast<Stream*>(h))) return CUDA_SUCCESS;
  return Fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy", "unknown stream");
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamSynchronize"); r) return r;
  if (CUresult r = CheckStream("cuStreamSynchronize", h); r) return r;
  return Synced();
}

// Not ready while anything is queued (on any stream: the queue is one), after which it runs.
CUresult CUDAAPI cuStreamQuery(CUstream h) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamQuery"); r) return r;
  if (CUresult r = CheckStream("cuStreamQuery", h); r) return r;
  if (S().queue.empty()) return CUDA_SUCCESS;
  Drain();
  return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  Lock lock(S().mu);
  const char* call = "cuStreamWaitEvent";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, h); r) return r;
  if (!LiveEvent(e)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  if (flags != 0) return NotImplemented(call, fmt::format("flags {}", flags));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* ph, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventCreate"); r) return r;
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~known) return Fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "flags 0x{:x}", flags);
  auto e = std::make_unique<Event>();
  e->flags = flags;
  *ph = reinterpret_cast<CUevent>(Adopt(S().events, std::move(e)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) {
  Lock lock(S().mu);
  const char* call = "cuEventRecord";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, h); r) return r;
  Event* ev = LiveEvent(e);
  if (!ev) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  ev->recorded = true;
  ++ev->pending;
  Submit([ev] {  // the work queued before it has run
    ev->at = std::chrono::steady_clock::now();
    --ev->pending;
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventSynchronize"); r) return r;
  if (!LiveEvent(e)) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize", "unknown event");
  return Synced();
}

// Not ready while its record is queued, after which the queue runs.
CUresult CUDAAPI cuEventQuery(CUevent e) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventQuery"); r) return r;
  Event* ev = LiveEvent(e);
  if (!ev) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery", "unknown event");
  if (ev->pending == 0) return CUDA_SUCCESS;
  Drain();
  return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  Lock lock(S().mu);
  const char* call = "cuEventElapsedTime";
  if (CUresult r = Ready(call); r) return r;
  Event *a = LiveEvent(start), *b = LiveEvent(end);
  if (!a || !b) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) {
    return Fail(CUDA_ERROR_INVALID_HANDLE, call, "an event was created with CU_EVENT_DISABLE_TIMING");
  }
  if (!a->recorded || !b->recorded) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "an event was never recorded");
  if (a->pending || b->pending) return CUDA_ERROR_NOT_READY;  // the caller did not wait for them
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent e) {
  Lock lock(S().mu);
  if (LiveEvent(e) && LiveEvent(e)->pending) Drain();  // its queued record refers to it
  if (S().events.erase(reinterpret_cast<Event*>(e))) return CUDA_SUCCESS;
  return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy", "unknown event");
}

}  // extern "C"
