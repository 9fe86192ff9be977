#include "sched/fragmentation.h"

#include <algorithm>
#include <array>
#include <bit>
#include <unordered_map>

namespace gpool::sched {
namespace {

// More classes than this make every placement slower for little gain: the heaviest are kept.
constexpr size_t kMaxClasses = 64;

// Fragmentation of one node state for one task shape (milli-GPU).
// `whole` and `partial`: the node's wholly free GPUs and the free milli of the others, which
// every whole-GPU class needs: counted once per node state, not once per class (placement
// evaluates this for every candidate node of every task).
double ClassFragmentation(const NodeSpec& node, const int32_t* free_milli, const uint64_t* free_mem,
                          int64_t free_cpu, uint64_t free_memory, int64_t total_free, int whole,
                          int64_t partial, const WorkloadClass& c) {
  const TaskRequest& t = c.task;
  if (t.gpus > 0 && (node.gpu_model < 0 || !(c.models & (ModelMask{1} << node.gpu_model)))) {
    return static_cast<double>(total_free);
  }
  // A GPU-less task can use none of the free GPU capacity: all of it is fragmented for it
  // (FGD's definition). Constant across placements of a task apart from what the task takes
  // itself, but it sets where a delta falls on FGD's score scale (placement.cc, FgdScore): with
  // 0 instead, gpool stranded 943 GPUs on the artifact's gpushare100 variant, 818 so (seed 42,
  // ties in a seeded random order; docs/simulator/fill.md).
  if (t.gpus == 0) return static_cast<double>(total_free);
  if (free_cpu < t.cpu_milli || free_memory < t.memory_bytes) return static_cast<double>(total_free);
  if (t.fractional()) {
    bool fits = false;
    int64_t frag = 0;
    for (int g = 0; g < node.gpus; ++g) {
      if (free_milli[g] >= t.gpu_milli && free_mem[g] >= t.gpu_memory_bytes) {
        fits = true;
      } else {
        frag += free_milli[g];
      }
    }
    return static_cast<double>(fits ? frag : total_free);
  }
  return static_cast<double>(whole >= t.gpus ? partial : total_free);
}

}  // namespace

WorkloadDistribution::WorkloadDistribution(std::vector<WorkloadClass> classes)
    : classes_(std::move(classes)) {
  std::erase_if(classes_, [](const WorkloadClass& c) { return !(c.weight > 0); });
  if (classes_.size() > kMaxClasses) {
    std::stable_sort(classes_.begin(), classes_.end(),
                     [](const WorkloadClass& a, const WorkloadClass& b) { return a.weight > b.weight; });
    classes_.resize(kMaxClasses);
  }
  double sum = 0;
  for (const WorkloadClass& c : classes_) sum += c.weight;
  for (WorkloadClass& c : classes_) c.weight /= sum;
}

WorkloadDistribution WorkloadDistribution::FromJobs(const std::vector<JobSpec>& jobs) {
  return FromJobs(jobs, nullptr);
}

WorkloadDistribution WorkloadDistribution::FromJobs(const std::vector<JobSpec>& jobs,
                                                    const ClusterState* running_of) {
  // Counted in a hash map by TaskShape (cluster.h: the running jobs' shapes are kept in it), then
  // put in shape order (the order a std::map gave, which fixes the class order and so the
  // decisions): policies call this every cycle, and a tree insert per job was most of a fill's
  // time.
  struct ShapeHash {
    size_t operator()(const TaskShape& k) const {
      uint64_t h = 0x9E3779B97F4A7C15ull;
      auto mix = [&h](uint64_t v) { h = (h ^ v) * 0xBF58476D1CE4E5B9ull; h ^= h >> 31; };
      mix(static_cast<uint64_t>(k.gpus) << 32 | static_cast<uint32_t>(k.gpu_milli));
      mix(k.gpu_memory_bytes);
      mix(static_cast<uint64_t>(k.cpu_milli));
      mix(k.memory_bytes);
      mix(static_cast<uint64_t>(k.models));
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<TaskShape, double, ShapeHash> counts;
  for (const JobSpec& j : jobs) counts[TaskShape::Of(j)] += j.num_tasks;
  if (running_of != nullptr) {
    for (const ShapeCount& c : running_of->running_shapes()) counts[c.shape] += static_cast<double>(c.tasks);
  }
  std::vector<std::pair<TaskShape, double>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<WorkloadClass> classes;
  classes.reserve(sorted.size());
  for (const auto& [k, n] : sorted) {
    WorkloadClass c;
    c.task.gpus = k.gpus;
    c.task.gpu_milli = k.gpu_milli;
    c.task.gpu_memory_bytes = k.gpu_memory_bytes;
    c.task.cpu_milli = k.cpu_milli;
    c.task.memory_bytes = k.memory_bytes;
    c.models = k.models;
    c.weight = n;
    classes.push_back(c);
  }
  return WorkloadDistribution(std::move(classes));
}

double FragmentationOf(const NodeSpec& node, const int32_t* gpu_free_milli,
                       const uint64_t* gpu_free_mem, int64_t free_cpu, uint64_t free_mem,
                       const WorkloadDistribution& w) {
  int64_t total_free = 0, partial = 0;
  int whole = 0;
  for (int g = 0; g < node.gpus; ++g) {
    total_free += gpu_free_milli[g];
    if (gpu_free_milli[g] == 1000) {
      ++whole;
    } else {
      partial += gpu_free_milli[g];
    }
  }
  if (total_free == 0) return 0;
  double f = 0;
  for (const WorkloadClass& c : w.classes()) {
    f += c.weight * ClassFragmentation(node, gpu_free_milli, gpu_free_mem, free_cpu, free_mem,
                                       total_free, whole, partial, c);
  }
  return f;
}

namespace {
struct NodeCopy {
  std::array<int32_t, kMaxGpusPerNode> milli{};
  std::array<uint64_t, kMaxGpusPerNode> mem{};
};
NodeCopy CopyNode(const ClusterState& s, NodeId n) {
  NodeCopy c;
  for (int g = 0; g < s.node(n).gpus; ++g) {
    c.milli[g] = s.gpu_free_milli(n, g);
    c.mem[g] = s.gpu_free_memory(n, g);
  }
  return c;
}
}  // namespace

double NodeFragmentation(const ClusterState& state, NodeId n, const WorkloadDistribution& w) {
  if (!state.schedulable(n)) return 0;
  NodeCopy c = CopyNode(state, n);
  return FragmentationOf(state.node(n), c.milli.data(), c.mem.data(), state.free_cpu(n),
                         state.free_memory(n), w);
}

double ClusterFragmentation(const ClusterState& state, const WorkloadDistribution& w) {
  double sum = 0;
  for (size_t i = 0; i < state.num_nodes(); ++i) {
    sum += NodeFragmentation(state, NodeId(static_cast<uint32_t>(i)), w);
  }
  return sum;
}

double FragmentationDelta(const ClusterState& state, const TaskBinding& b, const TaskRequest& t,
                          const WorkloadDistribution& w) {
  const NodeSpec& node = state.node(b.node);
  NodeCopy c = CopyNode(state, b.node);
  const double before = FragmentationOf(node, c.milli.data(), c.mem.data(), state.free_cpu(b.node),
                                        state.free_memory(b.node), w);
  for (uint32_t m = b.gpu_mask; m != 0; m &= m - 1) {
    const int g = std::countr_zero(m);
    c.milli[g] -= t.fractional() ? t.gpu_milli : 1000;
    c.mem[g] -= t.fractional() ? t.gpu_memory_bytes : node.gpu_memory_bytes;
  }
  const double after = FragmentationOf(node, c.milli.data(), c.mem.data(),
                                       state.free_cpu(b.node) - t.cpu_milli,
                                       state.free_memory(b.node) - t.memory_bytes, w);
  return after - before;
}

}  // namespace gpool::sched
