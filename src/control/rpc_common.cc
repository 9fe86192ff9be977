#include "control/rpc_common.h"

#include <stdexcept>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

namespace gpool::control {

grpc::Status ToGrpc(const Status& s) {
  using C = grpc::StatusCode;
  C c = C::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: c = C::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: c = C::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: c = C::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: c = C::FAILED_PRECONDITION; break;
    case StatusCode::kResourceExhausted: c = C::RESOURCE_EXHAUSTED; break;
    case StatusCode::kUnavailable: c = C::UNAVAILABLE; break;
    case StatusCode::kPermissionDenied: c = C::PERMISSION_DENIED; break;
    case StatusCode::kUnimplemented: c = C::UNIMPLEMENTED; break;
    case StatusCode::kAborted: c = C::ABORTED; break;
    case StatusCode::kDeadlineExceeded: c = C::DEADLINE_EXCEEDED; break;
    case StatusCode::kUnauthenticated: c = C::UNAUTHENTICATED; break;
    default: c = C::INTERNAL; break;
  }
  return grpc::Status(c, s.message());
}

Status FromGrpc(const grpc::Status& s) {
  using C = grpc::StatusCode;
  switch (s.error_code()) {
    case C::OK: return Status::Ok();
    case C::INVALID_ARGUMENT: return Status::InvalidArgument(s.error_message());
    case C::NOT_FOUND: return Status::NotFound(s.error_message());
    case C::UNAVAILABLE: return Status::Unavailable(s.error_message());
    case C::DEADLINE_EXCEEDED: return Status(StatusCode::kDeadlineExceeded, s.error_message());
    case C::PERMISSION_DENIED: return Status::PermissionDenied(s.error_message());
    case C::UNAUTHENTICATED: return Status::Unauthenticated(s.error_message());
    case C::FAILED_PRECONDITION: return Status::FailedPrecondition(s.error_message());
    case C::ALREADY_EXISTS: return Status::AlreadyExists(s.error_message());
    case C::RESOURCE_EXHAUSTED: return Status::ResourceExhausted(s.error_message());
    default: return Status::Internal(fmt::format("rpc: {} ({})", s.error_message(),
                                                 static_cast<int>(s.error_code())));
  }
}

Status ParseHostPort(const std::string& what, const std::string& text, std::string* host,
                     int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument(fmt::format("{}: want HOST:PORT, got '{}'", what, text));
  }
  *host = text.substr(0, colon);
  try {
    size_t used = 0;
    *port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || *port < 0 || *port > 65535) throw std::out_of_range("");
  } catch (const std::exception&) {
    return Status::InvalidArgument(fmt::format("{}: bad port in '{}'", what, text));
  }
  return Status::Ok();
}

}  // namespace gpool::control
