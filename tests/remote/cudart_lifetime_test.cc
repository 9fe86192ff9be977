// The libcudart.so.13 stand-in's state outlives exit() and its errors stay what they first were.
// Each case runs in a child process that loads the stand-in with dlopen for the first time (this
// process never loads it, so every child starts with its own copy and its own static objects),
// against a GPU server forked from this process (emulated backend, TCP on loopback).
//
// 1. CUDA calls may still come while exit() runs the library's destructors (another program
//    thread, an atexit handler, the host-function thread). An asynchronous error kept for the
//    program then printed freed bytes as its message: the map keeping it had been destroyed. The
//    child keeps such an error (an out-of-range posted memset, brought back by the host-function
//    thread's query before the program synchronizes), calls exit(), and synchronizes from an
//    atexit handler registered before the library was loaded, which therefore runs after the
//    library's destructors. The message must come out whole (under ASan the destroyed map's read
//    is also a heap-use-after-free).
// 2. A session refused for its lease: every call on that server returns cudaErrorNotPermitted, as
//    docs/remoting.md says, not just the first (later ones returned cudaErrorDevicesUnavailable).
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "remote/server/test_server.h"

namespace gpool::remote {
namespace {

constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInvalidValue = 1;
constexpr int kCudaErrorNotPermitted = 800;

using MallocFn = int (*)(void**, size_t);
using MemsetAsyncFn = int (*)(void*, int, size_t, void*);
using HostFn = void (*)(void*);
using LaunchHostFuncFn = int (*)(void*, HostFn, void*);
using SyncFn = int (*)();

// Runs `child` in a forked process whose stderr is captured; returns {exit status, stderr}.
template <class Fn>
std::pair<int, std::string> InChild(Fn&& child) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    child();  // exits
    _exit(99);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  // Bounded: a child that hangs is killed after 60 s rather than holding the test forever.
  for (;;) {
    pollfd p{.fd = fds[0], .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 60000) <= 0) {
      kill(pid, SIGKILL);
      out += "\n[test: the child hung; killed]";
      break;
    }
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

class CudartLifetime : public ::testing::Test {
 protected:
  // The server is forked before this process has any thread (test_server.h).
  void StartServer(server::ServerOptions o = {}) {
    o.emulated.memory_bytes = uint64_t{256} << 20;
    address_ = server::testing::ForkServer(o, &server_pid_);
    ASSERT_FALSE(address_.empty()) << "the GPU server did not start";
  }
  void TearDown() override { server::testing::KillServer(server_pid_); }

  std::string address_;
  pid_t server_pid_ = -1;
};

void* Sym(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr) {
    std::fprintf(stderr, "no %s in the stand-in\n", name);
    _exit(10);
  }
  return f;
}

SyncFn g_sync = nullptr;
void SyncAfterTheLibrarysDestructors() {
  int e = g_sync();
  std::fprintf(stderr, "\nSYNC-AT-EXIT %d\n", e);
  // Done: what exit() does next (a sanitizer's leak check of a child that left its server link
  // open on purpose) is not this test's question.
  _exit(0);
}

TEST_F(CudartLifetime, AnAsynchronousErrorKeptForTheProgramSurvivesExit) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto [rc, out] = InChild([&] {
    setenv("GPOOL_DEVICES", (address_ + "/0").c_str(), 1);
    // Before the library's static constructors register their destructors: runs after them.
    std::atexit(SyncAfterTheLibrarysDestructors);
    void* lib = dlopen(GPOOL_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      std::fprintf(stderr, "dlopen: %s\n", dlerror());
      _exit(11);
    }
    auto malloc_fn = reinterpret_cast<MallocFn>(Sym(lib, "cudaMalloc"));
    auto memset_fn = reinterpret_cast<MemsetAsyncFn>(Sym(lib, "cudaMemsetAsync"));
    auto host_fn = reinterpret_cast<LaunchHostFuncFn>(Sym(lib, "cudaLaunchHostFunc"));
    g_sync = reinterpret_cast<SyncFn>(Sym(lib, "cudaDeviceSynchronize"));
    void* p = nullptr;
    if (malloc_fn(&p, 64) != kCudaSuccess) _exit(12);
    std::fprintf(stderr, "ALLOCATED %p\n", p);
    // Posted: fails on the server; the host-function thread's query brings the error back and
    // keeps it for the program's next synchronizing call.
    if (memset_fn(p, 0, 1 << 20, nullptr) != kCudaSuccess) _exit(13);
    static std::atomic<bool> ran{false};
    if (host_fn(nullptr, [](void*) { ran.store(true); }, nullptr) != kCudaSuccess) _exit(14);
    for (int i = 0; i < 60000 && !ran.load(); ++i) usleep(1000);
    if (!ran.load()) _exit(15);
    std::exit(0);
  });
  ASSERT_EQ(rc, 0) << out;
  size_t at = out.find("ALLOCATED ");
  ASSERT_NE(at, std::string::npos) << out;
  std::string ptr = out.substr(at + 10, out.find('\n', at) - at - 10);
  // The message the server sent (emulated backend's memset check), whole.
  EXPECT_NE(out.find("gpool: asynchronous error on " + address_ + ": Memset: memset: device range " +
                     ptr + "+1048576 is not inside one allocation\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("SYNC-AT-EXIT " + std::to_string(kCudaErrorInvalidValue)), std::string::npos)
      << out;
}

TEST_F(CudartLifetime, ASessionRefusedForItsLeaseIsNotPermittedEveryTime) {
  server::ServerOptions o;
  o.authorize = [](const std::string&, server::SessionGrant*) {
    return Status::PermissionDenied("lease refused: this test's server refuses every lease");
  };
  ASSERT_NO_FATAL_FAILURE(StartServer(o));
  auto [rc, out] = InChild([&] {
    setenv("GPOOL_DEVICES", (address_ + "/0").c_str(), 1);
    setenv("GPOOL_LEASE", "gpl1.not.valid", 1);
    void* lib = dlopen(GPOOL_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) _exit(11);
    auto malloc_fn = reinterpret_cast<MallocFn>(Sym(lib, "cudaMalloc"));
    auto sync_fn = reinterpret_cast<SyncFn>(Sym(lib, "cudaDeviceSynchronize"));
    void* p = nullptr;
    int a = malloc_fn(&p, 16), b = malloc_fn(&p, 16), c = sync_fn();
    std::fprintf(stderr, "\nCODES %d %d %d\n", a, b, c);
    _exit(0);
  });
  ASSERT_EQ(rc, 0) << out;
  const std::string want = std::to_string(kCudaErrorNotPermitted);
  EXPECT_NE(out.find("CODES " + want + " " + want + " " + want + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("refused the session: lease refused: this test's server refuses every lease"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace gpool::remote
