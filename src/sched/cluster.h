// ClusterState: allocation bookkeeping and per-domain free-capacity aggregates.
//
// The caller creates one ClusterState from a ClusterSpec and keeps it current: Bind when a job
// starts, Release when it ends or is preempted, SetHealth/SetPower as nodes change. Policies get
// it by const reference and work on a copy, which is how they try placements without touching
// the caller's state. A copy is cheap, since policies make one or more per cycle: the domain
// tree is shared (immutable), the ClusterSpec is shared until a copy changes a node's health or
// power (copy on write), running jobs are shared immutable records (a copy copies pointers),
// and the rest is flat vectors (a few memcpys). Copying still costs O(nodes + running jobs).
//
// Aggregates make placement cheap: every domain (leaf, pod, fabric) keeps, per GPU model, a
// histogram of its schedulable nodes by number of wholly free GPUs, plus free CPU and memory
// sums. "Could a gang of N tasks of g GPUs fit in this domain?" is then a sum over at most
// kMaxGpusPerNode+1 buckets instead of a scan of its nodes. The histogram is an upper bound
// (it ignores CPU and memory); placement confirms on the nodes themselves.
//
// A node is schedulable when it is healthy and powered on. Unschedulable nodes keep their
// allocations (jobs on a node that fails are the caller's to release) but count for nothing in
// the aggregates.
//
// Thread safety: thread-compatible. Concurrent const use is safe.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "common/status.h"
#include "sched/fabric_load.h"
#include "sched/types.h"

namespace gpool::sched {

// A running job as the bookkeeping knows it.
struct RunningJob {
  JobSpec spec;
  Placement placement;
  int64_t start_ns = 0;
  // Expected end (start + est_runtime); INT64_MAX when the job gave no estimate.
  int64_t expected_end_ns() const;
};

// The running jobs of a ClusterState, in no particular order: a read-only view that iterates as
// `const RunningJob&`. Valid until the state it came from changes or goes away.
class RunningList {
 public:
  using Ptr = std::shared_ptr<const RunningJob>;
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = RunningJob;
    using difference_type = std::ptrdiff_t;
    using pointer = const RunningJob*;
    using reference = const RunningJob&;
    iterator() = default;
    explicit iterator(std::vector<Ptr>::const_iterator it) : it_(it) {}
    const RunningJob& operator*() const { return **it_; }
    const RunningJob* operator->() const { return it_->get(); }
    iterator& operator++() { ++it_; return *this; }
    iterator operator++(int) { iterator t = *this; ++it_; return t; }
    bool operator==(const iterator& o) const { return it_ == o.it_; }
   private:
    std::vector<Ptr>::const_iterator it_;
  };
  explicit RunningList(const std::vector<Ptr>& v) : v_(&v) {}
  iterator begin() const { return iterator(v_->begin()); }
  iterator end() const { return iterator(v_->end()); }
  size_t size() const { return v_->size(); }
  bool empty() const { return v_->empty(); }
  const RunningJob& operator[](size_t i) const { return *(*v_)[i]; }

 private:
  const std::vector<Ptr>* v_;
};

// A task's shape as workload statistics see it (fragmentation.h's WorkloadDistribution): GPUs,
// a fraction's milli and GPU memory (0 for whole GPUs), CPU, memory and the allowed models.
struct TaskShape {
  int32_t gpus = 0;
  int32_t gpu_milli = 0;
  uint64_t gpu_memory_bytes = 0;
  int64_t cpu_milli = 0;
  uint64_t memory_bytes = 0;
  ModelMask models = kAnyModel;
  static TaskShape Of(const JobSpec& j);
  auto operator<=>(const TaskShape&) const = default;
};

// How many running tasks have one shape.
struct ShapeCount {
  TaskShape shape;
  int64_t tasks = 0;
};

// Free capacity aggregate of one domain for one GPU model.
struct ModelAggregate {
  // nodes_by_free[k] = schedulable nodes of this model with exactly k wholly free GPUs.
  std::array<int32_t, kMaxGpusPerNode + 1> nodes_by_free{};
  // tasks_by_size[g] = sum over nodes of floor(free whole GPUs / g): how many g-GPU tasks fit,
  // kept up to date so a capacity check is one load instead of a histogram sum.
  std::array<int32_t, kMaxGpusPerNode + 1> tasks_by_size{};
  // gpus_by_free_decile[b] = GPUs with free milli in [100b, 100b+99] (b = 10: wholly free).
  // Bounds fractional capacity without counting crumbs smaller than the task.
  std::array<int32_t, 11> gpus_by_free_decile{};
  int64_t free_whole_gpus = 0;
  int64_t free_milli = 0;       // sum of free milli over all GPUs (whole and partial)
  int64_t partial_gpus = 0;     // GPUs with 0 < free < 1000
};

class ClusterState {
 public:
  // Validates the spec (domain tree, node fields) and builds the aggregates. Errors name the
  // node or domain and the field.
  static StatusOr<ClusterState> Create(ClusterSpec spec);

  const ClusterSpec& spec() const { return *spec_; }
  size_t num_nodes() const { return spec_->nodes.size(); }
  size_t num_domains() const { return spec_->domains.size(); }
  size_t num_models() const { return spec_->gpu_models.size(); }
  const NodeSpec& node(NodeId n) const { return spec_->nodes[n.value()]; }
  const DomainSpec& domain(DomainId d) const { return spec_->domains[d.value()]; }

  // The domain tree, as built by Create.
  const std::vector<DomainId>& children(DomainId d) const { return topo_->children[d.value()]; }
  const std::vector<NodeId>& leaf_nodes(DomainId leaf) const { return topo_->leaf_nodes[leaf.value()]; }
  const std::vector<DomainId>& domains_at(Level l) const;
  // Whether d runs below its nominal bandwidth (failed links). Domains don't change after
  // Create, so this is computed once there: placement asks it for every leaf, per gang.
  bool degraded(DomainId d) const { return topo_->degraded[d.value()] != 0; }
  // The node's ancestor at `l` (kLeaf, kPod or kFabric).
  DomainId ancestor(NodeId n, Level l) const;
  // Smallest level whose domain holds both nodes: kNode for the same node, kLeaf, kPod, kFabric;
  // an invalid result (returned as std::nullopt-like false) when they are in different fabrics.
  bool Distance(NodeId a, NodeId b, Level* level) const;

  // ---- Per-node free capacity ----
  // Healthy, powered on and not held.
  bool schedulable(NodeId n) const;
  // A held node is taken out of placement without changing its health or power: policies hold
  // the nodes of a reservation on their working copy so that backfill can't use them.
  void SetHeld(NodeId n, bool held);
  bool held(NodeId n) const { return held_[n.value()] != 0; }
  int64_t free_cpu(NodeId n) const { return free_cpu_[n.value()]; }
  uint64_t free_memory(NodeId n) const { return free_mem_[n.value()]; }
  int32_t gpu_free_milli(NodeId n, int gpu) const { return gpu_free_milli_[gpu_index(n, gpu)]; }
  uint64_t gpu_free_memory(NodeId n, int gpu) const { return gpu_free_mem_[gpu_index(n, gpu)]; }
  int32_t free_whole_gpus(NodeId n) const { return free_whole_[n.value()]; }
  uint32_t free_whole_mask(NodeId n) const;  // bit i set when GPU i is wholly free
  // Time the node last became fully idle (no allocation); -1 while something runs on it. Nodes
  // start idle since time 0.
  int64_t idle_since_ns(NodeId n) const { return idle_since_[n.value()]; }
  bool idle(NodeId n) const { return idle_since_[n.value()] >= 0; }

  // ---- Per-domain aggregates (schedulable nodes only) ----
  const ModelAggregate& aggregate(DomainId d, int model) const {
    return agg_[d.value() * num_models() + static_cast<size_t>(model)];
  }
  int64_t domain_free_cpu(DomainId d) const { return dom_free_cpu_[d.value()]; }
  uint64_t domain_free_memory(DomainId d) const { return dom_free_mem_[d.value()]; }
  int64_t domain_total_gpus(DomainId d) const { return dom_total_gpus_[d.value()]; }
  // Upper bound on how many tasks of `t` fit in domain d on models in `models` (uses the
  // histograms for whole GPUs, free milli for fractions, CPU/memory sums for GPU-less tasks).
  int64_t TaskCapacityBound(DomainId d, const TaskRequest& t, ModelMask models) const;
  // Free whole GPUs of the given models in d.
  int64_t FreeWholeGpus(DomainId d, ModelMask models) const;

  // Cluster totals over healthy nodes, whatever their power state (fair-share denominators).
  int64_t total_gpus() const { return total_gpus_; }
  int64_t total_cpu() const { return total_cpu_; }
  uint64_t total_memory() const { return total_mem_; }

  // ---- Fit checks ----
  // How many tasks of `t` fit on node n now (0 when unschedulable or the model doesn't match).
  int32_t TasksThatFit(NodeId n, const TaskRequest& t, ModelMask models) const;
  // Whether `b` (for task `t`) can be applied now: the task's node, its own GPUs and its remote
  // GPUs (each on a schedulable node that serves GPUs, never the task's own).
  Status CheckBinding(const TaskBinding& b, const TaskRequest& t) const;

  // ---- Bookkeeping ----
  // Records a started job. Fails, changing nothing, if any task doesn't fit where bound or the
  // job id is already running.
  Status Bind(const JobSpec& job, const Placement& p, int64_t now_ns);
  // Frees a running job's resources. NotFound when it isn't running.
  Status Release(JobId job, int64_t now_ns);
  // Takes or returns resources without a job (reservations, what-if copies). `sign` +1 takes,
  // -1 returns; remote GPUs are taken on their own nodes. No checks beyond bounds: callers use
  // CheckBinding first.
  void Apply(const TaskBinding& b, const TaskRequest& t, int sign, int64_t now_ns);

  void SetHealth(NodeId n, Health h);
  void SetPower(NodeId n, PowerState p);

  RunningList running() const { return RunningList(running_); }
  const RunningJob* FindRunning(JobId job) const;
  // GPUs (milli) in use per queue index; grows as queues are seen.
  int64_t queue_used_milli(QueueId q) const {
    return q.value() < queue_used_milli_.size() ? queue_used_milli_[q.value()] : 0;
  }
  // CPU, memory and running jobs per queue index, kept like queue_used_milli so that a cycle
  // needs no pass over the running jobs for them.
  int64_t queue_used_cpu(QueueId q) const { return At(queue_used_cpu_, q); }
  uint64_t queue_used_memory(QueueId q) const { return At(queue_used_mem_, q); }
  int32_t queue_running_jobs(QueueId q) const { return At(queue_jobs_, q); }
  // Cluster-wide allocated totals.
  int64_t used_milli() const { return used_milli_; }
  // Running tasks by shape, in shape order (one entry per shape present).
  const std::vector<ShapeCount>& running_shapes() const { return shapes_; }

  // ---- Fabric load (optional) ----
  // The caller's view of uplink load (fabric_load.h), shared by copies. Null (the default, and
  // the controller today): placement ignores the network and decides exactly as without it.
  void SetFabricLoad(std::shared_ptr<const FabricLoad> load) { load_ = std::move(load); }
  // Null when unset or empty.
  const FabricLoad* fabric_load() const { return load_ && !load_->empty() ? load_.get() : nullptr; }

 private:
  ClusterState() = default;
  size_t gpu_index(NodeId n, int gpu) const { return topo_->gpu_offset[n.value()] + gpu; }
  // CheckBinding's and Apply's GPU part for one node's GPUs in `mask`.
  Status CheckGpus(NodeId n, uint32_t mask, const TaskRequest& t) const;
  void ApplyGpus(NodeId n, uint32_t mask, const TaskRequest& t, int sign);
  // Removes (sign -1) or adds (+1) node n's current contribution to its ancestors' aggregates.
  void Contribute(NodeId n, int sign);
  void RecomputeNode(NodeId n);

  // What Create derives from the spec and nothing changes afterwards: shared by all copies.
  struct Topology {
    std::vector<std::vector<DomainId>> children;
    std::vector<std::vector<NodeId>> leaf_nodes;
    std::array<std::vector<DomainId>, 4> by_level;
    std::vector<std::array<DomainId, 3>> ancestors;  // per node: leaf, pod, fabric
    std::vector<size_t> gpu_offset;
    std::vector<uint8_t> degraded;  // per domain
  };
  // Open-addressing hash from job id to its slot in running_: a flat vector, so copying the
  // state copies it with one memcpy (an unordered_map copy allocates a node per job).
  class JobIndex {
   public:
    // The slot of `id`, or -1.
    int64_t Find(JobId id) const;
    void Set(JobId id, uint32_t slot);  // inserts or overwrites
    void Erase(JobId id);
   private:
    size_t Probe(JobId id) const;  // the cell holding id, or the empty cell where it would go
    struct Cell {
      uint64_t key = JobId::kInvalid;  // kInvalid = empty
      uint32_t slot = 0;
    };
    std::vector<Cell> cells_;  // size 0 or a power of two, at most half full
    size_t size_ = 0;
  };
  template <typename T>
  static T At(const std::vector<T>& v, QueueId q) { return q.value() < v.size() ? v[q.value()] : T{}; }
  // Adds (sign +1) or removes (-1) a running job's per-queue and per-shape bookkeeping.
  void Account(const JobSpec& job, int sign);
  // Copy on write: clones the spec first when another copy of the state shares it.
  NodeSpec& MutableNode(NodeId n);

  std::shared_ptr<ClusterSpec> spec_;  // shared between copies until one changes a node
  std::shared_ptr<const Topology> topo_;
  std::vector<int32_t> gpu_free_milli_;
  std::vector<uint64_t> gpu_free_mem_;
  std::vector<int32_t> free_whole_;
  std::vector<int64_t> free_cpu_;
  std::vector<uint64_t> free_mem_;
  std::vector<int32_t> alloc_count_;  // tasks bound per node
  std::vector<int64_t> idle_since_;
  std::vector<uint8_t> held_;

  std::vector<ModelAggregate> agg_;  // [domain * num_models + model]
  std::vector<int64_t> dom_free_cpu_;
  std::vector<uint64_t> dom_free_mem_;
  std::vector<int64_t> dom_total_gpus_;
  int64_t total_gpus_ = 0;
  int64_t total_cpu_ = 0;
  uint64_t total_mem_ = 0;

  std::vector<RunningList::Ptr> running_;  // immutable records, shared between copies
  JobIndex running_index_;
  std::vector<int64_t> queue_used_milli_;
  std::vector<int64_t> queue_used_cpu_;
  std::vector<uint64_t> queue_used_mem_;
  std::vector<int32_t> queue_jobs_;
  std::vector<ShapeCount> shapes_;  // sorted by shape
  int64_t used_milli_ = 0;
  std::shared_ptr<const FabricLoad> load_;
};

}  // namespace gpool::sched
