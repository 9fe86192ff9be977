// Device memory accounting per lease and per GPU, across the session workers of one GPU server.
//
// A lease's memory limit holds for the lease, however many sessions use it at once (two
// `gpool run` with one token are two sessions, two worker processes): an allocation is checked
// against the sum of what every live session of that lease holds on its GPU. And the leases on
// one GPU cannot together promise more than it has: a lease's memory is *reserved* from the start
// of its first session to the end of its last one (all of the GPU for a lease larger than it:
// its limit can never be reached there), and admitting a lease whose memory does not
// fit beside the reservations already made (plus what sessions without a lease limit hold) is
// refused, naming the lease and the GPU. Sessions without a memory limit of their own (an
// --insecure server, a lease with mem 0) share what no lease reserved: together they stay within
// the GPU's memory less the reservations, so no lease ever finds its reserved memory taken.
//
// State: one MAP_SHARED anonymous mapping created by the server before it forks workers
// (process_shared.h): one entry per live session, holding its pid and, per device, its lease's
// id and limit and the bytes the session has allocated there. Every total is a sum over live
// entries, computed when it is checked, so no counter can be left wrong by a worker that died:
// the entry of a worker that exited without Leave (a client killed with -9 ends its worker
// normally, but a worker killed with -9, crashed, or cut off by the attach deadline does not) is
// reclaimed when it would change an answer: before refusing anything, the entries of dead
// processes are dropped and the check made again. Cost: a check scans the live entries (at most
// max_sessions, times the sessions of the same lease for the reservations) under the lock.
// Limits: liveness is kill(pid, 0) (process_shared.h); device memory a backend takes outside
// Malloc (module variables, the cuda backend's staging buffers) is not counted; device indexes
// from kMaxDevices on are not accounted (their calls pass unchecked).
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

// One device a session may use, and under which lease.
struct LedgerClaim {
  uint32_t device = 0;
  // Shared by every session of one lease (the token's signature); empty: this session's own
  // (an --insecure session). At most kMaxLeaseIdBytes.
  std::string lease_id;
  uint64_t limit = 0;         // the lease's memory in bytes; 0: no limit of its own, reserves none
  uint64_t device_total = 0;  // the GPU's memory as the backend reports it; 0: unknown, unchecked
  std::string gpu;            // "HOST:PORT/INDEX", for messages
  std::string lease_name;     // "the lease of tenant a (job j)", for messages
};

class LeaseLedger {
 public:
  static constexpr int kMaxDevices = 16;
  static constexpr size_t kMaxLeaseIdBytes = 64;

  // Creates the shared state (in the server, before forking workers).
  static StatusOr<std::unique_ptr<LeaseLedger>> Create(int max_sessions = 256);
  ~LeaseLedger();
  LeaseLedger(const LeaseLedger&) = delete;
  LeaseLedger& operator=(const LeaseLedger&) = delete;

  // Admits a session that may use the claimed devices (at most one claim per device). A lease
  // no live session holds yet is admitted only if its limit fits the GPU beside the other
  // leases' reservations and the memory sessions without a limit hold; else PermissionDenied
  // naming the lease, the GPU and the numbers. ResourceExhausted when max_sessions live sessions
  // hold every entry. Returns the session's entry.
  StatusOr<int> Join(std::span<const LedgerClaim> claims);
  // The session ended: its memory and, if it was its lease's last, the lease's reservation are
  // free again.
  void Leave(int entry);

  // Accounts `size` more bytes to the session on `device`, if its lease (all of the lease's
  // sessions together) or, without a limit, the GPU's unreserved memory has room; else
  // ResourceExhausted saying which limit and its numbers. Devices the session did not claim
  // pass, and so does, without a limit, one allocation larger than the whole GPU (the backend
  // refuses it, naming the device's own bound).
  Status Take(int entry, uint32_t device, uint64_t size);
  // Gives back `size` bytes (a free); GiveAll: all of the session's on `device` (a reset).
  void Give(int entry, uint32_t device, uint64_t size);
  void GiveAll(int entry, uint32_t device);
  // What the session sees of `device`: its lease's limit (or the GPU's memory without one) and
  // what all sessions may still take under it. False for a device it did not claim, or when
  // neither is known.
  bool Room(int entry, uint32_t device, uint64_t* limit, uint64_t* free);

 private:
  struct Shared;
  struct Entry;
  struct Sums;
  LeaseLedger(Shared* shared, size_t bytes) : shared_(shared), bytes_(bytes) {}
  Entry& entry(int i);
  // Caller holds the mutex.
  Sums SumLocked(uint32_t device, const Entry* of_lease);
  bool LeaseHeldLocked(uint32_t device, std::string_view id, int except);
  void ReapDeadLocked();
  void Lock();
  void Unlock();

  Shared* shared_;
  size_t bytes_;
};

}  // namespace gpool::remote::server
