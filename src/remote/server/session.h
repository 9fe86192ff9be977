// One client session in a GPU server worker: reads batched requests from the data connection,
// runs them on the backend in order, replies to the synchronous ones, and enforces the session's
// limits.
//
// Asynchronous requests (launches, async copies, registrations, ...) get no reply; the first one
// that fails is remembered and returned with the next reply, as CUDA reports asynchronous errors
// at the next synchronizing call. A malformed message ends this session only (the worker exits).
// A session may have a deadline (its lease's expiry, SetDeadline): at it the session ends
// whatever it is doing, idle or busy (see SessionDeadline).
// Thread safety: Run() owns the connection and backend; one thread, plus Run's own deadline
// watchdog thread, which only sends the SessionEnd message and closes the connection (sends are
// serialized by send_mu_).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "remote/protocol/messages.h"
#include "remote/server/backend.h"
#include "remote/server/share_arbiter.h"
#include "remote/transport/transport.h"

namespace gpool::remote::server {

struct SessionLimits {
  uint64_t memory_bytes = 0;  // 0 = no limit
  // Fraction of each GPU's kernel time this session gets while others compete for it; enforced
  // by the server's ShareArbiter (see share_arbiter.h for how and its limits).
  double compute_share = 1.0;
};

struct SessionStats {
  uint64_t requests = 0, launches = 0, kernel_ns = 0, bytes_in = 0, bytes_out = 0;
  uint64_t peak_memory = 0;
  uint64_t share_waits = 0;  // launches that waited for other sessions' turns
  uint64_t h2d_in_place = 0;  // host-to-device chunks received straight into their target
  uint64_t bare_replies = 0;  // read replies sent as their bytes alone (proto::kBareReplyMinBytes)
  uint64_t replies = 0;  // replies sent: the round trips the client waited for (at most)
  uint64_t sends = 0;    // transport sends of replies (a run of small read replies goes in one)
  // Modules registered and not unregistered: now, and the most at any time. A client that loads
  // and unloads a kernel library repeatedly keeps the peak at what it has loaded at once.
  uint64_t modules = 0, peak_modules = 0;
  // Replies per request op (index: proto::Op), so tests and the session's end-of-session log
  // line can tell which calls the client waited for.
  std::array<uint64_t, static_cast<size_t>(proto::Op::kMaxOp)> replies_by_op{};
  // "GetModuleInfo 1, Malloc 2, ..." for the ops with replies, in op order ("none" if none).
  std::string RepliesByOp() const;
};

// When a session must end: its lease's expiry. The session checks the clock on every message it
// receives (a vDSO clock read per batch), and a watchdog thread wakes at the deadline (re-reading
// the clock at least every max_sleep_ms, so a ManualClock or a wall-clock step is seen too), so
// an idle session ends on time as well. Ending sends the client SessionEnd {error, why} (it sees
// that message at its next call, or at the one it is waiting in) and closes the connection; Run
// then returns PermissionDenied(why), and the worker exits, which frees the session's GPU memory.
// Limit: a backend call already running (a long kernel on the emulated backend, a sync on a long
// GPU kernel) is not interrupted; Run returns when it does, and if that takes longer than
// grace_ms the watchdog calls on_stuck (the worker: _exit, which frees the memory anyway).
struct SessionDeadline {
  const Clock* clock = nullptr;  // Unix-epoch time (UnixClock; a ManualClock in tests)
  int64_t at_nanos = 0;          // 0: no deadline
  int32_t error = 0;             // the CUDA error the client gets (cudaErrorNotPermitted)
  std::string why;               // "lease for GPU H:P/0 expired at 2026-11-30T22:40:00Z (...)"
  int max_sleep_ms = 1000;
  int grace_ms = 5000;
  std::function<void()> on_stuck;  // null: nothing
};

// A host-to-device chunk that is its message's last frame is received straight into place: the
// session is the connection's TailPlacer, runs the frames before it (which may write or free the
// destination), asks the backend where the chunk goes (H2DTarget validates it first: a bad one is
// received into the message buffer and fails as usual), and commits it once it is in.
class Session : private TailPlacer {
 public:
  // `arbiter` (may be null: no share enforcement) must have a slot joined for this session.
  Session(uint64_t id, std::unique_ptr<Connection> conn, Backend* backend, SessionLimits limits,
          ShareArbiter* arbiter = nullptr, int arbiter_slot = -1);
  // Serves until the client disconnects (OK), sends a malformed message (InvalidArgument), or
  // the deadline passes (PermissionDenied naming it).
  Status Run();
  // Call before Run.
  void SetDeadline(SessionDeadline deadline) { deadline_ = std::move(deadline); }
  const SessionStats& stats() const { return stats_; }

 private:
  std::span<std::byte> Place(std::span<const std::byte> head, size_t tail_len) override;
  Status Serve();
  // Deadline (session_deadline.cc): whether it has passed; ends the session (idempotent: sends
  // SessionEnd once, closes the connection); the watchdog thread's loop.
  bool PastDeadline() const {
    return deadline_.at_nanos != 0 && deadline_.clock->NowNanos() >= deadline_.at_nanos;
  }
  void EndSession();
  void WatchDeadline();
  // Sends under send_mu_ (the watchdog may end the session meanwhile); Unavailable once ended.
  // Replies gathered by Emit go first, in the same Connection::SendAll; empty `parts`: only them.
  Status SendLocked(std::span<const wire::ByteSpan> parts);
  // Sends one reply, or while ServeReads gathers (gathering_) and the reply is small, appends it
  // to gather_ to go out with the run's other replies.
  Status Emit(std::span<const wire::ByteSpan> parts);
  // Runs one request; an error ends the session (Unavailable: the client is gone).
  Status Dispatch(const proto::Frame& f);
  // Serves the MemcpyD2H frames at the start of `frames` (at least the first), starting each
  // one's device read before the previous one's reply is sent; *served: how many it took.
  Status ServeReads(std::span<const proto::Frame> frames, size_t* served);
  Status Handle(const proto::Frame& f);
  template <class Req, class Fn>
  Status Sync(const proto::Frame& f, Fn&& fn);
  template <class Req, class Fn>
  Status Async(const proto::Frame& f, Fn&& fn);
  Status SendReply(uint16_t op, Result r, auto& body, std::span<const std::byte> tail = {});
  // A read's reply: bare (its bytes alone, see proto::kBareReplyMinBytes) when it may be, else
  // framed by SendReply.
  Status SendReadReply(const proto::MemcpyD2H& q, Result r, proto::Data& d);
  void CountReply(uint16_t op);
  void Defer(const char* op, Result r);
  // GetModuleInfo: every registered function's layout and variable's address on `device` in
  // `module`, each from the backend's per-function and per-variable calls, each with its own
  // result (a device the backend refuses fails each variable, naming it; layouts do not depend
  // on the device).
  Result ModuleInfoOf(uint64_t module, uint32_t device, proto::ModuleInfo* out);

  uint64_t id_;
  std::unique_ptr<Connection> conn_;
  Backend* backend_;
  SessionLimits limits_;
  SessionStats stats_;
  uint64_t memory_in_use_ = 0;
  struct Allocation {
    uint64_t size = 0;
    uint32_t device = 0;
  };
  std::unordered_map<uint64_t, Allocation> allocations_;  // by pointer
  // Memory handles (MemCreate) by id: their size counts in memory_in_use_ until the backend says
  // their memory is gone (MemRelease, MemUnmap); ForgetHandles then takes it off.
  std::unordered_map<uint64_t, uint64_t> vmm_sizes_;
  void ForgetHandles(const std::vector<uint64_t>& gone);
  // DeviceReset: the device's allocations and streams are gone from the backend; forget them.
  void ForgetDevice(uint32_t device);
  std::unordered_map<uint64_t, uint32_t> stream_devices_;  // stream id -> device
  // What the client registered in each module it registered (RegisterModule until
  // UnregisterModule), in registration order, whatever the backend answered: GetModuleInfo
  // reports each one's own result. The backend has no way to list them.
  struct ModuleRegs {
    std::vector<uint64_t> functions, vars;
  };
  std::unordered_map<uint64_t, ModuleRegs> modules_;
  ShareArbiter* arbiter_;
  int arbiter_slot_;
  bool share_active_ = false;  // launched since the last Idle()
  Result deferred_;
  // The message being received: frames Place already ran, the error that stopped them, and the
  // chunk it placed (data empty: none).
  size_t handled_ = 0;
  Status place_error_;
  struct Placed {
    uint64_t dst = 0, stream = 0;
    std::span<const std::byte> data;
  } placed_;
  proto::BatchWriter out_;
  // The frames of the message Serve runs, and of the head Place looks at (kept: no allocation
  // per message).
  std::vector<proto::Frame> frames_, place_frames_;
  std::vector<std::byte> staging_;
  // Replies to a run of small reads, gathered so that they leave together (one sendmsg over TCP
  // for up to kGatherBytes of them instead of one each; ServeReads): the encoded replies back to
  // back in gather_, where each ends in gather_ends_.
  static constexpr size_t kGatherBytes = size_t{64} << 10;
  bool gathering_ = false;
  std::vector<std::byte> gather_;
  std::vector<size_t> gather_ends_;
  std::vector<wire::ByteSpan> gather_parts_;
  std::vector<std::span<const wire::ByteSpan>> gather_msgs_;

  SessionDeadline deadline_;
  std::timed_mutex send_mu_;          // serializes sends with EndSession
  std::atomic<bool> ended_{false};    // set (under send_mu_) once SessionEnd went out
  std::mutex watch_mu_;               // guards watch_stop_
  std::condition_variable watch_cv_;
  bool watch_stop_ = false;           // Run is done: the watchdog returns
};

}  // namespace gpool::remote::server
