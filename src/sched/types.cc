#include "sched/types.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>

#include "common/file.h"

namespace gpool::sched {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view LevelName(Level l) {
  switch (l) {
    case Level::kNode: return "node";
    case Level::kLeaf: return "leaf";
    case Level::kPod: return "pod";
    case Level::kFabric: return "fabric";
  }
  return "?";
}

StatusOr<Level> ParseLevel(std::string_view s) {
  std::string l = Lower(Trim(s));
  if (l == "node") return Level::kNode;
  if (l == "leaf") return Level::kLeaf;
  if (l == "pod") return Level::kPod;
  if (l == "fabric" || l == "any") return Level::kFabric;
  return Status::InvalidArgument(
      fmt::format("locality level '{}': expected node, leaf, pod, fabric or any", s));
}

std::string_view PowerStateName(PowerState p) {
  switch (p) {
    case PowerState::kOn: return "on";
    case PowerState::kSuspending: return "suspending";
    case PowerState::kOff: return "off";
    case PowerState::kResuming: return "resuming";
  }
  return "?";
}

std::string_view WaitKindName(WaitKind k) {
  switch (k) {
    case WaitKind::kNeverFits: return "never-fits";
    case WaitKind::kQueueCap: return "queue-cap";
    case WaitKind::kQueueJobs: return "queue-jobs";
    case WaitKind::kBlocked: return "blocked";
    case WaitKind::kReserved: return "reserved";
    case WaitKind::kNoRoom: return "no-room";
  }
  return "?";
}

std::string_view JobKindName(JobKind k) {
  switch (k) {
    case JobKind::kTraining: return "training";
    case JobKind::kInference: return "inference";
    case JobKind::kInteractive: return "interactive";
  }
  return "?";
}

StatusOr<JobKind> ParseJobKind(std::string_view s) {
  std::string l = Lower(Trim(s));
  if (l == "training") return JobKind::kTraining;
  if (l == "inference") return JobKind::kInference;
  if (l == "interactive") return JobKind::kInteractive;
  return Status::InvalidArgument(
      fmt::format("job kind '{}': expected training, inference or interactive", s));
}

std::string_view GpuSourceName(GpuSource s) {
  switch (s) {
    case GpuSource::kLocal: return "local";
    case GpuSource::kPooled: return "pooled";
    case GpuSource::kRemote: return "remote";
  }
  return "?";
}

StatusOr<GpuSource> ParseGpuSource(std::string_view s) {
  std::string l = Lower(Trim(s));
  if (l.empty() || l == "local") return GpuSource::kLocal;
  if (l == "pooled") return GpuSource::kPooled;
  if (l == "remote") return GpuSource::kRemote;
  return Status::InvalidArgument(
      fmt::format("GPU source '{}': expected local, pooled or remote", s));
}

int TaskBinding::gpu_count() const {
  int n = std::popcount(gpu_mask);
  for (const RemoteGpus& r : remote) n += std::popcount(r.gpu_mask);
  return n;
}

Status BuildUniformTopology(const UniformTopologyOptions& o, ClusterSpec* spec) {
  if (o.nodes_per_leaf < 1) {
    return Status::InvalidArgument(
        fmt::format("topology.nodes_per_leaf: must be >= 1, got {}", o.nodes_per_leaf));
  }
  if (o.leaves_per_pod < 1) {
    return Status::InvalidArgument(
        fmt::format("topology.leaves_per_pod: must be >= 1, got {}", o.leaves_per_pod));
  }
  spec->domains.clear();
  spec->domains.push_back({.name = "fabric0", .level = Level::kFabric});
  const DomainId fabric(0);
  const size_t n = spec->nodes.size();
  const size_t leaves = (n + o.nodes_per_leaf - 1) / o.nodes_per_leaf;
  DomainId pod;
  for (size_t l = 0; l < leaves; ++l) {
    if (l % o.leaves_per_pod == 0) {
      pod = DomainId(static_cast<uint32_t>(spec->domains.size()));
      spec->domains.push_back({.name = fmt::format("pod{}", l / o.leaves_per_pod),
                               .level = Level::kPod,
                               .parent = fabric,
                               .bandwidth_gbps = o.pod_bandwidth_gbps,
                               .nominal_bandwidth_gbps = o.pod_bandwidth_gbps});
    }
    const DomainId leaf(static_cast<uint32_t>(spec->domains.size()));
    spec->domains.push_back({.name = fmt::format("leaf{}", l),
                             .level = Level::kLeaf,
                             .parent = pod,
                             .bandwidth_gbps = o.leaf_bandwidth_gbps,
                             .nominal_bandwidth_gbps = o.leaf_bandwidth_gbps});
    for (size_t i = l * o.nodes_per_leaf; i < std::min(n, (l + 1) * o.nodes_per_leaf); ++i) {
      spec->nodes[i].leaf = leaf;
    }
  }
  return Status::Ok();
}

int FindGpuModel(const ClusterSpec& spec, std::string_view name) {
  for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
    if (spec.gpu_models[i] == name) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<ModelMask> ParseGpuModels(const ClusterSpec& spec, std::string_view text) {
  std::string_view t = Trim(text);
  std::string l = Lower(t);
  if (l.empty() || l == "nan" || l == "any" || l == "*") return kAnyModel;
  ModelMask mask = 0;
  for (std::string_view part : Split(t, '|')) {
    part = Trim(part);
    int m = FindGpuModel(spec, part);
    if (m < 0) {
      return Status::InvalidArgument(
          fmt::format("gpu_models: unknown GPU model '{}' in '{}'", part, text));
    }
    mask |= ModelMask{1} << m;
  }
  return mask;
}

Status ValidateJob(const JobSpec& job, const ClusterSpec& cluster, size_t num_queues) {
  auto err = [&](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(
        fmt::format("job {} ({}): {}: {}", job.id.value(), job.name, field, what));
  };
  if (!job.id.valid()) return err("id", "missing");
  if (!job.queue.valid() || job.queue.value() >= num_queues) {
    return err("queue", fmt::format("{} is not one of the {} queues", job.queue.value(), num_queues));
  }
  if (job.num_tasks < 1) return err("num_tasks", fmt::format("must be >= 1, got {}", job.num_tasks));
  const TaskRequest& t = job.task;
  if (t.gpus < 0 || t.gpus > kMaxGpusPerNode) {
    return err("task.gpus", fmt::format("must be in 0..{}, got {}", kMaxGpusPerNode, t.gpus));
  }
  if (t.gpu_milli < 0 || t.gpu_milli > 1000) {
    return err("task.gpu_milli", fmt::format("must be in 0..1000, got {}", t.gpu_milli));
  }
  if (t.gpu_milli > 0 && t.gpu_milli < 1000 && t.gpus != 1) {
    return err("task.gpu_milli",
               fmt::format("a fraction of a GPU ({} milli) needs task.gpus = 1, got {}",
                           t.gpu_milli, t.gpus));
  }
  if (t.gpus == 0 && t.gpu_milli != 0) {
    return err("task.gpu_milli", fmt::format("{} with task.gpus = 0", t.gpu_milli));
  }
  if (t.cpu_milli < 0) return err("task.cpu_milli", fmt::format("negative: {}", t.cpu_milli));
  if (t.gpus == 0 && t.cpu_milli == 0 && t.memory_bytes == 0) {
    return err("task", "asks for nothing (no GPU, CPU or memory)");
  }
  if (job.gpu_models == 0) return err("gpu_models", "empty set of models");
  if (job.locality.level == Level::kNode && job.num_tasks > 1 && job.locality.required) {
    // Allowed: several tasks on one node. Nothing to check here beyond the level itself.
  }
  if (!std::isfinite(job.est_runtime_s) || job.est_runtime_s < 0) {
    return err("est_runtime_s", fmt::format("must be >= 0, got {}", job.est_runtime_s));
  }
  if (!std::isfinite(job.min_runtime_s) || job.min_runtime_s < 0) {
    return err("min_runtime_s", fmt::format("must be >= 0, got {}", job.min_runtime_s));
  }
  const RemoteGpuRequest& r = job.remote;
  if (r.source != GpuSource::kLocal) {
    if (t.gpus == 0) {
      return err("remote.source", fmt::format("'{}' for a task with no GPUs",
                                              GpuSourceName(r.source)));
    }
    if (!std::isfinite(r.max_slowdown) || (r.max_slowdown != 0 && r.max_slowdown < 1)) {
      return err("remote.max_slowdown",
                 fmt::format("must be 0 (any) or a factor >= 1, got {}", r.max_slowdown));
    }
  }
  // A task must fit on some node of an allowed model, or it would wait forever. With remote
  // attachment it may instead run on any node with its CPU and memory and draw its GPUs from
  // the serving nodes (an upper bound: distance and slowdown limits are the placement's).
  if (t.gpus > 0) {
    auto model_ok = [&](const NodeSpec& n) {
      return n.gpus > 0 && n.gpu_model >= 0 && (job.gpu_models & (ModelMask{1} << n.gpu_model)) &&
             !(t.fractional() && t.gpu_memory_bytes > n.gpu_memory_bytes);
    };
    // Runs for every pending job of every cycle (10k jobs x 10k nodes in sched_bench), so it
    // stops at the first node that settles it: both conditions only grow along the scan.
    const bool remote_ok = r.source != GpuSource::kLocal;
    bool any = false;
    bool host = false;
    int64_t lendable = 0;
    for (const NodeSpec& n : cluster.nodes) {
      const bool fits_host = t.cpu_milli <= n.cpu_milli && t.memory_bytes <= n.memory_bytes;
      if (r.source != GpuSource::kRemote && fits_host && n.gpus >= t.gpus && model_ok(n)) {
        any = true;
        break;
      }
      if (!remote_ok) continue;
      host = host || fits_host;
      if (model_ok(n) && n.serves_gpus) lendable += t.fractional() ? 1 : n.gpus;
      if (host && lendable >= t.gpus) {
        any = true;
        break;
      }
    }
    if (!any) {
      return err("task", fmt::format("no node of an allowed GPU model can ever hold one task "
                                     "({} GPUs, {} milli-CPU, {} bytes)",
                                     t.gpus, t.cpu_milli, t.memory_bytes));
    }
  }
  return Status::Ok();
}

Status ValidateQueue(const QueueSpec& q, const ClusterSpec& cluster) {
  auto err = [&](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(fmt::format("queue '{}': {}: {}", q.name, field, what));
  };
  if (q.name.empty()) return err("name", "empty");
  if (q.guaranteed_gpus < 0) {
    return err("guaranteed_gpus", fmt::format("must be >= 0, got {}", q.guaranteed_gpus));
  }
  if (!(q.weight > 0) || !std::isfinite(q.weight)) {
    return err("weight", fmt::format("must be > 0, got {}", q.weight));
  }
  if (q.max_gpus < -1) return err("max_gpus", fmt::format("must be >= -1, got {}", q.max_gpus));
  if (q.max_running_jobs < -1) {
    return err("max_running_jobs", fmt::format("must be >= -1, got {}", q.max_running_jobs));
  }
  for (DomainId d : q.guaranteed_domains) {
    if (!d.valid() || d.value() >= cluster.domains.size()) {
      return err("guaranteed_domains", fmt::format("no domain {}", d.value()));
    }
  }
  return Status::Ok();
}

}  // namespace gpool::sched
