// State shared by the GPU server and the session workers it forks: an anonymous MAP_SHARED
// mapping created before the fork, guarded by a process-shared robust mutex (a worker killed
// while holding it does not wedge the others). Used by ShareArbiter and LeaseLedger.
// Limit: a process counts as alive while kill(pid, 0) finds it, so a pid reused by another
// process looks alive until that one exits too.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "common/status.h"

namespace gpool::remote::server {

// `bytes` of zeroed memory that forked children share with this process (and each other).
inline StatusOr<void*> MapSharedZeroed(size_t bytes, std::string_view what) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted(
        fmt::format("{}: mmap {} bytes: {}", what, bytes, std::strerror(errno)));
  }
  std::memset(p, 0, bytes);
  return p;
}

inline void InitSharedRobustMutex(pthread_mutex_t* mu) {
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mu, &ma);
  pthread_mutexattr_destroy(&ma);
}

// A holder that died leaves the state consistent enough (every update is a few plain stores
// whose half-done state the users tolerate), so mark the mutex consistent and go on.
inline void LockSharedRobust(pthread_mutex_t* mu) {
  if (pthread_mutex_lock(mu) == EOWNERDEAD) pthread_mutex_consistent(mu);
}

inline bool ProcessAlive(pid_t pid) {
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

}  // namespace gpool::remote::server
