// See managed_guard.h.
#include "remote/client/managed_guard.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::client::managed {

struct Variable {
  uint64_t begin = 0, end = 0;  // device range [begin, end)
  int device = 0;
  mutable std::atomic<bool> live{true};  // cleared by Unregister
  std::string message;  // written before the node is published, read-only after
  const Variable* next = nullptr;
};

namespace {

// The registered variables, newest first. Nodes are published with a release store and never
// freed or changed after (but `live`), so the handler can walk the list without a lock while
// Register adds to it. They stay reachable from here (no leak report).
std::atomic<const Variable*> g_head{nullptr};
std::atomic<bool> g_installed{false};
// The dispositions the guard replaced, for faults that are not its own: [0] SIGSEGV, [1] SIGBUS.
// Written once, before the handler is installed.
struct sigaction g_previous[2];

struct Guard {
  std::mutex mu;
  // The pages this process reserved (PROT_NONE) for variables' ranges: begin -> end, disjoint.
  std::map<uint64_t, uint64_t> reserved;
};
Guard& G() {
  static Guard* g = new Guard;  // never destroyed: a library may register at any time
  return *g;
}

// write(2) until done or failing; async-signal-safe.
void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The signal's default action: set, then raised. The signal is blocked while its handler runs, so
// it is delivered (and the process dies of it, with a core where enabled) when the handler
// returns; a fault would also recur there. Async-signal-safe.
void DieOf(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

void OnFault(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // si_addr means the faulting address only for a fault the kernel raised (si_code > 0), not for
  // a signal sent with kill(2).
  const bool fault = info != nullptr && info->si_code > 0;
  if (fault) {
    if (const Variable* v = Find(reinterpret_cast<uint64_t>(info->si_addr))) {
      WriteAll(STDERR_FILENO, v->message.data(), v->message.size());
      DieOf(sig);
      return;
    }
  }
  const struct sigaction& prev = g_previous[sig == SIGBUS ? 1 : 0];
  errno = saved_errno;
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler == SIG_IGN && !fault) return;  // a sent signal, ignored as before
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default, or a fault while the signal is ignored, which the kernel also kills for.
  DieOf(sig);
}

// An alternate signal stack for this thread, unless it has one: a stack overflow faults with no
// stack left, and the handler (then the previous one) must still run. Never freed: the thread may
// fault at any time.
void EnsureAltStack() {
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;
  const size_t size = std::max<size_t>(SIGSTKSZ, size_t{256} << 10);
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;  // the handler then runs on the faulting stack
  stack_t ss{};
  ss.ss_sp = mem;
  ss.ss_size = size;
  if (sigaltstack(&ss, nullptr) != 0) munmap(mem, size);
}

void InstallOnce() {
  if (g_installed.load(std::memory_order_acquire)) return;
  EnsureAltStack();
  struct sigaction sa {};
  sa.sa_sigaction = OnFault;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  // The previous dispositions are read before ours goes in, so the handler never sees them unset.
  sigaction(SIGSEGV, nullptr, &g_previous[0]);
  sigaction(SIGBUS, nullptr, &g_previous[1]);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  g_installed.store(true, std::memory_order_release);
}

// Reserves [lo, hi) (page-aligned) less what this process reserved already, PROT_NONE, so that no
// host mapping of the program can be made there and an access faults. Under G().mu.
Registration ReservePages(uint64_t lo, uint64_t hi) {
  auto& reserved = G().reserved;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  for (uint64_t at = lo; at < hi;) {
    auto next = reserved.upper_bound(at);  // the first reservation starting after `at`
    if (next != reserved.begin()) {
      auto covering = std::prev(next);
      if (covering->second > at) {
        at = covering->second;
        continue;
      }
    }
    const uint64_t end = next == reserved.end() ? hi : std::min(hi, next->first);
    gaps.emplace_back(at, end);
    at = end;
  }
  for (const auto& [b, e] : gaps) {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_FIXED_NOREPLACE
    flags |= MAP_FIXED_NOREPLACE;
#endif
    void* want = reinterpret_cast<void*>(b);
    void* got = mmap(want, e - b, PROT_NONE, flags, -1, 0);
    if (got == MAP_FAILED) {
      const int err = errno;
      if (err == EEXIST) {
        return {Reserve::kMappedHere,
                fmt::format("0x{:x}+{} is already mapped in this process", b, e - b)};
      }
      return {Reserve::kUnavailable,
              fmt::format("reserving 0x{:x}+{}: {}", b, e - b, std::strerror(err))};
    }
    if (got != want) {
      // A kernel without MAP_FIXED_NOREPLACE (before Linux 4.17) takes the address as a hint and
      // maps elsewhere when it is taken.
      munmap(got, e - b);
      return {Reserve::kMappedHere,
              fmt::format("0x{:x}+{} is in use in this process (the reservation landed at {})", b,
                          e - b, got)};
    }
    reserved[b] = e;
  }
  return {};
}

}  // namespace

Registration Register(std::string_view name, uint64_t ptr, uint64_t size, int device) {
  auto v = std::make_unique<Variable>();
  v->begin = ptr;
  v->end = ptr + std::max<uint64_t>(size, 1);
  v->device = device;
  v->message = fmt::format(
      "gpool: FATAL: host access to __managed__ variable {} (device address 0x{:x}, {} bytes, on "
      "device {}): managed memory is not remoted; access it from kernels only, or copy it with "
      "cudaMemcpyFromSymbol/ToSymbol\n", name, ptr, size, device);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  Registration r;
  std::lock_guard<std::mutex> lk(G().mu);
  if (v->end < v->begin) {
    r = {Reserve::kUnavailable, fmt::format("0x{:x}+{} wraps around the address space", ptr, size)};
    v->end = ~uint64_t{0};
  } else {
    const uint64_t lo = v->begin / page * page;
    const uint64_t hi = v->end > ~uint64_t{0} - (page - 1) ? ~uint64_t{0} / page * page
                                                           : (v->end + page - 1) / page * page;
    r = ReservePages(lo, hi);
  }
  v->next = g_head.load(std::memory_order_relaxed);
  g_head.store(v.release(), std::memory_order_release);
  InstallOnce();
  return r;
}

void Unregister(uint64_t ptr, int device) {
  std::lock_guard<std::mutex> lk(G().mu);
  for (const Variable* v = g_head.load(std::memory_order_acquire); v; v = v->next) {
    if (v->begin == ptr && v->device == device) {
      v->live.store(false, std::memory_order_release);
    }
  }
}

const Variable* Find(uint64_t addr) {
  for (const Variable* v = g_head.load(std::memory_order_acquire); v; v = v->next) {
    if (addr >= v->begin && addr < v->end && v->live.load(std::memory_order_acquire)) return v;
  }
  return nullptr;
}

std::string_view Message(const Variable* v) { return v->message; }

bool HandlerInstalled() { return g_installed.load(std::memory_order_acquire); }

void (*Handler())(int, siginfo_t*, void*) { return OnFault; }

}  // namespace gpool::remote::client::managed
