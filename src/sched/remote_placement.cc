#include "sched/remote_placement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace gpool::sched {
namespace {

bool LenderModelAllowed(ModelMask models, int model) {
  return model >= 0 && (models & (ModelMask{1} << model)) != 0;
}

// Places the tasks of one gang one after another. What earlier tasks took is kept in an overlay
// (taken_) over the const state, so no copy of the state is made.
class RemotePlacer {
 public:
  RemotePlacer(const ClusterState& s, const JobSpec& job, const PlacementOptions& o)
      : s_(s), job_(job), t_(job.task), o_(o), cost_(o.remote_cost ? *o.remote_cost : RemoteCostModel{}) {
    FindLenders();
  }

  std::optional<Placement> Place() {
    Placement p;
    p.tasks.reserve(static_cast<size_t>(job_.num_tasks));
    for (int32_t i = 0; i < job_.num_tasks; ++i) {
      std::optional<TaskBinding> b = PlaceTask();
      if (!b) return std::nullopt;
      if (i == 0) first_host_ = b->node;
      Take(*b);
      p.tasks.push_back(std::move(*b));
    }
    return p;
  }

 private:
  struct Overlay {
    std::array<int32_t, kMaxGpusPerNode> milli{};
    std::array<uint64_t, kMaxGpusPerNode> mem{};
    int64_t cpu = 0;
    uint64_t memory = 0;
  };
  struct Lenders {
    DomainId leaf, pod, fabric;
    std::vector<NodeId> nodes;
  };

  const Overlay* Find(NodeId n) const {
    auto it = taken_.find(n.value());
    return it == taken_.end() ? nullptr : &it->second;
  }
  bool Excluded(NodeId n) const {
    return o_.excluded_nodes && n.value() < o_.excluded_nodes->size() && (*o_.excluded_nodes)[n.value()];
  }
  int32_t FreeMilli(NodeId n, int g) const {
    const Overlay* t = Find(n);
    return s_.gpu_free_milli(n, g) - (t ? t->milli[g] : 0);
  }
  uint64_t FreeGpuMem(NodeId n, int g) const {
    const Overlay* t = Find(n);
    return s_.gpu_free_memory(n, g) - (t ? t->mem[g] : 0);
  }
  bool HostFits(NodeId n) const {
    const Overlay* t = Find(n);
    return s_.free_cpu(n) - (t ? t->cpu : 0) >= t_.cpu_milli &&
           s_.free_memory(n) - (t ? t->memory : 0) >= t_.memory_bytes;
  }
  bool GpuFits(NodeId n, int g) const {
    if (t_.fractional()) return FreeMilli(n, g) >= t_.gpu_milli && FreeGpuMem(n, g) >= t_.gpu_memory_bytes;
    return FreeMilli(n, g) == 1000;
  }
  // GPUs of n this task could use now.
  int Units(NodeId n) const {
    int u = 0;
    for (int g = 0; g < s_.node(n).gpus; ++g) u += GpuFits(n, g) ? 1 : 0;
    return u;
  }
  bool Lends(NodeId n) const {
    const NodeSpec& spec = s_.node(n);
    return spec.serves_gpus && spec.gpus > 0 && LenderModelAllowed(job_.gpu_models, spec.gpu_model) &&
           s_.schedulable(n) && !Excluded(n) &&
           !(t_.fractional() && t_.gpu_memory_bytes > spec.gpu_memory_bytes);
  }

  // Lending nodes by leaf, and the units under every leaf, pod and fabric. Leaves whose
  // aggregates show no free GPU capacity of an allowed model are skipped unread.
  void FindLenders() {
    for (DomainId leaf : s_.domains_at(Level::kLeaf)) {
      int64_t free_milli = 0;
      for (size_t m = 0; m < s_.num_models(); ++m) {
        if (LenderModelAllowed(job_.gpu_models, static_cast<int>(m))) {
          free_milli += s_.aggregate(leaf, static_cast<int>(m)).free_milli;
        }
      }
      if (free_milli < t_.gpu_milli) continue;
      Lenders l;
      int64_t units = 0;
      for (NodeId n : s_.leaf_nodes(leaf)) {
        if (!Lends(n)) continue;
        const int u = Units(n);
        if (u == 0) continue;
        l.nodes.push_back(n);
        units += u;
      }
      if (l.nodes.empty()) continue;
      l.leaf = leaf;
      l.pod = s_.domain(leaf).parent;
      l.fabric = s_.domain(l.pod).parent;
      units_[leaf.value()] += units;
      units_[l.pod.value()] += units;
      units_[l.fabric.value()] += units;
      lenders_.push_back(std::move(l));
    }
  }
  int64_t UnitsIn(DomainId d) const {
    auto it = units_.find(d.value());
    return it == units_.end() ? 0 : it->second;
  }

  // The smallest distance at which host h could find the task's GPUs (kFabric + 1: none).
  int Reach(NodeId h, int need) const {
    const int within = static_cast<int>(job_.remote.within);
    if (s_.node(h).serves_gpus && Lends(h) && Units(h) >= need) return static_cast<int>(Level::kNode);
    for (int l = static_cast<int>(Level::kLeaf); l <= within; ++l) {
      if (UnitsIn(s_.ancestor(h, static_cast<Level>(l))) >= need) return l;
    }
    return static_cast<int>(Level::kFabric) + 1;
  }

  bool SlowdownOk(NodeId h, NodeId g) const {
    return job_.remote.max_slowdown <= 0 || EstimateSlowdown(s_, h, g, cost_) <= job_.remote.max_slowdown;
  }

  bool HostAllowed(NodeId h) const {
    if (!s_.schedulable(h) || Excluded(h) || !HostFits(h)) return false;
    if (!first_host_.valid()) return true;
    if (!job_.allow_split && s_.ancestor(h, Level::kFabric) != s_.ancestor(first_host_, Level::kFabric)) {
      return false;
    }
    if (job_.locality.required) {
      if (job_.locality.level == Level::kNode) return h == first_host_;
      return s_.ancestor(h, job_.locality.level) == s_.ancestor(first_host_, job_.locality.level);
    }
    return true;
  }

  std::optional<TaskBinding> PlaceTask() {
    const int need = t_.fractional() ? 1 : t_.gpus;
    struct Cand {
      int reach;
      int free_gpus;
      int64_t cpu_left;
      NodeId node;
    };
    std::vector<Cand> cands;
    for (size_t i = 0; i < s_.num_nodes(); ++i) {
      const NodeId h(static_cast<uint32_t>(i));
      if (!HostAllowed(h)) continue;
      const int reach = Reach(h, need);
      if (reach > static_cast<int>(job_.remote.within)) continue;
      const Overlay* t = Find(h);
      cands.push_back({reach, s_.free_whole_gpus(h), s_.free_cpu(h) - (t ? t->cpu : 0) - t_.cpu_milli, h});
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
      if (a.reach != b.reach) return a.reach < b.reach;
      if (a.free_gpus != b.free_gpus) return a.free_gpus < b.free_gpus;
      if (a.cpu_left != b.cpu_left) return a.cpu_left < b.cpu_left;
      return a.node < b.node;
    });
    // A host whose supply is all over its slowdown limit fails in Gather; the next one is
    // tried. Bounded so that a job that fits nowhere costs a bounded number of gathers.
    constexpr size_t kMaxHostsTried = 64;
    for (size_t i = 0; i < cands.size() && i < kMaxHostsTried; ++i) {
      if (std::optional<TaskBinding> b = Gather(cands[i].node, need)) return b;
    }
    return std::nullopt;
  }

  // Takes the task's GPUs for host h, nearest first (see the header), or nullopt.
  std::optional<TaskBinding> Gather(NodeId h, int need) const {
    TaskBinding b;
    b.node = h;
    b.via_server = true;
    b.gpu_milli = t_.fractional() ? t_.gpu_milli : 1000;
    b.gpu_memory_bytes = t_.fractional() ? t_.gpu_memory_bytes : s_.node(h).gpu_memory_bytes;
    double slowdown = 1;
    int got = 0;
    // The host's own GPUs first.
    if (Lends(h) && SlowdownOk(h, h)) {
      const uint32_t mask = Pick(h, need);
      if (mask != 0) {
        b.gpu_mask = mask;
        got += std::popcount(mask);
        slowdown = std::max(slowdown, EstimateSlowdown(s_, h, h, cost_));
      }
    }
    // Then the rings: the host's leaf, its pod, its fabric, as far as remote.within allows.
    for (int l = static_cast<int>(Level::kLeaf); got < need && l <= static_cast<int>(job_.remote.within); ++l) {
      const Level level = static_cast<Level>(l);
      const DomainId here = s_.ancestor(h, level);
      const DomainId inner = l > static_cast<int>(Level::kLeaf) ? s_.ancestor(h, static_cast<Level>(l - 1)) : DomainId();
      struct Lender {
        bool stranded;
        int32_t fill;  // whole GPUs: free GPUs; a fraction: free milli of its best GPU
        NodeId node;
      };
      std::vector<Lender> ring;
      for (const Lenders& ls : lenders_) {
        const DomainId d = level == Level::kLeaf ? ls.leaf : level == Level::kPod ? ls.pod : ls.fabric;
        const DomainId in = level == Level::kPod ? ls.leaf : level == Level::kFabric ? ls.pod : DomainId();
        if (d != here || (inner.valid() && in == inner)) continue;  // inner rings were done
        for (NodeId n : ls.nodes) {
          if (n == h || !SlowdownOk(h, n)) continue;
          int32_t fill = 0;
          if (t_.fractional()) {
            fill = 1001;
            for (int g = 0; g < s_.node(n).gpus; ++g) {
              if (GpuFits(n, g)) fill = std::min(fill, FreeMilli(n, g));
            }
            if (fill == 1001) continue;
          } else {
            fill = Units(n);
            if (fill == 0) continue;
          }
          ring.push_back({!HostFits(n), fill, n});
        }
      }
      std::sort(ring.begin(), ring.end(), [](const Lender& a, const Lender& b) {
        if (a.stranded != b.stranded) return a.stranded;
        if (a.fill != b.fill) return a.fill < b.fill;
        return a.node < b.node;
      });
      for (const Lender& ln : ring) {
        if (got >= need) break;
        const uint32_t mask = Pick(ln.node, need - got);
        if (mask == 0) continue;
        b.remote.push_back({ln.node, mask});
        got += std::popcount(mask);
        slowdown = std::max(slowdown, EstimateSlowdown(s_, h, ln.node, cost_));
      }
    }
    if (got < need) return std::nullopt;
    b.slowdown = slowdown;
    return b;
  }

  // Up to `want` GPUs of n this task can use: whole GPUs in index order; a fraction on the
  // fullest GPU that holds it.
  uint32_t Pick(NodeId n, int want) const {
    uint32_t mask = 0;
    if (t_.fractional()) {
      int best = -1;
      for (int g = 0; g < s_.node(n).gpus; ++g) {
        if (GpuFits(n, g) && (best < 0 || FreeMilli(n, g) < FreeMilli(n, best))) best = g;
      }
      return best < 0 ? 0 : uint32_t{1} << best;
    }
    for (int g = 0; g < s_.node(n).gpus && want > 0; ++g) {
      if (GpuFits(n, g)) {
        mask |= uint32_t{1} << g;
        --want;
      }
    }
    return mask;
  }

  void TakeGpus(NodeId n, uint32_t mask) {
    Overlay& o = taken_[n.value()];
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const int g = std::countr_zero(m);
      const bool had = GpuFits(n, g);
      o.milli[g] += t_.fractional() ? t_.gpu_milli : 1000;
      o.mem[g] += t_.fractional() ? t_.gpu_memory_bytes : s_.node(n).gpu_memory_bytes;
      if (had && !GpuFits(n, g)) {
        // One unit fewer under the node's leaf, pod and fabric.
        for (Level l : {Level::kLeaf, Level::kPod, Level::kFabric}) --units_[s_.ancestor(n, l).value()];
      }
    }
  }
  void Take(const TaskBinding& b) {
    Overlay& o = taken_[b.node.value()];
    o.cpu += t_.cpu_milli;
    o.memory += t_.memory_bytes;
    if (b.gpu_mask != 0) TakeGpus(b.node, b.gpu_mask);
    for (const RemoteGpus& r : b.remote) TakeGpus(r.node, r.gpu_mask);
  }

  const ClusterState& s_;
  const JobSpec& job_;
  const TaskRequest& t_;
  const PlacementOptions& o_;
  const RemoteCostModel cost_;
  std::vector<Lenders> lenders_;
  std::unordered_map<uint32_t, int64_t> units_;  // by domain id: GPUs this task could use
  std::unordered_map<uint32_t, Overlay> taken_;  // by node id: what earlier tasks took
  NodeId first_host_;
};

}  // namespace

std::optional<Placement> PlaceRemote(const ClusterState& state, const JobSpec& job,
                                     const PlacementOptions& options) {
  if (job.task.gpus == 0) return std::nullopt;
  return RemotePlacer(state, job, options).Place();
}

int CountRemoteGpus(const Placement& p) {
  int n = 0;
  for (const TaskBinding& b : p.tasks) {
    for (const RemoteGpus& r : b.remote) n += std::popcount(r.gpu_mask);
  }
  return n;
}

}  // namespace gpool::sched
