// Scheduler value types: the cluster as the scheduler sees it, jobs, queues and decisions.
//
// The scheduler library (src/sched) is a pure library: no I/O, no threads, no globals. Its
// callers (the simulator in src/sim, the controller in src/control) describe the cluster with a
// ClusterSpec, keep a ClusterState (cluster.h) up to date as jobs start and end, and ask a Policy
// (scheduler.h) for Decisions once per scheduling cycle.
//
// Fabric locality is expressed without depending on src/fabric: an adapter turns the fabric into
// a tree of domains (fabric -> pod -> leaf) with a usable bandwidth each, and gives every node its
// leaf. A failed link lowers a domain's bandwidth_gbps; a failure that splits a leaf is expressed
// by giving the two halves separate leaf domains.
//
// Units: GPU shares in milli-GPU (1000 = one GPU), CPU in milli-cores, memory in bytes, times in
// nanoseconds on the caller's clock. All types here are plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace gpool::sched {

using NodeId = Id<struct SchedNodeTag>;      // index into ClusterSpec::nodes
using DomainId = Id<struct SchedDomainTag>;  // index into ClusterSpec::domains
using JobId = Id<struct SchedJobTag, uint64_t>;
using QueueId = Id<struct SchedQueueTag>;    // index into the queue list given to a policy

// Most GPUs one node may have (bitmasks and per-domain histograms are sized by it).
inline constexpr int kMaxGpusPerNode = 16;
// Most distinct GPU models in one cluster (a model set is a 64-bit mask).
inline constexpr int kMaxGpuModels = 64;

// A set of GPU models as a bitmask over ClusterSpec::gpu_models. kAnyModel matches every model.
using ModelMask = uint64_t;
inline constexpr ModelMask kAnyModel = ~ModelMask{0};

// Fabric levels from the smallest domain outwards. kNode is "one node" (distance 0).
enum class Level : uint8_t { kNode = 0, kLeaf = 1, kPod = 2, kFabric = 3 };
std::string_view LevelName(Level l);  // "node", "leaf", "pod", "fabric"
// Parses "node", "leaf", "pod", "fabric"; "any" means kFabric.
StatusOr<Level> ParseLevel(std::string_view s);

enum class Health : uint8_t { kHealthy, kUnhealthy };
enum class PowerState : uint8_t { kOn, kSuspending, kOff, kResuming };
std::string_view PowerStateName(PowerState p);

enum class JobKind : uint8_t { kTraining, kInference, kInteractive };
std::string_view JobKindName(JobKind k);
StatusOr<JobKind> ParseJobKind(std::string_view s);

// Where a task's GPUs may come from (docs/scheduler.md, "Remote GPUs").
//   kLocal:  GPUs of the node the task's process runs on, used directly (CUDA_VISIBLE_DEVICES).
//   kPooled: local when the whole gang fits that way; else its GPUs may come from GPU servers on
//            other nodes (remote attachment through the remoting runtime), several per task
//            when needed (aggregation).
//   kRemote: always through the remoting runtime: the task runs on a node with the CPU and
//            memory it asks for (a CPU-only node is fine) and its GPUs come from GPU servers,
//            its own node's included when that node serves them.
enum class GpuSource : uint8_t { kLocal, kPooled, kRemote };
std::string_view GpuSourceName(GpuSource s);  // "local", "pooled", "remote"
StatusOr<GpuSource> ParseGpuSource(std::string_view s);  // "" = local

// One fabric domain. Domains form a tree: every node's leaf has a pod parent, every pod has a
// fabric parent, fabrics have no parent. Two fabrics are not connected to each other.
struct DomainSpec {
  std::string name;
  Level level = Level::kLeaf;
  DomainId parent;                    // invalid for kFabric
  double bandwidth_gbps = 0;          // usable uplink bandwidth now (0 = unknown)
  double nominal_bandwidth_gbps = 0;  // when all links are up (0 = unknown)
};

struct NodeSpec {
  std::string name;
  DomainId leaf;              // the leaf domain the node hangs off
  int32_t gpus = 0;           // 0..kMaxGpusPerNode, all of one model
  int32_t gpu_model = -1;     // index into ClusterSpec::gpu_models; -1 when gpus == 0
  uint64_t gpu_memory_bytes = 0;  // per GPU
  int64_t cpu_milli = 0;
  uint64_t memory_bytes = 0;
  Health health = Health::kHealthy;
  PowerState power = PowerState::kOn;
  // The node runs a GPU server that the scheduler may lend its GPUs through (remote
  // attachment). Without one its GPUs serve only tasks running on it.
  bool serves_gpus = false;
};

struct ClusterSpec {
  std::vector<std::string> gpu_models;  // e.g. {"V100M16", "V100M32", "A10"}
  std::vector<DomainSpec> domains;
  std::vector<NodeSpec> nodes;
};

// Options for BuildUniformTopology.
struct UniformTopologyOptions {
  int nodes_per_leaf = 16;
  int leaves_per_pod = 16;
  double leaf_bandwidth_gbps = 0;
  double pod_bandwidth_gbps = 0;
};
// Fills spec->domains with a fabric -> pods -> leaves tree and assigns spec->nodes to leaves in
// order. For clusters with no known topology (e.g. the openb trace) and for benchmarks.
Status BuildUniformTopology(const UniformTopologyOptions& options, ClusterSpec* spec);

// Looks a model name up; returns -1 when unknown.
int FindGpuModel(const ClusterSpec& spec, std::string_view name);
// Parses "V100M16|V100M32" (or "", "nan", "any" = any model) into a mask over spec.gpu_models.
// An unknown model name is an error naming it.
StatusOr<ModelMask> ParseGpuModels(const ClusterSpec& spec, std::string_view text);

// What one task of a gang asks for. Exactly one of three shapes:
//   whole GPUs:     gpus >= 1, gpu_milli == 0 (means 1000 per GPU), gpu_memory_bytes ignored
//   a GPU fraction: gpus == 1, 0 < gpu_milli < 1000, gpu_memory_bytes > 0 optional
//   no GPU:         gpus == 0
struct TaskRequest {
  int32_t gpus = 0;
  int32_t gpu_milli = 0;
  uint64_t gpu_memory_bytes = 0;
  int64_t cpu_milli = 0;
  uint64_t memory_bytes = 0;

  bool fractional() const { return gpus == 1 && gpu_milli > 0 && gpu_milli < 1000; }
  // GPU capacity in milli-GPU this task takes.
  int64_t milli_gpus() const { return fractional() ? gpu_milli : int64_t{gpus} * 1000; }
};

struct Locality {
  Level level = Level::kFabric;  // kFabric = any placement inside one fabric
  bool required = false;         // true: never place outside one domain of `level`
};

// Remote attachment of a job's GPUs (GpuSource). Ignored for kLocal.
struct RemoteGpuRequest {
  GpuSource source = GpuSource::kLocal;
  // The farthest a task's GPU may be from the node its process runs on: kNode (its own node,
  // through the remoting runtime: fractions enforced by the GPU server), kLeaf, kPod or
  // kFabric (any).
  Level within = Level::kFabric;
  // The estimated slowdown (remote_cost.h) the job accepts, as a factor >= 1 (1.1 = 10% slower
  // than on local GPUs); 0 = any.
  double max_slowdown = 0;
};

struct JobSpec {
  JobId id;
  std::string name;
  std::string tenant;
  QueueId queue;              // index into the policy input's queues
  int32_t priority = 0;       // priority class; higher is more important
  int32_t num_tasks = 1;      // gang size; all tasks start together or none does
  TaskRequest task;           // every task of the gang asks the same
  ModelMask gpu_models = kAnyModel;
  Locality locality;
  RemoteGpuRequest remote;
  // A gang is always placed inside one fabric (connected) domain. allow_split lets it span
  // several fabrics when none fits it alone (tasks that don't talk to each other).
  bool allow_split = false;
  double est_runtime_s = 0;   // 0 = unknown (treated as unbounded by backfill)
  bool preemptible = true;
  double min_runtime_s = 0;   // not preempted or reclaimed before running this long
  JobKind kind = JobKind::kTraining;
  int64_t submit_ns = 0;

  int64_t total_milli_gpus() const { return task.milli_gpus() * num_tasks; }
};

// Checks a job against itself and the cluster. The error names the job and the field, e.g.
// "job 7 (train-a): task.gpu_milli: 1500 is not in 1..999 for a fractional task".
Status ValidateJob(const JobSpec& job, const ClusterSpec& cluster, size_t num_queues);

struct QueueSpec {
  std::string name;
  std::string tenant;
  int64_t guaranteed_gpus = 0;           // quota in whole GPUs
  std::vector<DomainId> guaranteed_domains;  // whole domains, added to the quota and preferred
  double weight = 1;                     // share of idle capacity when borrowing over quota
  int64_t max_gpus = -1;                 // hard limit on GPUs in use; -1 = none
  int32_t max_running_jobs = -1;         // -1 = none
};
Status ValidateQueue(const QueueSpec& q, const ClusterSpec& cluster);

// GPUs of another node that a task uses through that node's GPU server.
struct RemoteGpus {
  NodeId node;
  uint32_t gpu_mask = 0;  // bit i = GPU i of `node`
  bool operator==(const RemoteGpus&) const = default;
};

// Where one task runs. Whole-GPU tasks name their GPUs in gpu_mask; a fractional task names one
// GPU in gpu_mask (one bit) and carries its milli and GPU memory.
//
// Remote attachment (JobSpec::remote): `node` is where the task's process runs and gives its CPU
// and memory; its GPUs are `gpu_mask` (the node's own, served by its GPU server) plus `remote`
// (other nodes'), each GPU at gpu_milli / gpu_memory_bytes. A local binding has `remote` empty
// and `via_server` false.
struct TaskBinding {
  NodeId node;
  uint32_t gpu_mask = 0;      // bit i = GPU i of the node
  int32_t gpu_milli = 0;      // per GPU in the mask (1000 for whole GPUs)
  uint64_t gpu_memory_bytes = 0;  // per GPU in the mask
  std::vector<RemoteGpus> remote;  // in the order the task sees them, after gpu_mask's
  // The task reaches its GPUs through the remoting runtime (always true when `remote` is not
  // empty; also for a kRemote task whose GPUs all happen to be its own node's).
  bool via_server = false;
  // Estimated slowdown of the task from remote attachment (remote_cost.h); 1 when local.
  double slowdown = 1;

  // GPUs the task uses, local and remote.
  int gpu_count() const;
};

struct Placement {
  std::vector<TaskBinding> tasks;  // one per task of the gang, in task order
};

// ---- Decisions ----

struct BindDecision {
  JobId job;
  Placement placement;
  bool backfilled = false;  // placed ahead of a reservation by EASY backfill
};

struct PreemptDecision {
  JobId victim;
  JobId for_job;            // the pending job that needs the room
  std::string reason;       // "priority" or "reclaim"
};

struct PowerDecision {
  NodeId node;
  PowerState target = PowerState::kOff;  // kOff = suspend it, kOn = resume it
  int64_t ready_ns = 0;                  // resume: expected end of boot (now + boot latency)
};

struct Reservation {
  JobId job;
  int64_t start_ns = 0;        // the shadow time: when the job is expected to start
  std::vector<NodeId> nodes;   // nodes held for it
};

// Why a pending job was not bound in a cycle (Decisions::waits, when SchedulingInput::explain
// asks for them). The text is for people (`gpool jobs`, the dashboard) and names the rule and
// its numbers; it holds only numbers that change with the configuration or the job, not with
// the load, so a caller that stores it rewrites it only when the cause changes.
enum class WaitKind : uint8_t {
  kNeverFits,  // more GPUs than the cluster has of its models, or than its queue's cap: a
               // caller may refuse it
  kQueueCap,   // its queue's max_gpus holds it back until the queue's own jobs end
  kQueueJobs,  // its queue's max_running_jobs
  kBlocked,    // strict order (backfill off): behind a job that cannot start
  kReserved,   // first to start: nodes are held for it (a reservation)
  kNoRoom,     // no placement now; the text says whether it waits within its guarantee
};
std::string_view WaitKindName(WaitKind k);  // "never-fits", "queue-cap", ...

struct WaitReason {
  JobId job;
  WaitKind kind = WaitKind::kNoRoom;
  std::string text;
};

// What a policy decided in one cycle. Apply preemptions first, then binds, then power actions:
// a bind may use room that a preemption of the same cycle frees.
struct Decisions {
  std::vector<PreemptDecision> preemptions;
  std::vector<BindDecision> binds;
  std::vector<PowerDecision> power;
  std::vector<Reservation> reservations;  // informational: why some free nodes stay idle
  // Informational: one per pending job not bound, when SchedulingInput::explain (else empty).
  std::vector<WaitReason> waits;
};

}  // namespace gpool::sched
