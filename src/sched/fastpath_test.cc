// The pruned scans of placement and preemption take exactly the decisions of the plain ones
// (PlacementOptions::reference_scan), on varied random states: several fabrics, mixed GPU models
// and node sizes, degraded and unhealthy domains, fragmented by whole-GPU, fractional and gang
// jobs of several queues and priorities; jobs of every shape and locality, with excluded nodes,
// preferred domains and FGD packing; preemption with priority and reclaim, reusing one scratch
// copy across calls as the scheduler does.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sched/fragmentation.h"
#include "sched/placement.h"
#include "sched/preemption.h"

namespace gpool::sched {
namespace {

// fabrics x pods x leaves x nodes; models and node sizes vary by node, a few leaves and pods run
// degraded and a few nodes are unhealthy.
ClusterState RandomCluster(std::mt19937_64& rng, int fabrics, int pods, int leaves, int nodes) {
  ClusterSpec spec;
  spec.gpu_models = {"A100", "H100"};
  for (int f = 0; f < fabrics; ++f) {
    const DomainId fid(static_cast<uint32_t>(spec.domains.size()));
    spec.domains.push_back({.name = "f" + std::to_string(f), .level = Level::kFabric});
    for (int p = 0; p < pods; ++p) {
      const DomainId pid(static_cast<uint32_t>(spec.domains.size()));
      const bool pod_degraded = rng() % 6 == 0;
      spec.domains.push_back({.name = "p", .level = Level::kPod, .parent = fid,
                              .bandwidth_gbps = pod_degraded ? 200.0 : 400.0, .nominal_bandwidth_gbps = 400});
      for (int l = 0; l < leaves; ++l) {
        const DomainId lid(static_cast<uint32_t>(spec.domains.size()));
        const bool leaf_degraded = rng() % 8 == 0;
        spec.domains.push_back({.name = "l", .level = Level::kLeaf, .parent = pid,
                                .bandwidth_gbps = leaf_degraded ? 100.0 : 200.0, .nominal_bandwidth_gbps = 200});
        for (int n = 0; n < nodes; ++n) {
          const int gpus = rng() % 5 == 0 ? 4 : 8;
          spec.nodes.push_back({.name = "n" + std::to_string(spec.nodes.size()),
                                .leaf = lid,
                                .gpus = gpus,
                                .gpu_model = static_cast<int32_t>(rng() % 3 == 0 ? 1 : 0),
                                .gpu_memory_bytes = 80ull << 30,
                                .cpu_milli = 64000,
                                .memory_bytes = 512ull << 30,
                                .health = rng() % 25 == 0 ? Health::kUnhealthy : Health::kHealthy});
        }
      }
    }
  }
  StatusOr<ClusterState> s = ClusterState::Create(std::move(spec));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

JobSpec RandomJob(std::mt19937_64& rng, uint64_t id, int queues) {
  JobSpec j;
  j.id = JobId(id);
  j.name = "j" + std::to_string(id);
  j.queue = QueueId(static_cast<uint32_t>(rng() % queues));
  j.priority = static_cast<int32_t>(rng() % 3);
  const int kind = static_cast<int>(rng() % 10);
  if (kind < 3) {
    j.task = {.gpus = 1, .gpu_milli = 100 * (1 + static_cast<int32_t>(rng() % 9)), .gpu_memory_bytes = 4ull << 30};
    if (rng() % 3 == 0) j.num_tasks = 1 + static_cast<int32_t>(rng() % 6);
  } else if (kind < 7) {
    j.task = {.gpus = 1 << (rng() % 4)};
    j.num_tasks = 1 + static_cast<int32_t>(rng() % 3);
  } else if (kind < 9) {
    j.task = {.gpus = rng() % 2 == 0 ? 8 : 4};
    j.num_tasks = 2 + static_cast<int32_t>(rng() % 20);
  } else {
    j.task = {.gpus = 0};
    j.num_tasks = 1 + static_cast<int32_t>(rng() % 8);
  }
  j.task.cpu_milli = 1000 * (1 + static_cast<int64_t>(rng() % 8));
  j.task.memory_bytes = (4ull << 30) * (1 + rng() % 8);
  if (rng() % 4 == 0) j.gpu_models = ModelMask{1} << (rng() % 2);
  const int loc = static_cast<int>(rng() % 8);
  if (loc < 4) {
    j.locality = {.level = static_cast<Level>(rng() % 4), .required = rng() % 2 == 0};
  }
  j.allow_split = rng() % 4 == 0;
  j.est_runtime_s = 60 + static_cast<double>(rng() % 7200);
  j.min_runtime_s = rng() % 5 == 0 ? 1e6 : 0;
  return j;
}

// Binds random jobs first-fit until `fill` of the GPUs is in use, at random start times.
void Fill(std::mt19937_64& rng, ClusterState* s, double fill, int queues, uint64_t* next_id) {
  int64_t total = 0;
  for (size_t n = 0; n < s->num_nodes(); ++n) total += s->node(NodeId(static_cast<uint32_t>(n))).gpus;
  for (int tries = 0; tries < 20000 && s->used_milli() < static_cast<int64_t>(fill * 1000 * total); ++tries) {
    JobSpec j = RandomJob(rng, (*next_id)++, queues);
    j.locality = {};
    const int64_t start = static_cast<int64_t>(rng() % 3'600'000'000'000ull);
    std::optional<Placement> p = rng() % 2 == 0 ? PlaceFirstFit(*s, j, {}) : PlaceGang(*s, j, {});
    if (p) {
      ASSERT_TRUE(s->Bind(j, *p, start).ok());
    }
  }
}

void ExpectSame(const std::optional<Placement>& a, const std::optional<Placement>& b, const std::string& what) {
  ASSERT_EQ(a.has_value(), b.has_value()) << what;
  if (!a) return;
  ASSERT_EQ(a->tasks.size(), b->tasks.size()) << what;
  for (size_t i = 0; i < a->tasks.size(); ++i) {
    EXPECT_EQ(a->tasks[i].node, b->tasks[i].node) << what << " task " << i;
    EXPECT_EQ(a->tasks[i].gpu_mask, b->tasks[i].gpu_mask) << what << " task " << i;
    EXPECT_EQ(a->tasks[i].gpu_milli, b->tasks[i].gpu_milli) << what << " task " << i;
    EXPECT_EQ(a->tasks[i].gpu_memory_bytes, b->tasks[i].gpu_memory_bytes) << what << " task " << i;
  }
}

TEST(FastPathTest, PlaceGangDecidesAsTheReferenceScan) {
  int placed = 0, failed = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 rng(seed);
    ClusterState s = RandomCluster(rng, 1 + static_cast<int>(seed % 3), 2 + static_cast<int>(seed % 3), 4, 4);
    uint64_t next_id = 1;
    Fill(rng, &s, 0.3 + 0.05 * static_cast<double>(seed % 10), 3, &next_id);
    std::vector<JobSpec> mix;
    for (int i = 0; i < 40; ++i) mix.push_back(RandomJob(rng, 100000 + i, 3));
    const WorkloadDistribution workload = WorkloadDistribution::FromJobs(mix);
    std::vector<uint8_t> excluded(s.num_nodes(), 0);
    for (auto& e : excluded) e = rng() % 10 == 0 ? 1 : 0;
    std::vector<DomainId> preferred{s.domains_at(Level::kPod)[rng() % s.domains_at(Level::kPod).size()],
                                    s.domains_at(Level::kLeaf)[rng() % s.domains_at(Level::kLeaf).size()]};
    for (int i = 0; i < 300; ++i) {
      const JobSpec j = RandomJob(rng, 200000 + i, 3);
      PlacementOptions fast;
      if (rng() % 2 == 0) fast.workload = &workload;
      if (rng() % 3 == 0) fast.excluded_nodes = &excluded;
      if (rng() % 4 == 0) fast.preferred_domains = &preferred;
      PlacementOptions ref = fast;
      ref.reference_scan = true;
      const std::optional<Placement> a = PlaceGang(s, j, fast);
      const std::optional<Placement> b = PlaceGang(s, j, ref);
      ExpectSame(a, b, "seed " + std::to_string(seed) + " job " + std::to_string(i));
      (a ? placed : failed) += 1;
      // Bind some of them, so that later jobs see a state this cycle changed.
      if (a && rng() % 2 == 0) {
        ASSERT_TRUE(s.Bind(j, *a, 0).ok());
      }
    }
  }
  // The mix must exercise both outcomes, or the comparison proves little.
  EXPECT_GT(placed, 1000);
  EXPECT_GT(failed, 300);
}

TEST(FastPathTest, PlanPreemptionDecidesAsTheReferenceScan) {
  int plans = 0, none = 0, reclaims = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    ClusterState s = RandomCluster(rng, 1 + static_cast<int>(seed % 2), 2, 4, 4);
    uint64_t next_id = 1;
    Fill(rng, &s, 0.95, 3, &next_id);
    // Queue 0 has little quota and runs over it (reclaim), the others are within theirs.
    std::vector<QueueSpec> queues{{.name = "q0", .tenant = "t", .guaranteed_gpus = 8},
                                  {.name = "q1", .tenant = "t", .guaranteed_gpus = 2000},
                                  {.name = "q2", .tenant = "t", .guaranteed_gpus = 2000}};
    const int64_t now = 4'000'000'000'000;
    std::optional<ClusterState> scratch;  // shared by every fast call, as the scheduler does
    for (int i = 0; i < 60; ++i) {
      const JobSpec j = RandomJob(rng, 300000 + i, 3);
      PreemptionOptions fast{.max_victims = 1 + static_cast<int>(rng() % 16), .scratch = &scratch};
      fast.priority = rng() % 4 != 0;
      fast.reclaim = rng() % 4 != 0;
      PreemptionOptions ref = fast;
      ref.scratch = nullptr;
      ref.placement.reference_scan = true;
      const std::optional<PreemptionPlan> a = PlanPreemption(s, j, queues, now, fast);
      const std::optional<PreemptionPlan> b = PlanPreemption(s, j, queues, now, ref);
      const std::string what = "seed " + std::to_string(seed) + " job " + std::to_string(i);
      ASSERT_EQ(a.has_value(), b.has_value()) << what;
      if (!a) {
        ++none;
        continue;
      }
      ++plans;
      EXPECT_EQ(a->victims, b->victims) << what;
      EXPECT_EQ(a->reasons, b->reasons) << what;
      for (PreemptReason r : a->reasons) reclaims += r == PreemptReason::kReclaim ? 1 : 0;
      ExpectSame(a->placement, b->placement, what);
      // Apply some plans so that the next calls see a changed state and a stale scratch.
      if (rng() % 2 == 0) {
        for (JobId v : a->victims) ASSERT_TRUE(s.Release(v, now).ok());
        ASSERT_TRUE(s.Bind(j, a->placement, now).ok());
      }
    }
  }
  EXPECT_GT(plans, 100);
  EXPECT_GT(none, 20);
  EXPECT_GT(reclaims, 5);
}

}  // namespace
}  // namespace gpool::sched
