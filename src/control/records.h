// Checks of the records the controller reads back from its Store (`/jobs/<id>`, `/nodes/<name>`)
// before it uses them.
//
// The controller writes only records whose names passed common/names.h, but a store may hold
// records an older gpool wrote before names were checked, or ones edited by hand. Such a record
// must not reach the generated files (partitions.conf, /metrics) nor crash the controller (a
// job id that is not `j<digits>` did: its number is parsed). The controller refuses to start on
// one (Controller::Open names the key and the field), and a standby ignores one from its watch
// with a warning: a running job's record cannot simply be skipped, or its GPUs would look free.
//
// Thread safety: pure functions.
#pragma once

#include <string_view>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::control {

// `j` and 1 to 19 digits (what the controller generates: j00000042). The digits fit a uint64.
Status ValidateJobId(std::string_view field, std::string_view id);

// id (and that it matches the key, `/jobs/<id>`), tenant, and the node of every allocation.
Status ValidateJobRecord(std::string_view key, const v1::Job& job);
// name (and that it matches the key, `/nodes/<name>`).
Status ValidateNodeRecord(std::string_view key, const v1::Node& node);

}  // namespace gpool::control
