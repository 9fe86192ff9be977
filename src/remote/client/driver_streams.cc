// The driver stand-in's streams and events (see driver_api.cc and driver_state.h). Stream and
// event ids are chosen by the client, so creating one is posted; a sync or query is one round
// trip (a stream sync right after the stream's reads is answered by their replies:
// ServerLink::SyncStream).
#include <cuda.h>

#include <algorithm>

#include "remote/client/driver_graphs.h"

namespace gpool::remote::client::driver {
namespace {

// A stream sync waits for the stream's host functions first (gated); a query does not wait and
// says not ready while one of them is queued (driver_hostfns.cc).
CUresult StreamCall(const char* call, CUstream s, bool query) {
  if (Capturing(s)) return CaptureRefuse(call, s, query ? "a query of a capturing stream"
                                                        : "a sync of a capturing stream");
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id, /*gate=*/!query)) return r;
  if (query && HostFnPending(dev, id)) return CUDA_ERROR_NOT_READY;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l->mu());
  Status st = query ? l->QueryStream(D().Index(dev), id, &h) : l->SyncStream(D().Index(dev), id, &h);
  if (!st.ok()) return FromStatus(st, call);
  return FromReply(h, l, call);
}

CUresult FindEvent(const char* call, CUevent e, const Event** out) {
  if (CUresult r = Ready(call)) return r;
  auto* rec = reinterpret_cast<const Event*>(e);
  std::lock_guard<std::mutex> lk(D().mu);
  if (!D().events.count(rec)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("event {} is not a live event",
                static_cast<const void*>(e)));
  }
  *out = rec;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
namespace proto = gpool::remote::proto;
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

// ---- streams and events

CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  const char* call = "cuStreamCreateWithPriority";
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags 0x{:x}", flags));
  }
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  priority = std::clamp(priority, -5, 0);
  auto* rec = new Stream{dev, 0, flags, priority};
  {
    std::lock_guard<std::mutex> lk(D().mu);
    rec->id = D().next_id++;
    D().streams.insert(rec);
  }
  proto::StreamCreate m{.device = D().Index(dev), .stream = rec->id, .flags = flags,
                        .priority = priority};
  *ph = reinterpret_cast<CUstream>(rec);
  return Post(l, m, call);
}
CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return cuStreamCreateWithPriority(ph, flags, 0);
}
CUresult cuStreamDestroy(CUstream s) {
  const char* call = "cuStreamDestroy_v2";
  if (CUresult r = Ready(call)) return r;
  auto* rec = reinterpret_cast<const Stream*>(s);
  CaptureForgetStream(s);
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!D().streams.erase(rec)) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("stream {} is not a live stream",
                  static_cast<const void*>(s)));
    }
  }
  CUresult err;
  ServerLink* l = D().Link(rec->device, &err, call);
  proto::StreamDestroy m;
  m.stream = rec->id;
  m.device = D().Index(rec->device);
  delete rec;
  return l ? Post(l, m, call) : err;
}
CUresult cuStreamSynchronize(CUstream s) { return StreamCall("cuStreamSynchronize", s, false); }
CUresult cuStreamQuery(CUstream s) { return StreamCall("cuStreamQuery", s, true); }
CUresult cuStreamGetFlags(CUstream s, unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, "cuStreamGetFlags", &dev, &id, /*gate=*/false)) return r;
  *flags = id == 0 ? 0 : reinterpret_cast<const Stream*>(s)->flags;
  return CUDA_SUCCESS;
}
// The stream's device (a default stream: the current context's).
CUresult cuStreamGetDevice(CUstream s, CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, "cuStreamGetDevice", &dev, &id, /*gate=*/false)) return r;
  *device = dev;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetPriority(CUstream s, int* priority) {
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, "cuStreamGetPriority", &dev, &id, /*gate=*/false)) return r;
  *priority = id == 0 ? 0 : reinterpret_cast<const Stream*>(s)->priority;
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  const char* call = "cuStreamWaitEvent";
  const Event* ev;
  if (CUresult r = FindEvent(call, e, &ev)) return r;
  // In a capture: a join (or, CU_EVENT_WAIT_EXTERNAL, an event-wait node), nothing sent.
  bool captured;
  if (CUresult r = CaptureStreamWait(call, s, e, (flags & CU_EVENT_WAIT_EXTERNAL) != 0,
                                     &captured); r || captured) {
    return r;
  }
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  if (l != D().Link(ev->device, &err, call)) {
    // Across servers the client waits for the event itself, then lets the stream go on.
    return cuEventSynchronize(e);
  }
  proto::StreamWaitEvent m{.stream = id, .device = D().Index(dev), .event = ev->id};
  return Post(l, m, call);
}

CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  const char* call = "cuEventCreate";
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  int dev;
  if (CUresult r = CurrentDevice(call, &dev)) return r;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  auto* rec = new Event{dev, 0, flags};
  {
    std::lock_guard<std::mutex> lk(D().mu);
    rec->id = D().next_id++;
    D().events.insert(rec);
  }
  // CU_EVENT_* flags have cudaEvent*'s values, which the protocol carries.
  proto::EventCreate m{.device = D().Index(dev), .event = rec->id, .flags = flags};
  *ph = reinterpret_cast<CUevent>(rec);
  return Post(l, m, call);
}
namespace {
CUresult RecordEvent(const char* call, CUevent e, CUstream s, bool external) {
  const Event* ev;
  if (CUresult r = FindEvent(call, e, &ev)) return r;
  // On a capturing stream: the event keeps the stream's place in the capture (a fork point), or
  // (CU_EVENT_RECORD_EXTERNAL) becomes an event-record node; nothing is sent.
  bool captured;
  if (CUresult r = CaptureEventRecord(call, e, s, external, &captured); r || captured) return r;
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id)) return r;
  if (D().env.devices[dev].server != D().env.devices[ev->device].server) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("event of device {} recorded on a "
                "stream of device {}, on another GPU server", ev->device, dev));
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::EventRecord m{.event = ev->id, .stream = id, .device = D().Index(dev)};
  return Post(l, m, call);
}
}  // namespace
CUresult cuEventRecord(CUevent e, CUstream s) { return RecordEvent("cuEventRecord", e, s, false); }
// CU_EVENT_RECORD_EXTERNAL matters in a capture only (an event-record node there).
CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags) {
  if ((flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) != 0) {
    return Fail("cuEventRecordWithFlags", CUDA_ERROR_INVALID_VALUE,
                fmt::format("flags {:#x}", flags));
  }
  return RecordEvent("cuEventRecordWithFlags", e, s, flags != 0);
}
CUresult cuEventSynchronize(CUevent e) {
  const char* call = "cuEventSynchronize";
  const Event* ev;
  if (CUresult r = FindEvent(call, e, &ev)) return r;
  if (CUresult r = CaptureHostEventUse(call, e)) return r;
  CUresult err;
  ServerLink* l = D().Link(ev->device, &err, call);
  if (!l) return err;
  proto::EventSync q;
  q.event = ev->id;
  return Call(l, q, call);
}
CUresult cuEventQuery(CUevent e) {
  const char* call = "cuEventQuery";
  const Event* ev;
  if (CUresult r = FindEvent(call, e, &ev)) return r;
  if (CUresult r = CaptureHostEventUse(call, e)) return r;
  CUresult err;
  ServerLink* l = D().Link(ev->device, &err, call);
  if (!l) return err;
  proto::EventQuery q;
  q.event = ev->id;
  return Call(l, q, call);
}
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  const char* call = "cuEventElapsedTime_v2";
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  const Event *a, *b;
  if (CUresult r = FindEvent(call, start, &a)) return r;
  if (CUresult r = FindEvent(call, end, &b)) return r;
  if (D().env.devices[a->device].server != D().env.devices[b->device].server) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, "the events are on different GPU servers");
  }
  CUresult err;
  ServerLink* l = D().Link(a->device, &err, call);
  if (!l) return err;
  proto::EventElapsed q{.start = a->id, .end = b->id};
  proto::FloatValue v;
  if (CUresult r = Call(l, q, &v, call)) return r;
  *ms = v.value;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  const char* call = "cuEventDestroy_v2";
  const Event* ev;
  if (CUresult r = FindEvent(call, e, &ev)) return r;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    D().events.erase(ev);
  }
  CaptureForgetEvent(e);
  CUresult err;
  ServerLink* l = D().Link(ev->device, &err, call);
  proto::EventDestroy m;
  m.event = ev->id;
  delete ev;
  return l ? Post(l, m, call) : err;
}

// Per-thread default stream variants (every default stream is the device's stream 0 here).
#define GPOOL_SAME(ret, name, target, params, args) \
  ret name params;                                  \
  ret name params { return target args; }
GPOOL_SAME(CUresult, cuStreamSynchronize_ptsz, cuStreamSynchronize, (CUstream s), (s))
GPOOL_SAME(CUresult, cuStreamQuery_ptsz, cuStreamQuery, (CUstream s), (s))
GPOOL_SAME(CUresult, cuStreamGetFlags_ptsz, cuStreamGetFlags, (CUstream s, unsigned int* f), (s, f))
GPOOL_SAME(CUresult, cuStreamGetPriority_ptsz, cuStreamGetPriority, (CUstream s, int* p), (s, p))
GPOOL_SAME(CUresult, cuStreamGetDevice_ptsz, cuStreamGetDevice, (CUstream s, CUdevice* d), (s, d))
GPOOL_SAME(CUresult, cuStreamWaitEvent_ptsz, cuStreamWaitEvent,
           (CUstream s, CUevent e, unsigned int f), (s, e, f))
GPOOL_SAME(CUresult, cuEventRecord_ptsz, cuEventRecord, (CUevent e, CUstream s), (e, s))
GPOOL_SAME(CUresult, cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags,
           (CUevent e, CUstream s, unsigned int f), (e, s, f))
#undef GPOOL_SAME

}  // extern "C"
#pragma GCC visibility pop
