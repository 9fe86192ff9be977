#include "fabric/route_internal.h"

namespace gpool::fabric::internal {

Status RouteDor(const SwitchGraph&, const LidSet&, RoutingTables*) {
  return Status::Unimplemented("dor routing is not implemented yet");
}

}  // namespace gpool::fabric::internal
