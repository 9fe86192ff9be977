// Shared checks for the gpool CUDA samples: every sample prints "PASS <name>" on success and
// exits non-zero with the failing call on error, so tests and scripts/gpu-check.sh can compare.
#pragma once
#include <dlfcn.h>
#include <signal.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cuda_runtime.h>

#include "expect.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,  \
                   cudaGetErrorName(e_), cudaGetErrorString(e_));                     \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// A library's call (cuBLAS, cuDNN, NCCL, ...): `ok` its success status, `name_of` the function
// that names any other status.
#define CHECK_LIB(call, ok, name_of)                                                  \
  do {                                                                                \
    auto s_ = (call);                                                                 \
    if (s_ != (ok)) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,      \
                   name_of(s_));                                                      \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)


// Where the handlers of SIGSEGV and SIGBUS are now, by the file that holds each ("none" for the
// default or ignored disposition): "SIGSEGV libcuda.so.1, SIGBUS libcuda.so.1". gpool's driver
// stand-in (libcuda.so.1) installs one only for a program with __managed__ variables
// (docs/remoting/driver-api.md, "Managed variables"); UCX's libucs installs its own when it is loaded.
inline std::string FaultHandlers() {
  std::string out;
  for (int sig : {SIGSEGV, SIGBUS}) {
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    void* fn = (now.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(now.sa_sigaction)
                                           : reinterpret_cast<void*>(now.sa_handler);
    const char* where = "none";
    Dl_info info{};
    if (now.sa_handler != SIG_DFL && now.sa_handler != SIG_IGN) {
      where = dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "unknown";
      if (const char* slash = std::strrchr(where, '/')) where = slash + 1;
    }
    out += std::string(out.empty() ? "" : ", ") + (sig == SIGSEGV ? "SIGSEGV " : "SIGBUS ") + where;
  }
  return out;
}
