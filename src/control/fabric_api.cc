#include "control/fabric_api.h"

#include <algorithm>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "control/api.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::control {
namespace {

const Status& NoFabric() {
  static const Status s = Status::FailedPrecondition(
      "the controller runs without --fabric: it has no fabric view");
  return s;
}

std::string MessageJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

// Running jobs the caller may see (all for tenant ""), after tracking all of them.
std::vector<JobNodes> VisibleJobs(Controller* c, FabricView* f, const std::string& tenant) {
  std::vector<JobNodes> all = RunningJobNodes(c);
  f->TrackJobs(all);
  if (tenant.empty()) return all;
  std::vector<JobNodes> mine;
  for (auto& j : all) {
    if (j.tenant == tenant) mine.push_back(std::move(j));
  }
  return mine;
}

#define GPOOL_FABRIC_GATE(admin_only, method)                          \
  std::string tenant;                                                  \
  if (grpc::Status g = auth_(ctx, admin_only, method, &tenant); !g.ok()) return g

class FabricServiceImpl final : public v1::FabricService::Service {
 public:
  FabricServiceImpl(Controller* c, FabricAuth auth) : c_(c), auth_(std::move(auth)) {}
  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetFabricRequest* req,
                   v1::GetFabricResponse* resp) override {
    GPOOL_FABRIC_GATE(false, "FabricService.Get");
    FabricView* f = c_->fabric().get();
    if (f == nullptr) return ToGrpc(NoFabric());
    *resp = f->Get(*req, VisibleJobs(c_, f, tenant));
    return grpc::Status::OK;
  }
  grpc::Status Path(grpc::ServerContext* ctx, const v1::FabricPathRequest* req,
                    v1::FabricPathResponse* resp) override {
    GPOOL_FABRIC_GATE(false, "FabricService.Path");
    FabricView* f = c_->fabric().get();
    if (f == nullptr) return ToGrpc(NoFabric());
    if (req->from().empty()) return ToGrpc(Status::InvalidArgument("from: must not be empty"));
    if (req->to().empty()) return ToGrpc(Status::InvalidArgument("to: must not be empty"));
    auto r = f->Path(*req);
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }
  grpc::Status Health(grpc::ServerContext* ctx, const v1::FabricHealthRequest*,
                      v1::FabricHealthResponse* resp) override {
    GPOOL_FABRIC_GATE(false, "FabricService.Health");
    FabricView* f = c_->fabric().get();
    if (f == nullptr) return ToGrpc(NoFabric());
    *resp = f->Health(VisibleJobs(c_, f, tenant));
    return grpc::Status::OK;
  }
  grpc::Status Event(grpc::ServerContext* ctx, const v1::FabricEventRequest* req,
                     v1::FabricEventResponse* resp) override {
    GPOOL_FABRIC_GATE(true, "FabricService.Event");
    FabricView* f = c_->fabric().get();
    if (f == nullptr) return ToGrpc(NoFabric());
    if (req->link().empty() == req->switch_name().empty()) {
      return ToGrpc(Status::InvalidArgument("link, switch_name: give exactly one"));
    }
    (void)VisibleJobs(c_, f, "");  // track the jobs before a re-route moves their flows
    Status s = req->link().empty() ? f->ObserveSwitch(req->switch_name(), req->up())
                                   : f->ObserveLink(req->link(), req->up());
    if (!s.ok()) return ToGrpc(s);
    resp->set_generation(static_cast<int64_t>(f->generation()));
    return grpc::Status::OK;
  }

 private:
  Controller* c_;
  FabricAuth auth_;
};

}  // namespace

JobNodes JobNodesOf(const v1::Job& j) {
  JobNodes n{.id = j.id(), .tenant = j.tenant(), .nodes = {}, .remote = {}};
  for (const v1::Allocation& a : j.allocations()) {
    n.nodes.push_back(a.node());
    for (const v1::RemoteGpus& r : a.remote()) {
      if (r.node().empty() || r.node() == a.node()) continue;  // its own node: no fabric flow
      RemoteFlow f{.host = a.node(), .lender = r.node()};
      if (std::find(n.remote.begin(), n.remote.end(), f) == n.remote.end()) n.remote.push_back(std::move(f));
    }
  }
  return n;
}

std::vector<JobNodes> RunningJobNodes(Controller* c) {
  v1::ListJobsRequest req;
  req.set_state("running");
  v1::ListJobsResponse jobs = c->ListJobs(req);
  std::vector<JobNodes> out;
  out.reserve(jobs.jobs_size());
  for (const v1::Job& j : jobs.jobs()) out.push_back(JobNodesOf(j));
  return out;
}

std::unique_ptr<grpc::Service> MakeFabricService(Controller* c, FabricAuth auth) {
  return std::make_unique<FabricServiceImpl>(c, std::move(auth));
}

StatusOr<std::string> FabricJson(Controller* c, bool all_links, const std::string& tenant) {
  FabricView* f = c->fabric().get();
  if (f == nullptr) return NoFabric();
  std::vector<JobNodes> jobs = VisibleJobs(c, f, tenant);
  v1::GetFabricRequest req;
  req.set_all_links(all_links);
  nlohmann::json out = nlohmann::json::parse(MessageJson(f->Get(req, jobs)));
  out["health"] = nlohmann::json::parse(MessageJson(f->Health(jobs)));
  // Fabric names come from files and need not be UTF-8: replaced rather than thrown.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gpool::control
