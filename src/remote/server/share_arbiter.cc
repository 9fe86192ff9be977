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

namespace gpool::remote::server {
namespace {

constexpr int kMaxDevices = 16;
constexpr int kMaxSlots = 1024;
// A waiter re-checks at least this often, so a peer that died (its slot still marked active)
// holds nobody back for long.
constexpr long kRecheckNs = 10'000'000;

struct Slot {
  pid_t pid;  // 0 = free
  uint32_t share_milli;
  uint64_t admitted, waits;
  uint8_t active[kMaxDevices];
  uint64_t vtime[kMaxDevices];  // kernel ns * 1000 / share_milli
};

bool Alive(pid_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace

struct ShareArbiter::Shared {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int slots;
  Slot slot[1];  // `slots` of them (the mapping is sized for it)
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
  size_t bytes = sizeof(Shared) + sizeof(Slot) * static_cast<size_t>(o.max_sessions);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted(fmt::format("share arbiter: mmap {} bytes: {}", bytes,
                                                 std::strerror(errno)));
  }
  std::memset(p, 0, bytes);
  auto* s = static_cast<Shared*>(p);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&s->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_condattr_destroy(&ca);
  s->slots = o.max_sessions;
  return std::unique_ptr<ShareArbiter>(new ShareArbiter(s, bytes, o));
}

ShareArbiter::ShareArbiter(Shared* shared, size_t bytes, const ShareArbiterOptions& options)
    : shared_(shared), bytes_(bytes), options_(options) {}

// The mapping is unmapped but the mutex and condition variable are not destroyed: other
// processes may still use them.
ShareArbiter::~ShareArbiter() { ::munmap(shared_, bytes_); }

void ShareArbiter::Lock() {
  // A holder that died leaves the state consistent enough (every update is a few plain stores),
  // so mark the mutex consistent and go on.
  if (pthread_mutex_lock(&shared_->mu) == EOWNERDEAD) pthread_mutex_consistent(&shared_->mu);
}
void ShareArbiter::Unlock() { pthread_mutex_unlock(&shared_->mu); }

StatusOr<int> ShareArbiter::Join(uint32_t share_milli) {
  share_milli = std::clamp<uint32_t>(share_milli, 1, 1000);
  Lock();
  int found = -1;
  for (int i = 0; i < shared_->slots && found < 0; ++i) {
    Slot& s = shared_->slot[i];
    if (s.pid == 0 || !Alive(s.pid)) found = i;
  }
  if (found >= 0) {
    Slot& s = shared_->slot[found];
    std::memset(&s, 0, sizeof s);
    s.pid = ::getpid();
    s.share_milli = share_milli;
  }
  Unlock();
  if (found < 0) {
    return Status::ResourceExhausted(fmt::format(
        "share arbiter: all {} session slots are in use by live sessions", shared_->slots));
  }
  return found;
}

void ShareArbiter::Leave(int slot) {
  Lock();
  shared_->slot[slot] = Slot{};
  pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

uint64_t ShareArbiter::MinOtherActive(int self, uint32_t device, bool reap_dead) {
  uint64_t m = UINT64_MAX;
  for (int i = 0; i < shared_->slots; ++i) {
    Slot& s = shared_->slot[i];
    if (i == self || s.pid == 0 || !s.active[device]) continue;
    if (reap_dead && !Alive(s.pid)) {  // died without Leave: reclaim
      s = Slot{};
      continue;
    }
    m = std::min(m, s.vtime[device]);
  }
  return m;
}

bool ShareArbiter::Admit(int slot, uint32_t device) {
  if (device >= static_cast<uint32_t>(options_.devices)) return false;
  Lock();
  Slot& me = shared_->slot[slot];
  if (!me.active[device]) {
    // Coming back from idle: start no earlier than the least-served active session.
    uint64_t m = MinOtherActive(slot, device, /*reap_dead=*/false);
    if (m != UINT64_MAX) me.vtime[device] = std::max(me.vtime[device], m);
    me.active[device] = 1;
  }
  bool waited = false;
  for (;;) {
    // The cheap scan first; dead peers are looked for (one kill(2) each) only before waiting.
    uint64_t m = MinOtherActive(slot, device, /*reap_dead=*/false);
    if (m == UINT64_MAX || me.vtime[device] <= m + options_.slice_ns) break;
    m = MinOtherActive(slot, device, /*reap_dead=*/true);
    if (m == UINT64_MAX || me.vtime[device] <= m + options_.slice_ns) break;
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

void ShareArbiter::Charge(int slot, uint32_t device, uint64_t kernel_ns) {
  if (device >= static_cast<uint32_t>(options_.devices) || kernel_ns == 0) return;
  Lock();
  Slot& me = shared_->slot[slot];
  me.vtime[device] += kernel_ns * 1000 / me.share_milli;
  pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

void ShareArbiter::Idle(int slot) {
  Lock();
  Slot& me = shared_->slot[slot];
  bool any = false;
  for (uint8_t& a : me.active) {
    any |= a != 0;
    a = 0;
  }
  if (any) pthread_cond_broadcast(&shared_->cv);
  Unlock();
}

ShareStats ShareArbiter::stats(int slot) const {
  auto* self = const_cast<ShareArbiter*>(this);
  self->Lock();
  ShareStats s{.admitted = shared_->slot[slot].admitted, .waits = shared_->slot[slot].waits};
  self->Unlock();
  return s;
}

}  // namespace gpool::remote::server
