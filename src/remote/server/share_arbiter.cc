#include "remote/server/share_arbiter.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "remote/server/process_shared.h"

namespace gpool::remote::server {
namespace {

constexpr int kMaxDevices = 16;
constexpr int kMaxSlots = 1024;
constexpr size_t kMaxLeaseIdBytes = 64;
// A waiter re-checks at least this often, so a peer that died (its slot still marked active)
// holds nobody back for long.
constexpr long kRecheckNs = 10'000'000;

}  // namespace

struct ShareArbiter::Slot {
  pid_t pid;  // 0 = free
  uint64_t admitted, waits;
  uint8_t active[kMaxDevices];
  int32_t group[kMaxDevices];  // per device, the index of its group there
};

// Per device: `slots` of them, since a slot is in exactly one group per device.
struct ShareArbiter::Group {
  int32_t refs;  // slots in the group; 0 = free
  uint32_t share_milli;
  uint64_t vtime;  // kernel ns * 1000 / share_milli, of all its sessions
  uint8_t id_len;  // 0: a session alone (never joined by another)
  char id[kMaxLeaseIdBytes];
};

// The mapping: this header, the slots, then the groups device by device (all 8-byte aligned).
struct ShareArbiter::Shared {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int slots;
  int devices;
};

StatusOr<std::unique_ptr<ShareArbiter>> ShareArbiter::Create(const ShareArbiterOptions& o) {
  if (o.max_sessions < 1 || o.max_sessions > kMaxSlots) {
    return Status::InvalidArgument(fmt::format("share arbiter: max_sessions {} not in 1..{}",
                                               o.max_sessions, kMaxSlots));
  }
  if (o.devices < 1 || o.devices > kMaxDevices) {
    return Status::InvalidArgument(
        fmt::format("share arbiter: devices {} not in 1..{}", o.devices, kMaxDevices));
  }
  static_assert(sizeof(Shared) % alignof(Slot) == 0 && sizeof(Slot) % alignof(Group) == 0);
  const size_t n = static_cast<size_t>(o.max_sessions);
  size_t bytes = sizeof(Shared) + sizeof(Slot) * n +
                 sizeof(Group) * n * static_cast<size_t>(o.devices);
  GPOOL_ASSIGN_OR_RETURN(void* p, MapSharedZeroed(bytes, "share arbiter"));
  auto* s = static_cast<Shared*>(p);
  InitSharedRobustMutex(&s->mu);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  s->slots = o.max_sessions;
  s->devices = o.devices;
  return std::unique_ptr<ShareArbiter>(new ShareArbiter(s, bytes, o));
}

ShareArbiter::ShareArbiter(Shared* shared, size_t bytes, const ShareArbiterOptions& options)
    : shared_(shared), bytes_(bytes), options_(options) {}

// The mapping is unmapped but the mutex and condition variable are not destroyed: other
// processes may still use them.
ShareArbiter::~ShareArbiter() { ::munmap(shared_, bytes_); }

ShareArbiter::Slot& ShareArbiter::slot(int i) {
  return reinterpret_cast<Slot*>(shared_ + 1)[i];
}
ShareArbiter::Group& ShareArbiter::group(uint32_t device, int g) {
  auto* groups = reinterpret_cast<Group*>(reinterpret_cast<Slot*>(shared_ + 1) + shared_->slots);
  return groups[static_cast<size_t>(device) * static_cast<size_t>(shared_->slots) +
                static_cast<size_t>(g)];
}

void ShareArbiter::Lock() { LockSharedRobust(&shared_->mu); }
void ShareArbiter::Unlock() { pthread_mutex_unlock(&shared_->mu); }

void ShareArbiter::ReleaseLocked(int i) {
  Slot& s = slot(i);
  if (s.pid != 0) {
    for (int d = 0; d < shared_->devices; ++d) {
      Group& g = group(static_cast<uint32_t>(d), s.group[d]);
      if (--g.refs <= 0) g = Group{};
    }
  }
  s = Slot{};
}

StatusOr<int> ShareArbiter::Join(uint32_t share_milli, std::span<const ShareGroup> groups) {
  for (const ShareGroup& g : groups) {
    if (g.lease_id.size() > kMaxLeaseIdBytes) {
      return Status::InvalidArgument(fmt::format(
          "share arbiter: lease id of {} bytes (at most {})", g.lease_id.size(), kMaxLeaseIdBytes));
    }
  }
  share_milli = std::clamp<uint32_t>(share_milli, 1, 1000);
  Lock();
  int found = -1;
  for (int i = 0; i < shared_->slots && found < 0; ++i) {
    Slot& s = slot(i);
    if (s.pid == 0 || !ProcessAlive(s.pid)) found = i;
  }
  if (found >= 0) {
    ReleaseLocked(found);  // a dead session's slot gives up its groups first
    Slot& s = slot(found);
    s.pid = ::getpid();
    for (int d = 0; d < shared_->devices; ++d) {
      const auto dev = static_cast<uint32_t>(d);
      std::string_view id;
      uint32_t share = share_milli;
      for (const ShareGroup& g : groups) {
        if (g.device == dev) id = g.lease_id, share = std::clamp<uint32_t>(g.share_milli, 1, 1000);
      }
      int joined = -1, free = -1;
      for (int k = 0; k < shared_->slots && joined < 0; ++k) {
        Group& g = group(dev, k);
        if (g.refs > 0 && !id.empty() && std::string_view(g.id, g.id_len) == id) joined = k;
        if (g.refs <= 0 && free < 0) free = k;
      }
      if (joined < 0) {  // there is always a free one: a slot is in one group per device
        joined = free;
        Group& g = group(dev, joined);
        g = Group{};
        g.share_milli = share;
        g.id_len = static_cast<uint8_t>(id.size());
        if (!id.empty()) std::memcpy(g.id, id.data(), id.size());  // (a null data() is UB)
      }
      ++group(dev, joined).refs;
      s.group[d] = joined;
    }
  }
  Unlock();
  if (found < 0) {
    return Status::ResourceExhausted(fmt::format(
        "share arbiter: all {} session slots are in use by live sessions", shared_->slots));
  }
  return found;
}

void ShareArbiter::Leave(int i) {
  Lock();
  ReleaseLocked(i);
  pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

uint64_t ShareArbiter::MinOtherActive(int self, uint32_t device, bool reap_dead) {
  const int mine = slot(self).group[device];
  uint64_t m = UINT64_MAX;
  for (int i = 0; i < shared_->slots; ++i) {
    Slot& s = slot(i);
    if (i == self || s.pid == 0 || !s.active[device] || s.group[device] == mine) continue;
    if (reap_dead && !ProcessAlive(s.pid)) {  // died without Leave: reclaim
      ReleaseLocked(i);
      continue;
    }
    m = std::min(m, group(device, s.group[device]).vtime);
  }
  return m;
}

bool ShareArbiter::GroupActive(int self, uint32_t device) {
  const int mine = slot(self).group[device];
  for (int i = 0; i < shared_->slots; ++i) {
    const Slot& s = slot(i);
    if (i != self && s.pid != 0 && s.active[device] && s.group[device] == mine) return true;
  }
  return false;
}

bool ShareArbiter::Admit(int self, uint32_t device) {
  if (device >= static_cast<uint32_t>(options_.devices)) return false;
  Lock();
  Slot& me = slot(self);
  Group& g = group(device, me.group[device]);
  if (!me.active[device]) {
    // The group coming back from idle: it starts no earlier than the least-served active group.
    // (A session joining its lease's busy group takes the group's time as it is.)
    if (!GroupActive(self, device)) {
      uint64_t m = MinOtherActive(self, device, /*reap_dead=*/false);
      if (m != UINT64_MAX) g.vtime = std::max(g.vtime, m);
    }
    me.active[device] = 1;
  }
  bool waited = false;
  for (;;) {
    // The cheap scan first; dead peers are looked for (one kill(2) each) only before waiting.
    uint64_t m = MinOtherActive(self, device, /*reap_dead=*/false);
    if (m == UINT64_MAX || g.vtime <= m + options_.slice_ns) break;
    m = MinOtherActive(self, device, /*reap_dead=*/true);
    if (m == UINT64_MAX || g.vtime <= m + options_.slice_ns) break;
    waited = true;
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += kRecheckNs;
    if (deadline.tv_nsec >= 1'000'000'000) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1'000'000'000;
    }
    if (pthread_cond_timedwait(&shared_->cv, &shared_->mu, &deadline) == EOWNERDEAD) {
      pthread_mutex_consistent(&shared_->mu);
    }
  }
  ++me.admitted;
  if (waited) ++me.waits;
  Unlock();
  return waited;
}

void ShareArbiter::Charge(int self, uint32_t device, uint64_t kernel_ns) {
  if (device >= static_cast<uint32_t>(options_.devices) || kernel_ns == 0) return;
  Lock();
  Group& g = group(device, slot(self).group[device]);
  g.vtime += kernel_ns * 1000 / g.share_milli;
  pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

void ShareArbiter::Idle(int self) {
  Lock();
  Slot& me = slot(self);
  bool any = false;
  for (uint8_t& a : me.active) {
    any |= a != 0;
    a = 0;
  }
  if (any) pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

ShareStats ShareArbiter::stats(int self) const {
  auto* a = const_cast<ShareArbiter*>(this);
  a->Lock();
  ShareStats s{.admitted = a->slot(self).admitted, .waits = a->slot(self).waits};
  a->Unlock();
  return s;
}

}  // namespace gpool::remote::server
