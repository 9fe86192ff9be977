#include "sim/adapter.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/file.h"
#include "common/units.h"

namespace gpool::sim {

Status ValidateRemoteAttach(const RemoteAttach& r) {
  if (!r.enabled) return Status::Ok();
  if (r.source != sched::GpuSource::kPooled && r.source != sched::GpuSource::kRemote) {
    return Status::InvalidArgument(fmt::format("remote attach: source must be pooled or remote, got {}",
                                               sched::GpuSourceName(r.source)));
  }
  if (!std::isfinite(r.max_slowdown) || (r.max_slowdown != 0 && r.max_slowdown < 1)) {
    return Status::InvalidArgument(fmt::format(
        "remote attach: max_slowdown must be 0 (any) or >= 1, got {}", r.max_slowdown));
  }
  return Status::Ok();
}

void ApplyRemoteAttach(const RemoteAttach& remote, sched::JobSpec* job) {
  if (!remote.enabled || job->task.gpus == 0) return;
  job->remote = {.source = remote.source, .within = remote.within, .max_slowdown = remote.max_slowdown};
}

sched::ClusterSpec ToClusterSpec(const SimCluster& c, const RemoteAttach& remote) {
  sched::ClusterSpec s;
  std::map<std::string, int> models;
  for (const auto& h : c.hosts) {
    if (h.gpus > 0 && models.emplace(h.model, static_cast<int>(s.gpu_models.size())).second) {
      s.gpu_models.push_back(h.model);
    }
  }
  double total_up = 0;
  for (double g : c.pod_uplink_gbps) total_up += g;
  s.domains.push_back({.name = "fabric", .level = sched::Level::kFabric, .parent = {},
                       .bandwidth_gbps = total_up, .nominal_bandwidth_gbps = total_up});
  for (size_t p = 0; p < c.pod_names.size(); ++p) {
    s.domains.push_back({.name = c.pod_names[p], .level = sched::Level::kPod,
                         .parent = sched::DomainId(0), .bandwidth_gbps = c.pod_uplink_gbps[p],
                         .nominal_bandwidth_gbps = c.pod_uplink_gbps[p]});
  }
  std::vector<int32_t> leaf_pod(c.leaf_names.size(), 0);
  for (const auto& h : c.hosts) leaf_pod[h.leaf] = h.pod;
  const uint32_t leaf_base = static_cast<uint32_t>(1 + c.pod_names.size());
  for (size_t l = 0; l < c.leaf_names.size(); ++l) {
    s.domains.push_back({.name = c.leaf_names[l], .level = sched::Level::kLeaf,
                         .parent = sched::DomainId(1 + leaf_pod[l]),
                         .bandwidth_gbps = c.leaf_uplink_gbps[l],
                         .nominal_bandwidth_gbps = c.leaf_uplink_gbps[l]});
  }
  for (const auto& h : c.hosts) {
    sched::NodeSpec n;
    n.name = h.name;
    n.leaf = sched::DomainId(leaf_base + h.leaf);
    n.gpus = h.gpus;
    n.gpu_model = h.gpus > 0 ? models[h.model] : -1;
    n.gpu_memory_bytes = 80 * kGiB;
    n.cpu_milli = h.cpu_milli;
    n.memory_bytes = static_cast<uint64_t>(h.mem_mib) * kMiB;
    n.serves_gpus = remote.enabled && h.gpus > 0;
    s.nodes.push_back(std::move(n));
  }
  return s;
}

int TenantQueues::Find(const std::string& tenant) const {
  for (size_t i = 0; i < tenants.size(); ++i) {
    if (tenants[i] == tenant) return static_cast<int>(i);
  }
  return -1;
}

TenantQueues MakeTenantQueues(const Workload& w, int64_t cluster_gpus) {
  TenantQueues t;
  std::map<std::string, int> seen;
  for (const auto& j : w.jobs) {
    if (seen.emplace(j.tenant, static_cast<int>(t.tenants.size())).second) t.tenants.push_back(j.tenant);
  }
  if (t.tenants.empty()) t.tenants.push_back("default");
  const int64_t n = static_cast<int64_t>(t.tenants.size());
  for (int64_t i = 0; i < n; ++i) {
    sched::QueueSpec q;
    q.name = t.tenants[i];
    q.tenant = t.tenants[i];
    // Equal split; the remainder goes to the first queues so quotas add up to the cluster.
    q.guaranteed_gpus = cluster_gpus / n + (i < cluster_gpus % n ? 1 : 0);
    q.weight = 1;
    t.queues.push_back(std::move(q));
    t.entitlement.push_back(1.0 / static_cast<double>(n));
  }
  return t;
}

StatusOr<sched::JobSpec> ToJobSpec(const SimJob& j, const sched::ClusterSpec& spec,
                                   const TenantQueues& queues, int32_t max_gpus_per_host) {
  sched::JobSpec s;
  s.id = sched::JobId(j.id);
  s.name = j.name;
  s.tenant = j.tenant;
  int q = queues.Find(j.tenant);
  if (q < 0) return Status::Internal(fmt::format("{}: tenant '{}' has no queue", j.source, j.tenant));
  s.queue = sched::QueueId(static_cast<uint32_t>(q));
  s.priority = j.priority;
  int32_t tasks = 1, per_task = j.num_gpus;
  if (j.num_gpus > max_gpus_per_host && max_gpus_per_host > 0) {
    int32_t d = max_gpus_per_host;
    while (d > 1 && j.num_gpus % d != 0) --d;
    per_task = d;
    tasks = j.num_gpus / d;
  }
  s.num_tasks = tasks;
  s.task.gpus = per_task;
  s.task.gpu_milli = j.fractional() ? j.gpu_milli : 0;
  s.task.cpu_milli = (j.cpu_milli + tasks - 1) / tasks;
  s.task.memory_bytes = static_cast<uint64_t>((j.mem_mib + tasks - 1) / tasks) * kMiB;
  if (j.gpu_model.empty()) {
    s.gpu_models = sched::kAnyModel;
  } else {
    sched::ModelMask mask = 0;
    for (std::string_view m : Split(j.gpu_model, '|')) {
      auto it = std::find(spec.gpu_models.begin(), spec.gpu_models.end(), m);
      if (it == spec.gpu_models.end()) {
        return Status::InvalidArgument(fmt::format(
            "{}: field 'gpu_model': no host has GPU model '{}'", j.source, m));
      }
      mask |= sched::ModelMask{1} << (it - spec.gpu_models.begin());
    }
    s.gpu_models = mask;
  }
  s.est_runtime_s = j.estimate_s();
  s.locality = j.locality;
  s.allow_split = j.allow_split;
  s.preemptible = j.preemptible;
  s.min_runtime_s = j.min_runtime_s;
  s.kind = j.kind;
  s.submit_ns = static_cast<int64_t>(j.submit_s * 1e9);
  return s;
}

Status FitsEmptyCluster(const sched::JobSpec& job, const sched::ClusterSpec& spec) {
  int64_t gpus = 0;
  bool host_fits = false;
  // Remote attachment: any node with the task's CPU and memory can host it, its GPUs lent by
  // serving nodes of its models.
  const bool remote = job.task.gpus > 0 && job.remote.source != sched::GpuSource::kLocal &&
                      job.remote.within != sched::Level::kNode;
  int64_t lendable = 0;
  for (const auto& n : spec.nodes) {
    const bool cpu_mem = n.cpu_milli >= job.task.cpu_milli && n.memory_bytes >= job.task.memory_bytes;
    if (remote && cpu_mem) host_fits = true;
    bool model_ok = job.task.gpus == 0 ||
                    (n.gpu_model >= 0 && ((job.gpu_models >> n.gpu_model) & 1) != 0);
    if (!model_ok) continue;
    gpus += n.gpus;
    if (n.serves_gpus) lendable += n.gpus;
    if (n.gpus >= job.task.gpus && cpu_mem) host_fits = true;
  }
  // kRemote draws every GPU through a server; kPooled may also use its hosts' own.
  if (remote && job.remote.source == sched::GpuSource::kRemote) gpus = lendable;
  if (!host_fits) {
    return Status::ResourceExhausted(fmt::format(
        "no host can hold one task ({} GPUs, {} milli-CPU, {} MiB)", job.task.gpus,
        job.task.cpu_milli, job.task.memory_bytes / kMiB));
  }
  const int64_t need = int64_t{job.task.gpus} * job.num_tasks;
  if (gpus < need) {
    return Status::ResourceExhausted(
        fmt::format("asks {} GPUs, the cluster has {} of its models", need, gpus));
  }
  // A required locality: some one domain of its level must hold the whole gang.
  if (job.locality.required && job.locality.level != sched::Level::kFabric && need > 0) {
    std::vector<int64_t> in_domain(spec.domains.size(), 0);
    int64_t best = 0;
    for (const auto& n : spec.nodes) {
      if (n.gpu_model < 0 || ((job.gpu_models >> n.gpu_model) & 1) == 0) continue;
      if (job.locality.level == sched::Level::kNode) {
        best = std::max<int64_t>(best, n.gpus);
        continue;
      }
      sched::DomainId d = n.leaf;
      if (job.locality.level == sched::Level::kPod) d = spec.domains[d.value()].parent;
      best = std::max(best, in_domain[d.value()] += n.gpus);
    }
    if (best < need) {
      return Status::ResourceExhausted(fmt::format(
          "asks {} GPUs in one {} (required locality), the largest has {} of its models", need,
          sched::LevelName(job.locality.level), best));
    }
  }
  return Status::Ok();
}

}  // namespace gpool::sim
