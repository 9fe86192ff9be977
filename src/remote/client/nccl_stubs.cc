// Loud stubs for the NCCL entry points gpool's libnccl.so.2 stand-in does not implement: every
// other name NVIDIA's libnccl.so.2 (2.28) exports is defined, so a program linked against any of
// them loads, and fails naming the call when it makes it. Those returning ncclResult_t say their
// name once and return ncclInvalidUsage; the few returning something else (device-API helpers:
// teams, slot counts) say it and abort, since no value they could return would be true. nccl.h is
// not included: the signatures differ and do not matter to a stub. ncclResetDebugInit only resets
// NCCL's logging: said, and done.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

namespace gpool::remote::client::nccl {

int NcclUnsupported(const char* name) {
  static std::mutex mu;
  static auto& said = *new std::set<std::string>();  // never destroyed: exit-time calls
  std::lock_guard<std::mutex> lk(mu);
  if (said.insert(name).second) {
    fmt::print(stderr, "gpool: {} is not implemented by gpool's libnccl.so.2 stand-in "
                       "(returning ncclInvalidUsage; `gpool run --nccl native` keeps NVIDIA's NCCL)\n",
               name);
  }
  return 5;  // ncclInvalidUsage
}

[[noreturn]] void NcclAbort(const char* name) {
  fmt::print(stderr, "gpool: {} is not implemented by gpool's libnccl.so.2 stand-in (it returns "
                     "no status, so the program stops here)\n", name);
  std::abort();
}

}  // namespace gpool::remote::client::nccl

#define GPOOL_NCCL_STUB(name)                                                                \
  extern "C" __attribute__((visibility("default"))) int name() {                             \
    return ::gpool::remote::client::nccl::NcclUnsupported(#name);                            \
  }                                                                                          \
  extern "C" __attribute__((visibility("default"), alias(#name))) int p##name();
#define GPOOL_NCCL_ABORT(name)                                                               \
  extern "C" __attribute__((visibility("default"))) int name() {                             \
    ::gpool::remote::client::nccl::NcclAbort(#name);                                         \
  }                                                                                          \
  extern "C" __attribute__((visibility("default"), alias(#name))) int p##name();

GPOOL_NCCL_STUB(ncclAlltoAll)
GPOOL_NCCL_STUB(ncclGather)
GPOOL_NCCL_STUB(ncclScatter)
GPOOL_NCCL_STUB(ncclCommSplit)
GPOOL_NCCL_STUB(ncclCommShrink)
GPOOL_NCCL_STUB(ncclCommRevoke)
GPOOL_NCCL_STUB(ncclCommInitRankScalable)
GPOOL_NCCL_STUB(ncclCommRegister)
GPOOL_NCCL_STUB(ncclCommDeregister)
GPOOL_NCCL_STUB(ncclCommWindowRegister)
GPOOL_NCCL_STUB(ncclCommWindowDeregister)
GPOOL_NCCL_STUB(ncclGroupSimulateEnd)
GPOOL_NCCL_STUB(ncclDevCommCreate)
GPOOL_NCCL_STUB(ncclDevCommDestroy)
GPOOL_NCCL_STUB(ncclGinBarrierCreateRequirement)
GPOOL_NCCL_STUB(ncclLsaBarrierCreateRequirement)
GPOOL_NCCL_STUB(ncclLLA2ACreateRequirement)
GPOOL_NCCL_ABORT(ncclLLA2ACalcSlots)
GPOOL_NCCL_ABORT(ncclTeamWorld)
GPOOL_NCCL_ABORT(ncclTeamLsa)
GPOOL_NCCL_ABORT(ncclTeamRail)
GPOOL_NCCL_ABORT(ncclTeamRankToWorld)
GPOOL_NCCL_ABORT(ncclTeamRankToLsa)

extern "C" __attribute__((visibility("default"))) void ncclResetDebugInit() {
  ::gpool::remote::client::nccl::NcclUnsupported("ncclResetDebugInit");
}
extern "C" __attribute__((visibility("default"), alias("ncclResetDebugInit"))) void pncclResetDebugInit();
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  ::gpool::remote::client::nccl::NcclUnsupported("ncclResetDebugInitInternal");
}
