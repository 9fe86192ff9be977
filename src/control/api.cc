#include "control/api.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include "gpool/v1/gpool.grpc.pb.h"

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
    default: return Status::Internal(fmt::format("rpc: {} ({})", s.error_message(),
                                                 static_cast<int>(s.error_code())));
  }
}

namespace {

template <typename T>
grpc::Status Reply(StatusOr<T> r, T* out) {
  if (!r.ok()) return ToGrpc(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  explicit NodeServiceImpl(Controller* c) : c_(c) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterNodeRequest* req,
                        v1::RegisterNodeResponse* resp) override {
    return Reply(c_->RegisterNode(*req), resp);
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Reply(c_->Heartbeat(*req), resp);
  }
  grpc::Status List(grpc::ServerContext*, const v1::ListNodesRequest*,
                    v1::ListNodesResponse* resp) override {
    *resp = c_->ListNodes();
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(Controller* c) : c_(c) {}
  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                      v1::Job* resp) override {
    return Reply(c_->Submit(*req), resp);
  }
  grpc::Status Get(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override {
    return Reply(c_->GetJob(req->id()), resp);
  }
  grpc::Status List(grpc::ServerContext*, const v1::ListJobsRequest* req,
                    v1::ListJobsResponse* resp) override {
    *resp = c_->ListJobs(*req);
    return grpc::Status::OK;
  }
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelJobRequest* req,
                      v1::Job* resp) override {
    return Reply(c_->Cancel(req->id()), resp);
  }

 private:
  Controller* c_;
};

class TenantServiceImpl final : public v1::TenantService::Service {
 public:
  explicit TenantServiceImpl(Controller* c) : c_(c) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListTenantsRequest*,
                    v1::ListTenantsResponse* resp) override {
    *resp = c_->ListTenants();
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
};

}  // namespace

struct ApiServer::Services {
  explicit Services(Controller* c) : nodes(c), jobs(c), tenants(c) {}
  NodeServiceImpl nodes;
  JobServiceImpl jobs;
  TenantServiceImpl tenants;
};

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

ApiServer::ApiServer(Controller* controller)
    : controller_(controller), services_(std::make_unique<Services>(controller)) {}

ApiServer::~ApiServer() { Shutdown(); }

Status ApiServer::Start(const ApiOptions& options) {
  std::string host;
  int port = 0;
  GPOOL_RETURN_IF_ERROR(ParseHostPort("--listen", options.grpc_listen, &host, &port));
  grpc::ServerBuilder b;
  b.AddListeningPort(options.grpc_listen, grpc::InsecureServerCredentials(), &grpc_port_);
  b.RegisterService(&services_->nodes);
  b.RegisterService(&services_->jobs);
  b.RegisterService(&services_->tenants);
  grpc_ = b.BuildAndStart();
  if (!grpc_ || grpc_port_ == 0) {
    return Status::Unavailable(fmt::format("--listen: cannot listen on {}", options.grpc_listen));
  }
  if (!options.http_listen.empty()) {
    GPOOL_RETURN_IF_ERROR(ParseHostPort("--http", options.http_listen, &host, &port));
    http_ = std::make_unique<httplib::Server>();
    http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(controller_->MetricsText(), "text/plain; version=0.0.4");
    });
    http_->Get("/api/state", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(controller_->StateJson(), "application/json");
    });
    http_port_ = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
    if (http_port_ <= 0) {
      return Status::Unavailable(fmt::format("--http: cannot listen on {}", options.http_listen));
    }
    http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  }
  return Status::Ok();
}

void ApiServer::Shutdown() {
  if (http_) {
    http_->stop();
    if (http_thread_.joinable()) http_thread_.join();
    http_.reset();
  }
  if (grpc_) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc_.reset();
  }
}

}  // namespace gpool::control
