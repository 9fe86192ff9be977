// cuGetProcAddress's lookup, as pure logic over the table gen_driver_tables.py derives from
// cuda.h and cudaTypedefs.h (driver_procs.inc): which exported symbol a (base name, CUDA version,
// flags) request means. For example ("cuMemAlloc", 13000, legacy) is cuMemAlloc_v2,
// ("cuMemAlloc", 3000) the CUDA 2.x ABI's cuMemAlloc, and ("cuMemcpyHtoDAsync", 13000,
// per-thread) cuMemcpyHtoDAsync_v2_ptsz. Thread safety: immutable static data.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpool::remote::client {

// CUdriverProcAddressQueryResult's values.
enum class ProcFound : int { kSuccess = 0, kSymbolNotFound = 1, kVersionNotSufficient = 2 };

struct ProcLookup {
  ProcFound found = ProcFound::kSymbolNotFound;
  const char* symbol = nullptr;  // the exported name (kSuccess only)
};

// `flags`: CU_GET_PROC_ADDRESS_* (1 legacy stream, 2 per-thread default stream, 0 default).
// `default_per_thread`: what flags 0 means, which depends on how the caller was compiled: a
// program built with per-thread default streams calls cuGetProcAddress_v2_ptsz (cuda.h's macro).
// The newest version of `base` not after `cuda_version` is chosen; with per-thread streams its
// per-thread variant when the entry point has one (else the legacy one, as CUDA documents).
ProcLookup LookupProc(std::string_view base, int cuda_version, uint64_t flags,
                      bool default_per_thread);

// Table size, for coverage figures and tests: rows, and distinct base names.
int ProcRowCount();
int ProcBaseCount();

}  // namespace gpool::remote::client
