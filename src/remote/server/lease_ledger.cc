#include "remote/server/lease_ledger.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "remote/server/process_shared.h"

namespace gpool::remote::server {
namespace {

constexpr int kMaxLedgerEntries = 4096;

// a + b, saturating (limits near 2^64 must not wrap into a small number).
uint64_t LedgerAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// What a lease of `limit` bytes reserves on a GPU of `total`: its limit, or all of the GPU when
// it asks for more (its limit can never be reached there). So a lease for "the whole GPU" whose
// size came from another source (NVML's total, a node's spec) than the backend's (what
// cuMemGetInfo reports, a little less) is still admitted, alone.
uint64_t Reservation(uint64_t limit, uint64_t total) {
  return total != 0 ? std::min(limit, total) : limit;
}

std::string SessionCount(int n) { return n == 1 ? "1 session" : fmt::format("{} sessions", n); }

}  // namespace

struct LeaseLedger::Entry {
  pid_t pid;  // 0: free
  struct Holding {
    uint8_t held;    // the session may use the device
    uint8_t id_len;  // 0: no lease shared with others
    char id[kMaxLeaseIdBytes];
    uint64_t limit;   // 0: none
    uint64_t in_use;  // bytes this session allocated there
    bool Limited() const { return limit != 0; }
    bool SameLease(std::string_view other) const {
      return held && id_len != 0 && std::string_view(id, id_len) == other;
    }
    std::string_view lease() const { return {id, id_len}; }
  } dev[kMaxDevices];
};

struct LeaseLedger::Shared {
  pthread_mutex_t mu;
  int entries;
  uint64_t total[kMaxDevices];  // each GPU's memory, as the workers' backends report it
};

// Per device, over live entries.
struct LeaseLedger::Sums {
  uint64_t reserved = 0;   // the distinct leases' limits
  int leases = 0;          // how many distinct leases reserve
  uint64_t unlimited = 0;  // bytes held by sessions without a limit
  uint64_t lease_in_use = 0;  // of_lease's lease: bytes held by all its sessions
  int lease_sessions = 0;
};

StatusOr<std::unique_ptr<LeaseLedger>> LeaseLedger::Create(int max_sessions) {
  if (max_sessions < 1 || max_sessions > kMaxLedgerEntries) {
    return Status::InvalidArgument(
        fmt::format("lease ledger: max_sessions {} not in 1..{}", max_sessions, kMaxLedgerEntries));
  }
  size_t bytes = sizeof(Shared) + sizeof(Entry) * static_cast<size_t>(max_sessions);
  GPOOL_ASSIGN_OR_RETURN(void* p, MapSharedZeroed(bytes, "lease ledger"));
  auto* s = static_cast<Shared*>(p);
  InitSharedRobustMutex(&s->mu);
  s->entries = max_sessions;
  return std::unique_ptr<LeaseLedger>(new LeaseLedger(s, bytes));
}

// The mutex is not destroyed: other processes may still use it.
LeaseLedger::~LeaseLedger() { ::munmap(shared_, bytes_); }

// The entries follow the header in the mapping (both 8-byte aligned).
LeaseLedger::Entry& LeaseLedger::entry(int i) {
  static_assert(sizeof(Shared) % alignof(Entry) == 0);
  return reinterpret_cast<Entry*>(shared_ + 1)[i];
}

void LeaseLedger::Lock() { LockSharedRobust(&shared_->mu); }
void LeaseLedger::Unlock() { pthread_mutex_unlock(&shared_->mu); }

void LeaseLedger::ReapDeadLocked() {
  for (int i = 0; i < shared_->entries; ++i) {
    Entry& e = entry(i);
    if (e.pid != 0 && !ProcessAlive(e.pid)) std::memset(&e, 0, sizeof e);
  }
}

bool LeaseLedger::LeaseHeldLocked(uint32_t device, std::string_view id, int except) {
  for (int i = 0; i < shared_->entries; ++i) {
    if (i != except && entry(i).pid != 0 && entry(i).dev[device].SameLease(id)) return true;
  }
  return false;
}

LeaseLedger::Sums LeaseLedger::SumLocked(uint32_t device, const Entry* of_lease) {
  Sums s;
  const Entry::Holding* mine = of_lease ? &of_lease->dev[device] : nullptr;
  for (int i = 0; i < shared_->entries; ++i) {
    const Entry& e = entry(i);
    if (e.pid == 0) continue;
    const Entry::Holding& h = e.dev[device];
    if (!h.held) continue;
    if (mine != nullptr && mine->id_len != 0 && h.SameLease(mine->lease())) {
      s.lease_in_use = LedgerAdd(s.lease_in_use, h.in_use);
      ++s.lease_sessions;
    }
    if (!h.Limited()) {
      s.unlimited = LedgerAdd(s.unlimited, h.in_use);
      continue;
    }
    // A reservation counts once per lease: at its first live session (a session without a
    // shared id is a lease of its own).
    bool first = true;
    for (int j = 0; j < i && first && h.id_len != 0; ++j) {
      first = !(entry(j).pid != 0 && entry(j).dev[device].SameLease(h.lease()));
    }
    if (first) {
      s.reserved = LedgerAdd(s.reserved, Reservation(h.limit, shared_->total[device]));
      ++s.leases;
    }
  }
  return s;
}

StatusOr<int> LeaseLedger::Join(std::span<const LedgerClaim> claims) {
  for (const LedgerClaim& c : claims) {
    if (c.device >= static_cast<uint32_t>(kMaxDevices)) continue;  // not accounted (header)
    if (c.lease_id.size() > kMaxLeaseIdBytes) {
      return Status::InvalidArgument(fmt::format("lease ledger: lease id of {} bytes for GPU {} "
                                                 "(at most {})",
                                                 c.lease_id.size(), c.gpu, kMaxLeaseIdBytes));
    }
  }
  Lock();
  Status refused;
  int found = -1;
  for (int attempt = 0; attempt < 2; ++attempt) {
    // The dead are looked for (one kill(2) per entry) only when they might be in the way.
    if (attempt == 1) ReapDeadLocked();
    refused = Status::Ok();
    found = -1;
    for (int i = 0; i < shared_->entries && found < 0; ++i) {
      if (entry(i).pid == 0) found = i;
    }
    if (found < 0) {
      refused = Status::ResourceExhausted(fmt::format(
          "the GPU server serves at most {} sessions at once, and that many are running",
          shared_->entries));
      continue;
    }
    for (const LedgerClaim& c : claims) {
      if (c.device >= static_cast<uint32_t>(kMaxDevices) || c.limit == 0 || c.device_total == 0) {
        continue;
      }
      // A lease that already has a live session has its reservation: its sessions share it.
      if (!c.lease_id.empty() && LeaseHeldLocked(c.device, c.lease_id, -1)) continue;
      Sums s = SumLocked(c.device, nullptr);
      const uint64_t reserve = Reservation(c.limit, c.device_total);
      if (LedgerAdd(LedgerAdd(s.reserved, s.unlimited), reserve) > c.device_total) {
        refused = Status::PermissionDenied(fmt::format(
            "{} for GPU {} reserves {} bytes, but the GPU has {} bytes, of which {} are reserved "
            "by {} other lease(s) and {} are in use by sessions without a memory limit: it "
            "would overcommit the GPU",
            c.lease_name.empty() ? "the lease" : c.lease_name, c.gpu, c.limit, c.device_total,
            s.reserved, s.leases, s.unlimited));
        break;
      }
    }
    if (refused.ok()) break;
  }
  if (!refused.ok()) {
    Unlock();
    return refused;
  }
  Entry& e = entry(found);
  std::memset(&e, 0, sizeof e);
  e.pid = ::getpid();
  for (const LedgerClaim& c : claims) {
    if (c.device >= static_cast<uint32_t>(kMaxDevices)) continue;
    Entry::Holding& h = e.dev[c.device];
    h.held = 1;
    h.id_len = static_cast<uint8_t>(c.lease_id.size());
    if (!c.lease_id.empty()) std::memcpy(h.id, c.lease_id.data(), c.lease_id.size());
    h.limit = c.limit;
    if (c.device_total != 0) shared_->total[c.device] = c.device_total;
  }
  Unlock();
  return found;
}

void LeaseLedger::Leave(int i) {
  Lock();
  std::memset(&entry(i), 0, sizeof(Entry));
  Unlock();
}

Status LeaseLedger::Take(int i, uint32_t device, uint64_t size) {
  if (device >= static_cast<uint32_t>(kMaxDevices)) return Status::Ok();
  Lock();
  Entry& e = entry(i);
  Entry::Holding& h = e.dev[device];
  if (!h.held) {
    Unlock();
    return Status::Ok();
  }
  Status refused;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) ReapDeadLocked();
    Sums s = SumLocked(device, &e);
    if (h.Limited()) {
      // A session of no shared lease is its lease's only session.
      uint64_t used = h.id_len != 0 ? s.lease_in_use : h.in_use;
      if (LedgerAdd(used, size) <= h.limit) {
        refused = Status::Ok();
        break;
      }
      refused = Status::ResourceExhausted(fmt::format(
          "its lease's memory limit is {} bytes and {} are in use ({} of the lease)", h.limit,
          used, SessionCount(h.id_len != 0 ? s.lease_sessions : 1)));
    } else {
      // One allocation larger than the whole GPU is the backend's to refuse, in its own words
      // (the device's bound, as the driver reports it); sharing is not the reason it fails.
      const uint64_t total = shared_->total[device];
      if (total == 0 || size > total ||
          LedgerAdd(LedgerAdd(s.reserved, s.unlimited), size) <= total) {
        refused = Status::Ok();
        break;
      }
      refused = Status::ResourceExhausted(fmt::format(
          "the GPU has {} bytes, of which {} are reserved by {} lease(s) and {} are in use by "
          "sessions without a memory limit",
          total, s.reserved, s.leases, s.unlimited));
    }
  }
  if (refused.ok()) h.in_use = LedgerAdd(h.in_use, size);
  Unlock();
  return refused;
}

void LeaseLedger::Give(int i, uint32_t device, uint64_t size) {
  if (device >= static_cast<uint32_t>(kMaxDevices)) return;
  Lock();
  uint64_t& in_use = entry(i).dev[device].in_use;
  in_use -= std::min(in_use, size);
  Unlock();
}

void LeaseLedger::GiveAll(int i, uint32_t device) {
  if (device >= static_cast<uint32_t>(kMaxDevices)) return;
  Lock();
  entry(i).dev[device].in_use = 0;
  Unlock();
}

bool LeaseLedger::Room(int i, uint32_t device, uint64_t* limit, uint64_t* free) {
  if (device >= static_cast<uint32_t>(kMaxDevices)) return false;
  Lock();
  Entry& e = entry(i);
  const Entry::Holding& h = e.dev[device];
  // Without a limit of its own and with the GPU's size unknown, there is nothing to say.
  bool held = h.held != 0 && (h.Limited() || shared_->total[device] != 0);
  if (held) {
    Sums s = SumLocked(device, &e);
    if (h.Limited()) {
      uint64_t used = h.id_len != 0 ? s.lease_in_use : h.in_use;
      *limit = h.limit;
      *free = h.limit - std::min(h.limit, used);
    } else {
      *limit = shared_->total[device];
      uint64_t taken = LedgerAdd(s.reserved, s.unlimited);
      *free = *limit - std::min(*limit, taken);
    }
  }
  Unlock();
  return held;
}

}  // namespace gpool::remote::server
