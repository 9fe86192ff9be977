// A client's connection to one GPU server session: handshake, request batching, replies.
//
// Asynchronous requests are appended to an outgoing batch and sent at the next synchronous call,
// when the batch passes kFlushBytes, on Flush(), or by the link's pump thread once the batch has
// sat for two to three of its ticks (so queued work waits ~2-3 ms for the program's next CUDA
// call, ~8 ms at most; see the pump's ticks below). One ordered connection keeps requests in
// program order, which is stronger than CUDA's per-stream order. Large host data travels as a
// separate gather part, never copied into the batch. Transport failures come back as
// Unavailable: the server or its worker is gone, and every later call fails fast the same way.
//
// Asynchronous device-to-host copies (CopyFromDevice with async) are registered as pending reads
// and their requests queued in the batch like any asynchronous request (so a burst of small ones
// shares one send); their replies come back in order ahead of any later reply, and are written
// into the program's buffer by the next caller that reads a reply (every synchronizing call
// does, so the data is in place when a stream/event/device sync returns), or by the pump thread
// once they have waited two or three ticks. The pump waits only for replies whose requests have left
// (their batch generation is below batch_gen_); unsent ones it flushes like any queued batch.
//
// The pump sleeps on a one-shot timer (timerfd) that callers arm, without waking any thread, when
// the batch becomes non-empty or a flush sends asynchronous reads, unless it is armed already or
// the pump is ticking. Callers never disarm it: a burst the program syncs itself leaves the timer
// to fire once, and the pump, finding nothing waiting, sleeps again. So a program that syncs its
// bursts costs at most one timerfd_settime and one pump wake-up per tick, however many bursts
// the tick holds. (Until session 13 callers disarmed it before receiving: two timerfd_settime
// calls per burst and no wake-up. That pair cost ~7 us on a paravirtualized VM: one async op then
// a sync took 8.6 us over shared memory, 2.2 us without it; docs/benchmarks.md, "Remoting".)
// When the timer fires, the pump ticks for as long as a batch stays queued or sent reads wait
// unattended: a batch still unsent a tick after it looked is sent; the oldest sent read, still
// waiting and with no caller receiving, is received with the other sent ones. Synchronous calls
// and copies never arm it. The tick starts at kFlushTick (queued work waits 2-3 ticks, ~2-3 ms)
// and doubles, up to kMaxPumpTick, at each wake-up that finds the program did the work itself
// (what the last look or the arming was for is gone, or a caller is busy with it); the pump's
// first act (a flush or a receive) sets it back (NextPumpTick). Callers arm the timer for the
// current tick. So a program that keeps its own work moving pays one pump wake-up per ~4 ms,
// not per ms, and queued work that nobody sends waits at most ~2 kMaxPumpTick (~8 ms) once
// after such a stretch, ~2-3 ms after that.
// Each pump wake-up is a thread hop that competes with the copy's own threads for a core
// (measured: a 1 MiB device-to-host burst, 4 per sync over shared memory with the client on one
// CPU, ran at 0.91-0.96 of raw with the pump waking once per ms, 0.95-1.01 with the tick backing
// off and 0.95-1.04 with the timer switched off; measured with bench/remote_bench).
//
// Thread safety: callers serialize whole operations with mu() (Post, Call, Flush, copies); the
// pump thread takes mu() and read_mu_ only with try_lock, so it never blocks a caller for long.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "remote/protocol/messages.h"
#include "remote/transport/transport.h"

namespace gpool::remote::client {

struct LinkOptions {
  std::string address;          // the server's control address HOST:PORT
  std::string transport = "tcp";  // data transport: tcp or ucx
  std::string token;            // lease token ("" when the server is --insecure)
  std::string client_name;      // for the server's logs
};

class ServerLink {
 public:
  static constexpr size_t kFlushBytes = 64 << 10;
  static constexpr std::chrono::microseconds kFlushTick{1000};
  static constexpr std::chrono::microseconds kMaxPumpTick{4000};
  // The pump's tick after a wake-up (pure, for tests): kFlushTick once it acted, doubled (up to
  // kMaxPumpTick) when it found the program had done the work itself, else unchanged.
  static std::chrono::microseconds NextPumpTick(std::chrono::microseconds tick, bool acted,
                                                bool program_did_it) {
    if (acted) return kFlushTick;
    return program_did_it ? std::min(2 * tick, kMaxPumpTick) : tick;
  }

  static StatusOr<std::unique_ptr<ServerLink>> Connect(const LinkOptions& options);
  // A link over `conn`, a data connection already attached to a session (Connect's last step
  // done), named `address` in errors: for benchmarks and tests that script the server's side.
  static StatusOr<std::unique_ptr<ServerLink>> OverConnection(std::unique_ptr<Connection> conn,
                                                              std::string address);
  ~ServerLink();

  const std::string& address() const { return address_; }
  uint32_t device_count() const { return hello_.device_count; }
  uint64_t mem_limit() const { return hello_.mem_limit; }
  std::mutex& mu() { return mu_; }

  // Queues an asynchronous request.
  template <class Msg>
  Status Post(Msg& m) {
    GPOOL_RETURN_IF_ERROR(BrokenStatus());
    batch_.AddRequest(m);
    if (batch_.bytes() >= kFlushBytes || batch_.frames() >= proto::kMaxFramesPerMessage - 1) {
      return Flush();
    }
    MarkQueued();
    return Status::Ok();
  }
  // Sends queued requests plus `m`, whose last blob field is `tail`, sent uncopied.
  template <class Msg>
  Status PostWithTail(Msg& m, wire::ByteSpan tail) {
    GPOOL_RETURN_IF_ERROR(BrokenStatus());
    GPOOL_RETURN_IF_ERROR(LandReadsBeforeBulkSend());
    if (batch_.frames() >= proto::kMaxFramesPerMessage - 1) GPOOL_RETURN_IF_ERROR(Flush());
    batch_.AddRequestWithTail(m, tail);
    wire::ByteSpan parts[2] = {batch_.Finish(), tail};
    Status s = conn_->Send(parts);
    batch_.Reset();
    NextBatch();
    queued_.store(false, std::memory_order_relaxed);
    if (reads_queued_) ReadsSent();
    return Check(s);
  }
  // Before a send of bulk data (a large tail), which may block until the server has received it:
  // lands every pending read first. The server answers reads in order, and a large reply's send
  // blocks it until this side receives (UCX rendezvous; TCP once the socket buffers are full);
  // with this side blocked in its own send and nobody receiving, both would wait forever (an
  // asynchronous device-to-host copy, then a host-to-device copy of >= 128 KiB over UCX did).
  // Costs that pattern the reads' wait; nothing when no read is pending. Caller holds mu_.
  Status LandReadsBeforeBulkSend() {
    if (pending_size_.load(std::memory_order_relaxed) == 0) return Status::Ok();
    return WaitReads();
  }
  // Sends queued requests plus `m` and waits for its reply.
  template <class Msg, class Body>
  Status Call(Msg& m, proto::ReplyHead* head, Body* body) {
    GPOOL_RETURN_IF_ERROR(BrokenStatus());
    batch_.AddRequest(m);
    GPOOL_RETURN_IF_ERROR(Flush());
    return ReadReply(static_cast<uint16_t>(Msg::kOp), head, body);
  }
  // Reads the next reply, which must answer `op`, after the replies of pending asynchronous
  // reads. Body blobs point into an internal buffer valid until the next read. An error of an
  // earlier asynchronous read comes back as head->async_error.
  template <class Body>
  Status ReadReply(uint16_t op, proto::ReplyHead* head, Body* body) {
    // With no read pending (a plain synchronous call) the pump cannot be receiving: it receives
    // only for a pending read, none can be registered while this caller holds mu_, and the
    // acquire pairs with the release after the last one landed (PendingChanged), so whatever
    // the pump wrote for it (async_failure_, the reply count) is visible. read_mu_ is then not
    // needed (its lock and unlock were ~10% of a no-op call's client CPU, call_cpu_bench).
    std::unique_lock<std::mutex> lk(read_mu_, std::defer_lock);
    if (pending_size_.load(std::memory_order_acquire) != 0) {
      lk.lock();
      GPOOL_RETURN_IF_ERROR(DrainReadsLocked());
    }
    GPOOL_RETURN_IF_ERROR(ReadFrame(op));
    GPOOL_RETURN_IF_ERROR(Check(proto::DecodeReply(frame_, head, body)));
    TakeAsyncFailure(head);
    return Status::Ok();
  }
  Status Flush();
  // Waits until every pending asynchronous read has landed in its buffer. Caller holds mu().
  Status WaitReads() {
    GPOOL_RETURN_IF_ERROR(Flush());
    std::lock_guard<std::mutex> lk(read_mu_);
    return DrainReadsLocked();
  }
  bool broken() const { return broken_flag_.load(); }
  // Why the link is broken (OK while it is not): Unavailable "lost the GPU server ..." or, when
  // the server ended the session (its lease expired: proto::SessionEnd), PermissionDenied with
  // the server's reason.
  Status status() { return BrokenStatus(); }
  // For tests: reads registered and not yet landed; batches the pump has sent.
  size_t pending_reads() {
    std::lock_guard<std::mutex> lk(state_mu_);
    return pending_.size();
  }
  uint64_t pump_flushes() const { return pump_flushes_.load(); }
  // For tests: times the pump woke (from its sleep or at the end of a tick); whether it sleeps.
  uint64_t pump_wakes() const { return pump_wakes_.load(); }
  // For tests: timerfd_settime calls (armings of the pump's timer).
  uint64_t timer_arms() const { return timer_arms_.load(); }
  bool pump_asleep() const { return pump_sleeping_.load(); }
  // For tests: the pump's current tick (NextPumpTick), which callers also arm the timer with.
  std::chrono::microseconds pump_tick() const {
    return std::chrono::microseconds(pump_tick_us_.load(std::memory_order_relaxed));
  }

  // Host-to-device copy, chunked (proto::kCopyChunkBytes); small ones ride in the batch, large
  // chunks go uncopied as gather parts, up to kChunksInFlight of them handed to the transport at
  // once (Connection::SendAll: UCX keeps their rendezvous in flight together). Returns when the
  // bytes have left `src`. Asynchronous: errors come with a later reply.
  Status CopyToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream);
  static constexpr size_t kChunksInFlight = 8;
  // Device-to-host copy: all chunk requests go out at once and the replies stream back into
  // `dst` (large chunks are received straight into it). Synchronous (async false): returns when
  // `dst` is filled, with the first reply error in *head (error or async_error non-zero).
  // Asynchronous: returns once the requests are sent; `dst` must stay valid until a later
  // synchronizing call, by which it is filled; errors come with a later reply.
  Status CopyFromDevice(std::byte* dst, uint64_t src, size_t n, uint64_t stream,
                        proto::ReplyHead* head, bool async = false);

  // 2-D copies (cudaMemcpy2D*): `height` rows of `width` bytes, each side's rows its pitch apart.
  // Both pitches must be >= width (the caller checks). Rows travel packed, up to
  // proto::kCopyChunkBytes of them per request; contiguous on both sides they take the 1-D path,
  // and rows wider than a chunk go one 1-D copy each.
  // Host-to-device: posted (proto::Memcpy2DAsync; no reply, errors come with a later reply), like
  // CopyToDevice; returns when the bytes have left `src`. Host rows already contiguous (spitch ==
  // width) go uncopied; others are packed into a buffer of the link first.
  Status CopyToDevice2D(uint64_t dst, size_t dpitch, const std::byte* src, size_t spitch,
                        size_t width, size_t height, uint64_t stream);
  // Device-to-host, like CopyFromDevice (same `head` and `async` contract): each request
  // (proto::Memcpy2D) is a pending read whose packed rows are spread to `dpitch` when its reply is
  // received (straight into `dst` when dpitch == width).
  Status CopyFromDevice2D(std::byte* dst, size_t dpitch, uint64_t src, size_t spitch,
                          size_t width, size_t height, uint64_t stream, proto::ReplyHead* head,
                          bool async = false);
  // cudaStreamSynchronize's request (proto::StreamSync on `device`'s `stream`), or none: when the
  // last request this link queued or sent was a device-to-host read on `stream` (CopyFromDevice,
  // CopyFromDevice2D), the server answers that read only once the stream's earlier work is done,
  // so the stream is idle once every pending read has landed. Then this waits for the pending
  // reads and returns without a round trip (counted in syncs_elided()). When any read failed,
  // or an asynchronous error waits to be reported, the StreamSync goes to the server after all,
  // which says what holds now (a sticky error stays, a bad argument's does not). The pattern is a
  // program's "cudaMemcpyAsync(pinned, D2H, s); cudaStreamSynchronize(s)", which then costs the
  // read's exchange alone. Limits: the default stream (0) of a server with several devices always goes
  // to the server (the read ran on its pointer's device, which this link does not record); an
  // error another stream's work raises after the read's reply (a kernel fault the GPU reports
  // late) comes with the next call instead, as it would had that fault come a moment later.
  // Caller holds mu().
  Status SyncStream(uint32_t device, uint64_t stream, proto::ReplyHead* head);
  // cudaStreamQuery's request (proto::StreamQuery), answered the same way: it waits for the
  // stream's reads to land (as the query sent to the server would, behind their replies), then
  // answers without a round trip, however often it is polled.
  Status QueryStream(uint32_t device, uint64_t stream, proto::ReplyHead* head);
  // Syncs and queries answered here.
  uint64_t syncs_elided() const { return syncs_elided_.load(); }
  // For tests: replies received so far (each is a round trip some caller or the pump waited for;
  // a posted request adds none).
  uint64_t replies() const { return replies_.load(); }

 private:
  struct PendingRead {
    std::byte* dst;
    size_t len;
    proto::ReplyHead* result;  // null: asynchronous, errors go to async_failure_
    uint64_t gen;              // batch_gen_ of the batch carrying its request
    uint64_t seq;              // unique per read, in order
    // The request's op: MemcpyD2H, or Memcpy2D whose `len` bytes are rows of `width` that land
    // `pitch` apart from `dst` (width 0: contiguous).
    uint16_t op = static_cast<uint16_t>(proto::Op::kMemcpyD2H);
    size_t width = 0, pitch = 0;
  };

  ServerLink() = default;
  // CopyToDevice of more than one chunk. Caller holds mu_.
  Status CopyChunksToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream);
  Status ReadFrame(uint16_t op);
  // After the read requests of one copy are queued: the asynchronous end (send now if a chunk's
  // worth of reads waits, else leave queued for the pump or the next send) or the synchronous one
  // (send, receive every pending reply, report into *head). Caller holds mu_.
  Status FinishReads(proto::ReplyHead* head, bool async, uint64_t stream);
  // SyncStream and QueryStream: Msg is proto::StreamSync or proto::StreamQuery. Caller holds mu_.
  template <class Msg>
  Status StreamRequest(uint32_t device, uint64_t stream, proto::ReplyHead* head);
  // Passes `s` through; a failure breaks the link (Unavailable naming the server, from then on).
  // The OK path is inline: it runs several times per call.
  Status Check(Status s) {
    if (s.ok()) [[likely]] return s;
    return Broken(std::move(s));
  }
  Status Broken(Status s);
  // If `frames` is the server's SessionEnd, breaks the link with its reason (PermissionDenied,
  // returned); otherwise OK.
  Status CheckSessionEnd(const std::vector<proto::Frame>& frames);
  Status BrokenStatus();
  // Reads the replies of every pending read (sent_only: only of those whose requests have left).
  // Caller holds read_mu_; without sent_only, every pending read's request must have been sent.
  Status DrainReadsLocked(bool sent_only = false);
  static void Land(const PendingRead& p, std::span<const std::byte> data);
  // Whether the oldest pending read's request has left. Caller holds state_mu_.
  bool FrontReadSent() const {
    // seq_cst: the pump loads it after clearing timer_armed_ (see ArmTimer in ReadsSent).
    return !pending_.empty() && pending_.front().gen < batch_gen_.load();
  }
  // After a batch left with read requests: wakes a sleeping pump if some were asynchronous.
  void ReadsSent();
  // The batch holds requests nobody sent yet: on the empty -> non-empty step, a sleeping pump is
  // woken to send them within a tick or two. Caller holds mu_.
  void MarkQueued() {
    if (queued_.load(std::memory_order_relaxed)) return;
    // seq_cst store before ArmTimer's exchange: pairs with the pump's clearing of timer_armed_
    // before it looks at queued_ (either this arms the timer again or the pump sees the batch).
    queued_.store(true);
    ArmTimer();
  }
  // Arms the pump's timer for one tick unless timer_armed_ says the pump looks within a tick
  // anyway (armed, or ticking); `now`: to fire at once. Caller holds mu_ (or is the destructor).
  void ArmTimer(bool now = false);
  // Whether sent reads wait that no caller is receiving. Caller holds state_mu_.
  bool ReadsUnattended();
  // Moves a failure of an earlier asynchronous read into *head. Caller holds read_mu_, or mu_
  // with no read pending (see ReadReply).
  void TakeAsyncFailure(proto::ReplyHead* head);
  // replies_ + 1: a load and a store, not a locked add on the reply's path (its writers hold
  // read_mu_, or mu_ with no read pending, see ReadReply). Caller holds read_mu_, or that.
  void CountReply() {
    replies_.store(replies_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  Status StartPump();
  void PumpLoop();

  std::string address_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
  proto::HelloReply hello_;
  proto::BatchWriter batch_;   // guarded by mu_
  // CopyChunksToDevice's heads of chunks 1.. (chunk 0's is batch_), parts and messages; mu_.
  proto::BatchWriter chunk_heads_[kChunksInFlight];
  wire::ByteSpan chunk_parts_[kChunksInFlight][2];
  std::span<const wire::ByteSpan> chunk_msgs_[kChunksInFlight];
  // Written under mu_ (bumped whenever the batch is sent), read by the pump without it.
  std::atomic<uint64_t> batch_gen_{0};
  // After a batch was sent (caller holds mu_, as every writer of batch_gen_ does). seq_cst when
  // the batch carried reads: FrontReadSent's order with the pump's timer (see ArmTimer). Without
  // reads no pending read's generation is the batch's, so FrontReadSent reads the same either
  // way and a plain store does (a locked increment was ~5% of a no-op call's client CPU).
  void NextBatch() {
    if (reads_queued_) {
      ++batch_gen_;
    } else {
      batch_gen_.store(batch_gen_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  bool reads_queued_ = false;  // guarded by mu_: the batch carries read requests
  bool async_reads_queued_ = false;  // guarded by mu_: ... asynchronous ones among them
  size_t queued_read_bytes_ = 0;  // guarded by mu_: bytes the batch's read requests ask for
  // The last device-to-host copy's stream, and batch_.added() right after its requests (mu_):
  // SyncStream compares it with batch_.added() to see that nothing was queued since.
  struct LastRead {
    uint64_t added = 0;  // 0: none yet
    uint64_t stream = 0;
    bool failed = false;  // a synchronous copy's reply said it failed
  };
  LastRead last_read_;
  std::atomic<uint64_t> syncs_elided_{0};
  std::vector<std::byte> in_;  // guarded by read_mu_ (sync replies)
  std::vector<std::byte> drain_in_;  // guarded by read_mu_ (pending reads)
  proto::Frame frame_;
  // ParseMessage's frames of sync replies and of pending reads (read_mu_; reused: no
  // allocation per reply).
  std::vector<proto::Frame> frames_, drain_frames_;
  std::mutex mu_;
  std::mutex read_mu_;  // held by whoever reads from conn_; taken after mu_ when both

  std::mutex state_mu_;  // guards what follows (leaf lock)
  Status broken_;
  std::atomic<bool> broken_flag_{false};
  std::deque<PendingRead> pending_;
  // pending_.size(), stored under state_mu_ after every change (PendingChanged), so that "is any
  // read pending?" costs no lock on a call's path. A holder of mu_ that reads 0 is right: reads
  // are registered only under mu_ (its acquisition makes an earlier registration visible), and
  // anything else only removes them. The pump, which reads it without mu_, may see a stale 0 and
  // looks again at its next tick. Released after each change, so that a caller that acquires 0
  // sees all the landing of the last read did (ReadReply, which then skips read_mu_).
  std::atomic<size_t> pending_size_{0};
  void PendingChanged() { pending_size_.store(pending_.size(), std::memory_order_release); }
  uint64_t read_seq_ = 0;
  // The first failed asynchronous read, not yet reported: set under read_mu_ and state_mu_ both
  // (DrainReadsLocked), taken under state_mu_ by a caller holding read_mu_, or mu_ with no read
  // pending (TakeAsyncFailure from ReadReply); read under state_mu_, or by such a caller.
  proto::ReplyHead async_failure_;
  bool pump_stop_ = false;
  int timer_fd_ = -1;  // the pump's one-shot timer (timerfd), armed by callers
  // Whether the pump will look within about a tick: the timer is armed and not yet consumed, or
  // the pump is ticking. The pump clears it before each look and sets it when the look leaves it
  // ticking; callers never clear it.
  std::atomic<bool> timer_armed_{false};
  // The pump waits for the timer with no timeout (tests: it is idle).
  std::atomic<bool> pump_sleeping_{false};
  // Set by MarkQueued, cleared when the batch is sent: lets the pump see queued work without
  // touching mu_ (a caller may hold mu_ for a long synchronous call).
  std::atomic<bool> queued_{false};
  // The pump's tick in microseconds (written by the pump, read by ArmTimer).
  std::atomic<int64_t> pump_tick_us_{kFlushTick.count()};
  std::atomic<uint64_t> pump_flushes_{0}, pump_wakes_{0}, timer_arms_{0};
  std::atomic<uint64_t> replies_{0};
  std::vector<std::byte> pack2d_;  // guarded by mu_: CopyToDevice2D's packed rows
  std::thread pump_;
};

}  // namespace gpool::remote::client
