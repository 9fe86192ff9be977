// The FGD paper's baselines and FGD itself, as its artifact defines them (Weng et al., "Beware
// of Fragmentation", USENIX ATC '23; hkust-adsl/kubernetes-scheduler-simulator, the score
// plugins under pkg/simulator/plugin and pkg/utils/frag.go). Each is a Kubernetes score plugin:
// the scheduler filters the nodes a pod fits (CPU, memory, GPU model, and GPU room: a GPU with
// enough milli left for a shared pod, enough wholly free GPUs otherwise), scores every feasible
// node with an integer in 0..100, and binds to the highest, ties to the node first in a random
// order fixed for the run (NodeRanks). A plugin then picks the GPUs on that node.
//
//   random      every feasible node scores the same; a shared pod takes a random GPU that fits.
//   dotprod     Tetris' alignment, the artifact's variant: node [CPU left, GPU milli left] and
//               pod [CPU, GPU milli] divided by the largest node (128 CPUs, 8 GPUs), score =
//               int(100 * (1 - dot / 2)); best-fit GPU.
//   clustering  GpuClustering: nodes already running pods of the pod's GPU class ("share",
//               "1-gpu", "2-gpu", ...) first, nodes with only that class highest, then empty
//               nodes, then nodes of other classes, each band ordered by GPU milli in use;
//               CPU-only pods score 0 everywhere.
//   packing     GpuPacking: a pod that fits on partly used GPUs scores highest (less left on
//               them is better), then one that must open free GPUs on a used node, then an
//               empty node (fewer GPUs better); CPU-only pods score 0 everywhere.
//   bestfit     100 * (1 - (0.5 (CPU left - CPU)/128 CPUs + 0.5 (GPU left - GPU)/8 GPUs)).
//   fgd         FGD: the node's fragmentation (below) before minus after the pod, in GPUs,
//               through a sigmoid: int(100 * sigmoid(delta)). A shared pod tries every GPU
//               that fits and keeps the best (first on ties).
//
// The dimensions are the artifact's: CPU and GPU milli in the scores, memory as a filter only
// (its PodResource has no memory). Integer scores are kept: they make ties, and how ties are
// broken is part of how each baseline behaves.
//
// Fragmentation (pkg/utils/frag.go, NodeGpuShareFragAmountScore): for a target workload of
// typical pods (TypicalPods below) with frequencies p, a node's fragmentation is
//   sum over typical pods of p * (milli left on GPUs with less left than the pod asks per GPU,
//                                 when the pod fits the node's GPUs, GPU model and CPU;
//                                 all the node's GPU milli left otherwise, and for CPU-only pods)
// in milli-GPU. CPU-only typical pods count every free GPU milli as fragmented (the artifact's
// "XL"/"XR" classes): a constant for a given pod across nodes, it shifts the sigmoid only.
//
// All policies also implement sched::Policy, so they run in the replay too: jobs in arrival
// order, each task on the best node of a trial state; a gang with a required locality that the
// tasks' choices break is placed the same way inside each domain of its level in turn.
// Thread safety: const and reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster.h"
#include "sched/scheduler.h"
#include "sched/types.h"
#include "sim/rng.h"

namespace gpool::sim {

// A node as the artifact's NodeResource sees it.
struct NodeRes {
  int64_t cpu_left = 0;
  int64_t cpu_cap = 0;
  uint64_t mem_left = 0;     // filter only
  int32_t gpus = 0;
  int32_t model = -1;        // index into ClusterSpec::gpu_models; -1: no GPU
  std::array<int32_t, sched::kMaxGpusPerNode> gpu_left{};  // milli left per GPU
  uint32_t classes = 0;      // GPU classes of the pods on the node (bit PodRes::gpu_class)

  int64_t total_gpu_left() const;
  int32_t fully_free() const;
};

// A pod (one task) as the artifact's PodResource sees it.
struct PodRes {
  int64_t cpu = 0;
  uint64_t mem = 0;
  int32_t gpus = 0;          // 0: CPU-only
  int32_t milli = 0;         // per GPU: 1..999 shared, 1000 whole, 0 CPU-only
  sched::ModelMask models = sched::kAnyModel;

  bool shared() const { return gpus == 1 && milli < 1000; }
  int64_t total_milli() const { return int64_t{gpus} * milli; }
  // GpuClustering's class: 0 none (CPU-only), 1 "share", 1 + k "k-gpu".
  int gpu_class() const { return gpus == 0 ? 0 : (shared() ? 1 : 1 + gpus); }
  static PodRes Of(const sched::JobSpec& job);
};

// The filter: whether pod fits node (CPU, memory, model, GPU room).
bool Feasible(const NodeRes& n, const PodRes& p);

// Typical pods: the pod shapes (CPU, GPU count, milli per GPU, allowed models) of a workload,
// most popular first, up to the first that brings the cumulative count to 95% of all pods, with
// their frequencies renormalised to 1 (the artifact's GetTypicalPods with its defaults:
// popularity threshold 95, step 1, CPU-only pods included). Memory is not part of a shape.
struct TypicalPod {
  PodRes pod;
  double freq = 0;
};
using TypicalPods = std::vector<TypicalPod>;
TypicalPods MakeTypicalPods(const std::vector<sched::JobSpec>& jobs, double popularity = 0.95);

// A node's fragmentation in milli-GPU (defined above).
double NodeFrag(const NodeRes& n, const TypicalPods& target);

enum class ScoreKind { kRandom, kDotProd, kClustering, kPacking, kBestFit, kFgd };

class ScorePolicy final : public sched::Policy {
 public:
  // `target` is needed by fgd only (and kept by the others for the fill's fragmentation report).
  ScorePolicy(ScoreKind kind, std::shared_ptr<const TypicalPods> target);
  std::string_view name() const override;
  ScoreKind kind() const { return kind_; }
  const TypicalPods* target() const { return target_.get(); }

  // Score of a feasible node for pod, 0..100, higher better (random: 0 everywhere).
  int64_t Score(const NodeRes& n, const PodRes& p) const;
  // The GPUs pod takes on node n (a feasible one): a mask, one bit for a shared pod.
  uint32_t ChooseGpus(const NodeRes& n, const PodRes& p, SplitMix* rng) const;
  // Scores depend only on the node and the pod (random's GPU choice is drawn at bind time), so
  // the fill may cache a node's score until the node changes. The seed of a job's tie breaks:
  static uint64_t TieSeed(uint64_t seed, uint64_t job_id);

  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override;

 private:
  ScoreKind kind_;
  std::shared_ptr<const TypicalPods> target_;
};

// The node as NodeRes, from a cluster state; `classes` are filled by the caller.
NodeRes NodeResOf(const sched::ClusterState& s, sched::NodeId n);
// Applies a task's binding to a NodeRes (what the fill keeps up to date).
void TakeOn(NodeRes* n, const PodRes& p, uint32_t gpu_mask);

// Ranks the nodes for tie breaks: a seeded random permutation (rank[n] of node n). The
// artifact's kube-scheduler (its vendored selectHost) breaks ties toward the smallest node name,
// and the simulator names nodes with a random prefix per seed: ties go to the same nodes all
// run long, in a random order that changes with the seed.
std::vector<uint32_t> NodeRanks(uint64_t seed, size_t nodes);

// Picks the candidate with the highest score, ties to the lowest rank; or, with `rng` (random),
// uniformly among all candidates offered (the Random plugin's PreScore).
class BestPicker {
 public:
  BestPicker(const std::vector<uint32_t>* ranks, SplitMix* rng) : ranks_(ranks), rng_(rng) {}
  void Offer(int64_t score, uint32_t node) {
    if (rng_ != nullptr) {
      if (rng_->Below(++count_) == 0) node_ = node;
      return;
    }
    if (count_ == 0 || score > best_ || (score == best_ && (*ranks_)[node] < (*ranks_)[node_])) {
      best_ = score;
      node_ = node;
    }
    ++count_;
  }
  bool found() const { return count_ > 0; }
  uint32_t node() const { return node_; }

 private:
  const std::vector<uint32_t>* ranks_;
  SplitMix* rng_;
  int64_t best_ = 0;
  uint32_t node_ = 0;
  size_t count_ = 0;
};

}  // namespace gpool::sim
