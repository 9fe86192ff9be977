// Checks for the driver-API samples (driver_api.cc, vmm_alloc.cc: host code built -cudart none,
// so without common.h's runtime): CU(call) prints a failed call with its CUresult's name and
// exits 1; EXPECT as in common.h.
#pragma once
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#include "expect.h"

#define CU(call)                                                                        \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                           \
      const char* n_ = "?";                                                             \
      cuGetErrorName(r_, &n_);                                                          \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, n_, \
                   static_cast<int>(r_));                                               \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)
