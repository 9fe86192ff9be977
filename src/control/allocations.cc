#include "control/allocations.h"

#include <bit>
#include <cmath>

#include <fmt/format.h>

namespace gpool::control {

Status SetGpuSource(const v1::SubmitJobRequest& req, v1::Job* job) {
  auto source = sched::ParseGpuSource(req.gpu_source());
  if (!source.ok()) return source.status().WithContext("gpu_source");
  const bool attach = *source != sched::GpuSource::kLocal;
  if (!req.gpu_within().empty() && !attach) {
    return Status::InvalidArgument(fmt::format(
        "gpu_within: only for gpu_source pooled or remote (how far a task's GPUs may be), got "
        "'{}' with gpu_source local", req.gpu_within()));
  }
  if (!std::isfinite(req.max_slowdown()) ||
      (req.max_slowdown() != 0 && !(req.max_slowdown() >= 1))) {
    return Status::InvalidArgument(fmt::format(
        "max_slowdown: must be 0 (any) or a factor >= 1 (1.1 = 10% slower), got {}",
        req.max_slowdown()));
  }
  if (req.max_slowdown() != 0 && !attach) {
    return Status::InvalidArgument(
        "max_slowdown: only for gpu_source pooled or remote (local GPUs cost no slowdown)");
  }
  job->set_gpu_source(std::string(sched::GpuSourceName(*source)));
  if (attach) {
    auto within = sched::ParseLevel(req.gpu_within().empty() ? "any" : req.gpu_within());
    if (!within.ok()) return within.status().WithContext("gpu_within");
    job->set_gpu_within(*within == sched::Level::kFabric ? "any"
                                                         : std::string(sched::LevelName(*within)));
    job->set_max_slowdown(req.max_slowdown());
  }
  return Status::Ok();
}

StatusOr<sched::RemoteGpuRequest> RemoteRequestOf(const v1::Job& job) {
  sched::RemoteGpuRequest r;
  GPOOL_ASSIGN_OR_RETURN(r.source, sched::ParseGpuSource(job.gpu_source()));
  GPOOL_ASSIGN_OR_RETURN(r.within,
                         sched::ParseLevel(job.gpu_within().empty() ? "any" : job.gpu_within()));
  r.max_slowdown = job.max_slowdown();
  return r;
}

std::set<std::string> AllocationNodes(const v1::Allocation& a) {
  std::set<std::string> out = {a.node()};
  for (const auto& r : a.remote()) out.insert(r.node());
  return out;
}

std::set<std::string> JobNodeNames(const v1::Job& job) {
  std::set<std::string> out;
  for (const auto& a : job.allocations()) out.merge(AllocationNodes(a));
  return out;
}

int32_t GpusOn(const v1::Allocation& a, const std::string& node) {
  int32_t n = a.node() == node ? std::popcount(a.gpu_mask()) : 0;
  for (const auto& r : a.remote()) {
    if (r.node() == node) n += std::popcount(r.gpu_mask());
  }
  return n;
}

int32_t RemoteGpuCount(const v1::Allocation& a) {
  int32_t n = 0;
  for (const auto& r : a.remote()) n += std::popcount(r.gpu_mask());
  return n;
}

void FillAllocation(const sched::TaskBinding& b, const sched::ClusterState& state, int32_t task,
                    v1::Allocation* a) {
  a->set_task(task);
  a->set_node(state.node(b.node).name);
  a->set_gpu_mask(b.gpu_mask);
  if (b.gpu_milli > 0 && b.gpu_milli < 1000) {
    a->set_gpu_milli(b.gpu_milli);
    a->set_gpu_memory_bytes(b.gpu_memory_bytes);
  }
  for (const sched::RemoteGpus& r : b.remote) {
    v1::RemoteGpus* out = a->add_remote();
    out->set_node(state.node(r.node).name);
    out->set_gpu_mask(r.gpu_mask);
  }
  if (b.via_server) {
    a->set_via_server(true);
    a->set_slowdown(b.slowdown);
  }
}

StatusOr<sched::TaskBinding> BindingOf(const v1::Allocation& a,
                                       const std::map<std::string, int>& node_index) {
  auto find = [&](const std::string& name) -> StatusOr<sched::NodeId> {
    auto it = node_index.find(name);
    if (it == node_index.end()) {
      return Status::Internal(fmt::format("task {}: allocated on unknown node {}", a.task(), name));
    }
    return sched::NodeId(static_cast<uint32_t>(it->second));
  };
  sched::TaskBinding b;
  GPOOL_ASSIGN_OR_RETURN(b.node, find(a.node()));
  b.gpu_mask = a.gpu_mask();
  b.gpu_milli = a.gpu_milli() > 0 ? a.gpu_milli() : 1000;
  b.gpu_memory_bytes = a.gpu_memory_bytes();
  for (const auto& r : a.remote()) {
    GPOOL_ASSIGN_OR_RETURN(sched::NodeId n, find(r.node()));
    b.remote.push_back({.node = n, .gpu_mask = r.gpu_mask()});
  }
  b.via_server = a.via_server();
  b.slowdown = a.slowdown() > 0 ? a.slowdown() : 1;
  return b;
}

}  // namespace gpool::control
