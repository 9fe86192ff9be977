#include "fabric/route_internal.h"

namespace gpool::fabric::internal {

Status RouteFtree(const SwitchGraph&, const LidSet&, Usage*, RoutingTables*) {
  return Status::Unimplemented("ftree routing is not implemented yet");
}

std::vector<int> FatTreeLevels(const SwitchGraph&, std::string* why) {
  *why = "not implemented";
  return {};
}

}  // namespace gpool::fabric::internal
