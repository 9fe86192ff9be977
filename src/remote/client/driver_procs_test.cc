// cuGetProcAddress's table and lookup. Expected symbols are cuda.h's own mappings (its
// `#define cuMemAlloc cuMemAlloc_v2` and the per-thread macros), and the versions
// cudaTypedefs.h's PFN_<name>_v<version> typedefs give.
#include "remote/client/driver_procs.h"

#include <string>

#include <gtest/gtest.h>

namespace gpool::remote::client {
namespace {

std::string Sym(const char* base, int version, uint64_t flags = 0, bool ptds = false) {
  ProcLookup l = LookupProc(base, version, flags, ptds);
  return l.found == ProcFound::kSuccess ? l.symbol : "<" + std::to_string(int(l.found)) + ">";
}

TEST(DriverProcsTest, TheNewestVersionNotAfterTheRequestedOne) {
  EXPECT_EQ(Sym("cuMemAlloc", 13000), "cuMemAlloc_v2");
  EXPECT_EQ(Sym("cuMemAlloc", 3020), "cuMemAlloc_v2");  // _v2 appeared in CUDA 3.2
  EXPECT_EQ(Sym("cuMemAlloc", 3010), "cuMemAlloc");     // the 32-bit ABI before it
  EXPECT_EQ(Sym("cuCtxCreate", 12000), "cuCtxCreate_v3");
  EXPECT_EQ(Sym("cuCtxCreate", 13000), "cuCtxCreate_v4");
  EXPECT_EQ(Sym("cuGetProcAddress", 12000), "cuGetProcAddress_v2");
  EXPECT_EQ(Sym("cuGetProcAddress", 11030), "cuGetProcAddress");
  EXPECT_EQ(Sym("cuInit", 13000), "cuInit");
  EXPECT_EQ(Sym("cuGraphInstantiate", 13000), "cuGraphInstantiateWithFlags");  // cuda.h's #define
}

TEST(DriverProcsTest, PerThreadVariantsWhereAskedAndWhereTheyExist) {
  const uint64_t kLegacy = 1, kPerThread = 2;
  EXPECT_EQ(Sym("cuMemcpyHtoDAsync", 13000, kPerThread), "cuMemcpyHtoDAsync_v2_ptsz");
  EXPECT_EQ(Sym("cuMemcpyHtoD", 13000, kPerThread), "cuMemcpyHtoD_v2_ptds");
  EXPECT_EQ(Sym("cuLaunchKernel", 13000, kPerThread), "cuLaunchKernel_ptsz");
  EXPECT_EQ(Sym("cuLaunchKernel", 13000, kLegacy), "cuLaunchKernel");
  // Flags 0 follow the caller's build: cuGetProcAddress_v2_ptsz means per-thread.
  EXPECT_EQ(Sym("cuLaunchKernel", 13000, 0, /*ptds=*/true), "cuLaunchKernel_ptsz");
  EXPECT_EQ(Sym("cuLaunchKernel", 13000, 0, /*ptds=*/false), "cuLaunchKernel");
  EXPECT_EQ(Sym("cuLaunchKernel", 13000, kLegacy, /*ptds=*/true), "cuLaunchKernel");
  // No per-thread variant: the legacy one, as CUDA documents.
  EXPECT_EQ(Sym("cuMemAlloc", 13000, kPerThread), "cuMemAlloc_v2");
  // The per-thread variant appeared in CUDA 7.0: not before.
  EXPECT_EQ(Sym("cuLaunchKernel", 6050, kPerThread), "cuLaunchKernel");
  EXPECT_EQ(Sym("cuStreamGetCaptureInfo", 12030, kPerThread), "cuStreamGetCaptureInfo_v3_ptsz");
}

TEST(DriverProcsTest, UnknownNamesAndTooOldVersionsAreNotFound) {
  EXPECT_EQ(LookupProc("cuNoSuchCall", 13000, 0, false).found, ProcFound::kSymbolNotFound);
  // A versioned name is not a base name.
  EXPECT_EQ(LookupProc("cuMemAlloc_v2", 13000, 0, false).found, ProcFound::kSymbolNotFound);
  EXPECT_EQ(LookupProc("cuLaunchKernelEx", 11000, 0, false).found,
            ProcFound::kVersionNotSufficient);  // CUDA 11.6's
  EXPECT_EQ(LookupProc("cuLaunchKernelEx", 11060, 0, false).found, ProcFound::kSuccess);
}

TEST(DriverProcsTest, TheTableCoversCudaHsEntryPoints) {
  // CUDA 13.0's cudaTypedefs.h: 447 entry points in 634 versions (per-thread ones included).
  EXPECT_EQ(ProcBaseCount(), 447);
  EXPECT_EQ(ProcRowCount(), 634);
}

}  // namespace
}  // namespace gpool::remote::client
