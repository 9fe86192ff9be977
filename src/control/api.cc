#include "control/api.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/names.h"
#include "control/dashboard.h"
#include "control/fabric_api.h"
#include "control/http_auth.h"
#include "control/http_server.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::control {

namespace {

template <typename T>
grpc::Status Reply(StatusOr<T> r, T* out) {
  if (!r.ok()) return ToGrpc(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

}  // namespace

// Who may call what. With no TokenAuth everyone is admin.
struct Gate {
  const TokenAuth* auth = nullptr;

  // UNAUTHENTICATED for a missing/unknown token, PERMISSION_DENIED for a role not in `allowed`.
  grpc::Status Check(grpc::ServerContext* ctx, std::initializer_list<Role> allowed,
                     Principal* who, const char* method) const {
    if (auth == nullptr) {
      *who = Principal{Role::kAdmin, ""};
      return grpc::Status::OK;
    }
    const auto& md = ctx->client_metadata();
    auto it = md.find(kAuthMetadataKey);
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          fmt::format("{}: missing 'authorization: Bearer TOKEN' metadata (pass "
                                      "--token, --token-file or $GPOOL_TOKEN)", method));
    }
    auto p = auth->Authenticate(
        BearerToken(std::string_view(it->second.data(), it->second.size())), NowUnixSeconds());
    if (!p.ok()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          fmt::format("{}: {}", method, p.status().message()));
    }
    for (Role r : allowed) {
      if (p->role == r) {
        *who = *p;
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        fmt::format("{}: not allowed for a {} token", method, RoleName(p->role)));
  }
};

namespace {

constexpr auto kPeople = {Role::kAdmin, Role::kTenant};

// A tenant's view of a job: another tenant's job does not exist for it.
bool Visible(const Principal& who, const v1::Job& j) {
  return who.role != Role::kTenant || j.tenant() == who.tenant;
}
// A tenant may only name its own tenant (or none, meaning its own).
grpc::Status ScopeTenant(const Principal& who, std::string* tenant, const char* field) {
  if (who.role != Role::kTenant) return grpc::Status::OK;
  if (tenant->empty()) {
    *tenant = who.tenant;
  } else if (*tenant != who.tenant) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        fmt::format("{}: a token of tenant {} cannot act for tenant {}", field,
                                    who.tenant, *tenant));
  }
  return grpc::Status::OK;
}
// A name the request carries (names.h); INVALID_ARGUMENT naming the field otherwise. `optional`:
// empty means "not given" (a filter).
grpc::Status CheckRequestName(const char* field, const std::string& value, bool optional = false) {
  if (optional && value.empty()) return grpc::Status::OK;
  return ToGrpc(ValidateName(field, value));
}
grpc::Status JobNotFound(const std::string& id) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, fmt::format("job {} not found", id));
}

#define GPOOL_GATE(roles, method)                              \
  Principal who;                                               \
  if (auto gs = gate_->Check(ctx, roles, &who, method); !gs.ok()) return gs

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(Controller* c, const Gate* g) : c_(c), gate_(g) {}
  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterNodeRequest* req,
                        v1::RegisterNodeResponse* resp) override {
    GPOOL_GATE((std::initializer_list<Role>{Role::kAgent, Role::kAdmin}), "NodeService.Register");
    return Reply(c_->RegisterNode(*req), resp);
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    GPOOL_GATE((std::initializer_list<Role>{Role::kAgent, Role::kAdmin}), "NodeService.Heartbeat");
    return Reply(c_->Heartbeat(*req), resp);
  }
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListNodesRequest*,
                    v1::ListNodesResponse* resp) override {
    GPOOL_GATE(kPeople, "NodeService.List");
    *resp = c_->ListNodes();
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
  const Gate* gate_;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(Controller* c, const Gate* g) : c_(c), gate_(g) {}
  grpc::Status Submit(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                      v1::Job* resp) override {
    GPOOL_GATE(kPeople, "JobService.Submit");
    v1::SubmitJobRequest r = *req;
    // The tenant is checked by the controller (it is the name written everywhere); the request
    // id here, before a tenant token's scoping adds "TENANT/" to it.
    if (auto s = CheckRequestName("client_request_id", r.client_request_id(), true); !s.ok()) return s;
    if (auto s = ScopeTenant(who, r.mutable_tenant(), "tenant"); !s.ok()) return s;
    if (r.tenant().empty()) r.set_tenant("default");  // admin or open API, no tenant named
    if (who.role == Role::kTenant && !r.client_request_id().empty()) {
      // Request ids are global: scope them so one tenant cannot fetch another's job by id.
      r.set_client_request_id(who.tenant + "/" + r.client_request_id());
    }
    return Reply(c_->Submit(r), resp);
  }
  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* resp) override {
    GPOOL_GATE(kPeople, "JobService.Get");
    if (auto s = CheckRequestName("id", req->id()); !s.ok()) return s;
    auto j = c_->GetJob(req->id());
    if (j.ok() && !Visible(who, *j)) return JobNotFound(req->id());
    return Reply(std::move(j), resp);
  }
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                    v1::ListJobsResponse* resp) override {
    GPOOL_GATE(kPeople, "JobService.List");
    if (auto s = CheckRequestName("tenant", req->tenant(), true); !s.ok()) return s;
    v1::ListJobsRequest r = *req;
    if (auto s = ScopeTenant(who, r.mutable_tenant(), "tenant"); !s.ok()) return s;
    if (r.history()) return Reply(c_->ListArchivedJobs(r), resp);  // tenant-scoped like live
    *resp = c_->ListJobs(r);
    return grpc::Status::OK;
  }
  grpc::Status Cancel(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                      v1::Job* resp) override {
    GPOOL_GATE(kPeople, "JobService.Cancel");
    if (auto s = CheckRequestName("id", req->id()); !s.ok()) return s;
    if (who.role == Role::kTenant) {
      auto j = c_->GetJob(req->id());
      if (!j.ok()) return ToGrpc(j.status());
      if (!Visible(who, *j)) return JobNotFound(req->id());  // a job's tenant never changes
    }
    return Reply(c_->Cancel(req->id()), resp);
  }
  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchJobsRequest* req,
                     grpc::ServerWriter<v1::JobEvent>* writer) override {
    GPOOL_GATE(kPeople, "JobService.Watch");
    if (auto s = CheckRequestName("tenant", req->tenant(), true); !s.ok()) return s;
    if (auto s = CheckRequestName("id", req->id(), true); !s.ok()) return s;
    v1::WatchJobsRequest f = *req;
    if (auto s = ScopeTenant(who, f.mutable_tenant(), "tenant"); !s.ok()) return s;
    uint64_t cursor = 0;
    std::vector<v1::Job> snap = c_->SnapshotJobs(f, &cursor);
    v1::JobEvent ev;
    if (f.initial()) {
      for (v1::Job& j : snap) {
        *ev.mutable_job() = std::move(j);
        ev.set_initial(true);
        if (!writer->Write(ev)) return grpc::Status::OK;
      }
    }
    ev.set_initial(false);
    while (!ctx->IsCancelled()) {
      auto evs = c_->WaitJobEvents(f, &cursor, std::chrono::milliseconds(200));
      if (!evs.ok()) {
        return grpc::Status(grpc::StatusCode::DATA_LOSS, evs.status().message() +
                                                             "; watch again with initial=true");
      }
      for (v1::Job& j : *evs) {
        *ev.mutable_job() = std::move(j);
        if (!writer->Write(ev)) return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
  const Gate* gate_;
};

class TenantServiceImpl final : public v1::TenantService::Service {
 public:
  TenantServiceImpl(Controller* c, const Gate* g) : c_(c), gate_(g) {}
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListTenantsRequest*,
                    v1::ListTenantsResponse* resp) override {
    GPOOL_GATE(kPeople, "TenantService.List");
    v1::ListTenantsResponse all = c_->ListTenants();
    for (const v1::Tenant& t : all.tenants()) {
      if (who.role != Role::kTenant || t.name() == who.tenant) *resp->add_tenants() = t;
    }
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
  const Gate* gate_;
};

class LeaseServiceImpl final : public v1::LeaseService::Service {
 public:
  LeaseServiceImpl(Controller* c, const Gate* g) : c_(c), gate_(g) {}
  grpc::Status Issue(grpc::ServerContext* ctx, const v1::IssueLeasesRequest* req,
                     v1::IssueLeasesResponse* resp) override {
    GPOOL_GATE(kPeople, "LeaseService.Issue");
    if (auto s = CheckRequestName("job_id", req->job_id()); !s.ok()) return s;
    if (who.role == Role::kTenant) {
      auto j = c_->GetJob(req->job_id());
      if (!j.ok()) return ToGrpc(j.status());
      if (!Visible(who, *j)) return JobNotFound(req->job_id());
    }
    return Reply(c_->IssueLeases(*req), resp);
  }

 private:
  Controller* c_;
  const Gate* gate_;
};

#undef GPOOL_GATE

}  // namespace

struct ApiServer::Services {
  explicit Services(Controller* c)
      : nodes(c, &gate), jobs(c, &gate), tenants(c, &gate), leases(c, &gate),
        fabric(MakeFabricService(c, [this](grpc::ServerContext* ctx, bool admin_only,
                                           const char* method, std::string* tenant) {
          Principal who;
          grpc::Status s = admin_only ? gate.Check(ctx, {Role::kAdmin}, &who, method)
                                      : gate.Check(ctx, kPeople, &who, method);
          *tenant = who.role == Role::kTenant ? who.tenant : "";
          return s;
        })) {}
  Gate gate;
  NodeServiceImpl nodes;
  JobServiceImpl jobs;
  TenantServiceImpl tenants;
  LeaseServiceImpl leases;
  std::unique_ptr<grpc::Service> fabric;  // fabric_api.h
};

ApiServer::ApiServer(Controller* controller)
    : controller_(controller), services_(std::make_unique<Services>(controller)) {}

ApiServer::~ApiServer() { Shutdown(); }

Status ApiServer::Start(const ApiOptions& options) {
  std::string host;
  int port = 0;
  GPOOL_RETURN_IF_ERROR(ParseHostPort("--listen", options.grpc_listen, &host, &port));
  services_->gate.auth = options.auth;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key: give both or neither");
  }
  if (!options.tls_cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    GPOOL_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(options.tls_cert_file));
    GPOOL_ASSIGN_OR_RETURN(pair.private_key, ReadFile(options.tls_key_file));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder b;
  // Sync server threads: a call that waits for its commit holds its thread, and with the default
  // max of 2 idle pollers every finished call's thread exited and the next call created one
  // (~15% of the CPU of 64 concurrent submits was clone/exit). Idle pollers beyond this many
  // still exit after gRPC's 10 s idle timeout.
  b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 256);
  b.AddListeningPort(options.grpc_listen, creds, &grpc_port_);
  b.RegisterService(&services_->nodes);
  b.RegisterService(&services_->jobs);
  b.RegisterService(&services_->tenants);
  b.RegisterService(&services_->leases);
  b.RegisterService(services_->fabric.get());
  grpc_ = b.BuildAndStart();
  if (!grpc_ || grpc_port_ == 0) {
    return Status::Unavailable(fmt::format("--listen: cannot listen on {}", options.grpc_listen));
  }
  if (!options.http_listen.empty()) {
    GPOOL_RETURN_IF_ERROR(ParseHostPort("--http", options.http_listen, &host, &port));
    http_ = std::make_unique<HttpServer>(options.http_limits);  // bounded clients (http_server.h)
    // The same tokens as gRPC (http_auth.h): tenants see their own jobs only.
    http_auth_ = std::make_unique<HttpAuth>(
        HttpAuthOptions{.auth = options.auth, .metrics_public = options.metrics_public});
    const HttpAuth* ha = http_auth_.get();
    http_->Get("/metrics", [this, ha](const httplib::Request& req, httplib::Response& res) {
      if (!ha->CheckMetrics(req, res)) return;
      res.set_content(controller_->MetricsText(), "text/plain; version=0.0.4");
    });
    http_->Get("/api/state", [this, ha](const httplib::Request& req, httplib::Response& res) {
      auto who = ha->Check(req, res, {Role::kAdmin, Role::kTenant});
      if (!who) return;
      res.set_header("Cache-Control", "no-store");
      res.set_content(controller_->StateJson(HttpAuth::TenantScope(*who)), "application/json");
    });
    dashboard_ = std::make_unique<Dashboard>(controller_, DashboardOptions{});
    dashboard_->Register(http_.get(), ha);
    // The fabric view (fabric_api.h); ?links=all adds every link, not only loaded or failed ones.
    http_->Get("/api/fabric", [this, ha](const httplib::Request& req, httplib::Response& res) {
      auto who = ha->Check(req, res, {Role::kAdmin, Role::kTenant});
      if (!who) return;
      auto json = FabricJson(controller_, req.get_param_value("links") == "all",
                             HttpAuth::TenantScope(*who));
      if (!json.ok()) {
        res.status = 404;
        res.set_content(nlohmann::json({{"error", json.status().message()}}).dump(), "application/json");
        return;
      }
      res.set_content(*json, "application/json");
    });
    http_port_ = http_->Bind(host, port);
    if (http_port_ <= 0) {
      return Status::Unavailable(fmt::format("--http: cannot listen on {}", options.http_listen));
    }
    http_thread_ = std::thread([this] { http_->listen_after_bind(); });
    dashboard_->Start();
  }
  return Status::Ok();
}

void ApiServer::Shutdown() {
  if (http_) {
    http_->stop();
    if (http_thread_.joinable()) http_thread_.join();
    http_.reset();
    dashboard_.reset();  // after the server: no handler may still use it
  }
  if (grpc_) {
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc_.reset();
  }
}

}  // namespace gpool::control
