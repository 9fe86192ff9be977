// Scheduler benchmarks (src/sched): gang placement latency and one full scheduling cycle.
//
// Clusters are fat-tree shaped: 8 GPUs per node, 16 nodes per leaf switch, 16 leaves per pod
// (2,048 GPUs = 256 nodes = 16 leaves in one pod; 100,000 GPUs = 12,500 nodes = 782 leaves in
// 49 pods). "70% busy and fragmented": a fixed share of nodes is wholly free, scattered over the
// leaves (2-3 per leaf), and every other node has 1-3 GPUs free, so that 30% of GPUs are free but
// a 128-GPU gang (16 tasks x 8 GPUs) has to be assembled from several leaves.
//
// Latency percentiles come from timing each placement separately over 32 differently seeded
// clusters: wall time (p50_us, p99_us) and this thread's CPU time (cpu_p50_us, cpu_p99_us), the
// latter unaffected by other processes on a shared machine; `leaves` is how many leaves the gang used and
// `min_leaves` the fewest that could hold it anywhere (Slurm used 5 where 4 sufficed,
// notes/slurm-peer.md); `min_leaves_1pod` the fewest inside one pod, for the gangs we kept in a
// pod (`in_1pod_frac`): we keep a gang inside one pod when a pod can hold it.
// The first-fit scan over all nodes is the raw reference: the cost of looking at every node once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <vector>

#include "sched/cluster.h"
#include "sched/decision_hash.h"
#include "sched/placement.h"
#include "sched/scheduler.h"

namespace gpool::sched {
namespace {

constexpr int kGpusPerNode = 8;
constexpr int kNodesPerLeaf = 16;
constexpr int kLeavesPerPod = 16;

ClusterState MakeCluster(int nodes, bool serve = false) {
  ClusterSpec spec;
  spec.gpu_models = {"H100"};
  for (int i = 0; i < nodes; ++i) {
    spec.nodes.push_back({.name = "n" + std::to_string(i),
                          .gpus = kGpusPerNode,
                          .gpu_model = 0,
                          .gpu_memory_bytes = 80ull << 30,
                          .cpu_milli = 128000,
                          .memory_bytes = 2048ull << 30,
                          .serves_gpus = serve});
  }
  (void)BuildUniformTopology({.nodes_per_leaf = kNodesPerLeaf, .leaves_per_pod = kLeavesPerPod}, &spec);
  return *ClusterState::Create(std::move(spec));
}

// 70% of GPUs busy: `free_share` of nodes wholly free at random, the rest with 1-3 GPUs free,
// tuned so the total free is 30%. `fragmented`: no node wholly free (every node 1-3 GPUs free),
// so an 8-GPU task fits nowhere locally. `serve`: every node lends its GPUs (remote attachment).
ClusterState MakeBusy(int nodes, uint64_t seed, bool serve = false, bool fragmented = false) {
  ClusterState s = MakeCluster(nodes, serve);
  std::mt19937_64 rng(seed);
  const int64_t target_free = static_cast<int64_t>(nodes) * kGpusPerNode * 3 / 10;
  std::vector<int> free(nodes, 0);
  // Roughly 16% of nodes wholly free, the rest share what's left of the 30%.
  std::vector<int> order(nodes);
  for (int i = 0; i < nodes; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const int whole = fragmented ? 0 : nodes * 16 / 100;
  int64_t left = target_free;
  for (int i = 0; i < whole; ++i) {
    free[order[i]] = kGpusPerNode;
    left -= kGpusPerNode;
  }
  for (int i = whole; i < nodes && left > 0; ++i) {
    const int f = std::min<int64_t>(left, 1 + static_cast<int>(rng() % 3));
    free[order[i]] = f;
    left -= f;
  }
  uint64_t id = 1'000'000;
  for (int n = 0; n < nodes; ++n) {
    const int busy = kGpusPerNode - free[n];
    if (busy == 0) continue;
    JobSpec j;
    j.id = JobId(id++);
    j.queue = QueueId(0);
    j.task = {.gpus = busy, .cpu_milli = 1000 * busy, .memory_bytes = (16ull << 30) * busy};
    j.est_runtime_s = 600 + static_cast<double>(rng() % 7200);
    (void)s.Bind(j, {.tasks = {{.node = NodeId(static_cast<uint32_t>(n)), .gpu_mask = (1u << busy) - 1}}}, 0);
  }
  return s;
}

JobSpec Gang128() {
  JobSpec j;
  j.id = JobId(1);
  j.name = "gang128";
  j.queue = QueueId(0);
  j.num_tasks = 16;
  j.task = {.gpus = 8, .cpu_milli = 8000, .memory_bytes = 128ull << 30};
  return j;
}

// Fewest leaves that hold the gang, over `leaves`.
int MinLeavesOf(const ClusterState& s, const JobSpec& j, const std::vector<DomainId>& leaves) {
  std::vector<int64_t> caps;
  for (DomainId l : leaves) caps.push_back(s.TaskCapacityBound(l, j.task, kAnyModel));
  std::sort(caps.rbegin(), caps.rend());
  int64_t sum = 0;
  int n = 0;
  for (int64_t c : caps) {
    if (sum >= j.num_tasks) break;
    sum += c;
    ++n;
  }
  return sum >= j.num_tasks ? n : 1 << 20;
}
// Anywhere in the fabric, and the best inside a single pod.
int MinLeaves(const ClusterState& s, const JobSpec& j) { return MinLeavesOf(s, j, s.domains_at(Level::kLeaf)); }
int MinLeavesInOnePod(const ClusterState& s, const JobSpec& j) {
  int best = 1 << 20;
  for (DomainId pod : s.domains_at(Level::kPod)) best = std::min(best, MinLeavesOf(s, j, s.children(pod)));
  return best;
}

// CPU time of this thread: unlike wall time, not inflated when other processes share the cores.
double ThreadCpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

template <typename Fn>
void TimePlacements(benchmark::State& state, int nodes, Fn place, bool serve = false,
                    bool fragmented = false, GpuSource source = GpuSource::kLocal) {
  std::vector<ClusterState> clusters;
  for (uint64_t seed = 1; seed <= 32; ++seed) clusters.push_back(MakeBusy(nodes, seed, serve, fragmented));
  JobSpec gang = Gang128();
  gang.remote.source = source;
  std::vector<double> us, cpu_us;
  int64_t leaves = 0, min_leaves = 0, min_pod = 0, pod_placed = 0, placed = 0;
  size_t i = 0;
  for (auto _ : state) {
    const ClusterState& s = clusters[i++ % clusters.size()];
    const double c0 = ThreadCpuUs();
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<Placement> p = place(s, gang);
    const auto t1 = std::chrono::steady_clock::now();
    cpu_us.push_back(ThreadCpuUs() - c0);
    benchmark::DoNotOptimize(p);
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (p) {
      ++placed;
      leaves += CountLeaves(s, *p);
      min_leaves += MinLeaves(s, gang);
      const int mp = MinLeavesInOnePod(s, gang);
      if (mp < (1 << 20) && PlacementSpan(s, *p) <= Level::kPod) {
        min_pod += mp;
        ++pod_placed;
      }
    }
  }
  std::sort(us.begin(), us.end());
  std::sort(cpu_us.begin(), cpu_us.end());
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["cpu_p50_us"] = cpu_us[cpu_us.size() / 2];
  state.counters["cpu_p99_us"] = cpu_us[std::min(cpu_us.size() - 1, cpu_us.size() * 99 / 100)];
  state.counters["placed_frac"] = static_cast<double>(placed) / static_cast<double>(us.size());
  if (placed > 0) {
    state.counters["leaves"] = static_cast<double>(leaves) / static_cast<double>(placed);
    state.counters["min_leaves"] = static_cast<double>(min_leaves) / static_cast<double>(placed);
  }
  if (pod_placed > 0) {
    state.counters["min_leaves_1pod"] = static_cast<double>(min_pod) / static_cast<double>(pod_placed);
    state.counters["in_1pod_frac"] = static_cast<double>(pod_placed) / static_cast<double>(placed);
  }
}

void BM_PlaceGang128(benchmark::State& state) {
  TimePlacements(state, static_cast<int>(state.range(0)),
                 [](const ClusterState& s, const JobSpec& j) { return PlaceGang(s, j, {}); });
}
BENCHMARK(BM_PlaceGang128)->Arg(256)->Arg(12500)->Unit(benchmark::kMicrosecond);

void BM_FirstFitScan128(benchmark::State& state) {
  TimePlacements(state, static_cast<int>(state.range(0)),
                 [](const ClusterState& s, const JobSpec& j) { return PlaceFirstFit(s, j, {}); });
}
BENCHMARK(BM_FirstFitScan128)->Arg(256)->Arg(12500)->Unit(benchmark::kMicrosecond);

// The 128-GPU gang with remote attachment (remote_placement.h) on clusters whose nodes all lend
// their GPUs. Arg 1 = 0: the usual busy cluster (16% of nodes wholly free: most tasks find their
// 8 GPUs on their own node); 1: fragmented (no node has 8 free, every task aggregates GPUs of
// several nodes). Same time targets as BM_PlaceGang128.
void BM_PlaceRemoteGang128(benchmark::State& state) {
  TimePlacements(
      state, static_cast<int>(state.range(0)),
      [](const ClusterState& s, const JobSpec& j) { return PlaceGang(s, j, {}); },
      /*serve=*/true, /*fragmented=*/state.range(1) != 0, GpuSource::kRemote);
}
BENCHMARK(BM_PlaceRemoteGang128)
    ->Args({256, 0})->Args({256, 1})->Args({12500, 0})->Args({12500, 1})
    ->Unit(benchmark::kMicrosecond);

// One full cycle of the default policy: 10,000 nodes (80,000 GPUs), 10,000 pending jobs of
// mixed shapes (1, 2, 4, 8 GPUs, fractions, gangs of 2-16 nodes), 4 queues. Arg 0: 70% busy
// (most jobs can't start, the cycle is mostly ordering and rejecting); arg 1: empty cluster
// (thousands of binds in the one cycle).
void BM_Cycle10kJobs10kNodes(benchmark::State& state) {
  const bool empty = state.range(0) == 1;
  ClusterState s = empty ? MakeCluster(10000) : MakeBusy(10000, 7);
  std::vector<QueueSpec> queues;
  for (int q = 0; q < 4; ++q) {
    queues.push_back({.name = "q" + std::to_string(q), .tenant = "t", .guaranteed_gpus = 10000});
  }
  std::mt19937_64 rng(42);
  std::vector<JobSpec> pending;
  for (uint64_t i = 0; i < 10000; ++i) {
    JobSpec j;
    j.id = JobId(i + 1);
    j.queue = QueueId(static_cast<uint32_t>(rng() % 4));
    j.submit_ns = static_cast<int64_t>(rng() % 1'000'000'000'000ull);
    j.est_runtime_s = 60 + static_cast<double>(rng() % 36000);
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 3) {
      j.task = {.gpus = 1, .gpu_milli = 100 * (1 + static_cast<int>(rng() % 9)), .gpu_memory_bytes = 8ull << 30};
    } else if (kind < 8) {
      j.task = {.gpus = 1 << (rng() % 4)};
    } else {
      j.task = {.gpus = 8};
      j.num_tasks = 2 << (rng() % 4);
    }
    j.task.cpu_milli = 1000;
    j.task.memory_bytes = 8ull << 30;
    pending.push_back(j);
  }
  auto policy = *MakeDefaultPolicy({});
  UsageLedger ledger;
  ledger.Advance(s, 0);
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .usage = &ledger,
                     .now_ns = 2'000'000'000'000ll};
  size_t binds = 0;
  uint64_t hash = 0;
  for (auto _ : state) {
    StatusOr<Decisions> d = policy->Schedule(in);
    if (!d.ok()) {
      state.SkipWithError(d.status().ToString().c_str());
      return;
    }
    binds = d->binds.size();
    hash = HashDecisions(*d);
    benchmark::DoNotOptimize(d);
  }
  state.counters["binds"] = static_cast<double>(binds);
  // The decisions' fingerprint, cut to 6 digits so the console shows it exactly: a speed-up
  // must leave it unchanged (sched/decision_hash.h).
  state.counters["decisions_mod1e6"] = static_cast<double>(hash % 1'000'000);
}
BENCHMARK(BM_Cycle10kJobs10kNodes)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace gpool::sched

BENCHMARK_MAIN();
