// Helpers shared by the controller's source files (controller.cc, controller_schedule.cc, ...);
// not an API. Job ids are "j" and a zero-padded number (records.h checks them).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "gpool/v1/gpool.pb.h"

namespace gpool::control {

inline uint64_t JobNumber(const std::string& id) { return std::stoull(id.substr(1)); }
inline std::string JobIdOf(uint64_t n) { return fmt::format("j{:08d}", n); }

// Pending or running: not yet over.
inline bool Active(const v1::Job& j) { return j.state() == "pending" || j.state() == "running"; }

}  // namespace gpool::control
