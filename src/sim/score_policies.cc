#include "sim/score_policies.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "sched/placement.h"

namespace gpool::sim {

namespace {

// The artifact's normalisers (open-gpu-share/utils/const.go): the largest node it models.
constexpr double kMaxSpecCpu = 128000;
constexpr double kMaxSpecGpu = 8000;
constexpr int64_t kMaxScore = 100;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

bool ModelOk(const NodeRes& n, const PodRes& p) {
  return n.model >= 0 && ((p.models >> n.model) & 1) != 0;
}

// The node after pod, its GPUs taken the artifact's NodeResource.Sub way (least sufficient GPU
// first); what FGD scores whole-GPU and CPU-only pods with.
NodeRes SubPod(NodeRes n, const PodRes& p) {
  n.cpu_left -= p.cpu;
  int need = p.gpus;
  if (need == 0) return n;
  std::array<int, sched::kMaxGpusPerNode> idx{};
  for (int g = 0; g < n.gpus; ++g) idx[g] = g;
  std::stable_sort(idx.begin(), idx.begin() + n.gpus,
                   [&](int a, int b) { return n.gpu_left[a] < n.gpu_left[b]; });
  for (int k = 0; k < n.gpus && need > 0; ++k) {
    int g = idx[k];
    if (p.milli <= n.gpu_left[g]) {
      n.gpu_left[g] -= p.milli;
      --need;
    }
  }
  return n;
}

// The lowest-numbered wholly free GPUs, as many as pod asks (AllocateExclusiveGpuId).
uint32_t LowestFree(const NodeRes& n, int count) {
  uint32_t mask = 0;
  for (int g = 0; g < n.gpus && count > 0; ++g) {
    if (n.gpu_left[g] == 1000) {
      mask |= 1u << g;
      --count;
    }
  }
  return mask;
}

// The fitting GPU with the least milli left, the first on ties (allocateGpuIdBasedOnBestFit).
uint32_t BestFitGpu(const NodeRes& n, const PodRes& p) {
  int best = -1;
  for (int g = 0; g < n.gpus; ++g) {
    if (n.gpu_left[g] >= p.milli && (best < 0 || n.gpu_left[g] < n.gpu_left[best])) best = g;
  }
  return best < 0 ? 0 : 1u << best;
}

int64_t DotProdScore(const NodeRes& n, const PodRes& p) {
  const double node_cpu = static_cast<double>(n.cpu_left) / kMaxSpecCpu;
  const double node_gpu = static_cast<double>(n.total_gpu_left()) / kMaxSpecGpu;
  const double pod_cpu = static_cast<double>(p.cpu) / kMaxSpecCpu;
  const double pod_gpu = static_cast<double>(p.total_milli()) / kMaxSpecGpu;
  double s = node_cpu * pod_cpu + node_gpu * pod_gpu;
  s /= 2;
  s = 1 - s;
  return static_cast<int64_t>(static_cast<double>(kMaxScore) * s);
}

int64_t ClusteringScore(const NodeRes& n, const PodRes& p) {
  const int cls = p.gpu_class();
  if (cls == 0) return 0;
  const int64_t used = (kMaxScore / 4) * (static_cast<int64_t>(kMaxSpecGpu) - n.total_gpu_left()) /
                       static_cast<int64_t>(kMaxSpecGpu);
  if ((n.classes >> cls) & 1) {
    return used + (std::popcount(n.classes) == 1 ? kMaxScore * 3 / 4 : kMaxScore * 2 / 4);
  }
  return used + (n.classes == 0 ? kMaxScore / 4 : 0);
}

int64_t PackingScore(const NodeRes& n, const PodRes& p) {
  if (p.total_milli() <= 0) return 0;
  const int32_t free = n.fully_free();
  if (free == n.gpus) return std::max<int64_t>(kMaxScore / 3 - free, free);  // an empty node
  std::array<int, sched::kMaxGpusPerNode> idx{};
  for (int g = 0; g < n.gpus; ++g) idx[g] = g;
  std::stable_sort(idx.begin(), idx.begin() + n.gpus,
                   [&](int a, int b) { return n.gpu_left[a] < n.gpu_left[b]; });
  int need = p.gpus, free_used = 0;
  int64_t left_pct = 0;
  for (int k = 0; k < n.gpus && need > 0; ++k) {
    const int32_t left = n.gpu_left[idx[k]];
    if (p.milli <= left) {
      --need;
      if (left == 1000) ++free_used;
      left_pct += int64_t{left} * 100 / 1000;
    }
  }
  if (need != 0) return 0;
  if (free_used > 0) return std::max<int64_t>(kMaxScore / 2 - free_used, kMaxScore / 3);
  return std::max<int64_t>(kMaxScore - left_pct / 10, kMaxScore / 2);
}

int64_t BestFitScore(const NodeRes& n, const PodRes& p) {
  double s = 0;
  s += static_cast<double>(n.cpu_left - p.cpu) / kMaxSpecCpu * 0.5;
  s += static_cast<double>(n.total_gpu_left() - p.total_milli()) / kMaxSpecGpu * 0.5;
  s = (1.0 - s) * static_cast<double>(kMaxScore);
  return static_cast<int64_t>(s);
}

// FGD's score and, for a shared pod, the GPU it picks.
int64_t FgdScore(const NodeRes& n, const PodRes& p, const TypicalPods& target, int* gpu) {
  const double before = NodeFrag(n, target);
  if (p.shared()) {
    int64_t best = 0;
    *gpu = -1;
    for (int g = 0; g < n.gpus; ++g) {
      if (n.gpu_left[g] < p.milli) continue;
      NodeRes a = n;
      a.cpu_left -= p.cpu;
      a.gpu_left[g] -= p.milli;
      const int64_t s =
          static_cast<int64_t>(Sigmoid((before - NodeFrag(a, target)) / 1000) * static_cast<double>(kMaxScore));
      if (*gpu < 0 || s > best) {
        best = s;
        *gpu = g;
      }
    }
    return best;
  }
  *gpu = -1;
  return static_cast<int64_t>(Sigmoid((before - NodeFrag(SubPod(n, p), target)) / 1000) *
                              static_cast<double>(kMaxScore));
}

std::vector<size_t> ArrivalOrder(const std::vector<sched::JobSpec>& pending) {
  std::vector<size_t> order(pending.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = pending[a], &y = pending[b];
    return x.submit_ns != y.submit_ns ? x.submit_ns < y.submit_ns : x.id < y.id;
  });
  return order;
}

}  // namespace

int64_t NodeRes::total_gpu_left() const {
  int64_t t = 0;
  for (int g = 0; g < gpus; ++g) t += gpu_left[g];
  return t;
}

int32_t NodeRes::fully_free() const {
  int32_t f = 0;
  for (int g = 0; g < gpus; ++g) f += gpu_left[g] == 1000 ? 1 : 0;
  return f;
}

PodRes PodRes::Of(const sched::JobSpec& job) {
  PodRes p;
  p.cpu = job.task.cpu_milli;
  p.mem = job.task.memory_bytes;
  p.gpus = job.task.gpus;
  p.milli = job.task.gpus == 0 ? 0 : (job.task.fractional() ? job.task.gpu_milli : 1000);
  p.models = job.gpu_models;
  return p;
}

bool Feasible(const NodeRes& n, const PodRes& p) {
  if (n.cpu_left < p.cpu || n.mem_left < p.mem) return false;
  if (p.gpus == 0) return true;
  if (!ModelOk(n, p) || p.gpus > n.gpus) return false;
  if (p.shared()) {
    for (int g = 0; g < n.gpus; ++g) {
      if (n.gpu_left[g] >= p.milli) return true;
    }
    return false;
  }
  return n.fully_free() >= p.gpus;
}

TypicalPods MakeTypicalPods(const std::vector<sched::JobSpec>& jobs, double popularity) {
  using Key = std::tuple<int64_t, int32_t, int32_t, sched::ModelMask>;  // cpu, milli, gpus, models
  std::map<Key, double> counts;
  double total = 0;
  for (const sched::JobSpec& j : jobs) {
    const PodRes p = PodRes::Of(j);
    // CPU-only pods are all one "model" (the artifact's GpuType is empty for them).
    counts[{p.cpu, p.milli, p.gpus, p.gpus == 0 ? sched::kAnyModel : p.models}] += j.num_tasks;
    total += j.num_tasks;
  }
  std::vector<std::pair<double, Key>> order;
  for (const auto& [k, c] : counts) order.emplace_back(c, k);
  // Most popular first; equal counts: the larger shape first (the artifact's reversed Less).
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a > b; });
  TypicalPods out;
  double cum = 0;
  for (const auto& [c, k] : order) {
    if (cum >= popularity * total) break;
    cum += c;
    TypicalPod t;
    t.pod.cpu = std::get<0>(k);
    t.pod.milli = std::get<1>(k);
    t.pod.gpus = std::get<2>(k);
    t.pod.models = std::get<3>(k);
    t.freq = c;
    out.push_back(t);
  }
  for (TypicalPod& t : out) t.freq /= cum;
  return out;
}

double NodeFrag(const NodeRes& n, const TypicalPods& target) {
  const int64_t total = n.total_gpu_left();
  if (total == 0) return 0;
  double frag = 0;
  for (const TypicalPod& t : target) {
    const PodRes& p = t.pod;
    if (p.milli == 0 || !ModelOk(n, p)) {
      frag += t.freq * static_cast<double>(total);
      continue;
    }
    int fits = 0;
    int64_t crumbs = 0;
    for (int g = 0; g < n.gpus; ++g) {
      if (n.gpu_left[g] >= p.milli) {
        ++fits;
      } else {
        crumbs += n.gpu_left[g];
      }
    }
    const bool q3 = fits >= p.gpus && n.cpu_left >= p.cpu;
    frag += t.freq * static_cast<double>(q3 ? crumbs : total);
  }
  return frag;
}

ScorePolicy::ScorePolicy(ScoreKind kind, std::shared_ptr<const TypicalPods> target)
    : kind_(kind), target_(std::move(target)) {}

std::string_view ScorePolicy::name() const {
  switch (kind_) {
    case ScoreKind::kRandom: return "random";
    case ScoreKind::kDotProd: return "dotprod";
    case ScoreKind::kClustering: return "clustering";
    case ScoreKind::kPacking: return "packing";
    case ScoreKind::kBestFit: return "bestfit";
    case ScoreKind::kFgd: return "fgd";
  }
  return "?";
}

int64_t ScorePolicy::Score(const NodeRes& n, const PodRes& p) const {
  switch (kind_) {
    case ScoreKind::kRandom: return 0;
    case ScoreKind::kDotProd: return DotProdScore(n, p);
    case ScoreKind::kClustering: return ClusteringScore(n, p);
    case ScoreKind::kPacking: return PackingScore(n, p);
    case ScoreKind::kBestFit: return BestFitScore(n, p);
    case ScoreKind::kFgd: {
      int gpu = -1;
      return FgdScore(n, p, *target_, &gpu);
    }
  }
  return 0;
}

uint32_t ScorePolicy::ChooseGpus(const NodeRes& n, const PodRes& p, SplitMix* rng) const {
  if (p.gpus == 0) return 0;
  if (!p.shared()) return LowestFree(n, p.gpus);
  switch (kind_) {
    case ScoreKind::kRandom: {
      // allocateGpuIdBasedOnRandomFit: reservoir sampling over the GPUs that fit.
      int pick = -1;
      size_t seen = 0;
      for (int g = 0; g < n.gpus; ++g) {
        if (n.gpu_left[g] < p.milli) continue;
        if (rng->Below(++seen) == 0) pick = g;
      }
      return pick < 0 ? 0 : 1u << pick;
    }
    case ScoreKind::kFgd: {
      int gpu = -1;
      FgdScore(n, p, *target_, &gpu);
      return gpu < 0 ? 0 : 1u << gpu;
    }
    default: return BestFitGpu(n, p);
  }
}

std::vector<uint32_t> NodeRanks(uint64_t seed, size_t nodes) {
  std::vector<uint32_t> rank(nodes);
  for (size_t i = 0; i < nodes; ++i) rank[i] = static_cast<uint32_t>(i);
  SplitMix rng(seed ^ 0x5EED0F0DE5ull);
  for (size_t i = nodes; i > 1; --i) std::swap(rank[i - 1], rank[rng.Below(i)]);
  return rank;
}

uint64_t ScorePolicy::TieSeed(uint64_t seed, uint64_t job_id) {
  return seed * 0x9E3779B97F4A7C15ull ^ (job_id + 0x632BE59BD9B4E019ull);
}

NodeRes NodeResOf(const sched::ClusterState& s, sched::NodeId n) {
  const sched::NodeSpec& spec = s.node(n);
  NodeRes r;
  r.cpu_left = s.free_cpu(n);
  r.cpu_cap = spec.cpu_milli;
  r.mem_left = s.free_memory(n);
  r.gpus = spec.gpus;
  r.model = spec.gpus > 0 ? spec.gpu_model : -1;
  for (int g = 0; g < spec.gpus; ++g) r.gpu_left[g] = s.gpu_free_milli(n, g);
  return r;
}

void TakeOn(NodeRes* n, const PodRes& p, uint32_t gpu_mask) {
  n->cpu_left -= p.cpu;
  n->mem_left -= p.mem;
  for (uint32_t m = gpu_mask; m != 0; m &= m - 1) n->gpu_left[std::countr_zero(m)] -= p.milli;
  const int cls = p.gpu_class();
  if (cls > 0) n->classes |= 1u << cls;
}

StatusOr<sched::Decisions> ScorePolicy::Schedule(const sched::SchedulingInput& in) const {
  sched::Decisions d;
  sched::ClusterState work = *in.state;
  const size_t nodes = work.num_nodes();
  // GpuClustering's classes of the pods on each node.
  std::vector<uint32_t> classes(nodes, 0);
  for (const sched::RunningJob& r : work.running()) {
    const int cls = PodRes::Of(r.spec).gpu_class();
    if (cls == 0) continue;
    for (const sched::TaskBinding& b : r.placement.tasks) classes[b.node.value()] |= 1u << cls;
  }
  int64_t free_milli = work.total_gpus() * 1000 - work.used_milli();
  const std::vector<uint32_t> ranks = NodeRanks(in.seed, nodes);
  for (size_t i : ArrivalOrder(*in.pending)) {
    const sched::JobSpec& job = (*in.pending)[i];
    if (job.total_milli_gpus() > free_milli) continue;
    const PodRes pod = PodRes::Of(job);
    // Tasks one by one on nodes under `within` (invalid: anywhere), on a trial copy for gangs
    // (single-task jobs, the common case, skip the copy).
    auto place = [&](sched::DomainId within) -> std::optional<sched::Placement> {
      SplitMix rng(TieSeed(in.seed, job.id.value()));
      std::optional<sched::ClusterState> trial;
      if (job.num_tasks > 1) trial = work;
      const sched::ClusterState& s = trial ? *trial : work;
      std::vector<std::pair<uint32_t, uint32_t>> added;  // (node, class bits) of earlier tasks
      const sched::Level wl = within.valid() ? s.domain(within).level : sched::Level::kFabric;
      sched::Placement p;
      for (int32_t t = 0; t < job.num_tasks; ++t) {
        auto res = [&](sched::NodeId id) {
          NodeRes r = NodeResOf(s, id);
          r.classes = classes[id.value()];
          for (const auto& [n, bits] : added) {
            if (n == id.value()) r.classes |= bits;
          }
          return r;
        };
        BestPicker pick(&ranks, kind_ == ScoreKind::kRandom ? &rng : nullptr);
        for (size_t n = 0; n < nodes; ++n) {
          const sched::NodeId id(static_cast<uint32_t>(n));
          if (!s.schedulable(id)) continue;
          if (within.valid() && s.ancestor(id, wl) != within) continue;
          const NodeRes r = res(id);
          if (!Feasible(r, pod)) continue;
          pick.Offer(Score(r, pod), static_cast<uint32_t>(n));
        }
        if (!pick.found()) return std::nullopt;
        const sched::NodeId id(pick.node());
        const uint32_t mask = ChooseGpus(res(id), pod, &rng);
        sched::TaskBinding b{.node = id, .gpu_mask = mask,
                             .gpu_milli = pod.shared() ? pod.milli : (pod.gpus > 0 ? 1000 : 0),
                             .gpu_memory_bytes = pod.shared() ? job.task.gpu_memory_bytes : 0};
        if (!s.CheckBinding(b, job.task).ok()) return std::nullopt;
        if (trial) {
          trial->Apply(b, job.task, +1, in.now_ns);
          if (pod.gpu_class() > 0) added.emplace_back(id.value(), 1u << pod.gpu_class());
        }
        p.tasks.push_back(b);
      }
      return p;
    };
    std::optional<sched::Placement> p = place(sched::DomainId());
    if (p && job.locality.required && sched::PlacementSpan(work, *p) > job.locality.level) {
      // A required locality: the same inside each domain of its level, the first that holds it.
      p.reset();
      if (job.locality.level != sched::Level::kNode) {
        for (sched::DomainId dom : work.domains_at(job.locality.level)) {
          p = place(dom);
          if (p && sched::PlacementSpan(work, *p) <= job.locality.level) break;
          p.reset();
        }
      }
    }
    if (!p || !work.Bind(job, *p, in.now_ns).ok()) continue;
    if (pod.gpu_class() > 0) {
      for (const auto& t : p->tasks) classes[t.node.value()] |= 1u << pod.gpu_class();
    }
    free_milli -= job.total_milli_gpus();
    d.binds.push_back({.job = job.id, .placement = std::move(*p)});
  }
  return d;
}

}  // namespace gpool::sim
