#include "sched/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <set>

namespace gpool::sched {
namespace {

bool ModelAllowed(ModelMask mask, int model) {
  return model >= 0 && (mask & (ModelMask{1} << model)) != 0;
}

}  // namespace

int64_t RunningJob::expected_end_ns() const {
  if (!(spec.est_runtime_s > 0)) return INT64_MAX;
  const double end = static_cast<double>(start_ns) + spec.est_runtime_s * 1e9;
  return end >= static_cast<double>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(end);
}

StatusOr<ClusterState> ClusterState::Create(ClusterSpec spec) {
  if (spec.gpu_models.size() > kMaxGpuModels) {
    return Status::InvalidArgument(fmt::format("cluster.gpu_models: {} models, at most {}",
                                               spec.gpu_models.size(), kMaxGpuModels));
  }
  {
    std::set<std::string> seen;
    for (const std::string& m : spec.gpu_models) {
      if (!seen.insert(m).second) {
        return Status::InvalidArgument(fmt::format("cluster.gpu_models: '{}' listed twice", m));
      }
    }
  }
  const size_t nd = spec.domains.size();
  for (size_t i = 0; i < nd; ++i) {
    const DomainSpec& d = spec.domains[i];
    auto err = [&](std::string_view field, const std::string& what) {
      return Status::InvalidArgument(fmt::format("domain {} ({}): {}: {}", i, d.name, field, what));
    };
    if (d.level == Level::kNode || d.level > Level::kFabric) return err("level", "must be leaf, pod or fabric");
    if (d.level == Level::kFabric) {
      if (d.parent.valid()) return err("parent", "a fabric has no parent");
      continue;
    }
    if (!d.parent.valid() || d.parent.value() >= nd) {
      return err("parent", fmt::format("missing or out of range ({})", d.parent.value()));
    }
    const Level want = d.level == Level::kLeaf ? Level::kPod : Level::kFabric;
    if (spec.domains[d.parent.value()].level != want) {
      return err("parent", fmt::format("a {} must hang off a {}", LevelName(d.level), LevelName(want)));
    }
  }
  for (size_t i = 0; i < spec.nodes.size(); ++i) {
    const NodeSpec& n = spec.nodes[i];
    auto err = [&](std::string_view field, const std::string& what) {
      return Status::InvalidArgument(fmt::format("node {} ({}): {}: {}", i, n.name, field, what));
    };
    if (!n.leaf.valid() || n.leaf.value() >= nd || spec.domains[n.leaf.value()].level != Level::kLeaf) {
      return err("leaf", "missing, out of range or not a leaf domain");
    }
    if (n.gpus < 0 || n.gpus > kMaxGpusPerNode) {
      return err("gpus", fmt::format("must be in 0..{}, got {}", kMaxGpusPerNode, n.gpus));
    }
    if (n.gpus > 0 && (n.gpu_model < 0 || static_cast<size_t>(n.gpu_model) >= spec.gpu_models.size())) {
      return err("gpu_model", fmt::format("index {} is not one of the {} models", n.gpu_model,
                                          spec.gpu_models.size()));
    }
    if (n.cpu_milli < 0) return err("cpu_milli", fmt::format("negative: {}", n.cpu_milli));
  }

  ClusterState s;
  s.spec_ = std::make_shared<ClusterSpec>(std::move(spec));
  const ClusterSpec& sp = *s.spec_;
  const size_t nn = sp.nodes.size();
  auto topo = std::make_shared<Topology>();
  topo->children.resize(nd);
  topo->leaf_nodes.resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    const DomainSpec& d = sp.domains[i];
    topo->by_level[static_cast<int>(d.level)].push_back(DomainId(static_cast<uint32_t>(i)));
    if (d.parent.valid()) topo->children[d.parent.value()].push_back(DomainId(static_cast<uint32_t>(i)));
  }
  topo->degraded.resize(nd);
  for (size_t i = 0; i < nd; ++i) {
    const DomainSpec& d = sp.domains[i];
    topo->degraded[i] = d.nominal_bandwidth_gbps > 0 && d.bandwidth_gbps < d.nominal_bandwidth_gbps ? 1 : 0;
  }
  topo->ancestors.resize(nn);
  topo->gpu_offset.resize(nn);
  size_t gpus = 0;
  for (size_t i = 0; i < nn; ++i) {
    const NodeSpec& n = sp.nodes[i];
    topo->leaf_nodes[n.leaf.value()].push_back(NodeId(static_cast<uint32_t>(i)));
    const DomainId pod = sp.domains[n.leaf.value()].parent;
    topo->ancestors[i] = {n.leaf, pod, sp.domains[pod.value()].parent};
    topo->gpu_offset[i] = gpus;
    gpus += static_cast<size_t>(n.gpus);
  }
  s.topo_ = std::move(topo);
  s.gpu_free_milli_.assign(gpus, 1000);
  s.gpu_free_mem_.resize(gpus);
  s.free_whole_.resize(nn);
  s.free_cpu_.resize(nn);
  s.free_mem_.resize(nn);
  s.alloc_count_.assign(nn, 0);
  s.idle_since_.assign(nn, 0);
  s.held_.assign(nn, 0);
  const size_t nm = std::max<size_t>(1, sp.gpu_models.size());
  s.agg_.assign(nd * nm, ModelAggregate{});
  s.dom_free_cpu_.assign(nd, 0);
  s.dom_free_mem_.assign(nd, 0);
  s.dom_total_gpus_.assign(nd, 0);
  for (size_t i = 0; i < nn; ++i) {
    const NodeSpec& n = sp.nodes[i];
    const NodeId id(static_cast<uint32_t>(i));
    for (int g = 0; g < n.gpus; ++g) s.gpu_free_mem_[s.topo_->gpu_offset[i] + g] = n.gpu_memory_bytes;
    s.free_whole_[i] = n.gpus;
    s.free_cpu_[i] = n.cpu_milli;
    s.free_mem_[i] = n.memory_bytes;
    for (DomainId d : s.topo_->ancestors[i]) s.dom_total_gpus_[d.value()] += n.gpus;
    if (n.health == Health::kHealthy) {
      s.total_gpus_ += n.gpus;
      s.total_cpu_ += n.cpu_milli;
      s.total_mem_ += n.memory_bytes;
    }
    s.Contribute(id, +1);
  }
  return s;
}

const std::vector<DomainId>& ClusterState::domains_at(Level l) const {
  return topo_->by_level[static_cast<int>(l)];
}

DomainId ClusterState::ancestor(NodeId n, Level l) const {
  if (l == Level::kNode) return DomainId();
  return topo_->ancestors[n.value()][static_cast<int>(l) - 1];
}

bool ClusterState::Distance(NodeId a, NodeId b, Level* level) const {
  if (a == b) {
    *level = Level::kNode;
    return true;
  }
  for (int i = 0; i < 3; ++i) {
    if (topo_->ancestors[a.value()][i] == topo_->ancestors[b.value()][i]) {
      *level = static_cast<Level>(i + 1);
      return true;
    }
  }
  return false;
}

bool ClusterState::schedulable(NodeId n) const {
  const NodeSpec& s = spec_->nodes[n.value()];
  return s.health == Health::kHealthy && s.power == PowerState::kOn && !held_[n.value()];
}

void ClusterState::SetHeld(NodeId n, bool held) {
  if ((held_[n.value()] != 0) == held) return;
  Contribute(n, -1);
  held_[n.value()] = held ? 1 : 0;
  Contribute(n, +1);
}

uint32_t ClusterState::free_whole_mask(NodeId n) const {
  uint32_t mask = 0;
  const size_t off = topo_->gpu_offset[n.value()];
  for (int g = 0; g < spec_->nodes[n.value()].gpus; ++g) {
    if (gpu_free_milli_[off + g] == 1000) mask |= 1u << g;
  }
  return mask;
}

namespace {
// kTasksOf[w][g] = w / g: how many g-GPU tasks w wholly free GPUs hold. A table, because
// Contribute runs for every task of every bind, release and hold, and divides otherwise.
constexpr auto kTasksOf = [] {
  std::array<std::array<int8_t, kMaxGpusPerNode + 1>, kMaxGpusPerNode + 1> t{};
  for (int w = 0; w <= kMaxGpusPerNode; ++w) {
    for (int g = 1; g <= kMaxGpusPerNode; ++g) t[w][g] = static_cast<int8_t>(w / g);
  }
  return t;
}();
}  // namespace

void ClusterState::Contribute(NodeId n, int sign) {
  if (!schedulable(n)) return;
  const size_t i = n.value();
  const NodeSpec& node = spec_->nodes[i];
  const std::array<DomainId, 3>& anc = topo_->ancestors[i];
  if (node.gpus > 0) {
    const size_t off = topo_->gpu_offset[i];
    int64_t milli = 0, partial = 0;
    std::array<int8_t, 11> deciles{};
    uint32_t buckets = 0;  // deciles with a GPU in them: usually one or two of the eleven
    for (int g = 0; g < node.gpus; ++g) {
      const int32_t f = gpu_free_milli_[off + g];
      milli += f;
      if (f > 0 && f < 1000) ++partial;
      ++deciles[f / 100];
      buckets |= 1u << (f / 100);
    }
    const int fw = free_whole_[i];
    const auto& tasks = kTasksOf[fw];
    const size_t nm = std::max<size_t>(1, spec_->gpu_models.size());
    for (DomainId d : anc) {
      ModelAggregate& a = agg_[d.value() * nm + static_cast<size_t>(node.gpu_model)];
      a.nodes_by_free[fw] += sign;
      for (int g = 1; g <= fw; ++g) a.tasks_by_size[g] += sign * tasks[g];
      a.free_whole_gpus += sign * fw;
      a.free_milli += sign * milli;
      a.partial_gpus += sign * partial;
      for (uint32_t m = buckets; m != 0; m &= m - 1) {
        const int b = std::countr_zero(m);
        a.gpus_by_free_decile[b] += sign * deciles[b];
      }
    }
  }
  for (DomainId d : anc) {
    dom_free_cpu_[d.value()] += sign * free_cpu_[i];
    if (sign > 0) {
      dom_free_mem_[d.value()] += free_mem_[i];
    } else {
      dom_free_mem_[d.value()] -= free_mem_[i];
    }
  }
}

int64_t ClusterState::TaskCapacityBound(DomainId d, const TaskRequest& t, ModelMask models) const {
  if (t.gpus == 0) {
    int64_t bound = INT64_MAX;
    if (t.cpu_milli > 0) bound = dom_free_cpu_[d.value()] / t.cpu_milli;
    if (t.memory_bytes > 0) {
      bound = std::min<int64_t>(bound, static_cast<int64_t>(dom_free_mem_[d.value()] / t.memory_bytes));
    }
    return bound;
  }
  int64_t bound = 0;
  const size_t nm = spec_->gpu_models.size();
  // Tasks one GPU with b tenths free takes depend only on b: divide once per decile, not once
  // per decile and model (backfill calls this for every end time it steps through).
  std::array<int64_t, 11> per_gpu{};
  const int lo = t.fractional() ? t.gpu_milli / 100 : 11;
  for (int b = lo; b <= 10; ++b) per_gpu[b] = std::min(1000, 100 * b + 99) / t.gpu_milli;
  for (size_t m = 0; m < nm; ++m) {
    if (!ModelAllowed(models, static_cast<int>(m))) continue;
    const ModelAggregate& a = agg_[d.value() * nm + m];
    if (t.fractional()) {
      for (int b = lo; b <= 10; ++b) bound += int64_t{a.gpus_by_free_decile[b]} * per_gpu[b];
    } else {
      bound += a.tasks_by_size[t.gpus];
    }
  }
  return bound;
}

int64_t ClusterState::FreeWholeGpus(DomainId d, ModelMask models) const {
  int64_t sum = 0;
  const size_t nm = spec_->gpu_models.size();
  for (size_t m = 0; m < nm; ++m) {
    if (ModelAllowed(models, static_cast<int>(m))) sum += agg_[d.value() * nm + m].free_whole_gpus;
  }
  return sum;
}

int32_t ClusterState::TasksThatFit(NodeId n, const TaskRequest& t, ModelMask models) const {
  if (!schedulable(n)) return 0;
  const size_t i = n.value();
  const NodeSpec& node = spec_->nodes[i];
  int64_t fit = INT32_MAX;
  if (t.cpu_milli > 0) fit = free_cpu_[i] / t.cpu_milli;
  if (t.memory_bytes > 0) fit = std::min<int64_t>(fit, static_cast<int64_t>(free_mem_[i] / t.memory_bytes));
  if (t.gpus == 0) return static_cast<int32_t>(fit);
  if (!ModelAllowed(models, node.gpu_model)) return 0;
  if (t.fractional()) {
    int64_t slots = 0;
    for (int g = 0; g < node.gpus; ++g) {
      int64_t s = gpu_free_milli_[topo_->gpu_offset[i] + g] / t.gpu_milli;
      if (t.gpu_memory_bytes > 0) {
        s = std::min<int64_t>(s, static_cast<int64_t>(gpu_free_mem_[topo_->gpu_offset[i] + g] / t.gpu_memory_bytes));
      }
      slots += s;
    }
    return static_cast<int32_t>(std::min(fit, slots));
  }
  return static_cast<int32_t>(std::min<int64_t>(fit, free_whole_[i] / t.gpus));
}

Status ClusterState::CheckGpus(NodeId n, uint32_t mask, const TaskRequest& t) const {
  const size_t i = n.value();
  const NodeSpec& node = spec_->nodes[i];
  auto err = [&](const std::string& what) {
    return Status::FailedPrecondition(fmt::format("GPUs of node {} ({}): {}", i, node.name, what));
  };
  if (node.gpus < 32 && (mask >> node.gpus) != 0) return err("GPU mask names GPUs the node lacks");
  if (t.fractional()) {
    const int g = std::countr_zero(mask);
    if (gpu_free_milli_[topo_->gpu_offset[i] + g] < t.gpu_milli) return err(fmt::format("GPU {} lacks {} milli", g, t.gpu_milli));
    if (gpu_free_mem_[topo_->gpu_offset[i] + g] < t.gpu_memory_bytes) return err(fmt::format("GPU {} lacks memory", g));
    return Status::Ok();
  }
  if ((mask & ~free_whole_mask(n)) != 0) return err("a named GPU is not wholly free");
  return Status::Ok();
}

Status ClusterState::CheckBinding(const TaskBinding& b, const TaskRequest& t) const {
  if (!b.node.valid() || b.node.value() >= spec_->nodes.size()) {
    return Status::InvalidArgument(fmt::format("binding: no node {}", b.node.value()));
  }
  const size_t i = b.node.value();
  const NodeSpec& node = spec_->nodes[i];
  auto err = [&](const std::string& what) {
    return Status::FailedPrecondition(fmt::format("binding on node {} ({}): {}", i, node.name, what));
  };
  auto unschedulable = [&](const NodeSpec& n) {
    return fmt::format("not schedulable (health {}, power {})",
                       n.health == Health::kHealthy ? "healthy" : "unhealthy",
                       PowerStateName(n.power));
  };
  if (!schedulable(b.node)) return err(unschedulable(node));
  if (free_cpu_[i] < t.cpu_milli) return err(fmt::format("{} milli-CPU free, {} asked", free_cpu_[i], t.cpu_milli));
  if (free_mem_[i] < t.memory_bytes) return err(fmt::format("{} bytes free, {} asked", free_mem_[i], t.memory_bytes));
  const int bits = b.gpu_count();
  if (t.gpus == 0) {
    if (bits != 0) return err("a GPU-less task names GPUs");
    return Status::Ok();
  }
  if (!b.remote.empty() && !b.via_server) return err("remote GPUs without via_server");
  if (b.via_server && b.gpu_mask != 0 && !node.serves_gpus) {
    return err("its own GPUs through a GPU server, but the node serves none");
  }
  if (t.fractional()) {
    if (bits != 1) return err("a fractional task must name exactly one GPU");
  } else if (bits != t.gpus) {
    return err(fmt::format("{} GPUs named, {} asked", bits, t.gpus));
  }
  if (b.gpu_mask != 0) GPOOL_RETURN_IF_ERROR(CheckGpus(b.node, b.gpu_mask, t));
  for (size_t k = 0; k < b.remote.size(); ++k) {
    const RemoteGpus& r = b.remote[k];
    if (!r.node.valid() || r.node.value() >= spec_->nodes.size()) {
      return err(fmt::format("remote GPUs on no node {}", r.node.value()));
    }
    const NodeSpec& gn = spec_->nodes[r.node.value()];
    if (r.node == b.node) return err("remote GPUs on the task's own node (use gpu_mask)");
    for (size_t j = 0; j < k; ++j) {
      if (b.remote[j].node == r.node) return err(fmt::format("node {} listed twice in remote", gn.name));
    }
    if (r.gpu_mask == 0) return err(fmt::format("remote GPUs on {}: empty mask", gn.name));
    if (!schedulable(r.node)) return err(fmt::format("remote GPUs on {}: {}", gn.name, unschedulable(gn)));
    if (!gn.serves_gpus) return err(fmt::format("remote GPUs on {}, which serves none", gn.name));
    GPOOL_RETURN_IF_ERROR(CheckGpus(r.node, r.gpu_mask, t));
  }
  return Status::Ok();
}

void ClusterState::ApplyGpus(NodeId n, uint32_t mask, const TaskRequest& t, int sign) {
  const size_t i = n.value();
  const NodeSpec& node = spec_->nodes[i];
  for (uint32_t m = mask; m != 0; m &= m - 1) {
    const size_t gi = topo_->gpu_offset[i] + static_cast<size_t>(std::countr_zero(m));
    const int32_t milli = t.fractional() ? t.gpu_milli : 1000;
    const uint64_t mem = t.fractional() ? t.gpu_memory_bytes : node.gpu_memory_bytes;
    gpu_free_milli_[gi] -= sign * milli;
    if (sign > 0) {
      gpu_free_mem_[gi] -= mem;
    } else {
      gpu_free_mem_[gi] += mem;
    }
  }
  int32_t whole = 0;
  for (int g = 0; g < node.gpus; ++g) whole += gpu_free_milli_[topo_->gpu_offset[i] + g] == 1000 ? 1 : 0;
  free_whole_[i] = whole;
}

void ClusterState::Apply(const TaskBinding& b, const TaskRequest& t, int sign, int64_t now_ns) {
  const size_t i = b.node.value();
  Contribute(b.node, -1);
  ApplyGpus(b.node, b.gpu_mask, t, sign);
  free_cpu_[i] -= sign * t.cpu_milli;
  if (sign > 0) {
    free_mem_[i] -= t.memory_bytes;
  } else {
    free_mem_[i] += t.memory_bytes;
  }
  alloc_count_[i] += sign;
  idle_since_[i] = alloc_count_[i] == 0 ? now_ns : -1;
  Contribute(b.node, +1);
  // A lent GPU is allocated on its own node, which is then not idle (power management).
  for (const RemoteGpus& r : b.remote) {
    const size_t ri = r.node.value();
    Contribute(r.node, -1);
    ApplyGpus(r.node, r.gpu_mask, t, sign);
    alloc_count_[ri] += sign;
    idle_since_[ri] = alloc_count_[ri] == 0 ? now_ns : -1;
    Contribute(r.node, +1);
  }
}

Status ClusterState::Bind(const JobSpec& job, const Placement& p, int64_t now_ns) {
  if (running_index_.Find(job.id) >= 0) {
    return Status::AlreadyExists(fmt::format("job {} ({}) is already running", job.id.value(), job.name));
  }
  if (p.tasks.size() != static_cast<size_t>(job.num_tasks)) {
    return Status::InvalidArgument(fmt::format("job {} ({}): placement has {} tasks, the gang has {}",
                                               job.id.value(), job.name, p.tasks.size(), job.num_tasks));
  }
  size_t applied = 0;
  Status st;
  for (; applied < p.tasks.size(); ++applied) {
    st = CheckBinding(p.tasks[applied], job.task);
    if (!st.ok()) break;
    Apply(p.tasks[applied], job.task, +1, now_ns);
  }
  if (!st.ok()) {
    while (applied > 0) {
      --applied;
      Apply(p.tasks[applied], job.task, -1, now_ns);
    }
    return st.WithContext(fmt::format("job {} ({}) task", job.id.value(), job.name));
  }
  running_index_.Set(job.id, static_cast<uint32_t>(running_.size()));
  running_.push_back(std::make_shared<const RunningJob>(RunningJob{.spec = job, .placement = p, .start_ns = now_ns}));
  Account(job, +1);
  return Status::Ok();
}

TaskShape TaskShape::Of(const JobSpec& j) {
  const TaskRequest& t = j.task;
  return {.gpus = t.gpus,
          .gpu_milli = t.fractional() ? t.gpu_milli : 0,
          .gpu_memory_bytes = t.fractional() ? t.gpu_memory_bytes : 0,
          .cpu_milli = t.cpu_milli,
          .memory_bytes = t.memory_bytes,
          .models = j.gpu_models};
}

void ClusterState::Account(const JobSpec& job, int sign) {
  if (job.queue.valid()) {
    const size_t q = job.queue.value();
    if (queue_used_milli_.size() <= q) {
      queue_used_milli_.resize(q + 1, 0);
      queue_used_cpu_.resize(q + 1, 0);
      queue_used_mem_.resize(q + 1, 0);
      queue_jobs_.resize(q + 1, 0);
    }
    queue_used_milli_[q] += sign * job.total_milli_gpus();
    queue_used_cpu_[q] += sign * job.task.cpu_milli * job.num_tasks;
    const uint64_t mem = job.task.memory_bytes * static_cast<uint64_t>(job.num_tasks);
    queue_used_mem_[q] = sign > 0 ? queue_used_mem_[q] + mem : queue_used_mem_[q] - mem;
    queue_jobs_[q] += sign;
  }
  used_milli_ += sign * job.total_milli_gpus();
  const TaskShape shape = TaskShape::Of(job);
  auto it = std::lower_bound(shapes_.begin(), shapes_.end(), shape,
                             [](const ShapeCount& c, const TaskShape& k) { return c.shape < k; });
  if (it == shapes_.end() || it->shape != shape) it = shapes_.insert(it, {shape, 0});
  it->tasks += sign * job.num_tasks;
  if (it->tasks == 0) shapes_.erase(it);
}

Status ClusterState::Release(JobId job, int64_t now_ns) {
  const int64_t found = running_index_.Find(job);
  if (found < 0) {
    return Status::NotFound(fmt::format("job {} is not running", job.value()));
  }
  const size_t idx = static_cast<size_t>(found);
  const RunningJob& r = *running_[idx];
  for (const TaskBinding& b : r.placement.tasks) Apply(b, r.spec.task, -1, now_ns);
  Account(r.spec, -1);
  running_index_.Erase(job);
  if (idx + 1 != running_.size()) {
    running_[idx] = std::move(running_.back());
    running_index_.Set(running_[idx]->spec.id, static_cast<uint32_t>(idx));
  }
  running_.pop_back();
  return Status::Ok();
}

void ClusterState::SetHealth(NodeId n, Health h) {
  if (spec_->nodes[n.value()].health == h) return;
  NodeSpec& node = MutableNode(n);
  Contribute(n, -1);
  const int sign = h == Health::kHealthy ? +1 : -1;
  total_gpus_ += sign * node.gpus;
  total_cpu_ += sign * node.cpu_milli;
  if (sign > 0) {
    total_mem_ += node.memory_bytes;
  } else {
    total_mem_ -= node.memory_bytes;
  }
  node.health = h;
  Contribute(n, +1);
}

void ClusterState::SetPower(NodeId n, PowerState p) {
  if (spec_->nodes[n.value()].power == p) return;
  NodeSpec& node = MutableNode(n);
  Contribute(n, -1);
  node.power = p;
  Contribute(n, +1);
}

const RunningJob* ClusterState::FindRunning(JobId job) const {
  const int64_t slot = running_index_.Find(job);
  return slot < 0 ? nullptr : running_[static_cast<size_t>(slot)].get();
}

NodeSpec& ClusterState::MutableNode(NodeId n) {
  // use_count is exact here: a concurrent copy of *this would be a const use racing with this
  // non-const call, which the class doesn't allow.
  if (spec_.use_count() > 1) spec_ = std::make_shared<ClusterSpec>(*spec_);
  return spec_->nodes[n.value()];
}

namespace {
// splitmix64's finaliser: job ids are often dense, and linear probing wants them spread.
size_t HashId(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<size_t>(x);
}
}  // namespace

size_t ClusterState::JobIndex::Probe(JobId id) const {
  const size_t mask = cells_.size() - 1;
  size_t i = HashId(id.value()) & mask;
  while (cells_[i].key != JobId::kInvalid && cells_[i].key != id.value()) i = (i + 1) & mask;
  return i;
}

int64_t ClusterState::JobIndex::Find(JobId id) const {
  if (cells_.empty()) return -1;
  const Cell& c = cells_[Probe(id)];
  return c.key == JobId::kInvalid ? -1 : int64_t{c.slot};
}

void ClusterState::JobIndex::Set(JobId id, uint32_t slot) {
  if ((size_ + 1) * 2 > cells_.size()) {
    std::vector<Cell> old = std::move(cells_);
    cells_.assign(std::max<size_t>(16, old.size() * 2), Cell{});
    for (const Cell& c : old) {
      if (c.key != JobId::kInvalid) cells_[Probe(JobId(c.key))] = c;
    }
  }
  Cell& c = cells_[Probe(id)];
  if (c.key == JobId::kInvalid) ++size_;
  c = {id.value(), slot};
}

void ClusterState::JobIndex::Erase(JobId id) {
  if (cells_.empty()) return;
  const size_t mask = cells_.size() - 1;
  size_t i = Probe(id);
  if (cells_[i].key == JobId::kInvalid) return;
  --size_;
  // Backward-shift deletion: move later cells of the probe run into the hole when their home
  // slot allows it, so lookups never need tombstones.
  for (size_t j = (i + 1) & mask; cells_[j].key != JobId::kInvalid; j = (j + 1) & mask) {
    const size_t home = HashId(cells_[j].key) & mask;
    // Cell j may move to hole i when i lies cyclically in [home, j).
    const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      cells_[i] = cells_[j];
      i = j;
    }
  }
  cells_[i] = Cell{};
}

}  // namespace gpool::sched
