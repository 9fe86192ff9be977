// Shared checks for the gpool CUDA samples: every sample prints "PASS <name>" on success and
// exits non-zero with the failing call on error, so tests and scripts/gpu-check.sh can compare.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

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

#define EXPECT(cond)                                                                  \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);        \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
