// Compute-share enforcement among the sessions of one GPU server: weighted fair admission of
// kernel launches, per device, across the server's worker processes.
//
// Each session has a share (the lease's `milli`, 1..1000) and, per device, a virtual time: the
// kernel time it has used divided by its share. Before a launch a session waits while its virtual
// time is more than `slice_ns` ahead of the smallest virtual time among the other sessions that
// are *active* on that device (have launched and not gone idle since). So while several sessions
// keep a GPU busy, kernel time is divided in proportion to their shares (time-slicing at kernel
// granularity, as CFS does for threads); a session alone on a GPU is never held back (shares are
// a floor under contention, not a cap on an idle GPU). A session becoming active again starts at
// no less than the smallest active virtual time, so idling never banks credit.
//
// Limits: admission is per kernel, so one long kernel is not preempted; the split is by measured
// kernel time, which the emulated backend reports (wall time of its CPU kernel) and the cuda
// backend measures with timing events, charged after the fact (cuda_backend.cc; on real GPUs MPS
// active thread percentages split inside kernels); enforcement is among the sessions of one
// server.
//
// The state lives in one MAP_SHARED anonymous mapping created by the server before it forks its
// workers, guarded by a process-shared robust mutex (a worker killed while holding it does not
// wedge the others) and a process-shared condition variable. Slots of workers that died without
// Leave() are reclaimed by pid check. Thread safety: every method may be called from any thread
// of any process that inherited the mapping.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "common/status.h"

namespace gpool::remote::server {

struct ShareArbiterOptions {
  int max_sessions = 64;  // concurrent sessions; Join fails beyond
  int devices = 16;       // device indexes 0..devices-1 are arbitrated
  // How far a session may run ahead of the least-served active one before it waits. Larger means
  // fewer waits and a coarser split over short windows.
  uint64_t slice_ns = 2'000'000;
};

struct ShareStats {
  uint64_t admitted = 0, waits = 0;
};

class ShareArbiter {
 public:
  // Creates the shared state (call in the server before forking workers).
  static StatusOr<std::unique_ptr<ShareArbiter>> Create(const ShareArbiterOptions& options);
  ~ShareArbiter();
  ShareArbiter(const ShareArbiter&) = delete;
  ShareArbiter& operator=(const ShareArbiter&) = delete;

  // Claims a slot for the calling process's session with `share_milli` (clamped to 1..1000).
  // Returns the slot, or ResourceExhausted when all are taken by live sessions.
  StatusOr<int> Join(uint32_t share_milli);
  void Leave(int slot);
  // Blocks until `slot` may launch on `device` (see the class comment); marks it active there.
  // Devices outside 0..devices-1 are admitted at once. Returns whether it had to wait.
  bool Admit(int slot, uint32_t device);
  // Charges `kernel_ns` of kernel time on `device` to `slot`.
  void Charge(int slot, uint32_t device, uint64_t kernel_ns);
  // The session has no queued work: others stop waiting for it.
  void Idle(int slot);
  ShareStats stats(int slot) const;

 private:
  struct Shared;
  ShareArbiter(Shared* shared, size_t bytes, const ShareArbiterOptions& options);
  // The smallest virtual time on `device` among live active slots other than `self`, or
  // UINT64_MAX when there is none; with `reap_dead`, slots of dead processes are freed first.
  // Caller holds the mutex.
  uint64_t MinOtherActive(int self, uint32_t device, bool reap_dead);
  void Lock();
  void Unlock();

  Shared* shared_;
  size_t bytes_;
  ShareArbiterOptions options_;
};

}  // namespace gpool::remote::server
