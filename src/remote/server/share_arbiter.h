// Compute-share enforcement among the sessions of one GPU server: weighted fair admission of
// kernel launches, per device, across the server's worker processes.
//
// The unit that gets a share is a *group*: per device, the sessions of one lease (a lease's
// share holds for the lease, however many sessions use it at once), or a session alone (no
// lease, or a test's Join without groups). Each group has a share (the lease's `milli`,
// 1..1000) and, per device, a virtual time: the kernel time its sessions have used divided by its
// share. Before a launch a session waits while its group's virtual time is more than `slice_ns`
// ahead of the smallest virtual time among the other groups that are *active* on that device
// (one of their sessions has launched and not gone idle since). So while several groups keep a
// GPU busy, kernel time is divided in proportion to their shares (time-slicing at kernel
// granularity, as CFS does for threads), and two sessions of one lease split that lease's share
// between them; a group alone on a GPU is never held back (shares are a floor under contention,
// not a cap on an idle GPU). A group becoming active again starts at no less than the smallest
// active virtual time, so idling never banks credit.
//
// Limits: admission is per kernel, so one long kernel is not preempted; the split is by measured
// kernel time, which the emulated backend reports (wall time of its CPU kernel) and the cuda
// backend measures with timing events, charged after the fact (cuda_backend.cc; on real GPUs MPS
// active thread percentages split inside kernels); enforcement is among the sessions of one
// server.
//
// The state lives in one MAP_SHARED anonymous mapping created by the server before it forks its
// workers, guarded by a process-shared robust mutex (a worker killed while holding it does not
// wedge the others) and a process-shared condition variable (process_shared.h). Slots of workers
// that died without Leave() are reclaimed by pid check, and a group goes with its last session.
// Thread safety: every method may be called from any thread of any process that inherited the
// mapping.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace gpool::remote::server {

struct ShareArbiterOptions {
  int max_sessions = 64;  // concurrent sessions; Join fails beyond
  int devices = 16;       // device indexes 0..devices-1 are arbitrated
  // How far a session may run ahead of the least-served active one before it waits. Larger means
  // fewer waits and a coarser split over short windows.
  uint64_t slice_ns = 2'000'000;
};

// A device on which the session shares one group with the other sessions of its lease.
struct ShareGroup {
  uint32_t device = 0;
  std::string lease_id;  // the lease (its token's signature; at most 64 bytes); empty: alone
  uint32_t share_milli = 1000;  // the lease's share (clamped to 1..1000)
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

  // Claims a slot for the calling process's session. On each device listed in `groups` it joins
  // (or starts) its lease's group with that lease's share; on the others it is a group alone
  // with `share_milli` (clamped to 1..1000). Returns the slot, or ResourceExhausted when all
  // are taken by live sessions, InvalidArgument for a lease id over 64 bytes.
  StatusOr<int> Join(uint32_t share_milli, std::span<const ShareGroup> groups = {});
  void Leave(int slot);
  // Blocks until `slot` may launch on `device` (see the class comment); marks it active there.
  // Devices outside 0..devices-1 are admitted at once. Returns whether it had to wait.
  bool Admit(int slot, uint32_t device);
  // Charges `kernel_ns` of kernel time on `device` to `slot`'s group there.
  void Charge(int slot, uint32_t device, uint64_t kernel_ns);
  // The session has no queued work: others stop waiting for it.
  void Idle(int slot);
  ShareStats stats(int slot) const;

 private:
  struct Shared;
  struct Slot;
  struct Group;
  ShareArbiter(Shared* shared, size_t bytes, const ShareArbiterOptions& options);
  Slot& slot(int i);
  Group& group(uint32_t device, int g);
  // The smallest virtual time on `device` among the groups other than `self`'s that have a live
  // active slot, or UINT64_MAX when there is none; with `reap_dead`, slots of dead processes are
  // freed first. Caller holds the mutex.
  uint64_t MinOtherActive(int self, uint32_t device, bool reap_dead);
  // Whether a slot of `self`'s group other than `self` is active on `device`. Caller holds it.
  bool GroupActive(int self, uint32_t device);
  // Frees a slot and its share of its groups. Caller holds the mutex.
  void ReleaseLocked(int slot);
  void Lock();
  void Unlock();

  Shared* shared_;
  size_t bytes_;
  ShareArbiterOptions options_;
};

}  // namespace gpool::remote::server
