// The node-name map of infiniband-diags (`ibnetdiscover --node-name-map FILE`, also read by
// OpenSM and ibtracert): one node per line, its GUID and the name a site gives it,
//
//   # comment
//   0x0002c90300a1b2c0 "gpu001 mlx5_0"
//   0x7cfe900300112233 "leaf-a01"
//
// The name is quoted (it may hold spaces) or, unquoted, the rest of the line. gpool uses it where
// a fabric's own names are GUID-like or vendor strings, e.g. to give Slurm host and switch names.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace gpool::fabric {

using NodeNameMap = std::unordered_map<uint64_t, std::string>;

// Errors name `source:line` and what is wrong (a bad GUID, an unterminated quote, an empty name,
// a GUID given twice, control bytes in a name).
StatusOr<NodeNameMap> ParseNodeNameMap(std::string_view text, std::string_view source);

}  // namespace gpool::fabric
