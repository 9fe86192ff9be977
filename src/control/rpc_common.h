// What the controller's gRPC server (api.h) and its clients (the CLI, agents) share: the mapping
// between gpool's Status and gRPC's, and HOST:PORT parsing. Kept apart from api.h so that a
// client links these without the server (see gpool_control_client in CMakeLists.txt).
#pragma once

#include <string>

#include "common/status.h"

namespace grpc {
class Status;
}  // namespace grpc
namespace gpool::control {

// Maps a gpool Status to the gRPC status with the same meaning.
grpc::Status ToGrpc(const Status& s);
// And back, for clients: the message is kept, prefixed by nothing.
Status FromGrpc(const grpc::Status& s);

// Splits "HOST:PORT"; errors name `what` (the flag).
Status ParseHostPort(const std::string& what, const std::string& text, std::string* host, int* port);

}  // namespace gpool::control
