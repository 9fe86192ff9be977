// The controller's fabric surfaces: the gpool.v1 FabricService (Get, Path, Health, Event) and
// the JSON of /api/fabric (docs/control-plane.md, "Fabric"). Both read the running jobs from the
// Controller and the fabric from its FabricView; without --fabric every call is
// FAILED_PRECONDITION ("the controller runs without --fabric").
//
// Thread safety: the service and FabricJson only call thread-safe Controller and FabricView
// methods.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/controller.h"
#include "control/fabric_view.h"

namespace grpc {
class Service;
class ServerContext;
class Status;
}

namespace gpool::control {

// A job record as the fabric view needs it: its allocations' nodes in task order, and one
// RemoteFlow per distinct (task node, lending node) pair of the allocations' `remote` GPUs.
JobNodes JobNodesOf(const v1::Job& j);
// Running jobs (JobNodesOf each).
std::vector<JobNodes> RunningJobNodes(Controller* c);

// Authorizes one call: OK and *tenant = the caller's tenant ("" = sees every job), or the gRPC
// error to answer. admin_only for Event (it changes the controller's view).
using FabricAuth = std::function<grpc::Status(grpc::ServerContext* ctx, bool admin_only,
                                              const char* method, std::string* tenant)>;
// A tenant's calls see only its own jobs (loads, affected jobs); the fabric itself is shared.
std::unique_ptr<grpc::Service> MakeFabricService(Controller* c, FabricAuth auth);

// {"engine","generation","num_links","switches":[..],"hosts":[..],"links":[..],"health":{..}}
// with the field names of the proto messages; all_links as GetFabricRequest. A non-empty
// `tenant` sees only its own jobs (as FabricService for a tenant token).
StatusOr<std::string> FabricJson(Controller* c, bool all_links, const std::string& tenant = "");

}  // namespace gpool::control
