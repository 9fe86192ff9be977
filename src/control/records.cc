#include "control/records.h"

#include <fmt/format.h>

#include "common/names.h"
#include "control/allocations.h"
#include "control/store.h"

namespace gpool::control {
namespace {

// Errors say which record and how to get past it.
Status InRecord(std::string_view key, const Status& s) {
  if (s.ok()) return s;
  return Status::InvalidArgument(fmt::format(
      "store key {}: {}; the record was not written by this gpool version's checks (an older "
      "version, or edited by hand): fix or delete it",
      EscapeForMessage(key), s.message()));
}

Status KeyMatches(std::string_view key, std::string_view prefix, std::string_view field,
                  std::string_view value) {
  if (key.substr(0, prefix.size()) == prefix && key.substr(prefix.size()) == value) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      fmt::format("{} '{}' does not match the key", field, EscapeForMessage(value)));
}

}  // namespace

Status ValidateJobId(std::string_view field, std::string_view id) {
  bool ok = id.size() >= 2 && id.size() <= 20 && id[0] == 'j';
  for (size_t i = 1; ok && i < id.size(); ++i) ok = id[i] >= '0' && id[i] <= '9';
  if (ok) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("{}: want 'j' and 1-19 digits (j00000042), got '{}'", field, EscapeForMessage(id)));
}

Status ValidateJobRecord(std::string_view key, const v1::Job& job) {
  GPOOL_RETURN_IF_ERROR(InRecord(key, ValidateJobId("id", job.id())));
  GPOOL_RETURN_IF_ERROR(InRecord(key, KeyMatches(key, keys::kJobs, "id", job.id())));
  GPOOL_RETURN_IF_ERROR(InRecord(key, ValidateName("tenant", job.tenant())));
  for (int i = 0; i < job.allocations_size(); ++i) {
    const v1::Allocation& a = job.allocations(i);
    GPOOL_RETURN_IF_ERROR(
        InRecord(key, ValidateName(fmt::format("allocations[{}].node", i), a.node())));
    for (int r = 0; r < a.remote_size(); ++r) {
      GPOOL_RETURN_IF_ERROR(InRecord(
          key, ValidateName(fmt::format("allocations[{}].remote[{}].node", i, r),
                            a.remote(r).node())));
    }
  }
  // The scheduler reads these every cycle: a bad one is refused here, not there.
  if (auto r = RemoteRequestOf(job); !r.ok()) {
    return InRecord(key, Status::InvalidArgument(
                             fmt::format("gpu_source/gpu_within: {}", r.status().message())));
  }
  return Status::Ok();
}

Status ValidateNodeRecord(std::string_view key, const v1::Node& node) {
  GPOOL_RETURN_IF_ERROR(InRecord(key, ValidateName("name", node.name())));
  return InRecord(key, KeyMatches(key, keys::kNodes, "name", node.name()));
}

}  // namespace gpool::control
