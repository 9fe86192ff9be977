#include "sched/placement.h"
#include "sched/remote_placement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <unordered_map>

namespace gpool::sched {
namespace {
// A GPU task's fragmentation delta is compared on FGD's own score scale: floor(100 x
// sigmoid(-delta / 1000)), higher better. Near a zero delta a step is about 40 milli-GPU, and
// steps widen as |delta| grows, so small differences of an estimated workload tie and large ones
// still count. Ties go to a fixed scrambled order of the nodes (TieOrder), the same for every
// task: consistent ties pack pods onto the same nodes, as the artifact's kube-scheduler does by
// node name. Measured in FGD's fill (docs/simulator/fill.md; unallocated GPUs, mean of seeds
// 42-44): deltas in 0.2-GPU steps with best-fit and model-demand ties (exact deltas for fractional
// tasks) stranded 864 on gpushare100 and 832 on gpuspec33 (fgd 835 and 752); this scale with
// TieOrder ties 825 and 718, and 283 on the default trace (10 seeds; 287 before, fgd 298).
// Ties in node-id order did worse on both variants (834 and 685 against 830 and 669, seed 42).
int64_t FgdScore(double delta_milli) {
  return static_cast<int64_t>(std::floor(100.0 / (1.0 + std::exp(delta_milli / 1000.0))));
}
// A node's place in the tie order: its id through splitmix64's finalizer (a bijection, so the
// order is total and the same on every call and every replica of the state).
uint64_t TieOrder(NodeId n) {
  uint64_t z = n.value() + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// A single task's fragmentation scan covers every leaf on clusters of at most this many nodes;
// larger clusters place single tasks like gangs (leaf first), which keeps a 10,000-job cycle on
// 10,000 nodes within its 100 ms (scanning 128 nodes a task took it to 130-200 ms).
constexpr size_t kFragScanMaxNodes = 2048;

// Free resources of one node as the gang being placed sees them: the state minus what earlier
// tasks of the same gang took. Only nodes the gang touches get an entry.
struct NodeFree {
  std::array<int32_t, kMaxGpusPerNode> milli{};
  std::array<uint64_t, kMaxGpusPerNode> mem{};
  int64_t cpu = 0;
  uint64_t memory = 0;
};

class Placer {
 public:
  // `use_load`: follow the state's fabric load view (PlaceGang); PlaceInDomain and first fit
  // ignore it, so baselines that call them keep their own behaviour.
  Placer(const ClusterState& s, const JobSpec& job, const PlacementOptions& o, bool use_load = false)
      : s_(s), job_(job), t_(job.task), o_(o), load_(use_load ? s.fabric_load() : nullptr) {
    for (size_t m = 0; m < s.num_models(); ++m) {
      if (job.gpu_models & (ModelMask{1} << m)) models_.push_back(static_cast<int>(m));
    }
    // Bound and Room index the aggregates directly: ClusterState::aggregate re-reads the model
    // count through the shared spec on every call, which the scan over every leaf can't afford.
    nm_ = s.num_models();
    if (s.num_domains() > 0 && nm_ > 0) agg_ = &s.aggregate(DomainId(0), 0);
    if (t_.fractional()) {
      lo_decile_ = t_.gpu_milli / 100;
      for (int b = lo_decile_; b <= 10; ++b) per_gpu_[b] = std::min(1000, 100 * b + 99) / t_.gpu_milli;
    }
  }

  // Places up to `want` tasks under domain d; returns how many it placed.
  int32_t PlaceUpTo(DomainId d, int32_t want) {
    if (want <= 0) return 0;
    const DomainSpec& dom = s_.domain(d);
    if (dom.level == Level::kLeaf) return PlaceOnNodes(s_.leaf_nodes(d), want);
    std::vector<Kid> kids = Kids(d);
    std::vector<uint8_t> used(kids.size(), 0);
    int32_t placed = 0;
    if (load_ != nullptr) {
      // Children whose uplinks are no more shared than the plan's bottleneck first; the rest
      // only if those fall short of their bounds.
      const KidPlan plan = PlanKids(kids, want);
      placed = PlaceOverKids(kids, want, plan.contention, &used);
    }
    return placed + PlaceOverKids(kids, want - placed, kNoLimit, &used);
  }

  // A child domain with its capacity bound for this gang and the contention on its uplinks.
  struct Kid {
    int64_t cap;
    DomainId d;
    double contention;
  };
  // The children of d that may hold a task, largest capacity first.
  std::vector<Kid> Kids(DomainId d) const {
    std::vector<Kid> kids;
    for (DomainId c : s_.children(d)) {
      const int64_t b = Bound(c);
      if (b > 0) kids.push_back({b, c, load_ != nullptr ? load_->Contention(c) : 1.0});
    }
    std::sort(kids.begin(), kids.end(), [](const Kid& a, const Kid& b) {
      return a.cap != b.cap ? a.cap > b.cap : a.d < b.d;
    });
    return kids;
  }
  static constexpr double kNoLimit = 1e300;
  // Contentions within 1% count as equal: a plan does not trade a leaf for noise.
  static bool WithinContention(double c, double limit) { return c <= limit * 1.01; }
  // Fewest children: largest capacity first, the last one the smallest that covers the rest;
  // only children whose contention is within `limit`. Returns how many it placed.
  int32_t PlaceOverKids(const std::vector<Kid>& kids, int32_t want, double limit,
                        std::vector<uint8_t>* used) {
    int32_t placed = 0;
    while (placed < want) {
      const int32_t rest = want - placed;
      // The smallest unused child that covers the rest alone, else the largest unused one;
      // among equal capacities the least contended (then, as without a view, the last of the
      // covering ones and the first of the others in id order).
      int pick = -1;
      bool covers = false;
      for (size_t i = 0; i < kids.size(); ++i) {
        if ((*used)[i] || !WithinContention(kids[i].contention, limit)) continue;
        const Kid& k = kids[i];
        if (k.cap >= rest) {  // sorted descending: keep going to find a smaller one
          if (pick < 0 || k.cap < kids[pick].cap || k.contention <= kids[pick].contention) {
            pick = static_cast<int>(i);
          }
          covers = true;
        } else if (covers) {
          break;
        } else if (pick < 0) {
          pick = static_cast<int>(i);  // none covers it: the largest unused
        } else if (k.cap < kids[pick].cap) {
          break;
        } else if (k.contention < kids[pick].contention) {
          pick = static_cast<int>(i);
        }
      }
      if (pick < 0) break;
      (*used)[pick] = 1;
      placed += PlaceUpTo(kids[pick].d, rest);
    }
    return placed;
  }
  // The children a gang of `want` would take by the bounds: the least contention (bottleneck)
  // at which the children no more loaded than that hold it, and how many of them it needs
  // (largest first). With no load view: contention 1 and the plain fewest-children count.
  struct KidPlan {
    double contention = 1;
    int needed = 0;
  };
  KidPlan PlanKids(const std::vector<Kid>& kids, int64_t want) const {
    int64_t sum = 0;
    auto count_within = [&](double limit) {
      sum = 0;
      int k = 0;
      for (const Kid& c : kids) {  // largest first
        if (sum >= want) break;
        if (!WithinContention(c.contention, limit)) continue;
        sum += c.cap;
        ++k;
      }
      return sum >= want ? k : -1;
    };
    const int all = count_within(kNoLimit);
    KidPlan best{1, all >= 0 ? all : static_cast<int>(kids.size())};
    if (load_ == nullptr || all < 0) return best;
    std::vector<double> levels;
    for (const Kid& c : kids) levels.push_back(c.contention);
    std::sort(levels.begin(), levels.end());
    for (size_t i = 0; i < levels.size(); ++i) {
      if (i > 0 && WithinContention(levels[i], levels[i - 1])) continue;
      const int k = count_within(levels[i]);
      if (k >= 0) return {levels[i], k};
    }
    return best;
  }

  // Places up to `want` tasks on `nodes`, best fit. Whole-GPU and GPU-less tasks take the nodes
  // with the least free room that still fit; fractional tasks go where FGD's fragmentation
  // grows least.
  int32_t PlaceOnNodes(const std::vector<NodeId>& nodes, int32_t want) {
    if (t_.fractional()) {
      int32_t placed = 0;
      while (placed < want && PlaceOneFractional(nodes)) ++placed;
      return placed;
    }
    struct Cand {
      int64_t room;
      NodeId n;
      int32_t fit;
    };
    std::vector<Cand> cands;
    for (NodeId n : nodes) {
      if (!Usable(n)) continue;
      const NodeFree f = View(n);
      const int32_t fit = Fit(n, f);
      if (fit <= 0) continue;
      const int64_t room = t_.gpus > 0 ? WholeFree(n, f) : f.cpu;
      cands.push_back({room, n, fit});
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
      return a.room != b.room ? a.room < b.room : a.n < b.n;
    });
    int32_t placed = 0;
    for (const Cand& c : cands) {
      if (placed >= want) break;
      const int32_t take = std::min(c.fit, want - placed);
      for (int32_t k = 0; k < take; ++k) Take(c.n, PickWhole(c.n));
      placed += take;
    }
    return placed;
  }

  // One task on the node where the target workload's fragmentation grows least (FGD's rule,
  // fragmentation.h: CPU and memory count, so a node left without the CPU its free GPUs need is
  // fragmented). GPU tasks: the best FgdScore of the delta, ties to the first node in TieOrder.
  // GPU-less tasks: the least exact delta, ties to the node left with the least free GPU milli
  // (where GPUs are gone), then the least CPU, then the lowest id. Fractional tasks:
  // PlaceOneFractional, which also picks the GPU. Needs a workload.
  bool PlaceOneByFragmentation(const std::vector<NodeId>& nodes) {
    if (t_.fractional()) return PlaceOneFractional(nodes);
    const WorkloadDistribution& w = *o_.workload;
    double best_delta = 0;
    int64_t best_room = 0;
    uint64_t best_tie = 0;
    NodeId best;
    // Nodes in the same state (model, GPU count, the multiset of per-GPU free milli and memory,
    // free CPU and memory) score the same: a large cluster has many (empty nodes of one type,
    // full ones), so each state's fragmentation is computed once per task.
    struct StateKey {
      std::array<std::pair<int32_t, uint64_t>, kMaxGpusPerNode> gpus{};
      int64_t cpu = 0;
      uint64_t memory = 0;
      int32_t model = 0, count = 0;
      bool operator==(const StateKey&) const = default;
    };
    struct StateHash {
      size_t operator()(const StateKey& k) const {
        uint64_t h = static_cast<uint64_t>(k.cpu) * 0x9E3779B97F4A7C15ull ^ k.memory;
        h = (h ^ (static_cast<uint64_t>(k.model) << 8 | static_cast<uint64_t>(k.count))) * 0xBF58476D1CE4E5B9ull;
        for (int g = 0; g < k.count; ++g) {
          h = (h ^ (static_cast<uint64_t>(k.gpus[g].first) ^ k.gpus[g].second << 11)) * 0x94D049BB133111EBull;
          h ^= h >> 29;
        }
        return static_cast<size_t>(h);
      }
    };
    std::unordered_map<StateKey, double, StateHash> seen;
    for (NodeId n : nodes) {
      if (!Usable(n)) continue;
      const NodeFree f = View(n);
      if (Fit(n, f) < 1) continue;
      const NodeSpec& node = s_.node(n);
      StateKey key{.cpu = f.cpu, .memory = f.memory, .model = node.gpu_model, .count = node.gpus};
      for (int g = 0; g < node.gpus; ++g) key.gpus[g] = {f.milli[g], f.mem[g]};
      std::sort(key.gpus.begin(), key.gpus.begin() + node.gpus);
      NodeFree a = f;
      int need = t_.gpus;
      int64_t room = 0;
      for (int g = 0; g < node.gpus; ++g) {
        if (need > 0 && a.milli[g] == 1000) {
          a.milli[g] = 0;
          a.mem[g] = 0;
          --need;
        }
        room += a.milli[g];
      }
      a.cpu -= t_.cpu_milli;
      a.memory -= t_.memory_bytes;
      // A GPU-less task goes where GPUs are gone (least free GPU milli, then least CPU): CPU on
      // a node whose free GPUs need it strands them. Steps of the delta only for GPU tasks.
      if (t_.gpus == 0) room = room * 1'000'000 + a.cpu;
      auto [it, fresh] = seen.try_emplace(key, 0.0);
      if (fresh) {
        it->second = FragmentationOf(node, a.milli.data(), a.mem.data(), a.cpu, a.memory, w) -
                     FragmentationOf(node, f.milli.data(), f.mem.data(), f.cpu, f.memory, w);
      }
      double delta = it->second;
      uint64_t tie = 0;
      if (t_.gpus > 0) {
        delta = -static_cast<double>(FgdScore(delta));
        tie = TieOrder(n);
      }
      const bool better = !best.valid() || delta < best_delta - 1e-9 ||
                          (delta <= best_delta + 1e-9 && (tie < best_tie ||
                          (tie == best_tie && room < best_room)));
      if (better) {
        best_delta = delta;
        best_tie = tie;
        best_room = room;
        best = n;
      }
    }
    if (!best.valid()) return false;
    Take(best, PickWhole(best));
    return true;
  }

  // All `want` tasks on one node (locality kNode required).
  bool PlaceOnOneNode(const std::vector<NodeId>& nodes, int32_t want) {
    NodeId best;
    int64_t best_room = INT64_MAX;
    for (NodeId n : nodes) {
      if (!Usable(n)) continue;
      const NodeFree f = View(n);
      if (t_.fractional()) {
        if (s_.TasksThatFit(n, t_, job_.gpu_models) < want) continue;
      } else if (Fit(n, f) < want) {
        continue;
      }
      const int64_t room = t_.gpus > 0 ? WholeFree(n, f) : f.cpu;
      if (room < best_room) {
        best_room = room;
        best = n;
      }
    }
    if (!best.valid()) return false;
    const std::vector<NodeId> one{best};
    return PlaceOnNodes(one, want) == want;
  }

  // ClusterState::TaskCapacityBound, inlined for the hot loop over every leaf (PlaceGang scans
  // every leaf of every pod that may hold the gang, per gang): the per-decile divisions and the
  // allowed models are worked out once per Placer, so a bound is a few loads from the domain's
  // aggregates. Cheap enough not to memoize (a memo cost a clear per gang).
  int64_t Bound(DomainId d) const {
    if (t_.gpus == 0) return s_.TaskCapacityBound(d, t_, job_.gpu_models);
    int64_t bound = 0;
    if (t_.fractional()) {
      for (int m : models_) {
        const ModelAggregate& a = Agg(d, m);
        for (int b = lo_decile_; b <= 10; ++b) bound += int64_t{a.gpus_by_free_decile[b]} * per_gpu_[b];
      }
      return bound;
    }
    for (int m : models_) bound += Agg(d, m).tasks_by_size[t_.gpus];
    return bound;
  }
  // Bound(d) >= n, stopping as soon as it is known: the scans only filter on it, and for
  // fractions the wholly free decile (counted first) usually settles it.
  bool Holds(DomainId d, int64_t n) const {
    if (!t_.fractional()) return Bound(d) >= n;
    int64_t bound = 0;
    for (int m : models_) {
      const ModelAggregate& a = Agg(d, m);
      for (int b = 10; b >= lo_decile_; --b) {
        bound += int64_t{a.gpus_by_free_decile[b]} * per_gpu_[b];
        if (bound >= n) return true;
      }
    }
    return false;
  }
  // The best leaf for a gang of n by (degraded, room, id), among leaves whose bound holds it,
  // skipping pods too small for it: the first pass of PlaceGang's leaf level, which runs for
  // every gang over every leaf, so bound and room come from one look at each leaf.
  bool BestLeaf(int64_t n, int* tier, int64_t* room, DomainId* leaf) const {
    bool found = false;
    for (DomainId pod : s_.domains_at(Level::kPod)) {
      if (!Holds(pod, n)) continue;
      for (DomainId d : s_.children(pod)) {
        int64_t r;
        if (t_.gpus > 0 && !t_.fractional()) {
          int64_t b = 0;
          r = 0;
          for (int m : models_) {
            const ModelAggregate& a = Agg(d, m);
            b += a.tasks_by_size[t_.gpus];
            r += a.free_whole_gpus;
          }
          if (b < n) continue;
        } else {
          if (!Holds(d, n)) continue;
          r = Room(d);
        }
        const int t = s_.degraded(d) ? 1 : 0;
        if (!found || t < *tier || (t == *tier && (r < *room || (r == *room && d < *leaf)))) {
          found = true;
          *tier = t;
          *room = r;
          *leaf = d;
        }
      }
    }
    return found;
  }
  // Best-fit key of a domain for this job: the free room it would have left; lower is better.
  // Free whole GPUs of the allowed models for whole-GPU tasks (ClusterState::FreeWholeGpus),
  // their free milli for fractions, free CPU for GPU-less tasks.
  int64_t Room(DomainId d) const {
    if (t_.gpus == 0) return s_.domain_free_cpu(d);
    int64_t room = 0;
    if (t_.fractional()) {
      for (int m : models_) room += Agg(d, m).free_milli;
    } else {
      for (int m : models_) room += Agg(d, m).free_whole_gpus;
    }
    return room;
  }
  const ModelAggregate& Agg(DomainId d, int m) const { return agg_[d.value() * nm_ + static_cast<size_t>(m)]; }
  Placement TakePlacement() { return std::move(out_); }
  void Reset() {
    out_.tasks.clear();
    taken_.clear();
    index_.clear();
  }

 private:
  bool Usable(NodeId n) const {
    if (!s_.schedulable(n)) return false;
    if (o_.excluded_nodes && n.value() < o_.excluded_nodes->size() && (*o_.excluded_nodes)[n.value()]) {
      return false;
    }
    if (t_.gpus > 0) {
      const int m = s_.node(n).gpu_model;
      if (m < 0 || !(job_.gpu_models & (ModelMask{1} << m))) return false;
      if (t_.gpus > s_.node(n).gpus) return false;
    }
    return true;
  }

  NodeFree View(NodeId n) const {
    auto it = index_.find(n.value());
    if (it != index_.end()) return taken_[it->second];
    NodeFree f;
    for (int g = 0; g < s_.node(n).gpus; ++g) {
      f.milli[g] = s_.gpu_free_milli(n, g);
      f.mem[g] = s_.gpu_free_memory(n, g);
    }
    f.cpu = s_.free_cpu(n);
    f.memory = s_.free_memory(n);
    return f;
  }

  int32_t WholeFree(NodeId n, const NodeFree& f) const {
    int32_t w = 0;
    for (int g = 0; g < s_.node(n).gpus; ++g) w += f.milli[g] == 1000 ? 1 : 0;
    return w;
  }

  // Tasks of a whole-GPU or GPU-less shape that fit in f.
  int32_t Fit(NodeId n, const NodeFree& f) const {
    int64_t fit = INT32_MAX;
    if (t_.cpu_milli > 0) fit = f.cpu / t_.cpu_milli;
    if (t_.memory_bytes > 0) fit = std::min<int64_t>(fit, static_cast<int64_t>(f.memory / t_.memory_bytes));
    if (t_.gpus > 0) fit = std::min<int64_t>(fit, WholeFree(n, f) / t_.gpus);
    return static_cast<int32_t>(std::max<int64_t>(0, fit));
  }

  // The lowest-numbered wholly free GPUs of n, as many as a task asks for.
  uint32_t PickWhole(NodeId n) const {
    if (t_.gpus == 0) return 0;
    const NodeFree f = View(n);
    uint32_t mask = 0;
    int need = t_.gpus;
    for (int g = 0; g < s_.node(n).gpus && need > 0; ++g) {
      if (f.milli[g] == 1000) {
        mask |= 1u << g;
        --need;
      }
    }
    return mask;
  }

  bool PlaceOneFractional(const std::vector<NodeId>& nodes) {
    const WorkloadDistribution* w =
        o_.workload != nullptr && !o_.workload->empty() ? o_.workload : nullptr;
    // With a workload: the best FgdScore, ties to the first node in TieOrder and its first GPU.
    // Without: the GPU left with the least free milli (best fit), the first on ties.
    double best_score = 0;
    uint64_t best_tie = 0;
    NodeId best;
    int best_gpu = -1;
    for (NodeId n : nodes) {
      if (!Usable(n)) continue;
      NodeFree f = View(n);
      if (f.cpu < t_.cpu_milli || f.memory < t_.memory_bytes) continue;
      const NodeSpec& node = s_.node(n);
      double before = 0;
      if (w) before = FragmentationOf(node, f.milli.data(), f.mem.data(), f.cpu, f.memory, *w);
      for (int g = 0; g < node.gpus; ++g) {
        if (f.milli[g] < t_.gpu_milli || f.mem[g] < t_.gpu_memory_bytes) continue;
        // GPUs in the same state on one node score the same: evaluate the first only.
        bool seen = false;
        for (int h = 0; h < g && !seen; ++h) seen = f.milli[h] == f.milli[g] && f.mem[h] == f.mem[g];
        if (seen) continue;
        const int32_t left = f.milli[g] - t_.gpu_milli;
        double score = 0;
        uint64_t tie = static_cast<uint64_t>(left);
        if (w) {
          NodeFree a = f;
          a.milli[g] = left;
          a.mem[g] -= t_.gpu_memory_bytes;
          score = -static_cast<double>(
              FgdScore(FragmentationOf(node, a.milli.data(), a.mem.data(), f.cpu - t_.cpu_milli,
                                       f.memory - t_.memory_bytes, *w) - before));
          tie = TieOrder(n);
        }
        const bool better = !best.valid() || score < best_score || (score == best_score && tie < best_tie);
        if (better) {
          best_score = score;
          best_tie = tie;
          best = n;
          best_gpu = g;
        }
      }
    }
    if (!best.valid()) return false;
    Take(best, 1u << best_gpu);
    return true;
  }

  void Take(NodeId n, uint32_t mask) {
    auto it = index_.find(n.value());
    if (it == index_.end()) {
      taken_.push_back(View(n));
      it = index_.emplace(n.value(), taken_.size() - 1).first;
    }
    NodeFree& f = taken_[it->second];
    const NodeSpec& node = s_.node(n);
    TaskBinding b{.node = n, .gpu_mask = mask};
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const int g = std::countr_zero(m);
      if (t_.fractional()) {
        f.milli[g] -= t_.gpu_milli;
        f.mem[g] -= t_.gpu_memory_bytes;
        b.gpu_milli = t_.gpu_milli;
        b.gpu_memory_bytes = t_.gpu_memory_bytes;
      } else {
        f.milli[g] = 0;
        f.mem[g] = 0;
        b.gpu_milli = 1000;
        b.gpu_memory_bytes = node.gpu_memory_bytes;
      }
    }
    f.cpu -= t_.cpu_milli;
    f.memory -= t_.memory_bytes;
    out_.tasks.push_back(b);
  }

  const ClusterState& s_;
  const JobSpec& job_;
  const TaskRequest& t_;
  const PlacementOptions& o_;
  const FabricLoad* load_;  // null: placement ignores the network
  std::vector<int> models_;  // allowed model indices
  size_t nm_ = 0;
  const ModelAggregate* agg_ = nullptr;  // the state's aggregates, [domain * nm_ + model]
  int lo_decile_ = 11;                   // fractional tasks: the smallest decile that holds one
  std::array<int64_t, 11> per_gpu_{};    // tasks one GPU of each free decile holds
  Placement out_;
  std::vector<NodeFree> taken_;
  std::unordered_map<uint32_t, size_t> index_;
};

// Fewest leaves that hold `n` tasks of `job` if every suspended (or resuming) healthy node were
// on and wholly free, on top of what is free now; INT_MAX when nothing would.
int LeavesWithResumes(const ClusterState& s, const JobSpec& job, const PlacementOptions& o, int64_t n,
                      const Placer& p) {
  const TaskRequest& t = job.task;
  std::vector<int64_t> cap(s.num_domains(), 0);
  for (DomainId l : s.domains_at(Level::kLeaf)) {
    int64_t c = p.Bound(l);
    for (NodeId id : s.leaf_nodes(l)) {
      const NodeSpec& node = s.node(id);
      if (node.health != Health::kHealthy || node.power == PowerState::kOn) continue;
      if (o.excluded_nodes && id.value() < o.excluded_nodes->size() && (*o.excluded_nodes)[id.value()]) continue;
      int64_t fit = INT32_MAX;
      if (t.cpu_milli > 0) fit = node.cpu_milli / t.cpu_milli;
      if (t.memory_bytes > 0) fit = std::min<int64_t>(fit, static_cast<int64_t>(node.memory_bytes / t.memory_bytes));
      if (t.gpus > 0) {
        if (node.gpu_model < 0 || !(job.gpu_models & (ModelMask{1} << node.gpu_model))) continue;
        fit = std::min<int64_t>(fit, t.fractional() ? int64_t{node.gpus} * (1000 / t.gpu_milli) : node.gpus / t.gpus);
      }
      if (fit != INT32_MAX) c += fit;
    }
    cap[l.value()] = c;
    if (c >= n) return 1;
  }
  auto fewest = [&](std::vector<int64_t> caps) {
    std::sort(caps.rbegin(), caps.rend());
    int64_t sum = 0;
    int k = 0;
    for (int64_t c : caps) {
      if (sum >= n) break;
      sum += c;
      ++k;
    }
    return sum >= n ? k : INT_MAX;
  };
  int best = INT_MAX;
  std::vector<int64_t> all;
  for (DomainId pod : s.domains_at(Level::kPod)) {
    std::vector<int64_t> caps;
    for (DomainId l : s.children(pod)) {
      if (s.domain(l).level == Level::kLeaf) caps.push_back(cap[l.value()]);
    }
    all.insert(all.end(), caps.begin(), caps.end());
    best = std::min(best, fewest(std::move(caps)));
  }
  return best != INT_MAX ? best : fewest(std::move(all));
}

}  // namespace

std::optional<Placement> PlaceInDomain(const ClusterState& state, const JobSpec& job, DomainId d,
                                       int32_t count, const PlacementOptions& options) {
  Placer p(state, job, options);
  if (p.PlaceUpTo(d, count) != count) return std::nullopt;
  return p.TakePlacement();
}

namespace {

std::optional<Placement> PlaceGangNow(const ClusterState& state, const JobSpec& job,
                                      const PlacementOptions& options) {
  const int32_t n = job.num_tasks;
  Placer p(state, job, options, /*use_load=*/true);
  const bool one_node = job.locality.required && job.locality.level == Level::kNode;
  const Level top = job.locality.required ? std::max(job.locality.level, Level::kLeaf) : Level::kFabric;

  auto try_domain = [&](DomainId d) -> bool {
    if (one_node) {
      if (state.domain(d).level != Level::kLeaf) return false;
      if (p.PlaceOnOneNode(state.leaf_nodes(d), n)) return true;
    } else if (p.PlaceUpTo(d, n) == n) {
      return true;
    }
    p.Reset();
    return false;
  };

  // The queue's own domains first, smallest level first.
  if (options.preferred_domains != nullptr) {
    std::vector<DomainId> pref = *options.preferred_domains;
    std::sort(pref.begin(), pref.end(), [&](DomainId a, DomainId b) {
      return state.domain(a).level != state.domain(b).level
                 ? state.domain(a).level < state.domain(b).level
                 : a < b;
    });
    for (DomainId d : pref) {
      if (state.domain(d).level > top || p.Bound(d) < n) continue;
      if (try_domain(d)) return p.TakePlacement();
    }
  }

  // Fewest children a gang needs in d (largest capacity first): a pod whose leaves hold the
  // gang in 3 leaves beats one that needs 5, even if the latter is fuller. With a fabric load
  // view, the least contended plan first (Placer::PlanKids): a pod whose free leaves have idle
  // uplinks beats one whose leaves share them with running rings, whatever their count.
  struct Cand {
    int tier;
    int contention;  // quantized: 0 = none, +1 per 1% of slowdown on the plan's worst uplink
    int needed;
    int64_t room;
    DomainId d;
  };
  auto better = [](const Cand& a, const Cand& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.contention != b.contention) return a.contention < b.contention;
    if (a.needed != b.needed) return a.needed < b.needed;
    if (a.room != b.room) return a.room < b.room;
    return a.d < b.d;
  };
  // Nothing fits anywhere by the aggregates: stop before looking at any leaf.
  int64_t total_bound = 0;
  bool some_fabric = false;
  for (DomainId f : state.domains_at(Level::kFabric)) {
    const int64_t b = p.Bound(f);
    total_bound += b;
    some_fabric |= b >= n;
  }
  if (!some_fabric && !(job.allow_split && !job.locality.required && total_bound >= n)) {
    return std::nullopt;
  }
  // Calls fn(d) for every domain of level l whose bound holds the gang. The pruned scan skips
  // the children of parents too small for it: a domain's bound never exceeds its parent's (the
  // aggregates of a parent are sums over its children, and the bounds grow with those sums), so
  // no domain it skips could have qualified. The order differs from domains_at(l), which the
  // callers don't depend on: `better` is a total order (ties end on the domain id).
  auto for_each_fitting = [&](Level l, auto&& fn) {
    if (options.reference_scan) {
      for (DomainId d : state.domains_at(l)) {
        if (p.Bound(d) >= n) fn(d);
      }
      return;
    }
    if (l == Level::kFabric) {
      for (DomainId d : state.domains_at(l)) {
        if (p.Holds(d, n)) fn(d);
      }
      return;
    }
    const Level parent = static_cast<Level>(static_cast<int>(l) + 1);
    for (DomainId up : state.domains_at(parent)) {
      if (!p.Holds(up, n)) continue;
      for (DomainId d : state.children(up)) {
        if (p.Holds(d, n)) fn(d);
      }
    }
  };
  // A single task crosses no link, so its leaf matters only for what it leaves behind: with a
  // target workload it goes on the node, in any leaf, where the workload's fragmentation grows
  // least (Placer::PlaceOneByFragmentation), as FGD places every pod. Placing it best fit inside
  // the fullest leaf instead stranded 1.6 times as many GPUs in FGD's fill experiment on the
  // openb trace (docs/simulator/fill.md, "FGD's fill experiment on openb"). The scan covers
  // every leaf whose bound holds the task: when it finds no node, neither would the levels below.
  if (n == 1 && options.workload != nullptr && !options.workload->empty() &&
      state.num_nodes() <= kFragScanMaxNodes) {
    std::vector<NodeId> nodes;
    for_each_fitting(Level::kLeaf, [&](DomainId d) {
      const auto& ln = state.leaf_nodes(d);
      nodes.insert(nodes.end(), ln.begin(), ln.end());
    });
    std::sort(nodes.begin(), nodes.end());  // ties end in id order, whichever scan found them
    if (p.PlaceOneByFragmentation(nodes)) return p.TakePlacement();
    return std::nullopt;
  }
  // A domain that lost bandwidth to failed links ranks after healthy ones (tier 1).
  auto cand_of = [&](DomainId d, Level l) -> Cand {
    Cand c{state.degraded(d) ? 1 : 0, 0, 1, p.Room(d), d};
    if (l != Level::kLeaf) {
      const Placer::KidPlan plan = p.PlanKids(p.Kids(d), n);
      c.needed = plan.needed;
      c.contention = static_cast<int>(std::floor(std::log(std::max(1.0, plan.contention)) / std::log(1.01) + 1e-9));
    }
    return c;
  };
  std::vector<Cand> cands;
  for (Level l = Level::kLeaf; l <= top; l = static_cast<Level>(static_cast<int>(l) + 1)) {
    // Usually the best candidate works: find it in one pass and try it; only on failure collect
    // the rest and try them best first.
    std::optional<Cand> first;
    if (l == Level::kLeaf && !options.reference_scan) {
      Cand c{0, 0, 1, 0, DomainId()};
      if (p.BestLeaf(n, &c.tier, &c.room, &c.d)) first = c;
    } else {
      for_each_fitting(l, [&](DomainId d) {
        const Cand c = cand_of(d, l);
        if (!first || better(c, *first)) first = c;
      });
    }
    if (!first) continue;
    if (try_domain(first->d)) return p.TakePlacement();
    cands.clear();
    for_each_fitting(l, [&](DomainId d) {
      if (d != first->d) cands.push_back(cand_of(d, l));
    });
    std::sort(cands.begin(), cands.end(), better);
    for (const Cand& c : cands) {
      if (try_domain(c.d)) return p.TakePlacement();
    }
    if (one_node) break;  // kNode: leaves were the only place to look
  }

  // Across fabrics, only when the job allows it.
  if (job.allow_split && !job.locality.required && state.domains_at(Level::kFabric).size() > 1) {
    std::vector<std::pair<int64_t, DomainId>> fabrics;
    for (DomainId d : state.domains_at(Level::kFabric)) fabrics.push_back({p.Bound(d), d});
    std::sort(fabrics.begin(), fabrics.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    int32_t placed = 0;
    for (const auto& [b, d] : fabrics) {
      if (placed >= n) break;
      placed += p.PlaceUpTo(d, n - placed);
    }
    if (placed == n) return p.TakePlacement();
  }
  return std::nullopt;
}

// Whether a gang placed across `leaves` leaves of the powered-on nodes should wait for
// suspended ones instead (PlacementOptions::resume_latency_s).
// Whether the job is still within the time it may wait for resumes (and the options ask for it).
bool MayWaitForResume(const ClusterState& state, const JobSpec& job, const PlacementOptions& options) {
  if (!(options.resume_latency_s > 0) || state.fabric_load() == nullptr) return false;
  const double bound_s = std::max(kResumeWaits * options.resume_latency_s, kResumeRuntimeShare * job.est_runtime_s);
  // Past the bound: waited long enough, take what is on.
  return !(static_cast<double>(options.now_ns - job.submit_ns) > bound_s * 1e9);
}

bool WaitForResume(const ClusterState& state, const JobSpec& job, const PlacementOptions& options,
                   int leaves) {
  if (leaves <= 1 || !MayWaitForResume(state, job, options)) return false;
  const Placer p(state, job, options);
  return LeavesWithResumes(state, job, options, job.num_tasks, p) < leaves;
}

}  // namespace

std::optional<Placement> PlaceGang(const ClusterState& state, const JobSpec& job,
                                   const PlacementOptions& options, bool* waits_for_resume) {
  if (waits_for_resume != nullptr) *waits_for_resume = false;
  if (job.remote.source == GpuSource::kRemote) return PlaceRemote(state, job, options);
  std::optional<Placement> p = PlaceGangNow(state, job, options);
  if (!p && job.remote.source == GpuSource::kPooled) return PlaceRemote(state, job, options);
  // Checked before counting leaves: without a view or power management this costs nothing.
  if (p && options.resume_latency_s > 0 && state.fabric_load() != nullptr &&
      WaitForResume(state, job, options, CountLeaves(state, *p))) {
    if (waits_for_resume != nullptr) *waits_for_resume = true;
    return std::nullopt;
  }
  return p;
}

std::optional<Placement> PlaceFirstFit(const ClusterState& state, const JobSpec& job,
                                       const PlacementOptions& options) {
  Placer p(state, job, options);
  int32_t placed = 0;
  std::vector<NodeId> one(1);
  for (size_t i = 0; i < state.num_nodes() && placed < job.num_tasks; ++i) {
    one[0] = NodeId(static_cast<uint32_t>(i));
    // Each node is visited once, so no earlier task of this gang is on it and the state's own
    // fit count is exact: skip nodes that hold none without building a candidate list.
    if (state.TasksThatFit(one[0], job.task, job.gpu_models) <= 0) continue;
    placed += p.PlaceOnNodes(one, job.num_tasks - placed);
  }
  if (placed != job.num_tasks) return std::nullopt;
  return p.TakePlacement();
}

Level PlacementSpan(const ClusterState& state, const Placement& p) {
  if (p.tasks.empty()) return Level::kNode;
  Level span = Level::kNode;
  const NodeId first = p.tasks[0].node;
  for (const TaskBinding& b : p.tasks) {
    Level l;
    if (!state.Distance(first, b.node, &l)) return static_cast<Level>(static_cast<int>(Level::kFabric) + 1);
    span = std::max(span, l);
  }
  return span;
}

int CountLeaves(const ClusterState& state, const Placement& p) {
  std::vector<DomainId> leaves;
  for (const TaskBinding& b : p.tasks) leaves.push_back(state.node(b.node).leaf);
  std::sort(leaves.begin(), leaves.end());
  return static_cast<int>(std::unique(leaves.begin(), leaves.end()) - leaves.begin());
}

}  // namespace gpool::sched
