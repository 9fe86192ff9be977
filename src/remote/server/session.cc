#include "remote/server/session.h"

#include <fmt/format.h>

#include "common/log.h"

namespace gpool::remote::server {

using namespace proto;  // NOLINT: the op structs read better unqualified here

Session::Session(uint64_t id, std::unique_ptr<Connection> conn, Backend* backend,
                 SessionLimits limits, ShareArbiter* arbiter, int arbiter_slot)
    : id_(id),
      conn_(std::move(conn)),
      backend_(backend),
      limits_(limits),
      arbiter_(arbiter),
      arbiter_slot_(arbiter_slot) {}

Status Session::Serve() {
  std::vector<std::byte> msg;
  for (;;) {
    handled_ = 0;
    place_error_ = Status::Ok();
    placed_ = Placed{};
    size_t placed = 0;
    Status s = conn_->RecvPlaced(&msg, *this, &placed);
    if (!s.ok()) return s.code() == StatusCode::kUnavailable ? Status::Ok() : s;
    if (PastDeadline()) {  // nothing more runs for an expired lease, not even this message
      EndSession();
      return Status::Ok();
    }
    stats_.bytes_in += msg.size() + placed;
    if (!place_error_.ok()) {
      return place_error_.code() == StatusCode::kUnavailable ? Status::Ok() : place_error_;
    }
    if (Status ps = ParseMessage(msg, &frames_, placed); !ps.ok()) {
      return ps.WithContext(fmt::format("session {} from {}", id_, conn_->peer()));
    }
    for (size_t i = handled_; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (placed != 0 && i + 1 == frames_.size()) {
        // The chunk Place accepted, now in place: complete it as CopyH2D would.
        ++stats_.requests;
        ++stats_.h2d_in_place;
        Defer(OpName(f.op), backend_->CommitH2D(placed_.dst, placed_.data, placed_.stream));
        continue;
      }
      Status hs;
      if (f.op == static_cast<uint16_t>(Op::kMemcpyD2H)) {
        // A run of reads (a device-to-host copy's chunks) is pipelined.
        size_t served = 1;
        ++stats_.requests;
        hs = ServeReads(std::span<const Frame>(frames_).subspan(i), &served);
        i += served - 1;
        if (!hs.ok() && hs.code() != StatusCode::kUnavailable) {
          hs = hs.WithContext(fmt::format("session {} from {}", id_, conn_->peer()));
        }
      } else {
        hs = Dispatch(f);
      }
      if (!hs.ok()) return hs.code() == StatusCode::kUnavailable ? Status::Ok() : hs;
    }
    // Nothing queued any more: other sessions need not wait for this one while it is idle.
    if (share_active_) {
      arbiter_->Idle(arbiter_slot_);
      share_active_ = false;
    }
  }
}

// Reply k's bytes are sent while chunk k+1's read runs (cuda: its DMA into the other staging
// buffer), so the device read and the network send overlap as the host-to-device direction's
// receive and DMA do. Only consecutive reads are looked ahead at: nothing runs between them, so
// starting the next one early reorders nothing. A read the backend cannot start (bad range or
// stream, too large for its staging) takes the unpipelined path at its turn and fails there.
Status Session::ServeReads(std::span<const Frame> frames, size_t* served) {
  MemcpyD2H q[2];
  bool started[2] = {false, false};
  auto start = [&](size_t k) -> Status {
    MemcpyD2H& r = q[k & 1];
    r = MemcpyD2H{};
    GPOOL_RETURN_IF_ERROR(DecodeBody(frames[k], &r));
    if (r.size > kCopyChunkBytes * 64) {
      return Status::InvalidArgument(fmt::format("MemcpyD2H of {} bytes exceeds one reply", r.size));
    }
    started[k & 1] = backend_->StartD2H(r.src, r.size, r.stream, static_cast<int>(k & 1));
    return Status::Ok();
  };
  *served = 1;
  GPOOL_RETURN_IF_ERROR(start(0));
  // Small replies of the run are gathered (Emit) and leave kGatherBytes at a time, and at the
  // run's end, where the transport sends them together for less (Connection::SendAllGathers:
  // TCP): the client reads each one at its next synchronizing call anyway, so holding the first
  // few back while the next reads run delays no answer it waits for alone.
  gathering_ = frames.size() > 1 && conn_->SendAllGathers();
  struct StopGathering {
    bool& on;
    ~StopGathering() { on = false; }
  } stop{gathering_};
  for (size_t k = 0;; ++k) {
    // The next read starts first; one that does not decode is left to its own turn (it ends
    // the session after this reply, as it would have unpipelined).
    bool next = k + 1 < frames.size() && frames[k + 1].op == static_cast<uint16_t>(Op::kMemcpyD2H);
    if (next) {
      next = start(k + 1).ok();
      if (next) ++stats_.requests;
    }
    const MemcpyD2H& r = q[k & 1];
    Data d;
    Result res;
    if (started[k & 1]) {
      res = backend_->FinishD2H(static_cast<int>(k & 1), &d.data);
    } else if (r.size != 0) {
      // Not started: a bad range or stream (CopyD2H says which), or too large to stage.
      staging_.resize(r.size);
      res = backend_->CopyD2H(staging_.data(), r.src, r.size, r.stream);
      if (res.ok()) d.data = staging_;
    }
    if (!res.ok()) d.data = {};
    Status s = SendReadReply(r, std::move(res), d);
    if (s.ok() && (!next || gather_.size() >= kGatherBytes)) s = SendLocked({});
    if (!s.ok() || !next) {
      *served = k + 1;
      // A started read left behind (the send failed) is waited for: its slot is reused later.
      if (next && started[(k + 1) & 1]) {
        std::span<const std::byte> unused;
        (void)backend_->FinishD2H(static_cast<int>((k + 1) & 1), &unused);
      }
      return s;
    }
  }
}

Status Session::Dispatch(const Frame& f) {
  ++stats_.requests;
  Status hs = Handle(f);
  if (hs.ok() || hs.code() == StatusCode::kUnavailable) return hs;
  return hs.WithContext(fmt::format("session {} from {}", id_, conn_->peer()));
}

std::span<std::byte> Session::Place(std::span<const std::byte> head, size_t tail_len) {
  // Anything unexpected is left to the normal path, which receives the message whole and
  // reports what is wrong with it (or, past the deadline, ends the session).
  if (PastDeadline()) return {};
  if (!ParseMessage(head, &place_frames_, tail_len).ok() ||
      place_frames_.back().op != static_cast<uint16_t>(Op::kMemcpyH2D)) {
    return {};
  }
  MemcpyH2D q;
  if (!DecodeBodyDetached(place_frames_.back(), &q).ok()) return {};
  // The frames before the chunk come first: they may launch kernels on, or free, its destination.
  for (; handled_ + 1 < place_frames_.size(); ++handled_) {
    Status hs = Dispatch(place_frames_[handled_]);
    if (!hs.ok()) {
      place_error_ = hs;
      ++handled_;
      return {};
    }
  }
  std::span<std::byte> target = backend_->H2DTarget(q.dst, tail_len, q.stream);
  if (target.size() != tail_len) return {};
  placed_ = Placed{.dst = q.dst, .stream = q.stream, .data = target};
  return target;
}

void Session::Defer(const char* op, Result r) {
  if (r.ok() || !deferred_.ok()) return;
  deferred_ = Err(r.code, fmt::format("{}: {}", op, r.message));
}

std::string SessionStats::RepliesByOp() const {
  std::string out;
  for (size_t op = 0; op < replies_by_op.size(); ++op) {
    if (replies_by_op[op] == 0) continue;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", OpName(static_cast<uint16_t>(op)),
                       replies_by_op[op]);
  }
  return out.empty() ? "none" : out;
}

void Session::CountReply(uint16_t op) {
  ++stats_.replies;
  if (op < stats_.replies_by_op.size()) ++stats_.replies_by_op[op];
}

Status Session::SendReadReply(const MemcpyD2H& q, Result r, Data& d) {
  constexpr auto kOp = static_cast<uint16_t>(Op::kMemcpyD2H);
  if (!conn_->HeadCostsARecv() || !r.ok() || !deferred_.ok() ||
      q.size < proto::kBareReplyMinBytes || d.data.size() != q.size) {
    return SendReply(kOp, std::move(r), d, d.data);
  }
  CountReply(kOp);
  ++stats_.bare_replies;
  stats_.bytes_out += d.data.size();
  wire::ByteSpan m = d.data;
  return Emit(std::span<const wire::ByteSpan>(&m, 1));
}

Status Session::Emit(std::span<const wire::ByteSpan> parts) {
  size_t total = 0;
  for (const wire::ByteSpan& p : parts) total += p.size();
  // Small: what the client's transport receives through its read-ahead anyway (a larger one is
  // received into place, and copying it here would cost more than its send saves).
  if (!gathering_ || total >= kTailMinBytes) return SendLocked(parts);
  for (const wire::ByteSpan& p : parts) gather_.insert(gather_.end(), p.begin(), p.end());
  gather_ends_.push_back(gather_.size());
  return Status::Ok();
}

Status Session::SendReply(uint16_t op, Result r, auto& body, std::span<const std::byte> tail) {
  CountReply(op);
  ReplyHead head{.error = r.code, .message = std::move(r.message)};
  if (!deferred_.ok()) {
    head.async_error = deferred_.code;
    head.async_message = std::move(deferred_.message);
    deferred_ = Result::Ok();
  }
  out_.Reset();
  if (tail.empty()) {
    out_.AddReply(op, head, body);
    wire::ByteSpan m = out_.Finish();
    stats_.bytes_out += m.size();
    return Emit(std::span<const wire::ByteSpan>(&m, 1));
  }
  // The body's last field is a blob: its bytes go as a second gather part, uncopied.
  out_.AddReplyWithTail(op, head, body, tail);
  wire::ByteSpan parts[2] = {out_.Finish(), tail};
  stats_.bytes_out += parts[0].size() + tail.size();
  return Emit(parts);
}

// `fn` by reference: a closure passed by value was copied through a 16-byte register from two
// 8-byte stores, a store-forwarding stall that was ~8% of a no-op request's CPU (call_cpu_bench).
template <class Req, class Fn>
Status Session::Sync(const Frame& f, Fn&& fn) {
  Req req;
  GPOOL_RETURN_IF_ERROR(DecodeBody(f, &req));
  return fn(req);
}

template <class Req, class Fn>
Status Session::Async(const Frame& f, Fn&& fn) {
  Req req;
  GPOOL_RETURN_IF_ERROR(DecodeBody(f, &req));
  Defer(OpName(f.op), fn(req));
  return Status::Ok();
}

Result Session::ModuleInfoOf(uint64_t module, uint32_t device, ModuleInfo* out) {
  auto it = modules_.find(module);
  if (it == modules_.end()) {
    return Err(kErrInvalidResourceHandle,
               fmt::format("GetModuleInfo: module {} is not registered in this session (never "
                           "registered, or unregistered)", module));
  }
  out->functions.reserve(it->second.functions.size());
  for (uint64_t id : it->second.functions) {
    FunctionInfo& fi = out->functions.emplace_back();
    fi.func = id;
    ParamInfo p;
    Result r = backend_->GetParamInfo(id, &p);
    fi.error = r.code;
    fi.message = std::move(r.message);
    if (r.ok()) fi.params = std::move(p.params);
  }
  out->vars.reserve(it->second.vars.size());
  for (uint64_t id : it->second.vars) {
    VarInfo& vi = out->vars.emplace_back();
    vi.var = id;
    Result r = backend_->GetSymbol(id, device, &vi.ptr, &vi.size);
    vi.error = r.code;
    vi.message = std::move(r.message);
    if (!r.ok()) vi.ptr = vi.size = 0;
  }
  return {};
}

void Session::ForgetDevice(uint32_t device) {
  std::erase_if(allocations_, [&](const auto& kv) {
    if (kv.second.device != device) return false;
    memory_in_use_ -= kv.second.size;
    return true;
  });
  std::erase_if(stream_devices_, [&](const auto& kv) { return kv.second == device; });
}

void Session::ForgetHandles(const std::vector<uint64_t>& gone) {
  for (uint64_t h : gone) {
    auto it = vmm_sizes_.find(h);
    if (it == vmm_sizes_.end()) continue;
    memory_in_use_ -= std::min(memory_in_use_, it->second);
    vmm_sizes_.erase(it);
  }
}

Status Session::Handle(const Frame& f) {
  if (f.op & kReply) return Status::InvalidArgument("client sent a reply frame");
  Empty none;
  switch (static_cast<Op>(f.op)) {
    case Op::kPing:
      return Sync<Ping>(f, [&](Ping&) { return SendReply(f.op, {}, none); });
    case Op::kGetDeviceProps:
      return Sync<GetDeviceProps>(f, [&](GetDeviceProps& q) {
        DeviceProps p;
        Result r = backend_->GetProps(q.device, &p);
        if (r.ok() && limits_.memory_bytes) {
          p.total_global_mem = std::min<uint64_t>(p.total_global_mem, limits_.memory_bytes);
        }
        return SendReply(f.op, r, p);
      });
    case Op::kGetAttribute:
      return Sync<GetAttribute>(f, [&](GetAttribute& q) {
        IntValue v;
        Result r = backend_->GetAttribute(q.device, q.attr, &v.value);
        return SendReply(f.op, r, v);
      });
    case Op::kMemGetInfo:
      return Sync<MemGetInfo>(f, [&](MemGetInfo& q) {
        MemInfo m;
        Result r = backend_->MemGetInfo(q.device, &m.free, &m.total);
        if (r.ok() && limits_.memory_bytes) {
          m.total = std::min(m.total, limits_.memory_bytes);
          m.free = std::min(m.free, m.total - std::min(m.total, memory_in_use_));
        }
        return SendReply(f.op, r, m);
      });
    case Op::kMalloc:
      return Sync<Malloc>(f, [&](Malloc& q) {
        Pointer p;
        Result r;
        if (limits_.memory_bytes && memory_in_use_ + q.size > limits_.memory_bytes) {
          r = Err(kErrMemoryAllocation,
                  fmt::format("cudaMalloc({} bytes) refused: the session's memory limit is {} "
                              "bytes and {} are in use",
                              q.size, limits_.memory_bytes, memory_in_use_));
        } else {
          r = backend_->Malloc(q.device, q.size, &p.ptr);
          if (r.ok()) {
            allocations_[p.ptr] = Allocation{.size = q.size, .device = q.device};
            memory_in_use_ += q.size;
            stats_.peak_memory = std::max(stats_.peak_memory, memory_in_use_);
          }
        }
        return SendReply(f.op, r, p);
      });
    case Op::kFree:
      return Sync<Free>(f, [&](Free& q) {
        Result r = backend_->Free(q.ptr);
        if (r.ok()) {
          auto it = allocations_.find(q.ptr);
          if (it != allocations_.end()) {
            memory_in_use_ -= it->second.size;
            allocations_.erase(it);
          }
        }
        return SendReply(f.op, r, none);
      });
    case Op::kMemcpyD2H: {  // (Run serves runs of these; this is one run by Place)
      size_t served = 1;
      return ServeReads(std::span<const Frame>(&f, 1), &served);
    }
    case Op::kMemcpyH2D:
      return Async<MemcpyH2D>(f, [&](MemcpyH2D& q) { return backend_->CopyH2D(q.dst, q.data, q.stream); });
    case Op::kMemcpyD2D:
      return Async<MemcpyD2D>(f, [&](MemcpyD2D& q) { return backend_->CopyD2D(q.dst, q.src, q.size, q.stream); });
    case Op::kMemset:
      return Async<Memset>(f, [&](Memset& q) {
        return backend_->Memset(q.dst, static_cast<uint8_t>(q.value), q.size, q.stream);
      });
    case Op::kMemcpy2D:
      return Sync<Memcpy2D>(f, [&](Memcpy2D& q) -> Status {
        Data d;
        Result r;
        if (q.kind < 1 || q.kind > 3) {
          r = Err(kErrInvalidMemcpyDirection, fmt::format("2-D copy kind {}", q.kind));
        } else if (q.kind == static_cast<uint8_t>(CopyKind::kDeviceToHost)) {
          if (q.width * q.height > kCopyChunkBytes * 64) {
            return Status::InvalidArgument("Memcpy2D reply too large");
          }
          staging_.resize(q.width * q.height);
          r = backend_->Copy2D(q, staging_.data());
          if (r.ok()) d.data = staging_;
        } else {
          r = backend_->Copy2D(q, nullptr);
        }
        return SendReply(f.op, r, d, d.data);
      });
    case Op::kMemcpy2DAsync:
      return Async<Memcpy2DAsync>(f, [&](Memcpy2DAsync& q) {
        if (q.kind != static_cast<uint8_t>(CopyKind::kHostToDevice) &&
            q.kind != static_cast<uint8_t>(CopyKind::kDeviceToDevice)) {
          return Err(kErrInvalidMemcpyDirection,
                     fmt::format("posted 2-D copy of kind {} (only host-to-device and "
                                 "device-to-device have no reply)", q.kind));
        }
        return backend_->Copy2D(q, nullptr);
      });
    case Op::kMemset2D:
      return Async<Memset2D>(f, [&](Memset2D& q) {
        return backend_->Memset2D(q.dst, q.pitch, static_cast<uint8_t>(q.value), q.width,
                                  q.height, q.stream);
      });
    case Op::kRegisterModule:
      return Async<RegisterModule>(f, [&](RegisterModule& q) {
        modules_[q.module];  // known from now on, even if the backend refuses the image
        stats_.modules = modules_.size();
        stats_.peak_modules = std::max(stats_.peak_modules, stats_.modules);
        return backend_->LoadModule(q.module, q.image);
      });
    case Op::kRegisterFunction:
      return Async<RegisterFunction>(f, [&](RegisterFunction& q) {
        if (auto it = modules_.find(q.module); it != modules_.end()) {
          it->second.functions.push_back(q.func);
        }
        return backend_->RegisterFunction(q.module, q.func, q.name);
      });
    case Op::kRegisterVar:
      return Async<RegisterVar>(f, [&](RegisterVar& q) {
        if (auto it = modules_.find(q.module); it != modules_.end()) {
          it->second.vars.push_back(q.var);
        }
        return backend_->RegisterVar(q.module, q.var, q.name, q.size, q.constant != 0);
      });
    case Op::kUnregisterModule:
      return Async<UnregisterModule>(f, [&](UnregisterModule& q) {
        modules_.erase(q.module);
        stats_.modules = modules_.size();
        return backend_->UnloadModule(q.module);
      });
    case Op::kGetModuleInfo:
      return Sync<GetModuleInfo>(f, [&](GetModuleInfo& q) {
        ModuleInfo m;
        Result r = ModuleInfoOf(q.module, q.device, &m);
        return SendReply(f.op, r, m);
      });
    case Op::kGetParamInfo:
      return Sync<GetParamInfo>(f, [&](GetParamInfo& q) {
        ParamInfo p;
        Result r = backend_->GetParamInfo(q.func, &p);
        return SendReply(f.op, r, p);
      });
    case Op::kLaunch:
    case Op::kLaunchCooperative:  // the same body; only the backend's call differs
      return Async<Launch>(f, [&](Launch& q) {
        uint64_t ns = 0;
        uint32_t dev = q.device;
        if (q.stream != 0) {
          auto it = stream_devices_.find(q.stream);
          if (it != stream_devices_.end()) dev = it->second;
        }
        // Kernel time the backend measured after the fact (cuda: timing events of launches
        // that have completed) counts before this launch is admitted.
        if (uint64_t done = backend_->TakeKernelTime(dev); done != 0) {
          stats_.kernel_ns += done;
          if (arbiter_ != nullptr) arbiter_->Charge(arbiter_slot_, dev, done);
        }
        if (arbiter_ != nullptr) {
          if (arbiter_->Admit(arbiter_slot_, dev)) ++stats_.share_waits;
          share_active_ = true;
        }
        Result r = static_cast<Op>(f.op) == Op::kLaunchCooperative
                       ? backend_->LaunchCooperative(q, &ns)
                       : backend_->Launch(q, &ns);
        ++stats_.launches;
        stats_.kernel_ns += ns;
        if (arbiter_ != nullptr) arbiter_->Charge(arbiter_slot_, dev, ns);
        return r;
      });
    case Op::kStreamCreate:
      return Async<StreamCreate>(f, [&](StreamCreate& q) {
        Result r = backend_->StreamCreate(q.device, q.stream, q.flags, q.priority);
        if (r.ok()) stream_devices_[q.stream] = q.device;
        return r;
      });
    case Op::kStreamDestroy:
      return Async<StreamDestroy>(f, [&](StreamDestroy& q) {
        stream_devices_.erase(q.stream);
        return backend_->StreamDestroy(q.stream);
      });
    case Op::kStreamSync:
      return Sync<StreamSync>(f, [&](StreamSync& q) {
        return SendReply(f.op, backend_->StreamSync(q.device, q.stream), none);
      });
    case Op::kStreamQuery:
      return Sync<StreamQuery>(f, [&](StreamQuery& q) {
        return SendReply(f.op, backend_->StreamQuery(q.device, q.stream), none);
      });
    case Op::kStreamWaitEvent:
      return Async<StreamWaitEvent>(f, [&](StreamWaitEvent& q) {
        return backend_->StreamWaitEvent(q.device, q.stream, q.event);
      });
    case Op::kEventCreate:
      return Async<EventCreate>(f, [&](EventCreate& q) { return backend_->EventCreate(q.device, q.event, q.flags); });
    case Op::kEventRecord:
      return Async<EventRecord>(f, [&](EventRecord& q) { return backend_->EventRecord(q.device, q.event, q.stream); });
    case Op::kEventSync:
      return Sync<EventSync>(f, [&](EventSync& q) { return SendReply(f.op, backend_->EventSync(q.event), none); });
    case Op::kEventQuery:
      return Sync<EventQuery>(f, [&](EventQuery& q) { return SendReply(f.op, backend_->EventQuery(q.event), none); });
    case Op::kEventElapsed:
      return Sync<EventElapsed>(f, [&](EventElapsed& q) {
        FloatValue v;
        Result r = backend_->EventElapsed(q.start, q.end, &v.value);
        return SendReply(f.op, r, v);
      });
    case Op::kEventDestroy:
      return Async<EventDestroy>(f, [&](EventDestroy& q) { return backend_->EventDestroy(q.event); });
    case Op::kDeviceSync:
      return Sync<DeviceSync>(f, [&](DeviceSync& q) { return SendReply(f.op, backend_->DeviceSync(q.device), none); });
    case Op::kDeviceReset:
      return Sync<DeviceReset>(f, [&](DeviceReset& q) {
        Result r = backend_->DeviceReset(q.device);
        if (r.ok()) ForgetDevice(q.device);
        return SendReply(f.op, r, none);
      });
    case Op::kFuncAttributes:
      return Sync<FuncAttributes>(f, [&](FuncAttributes& q) {
        FuncAttrs a;
        Result r = backend_->FuncAttributes(q.func, &a);
        return SendReply(f.op, r, a);
      });
    case Op::kOccupancy:
      return Sync<Occupancy>(f, [&](Occupancy& q) {
        IntValue v;
        Result r = backend_->Occupancy(q.func, q.block_size, q.shmem, &v.value);
        return SendReply(f.op, r, v);
      });
    case Op::kGetSymbol:
      return Sync<GetSymbol>(f, [&](GetSymbol& q) {
        Symbol s;
        Result r = backend_->GetSymbol(q.var, q.device, &s.ptr, &s.size);
        return SendReply(f.op, r, s);
      });
    case Op::kDeviceSetLimit:
      return Sync<DeviceSetLimit>(f, [&](DeviceSetLimit& q) {
        return SendReply(f.op, backend_->SetLimit(q.device, q.limit, q.value), none);
      });
    case Op::kDeviceGetLimit:
      return Sync<DeviceGetLimit>(f, [&](DeviceGetLimit& q) {
        U64Value v;
        Result r = backend_->GetLimit(q.device, q.limit, &v.value);
        return SendReply(f.op, r, v);
      });
    case Op::kSetDeviceFlags:
      return Sync<SetDeviceFlags>(f, [&](SetDeviceFlags& q) {
        return SendReply(f.op, backend_->SetDeviceFlags(q.device, q.flags), none);
      });
    case Op::kGetDeviceFlags:
      return Sync<GetDeviceFlags>(f, [&](GetDeviceFlags& q) {
        U64Value v;
        uint32_t flags = 0;
        Result r = backend_->GetDeviceFlags(q.device, &flags);
        v.value = flags;
        return SendReply(f.op, r, v);
      });
    case Op::kPeerAccess:
      return Sync<PeerAccess>(f, [&](PeerAccess& q) {
        return SendReply(f.op, backend_->PeerAccess(q.device, q.peer, q.enable != 0), none);
      });
    case Op::kFuncSetAttribute:
      return Async<FuncSetAttribute>(f, [&](FuncSetAttribute& q) {
        return backend_->FuncSetAttribute(q.func, q.device, q.attr, q.value);
      });
    case Op::kMemGranularity:
      return Sync<MemGranularity>(f, [&](MemGranularity& q) {
        U64Value v;
        Result r = backend_->MemGranularity(q.device, q.recommended != 0, &v.value);
        return SendReply(f.op, r, v);
      });
    case Op::kMemAddressReserve:
      return Sync<MemAddressReserve>(f, [&](MemAddressReserve& q) {
        Pointer p;
        Result r = backend_->MemAddressReserve(q.device, q.size, q.alignment, q.hint, &p.ptr);
        return SendReply(f.op, r, p);
      });
    case Op::kMemAddressFree:
      return Sync<MemAddressFree>(f, [&](MemAddressFree& q) {
        return SendReply(f.op, backend_->MemAddressFree(q.ptr, q.size), none);
      });
    case Op::kMemCreate:
      // Physical memory: counted against the limit as cudaMalloc's is, from creation until the
      // backend says it is gone (released and unmapped everywhere).
      return Sync<MemCreate>(f, [&](MemCreate& q) {
        U64Value h;
        Result r;
        if (limits_.memory_bytes && memory_in_use_ + q.size > limits_.memory_bytes) {
          r = Err(kErrMemoryAllocation,
                  fmt::format("cuMemCreate({} bytes) refused: the session's memory limit is {} "
                              "bytes and {} are in use",
                              q.size, limits_.memory_bytes, memory_in_use_));
        } else {
          r = backend_->MemCreate(q.device, q.size, &h.value);
          if (r.ok()) {
            vmm_sizes_[h.value] = q.size;
            memory_in_use_ += q.size;
            stats_.peak_memory = std::max(stats_.peak_memory, memory_in_use_);
          }
        }
        return SendReply(f.op, r, h);
      });
    case Op::kMemRelease:
      return Sync<MemRelease>(f, [&](MemRelease& q) {
        std::vector<uint64_t> gone;
        Result r = backend_->MemRelease(q.handle, &gone);
        ForgetHandles(gone);
        return SendReply(f.op, r, none);
      });
    case Op::kMemMap:
      return Sync<MemMap>(f, [&](MemMap& q) {
        return SendReply(f.op, backend_->MemMap(q.ptr, q.size, q.offset, q.handle), none);
      });
    case Op::kMemUnmap:
      return Sync<MemUnmap>(f, [&](MemUnmap& q) {
        std::vector<uint64_t> gone;
        Result r = backend_->MemUnmap(q.ptr, q.size, &gone);
        ForgetHandles(gone);
        return SendReply(f.op, r, none);
      });
    case Op::kMemSetAccess:
      return Sync<MemSetAccess>(f, [&](MemSetAccess& q) {
        return SendReply(f.op, backend_->MemSetAccess(q.ptr, q.size, q.device, q.flags), none);
      });
    case Op::kHello:
    case Op::kAttach:
    case Op::kSessionEnd:
    case Op::kMaxOp:
      break;
  }
  return Status::InvalidArgument(fmt::format("op {} not valid in a session", OpName(f.op)));
}

}  // namespace gpool::remote::server
