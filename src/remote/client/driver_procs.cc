#include "remote/client/driver_procs.h"

#include <algorithm>
#include <set>
#include <string>

namespace gpool::remote::client {
namespace {

struct Row {
  const char* base;
  int version;
  const char* symbol;
  bool per_thread;
};
constexpr Row kRows[] = {
#define GPOOL_PROC(base, version, symbol, pt) {base, version, symbol, pt != 0},
#include "remote/client/driver_procs.inc"
#undef GPOOL_PROC
};

}  // namespace

ProcLookup LookupProc(std::string_view base, int cuda_version, uint64_t flags,
                      bool default_per_thread) {
  const bool per_thread = (flags & 2) != 0 || ((flags & 3) == 0 && default_per_thread);
  const Row* legacy = nullptr;
  const Row* threaded = nullptr;
  bool known = false;
  for (const Row& r : kRows) {  // ~630 rows, looked up at start-up: a scan is fine
    if (base != r.base) continue;
    known = true;
    if (r.version > cuda_version) continue;
    const Row*& best = r.per_thread ? threaded : legacy;
    if (!best || r.version > best->version) best = &r;
  }
  if (!known) return {ProcFound::kSymbolNotFound, nullptr};
  if (!legacy) return {ProcFound::kVersionNotSufficient, nullptr};
  if (per_thread && threaded) return {ProcFound::kSuccess, threaded->symbol};
  return {ProcFound::kSuccess, legacy->symbol};
}

int ProcRowCount() { return static_cast<int>(std::size(kRows)); }
int ProcBaseCount() {
  std::set<std::string_view> bases;
  for (const Row& r : kRows) bases.insert(r.base);
  return static_cast<int>(bases.size());
}

}  // namespace gpool::remote::client
