#include "sched/cluster.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::ClusterShape;
using testing::Job;
using testing::MakeCluster;
using testing::MakeSpec;

TEST(ClusterState, CreateRejectsNodeWithoutLeafNamingIt) {
  ClusterSpec spec = MakeSpec({.nodes = 2});
  spec.nodes[1].leaf = DomainId();
  StatusOr<ClusterState> s = ClusterState::Create(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("node 1 (n1): leaf"), std::string::npos) << s.status().ToString();
}

TEST(ClusterState, CreateRejectsTooManyGpusAndBadModel) {
  ClusterSpec spec = MakeSpec({.nodes = 2});
  spec.nodes[0].gpus = kMaxGpusPerNode + 1;
  StatusOr<ClusterState> s = ClusterState::Create(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gpus"), std::string::npos);
  spec = MakeSpec({.nodes = 2});
  spec.nodes[0].gpu_model = 3;
  s = ClusterState::Create(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("gpu_model"), std::string::npos);
}

TEST(ClusterState, CreateRejectsLeafUnderLeaf) {
  ClusterSpec spec = MakeSpec({.nodes = 4, .nodes_per_leaf = 2});
  spec.domains.back().parent = DomainId(static_cast<uint32_t>(spec.domains.size() - 2));
  StatusOr<ClusterState> s = ClusterState::Create(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("parent"), std::string::npos);
}

TEST(ClusterState, AggregatesFollowBindAndRelease) {
  ClusterState s = MakeCluster({.nodes = 4, .nodes_per_leaf = 2, .leaves_per_pod = 2});
  const DomainId fabric = s.domains_at(Level::kFabric)[0];
  const DomainId leaf0 = s.domains_at(Level::kLeaf)[0];
  EXPECT_EQ(s.aggregate(fabric, 0).nodes_by_free[8], 4);
  EXPECT_EQ(s.FreeWholeGpus(fabric, kAnyModel), 32);

  JobSpec j = Job(1, 1, 3);
  Placement p{.tasks = {{.node = NodeId(0), .gpu_mask = 0b111}}};
  ASSERT_TRUE(s.Bind(j, p, 5).ok());
  EXPECT_EQ(s.aggregate(leaf0, 0).nodes_by_free[8], 1);
  EXPECT_EQ(s.aggregate(leaf0, 0).nodes_by_free[5], 1);
  EXPECT_EQ(s.FreeWholeGpus(fabric, kAnyModel), 29);
  EXPECT_EQ(s.free_whole_mask(NodeId(0)), 0xF8u);
  EXPECT_EQ(s.idle_since_ns(NodeId(0)), -1);
  EXPECT_EQ(s.used_milli(), 3000);
  EXPECT_EQ(s.queue_used_milli(QueueId(0)), 3000);
  // Two tasks of 4 GPUs fit in leaf0 (node 1 twice), one more on node 0 is not possible.
  TaskRequest four{.gpus = 4};
  EXPECT_EQ(s.TaskCapacityBound(leaf0, four, kAnyModel), 3);

  ASSERT_TRUE(s.Release(JobId(1), 9).ok());
  EXPECT_EQ(s.aggregate(fabric, 0).nodes_by_free[8], 4);
  EXPECT_EQ(s.idle_since_ns(NodeId(0)), 9);
  EXPECT_EQ(s.used_milli(), 0);
  EXPECT_FALSE(s.Release(JobId(1), 9).ok());
}

// The per-queue sums and the shape histogram follow Bind and Release, and agree with a pass over
// the running jobs (which is what the policy did every cycle before they were kept).
TEST(ClusterState, QueueSumsAndShapesFollowBindAndRelease) {
  ClusterState s = MakeCluster({.nodes = 4});
  JobSpec a = Job(1, 2, 2, /*queue=*/0);
  JobSpec b = Job(2, 1, 2, /*queue=*/1);  // same task shape as a
  JobSpec c = Job(3, 1, 1, /*queue=*/1);
  c.task.gpu_milli = 500;
  c.task.gpu_memory_bytes = 1ull << 30;
  ASSERT_TRUE(s.Bind(a, {.tasks = {{.node = NodeId(0), .gpu_mask = 0b11}, {.node = NodeId(1), .gpu_mask = 0b11}}}, 0).ok());
  ASSERT_TRUE(s.Bind(b, {.tasks = {{.node = NodeId(2), .gpu_mask = 0b11}}}, 0).ok());
  ASSERT_TRUE(s.Bind(c, {.tasks = {{.node = NodeId(3), .gpu_mask = 0b1}}}, 0).ok());
  EXPECT_EQ(s.queue_used_cpu(QueueId(0)), 2000);
  EXPECT_EQ(s.queue_used_memory(QueueId(0)), 2ull << 30);
  EXPECT_EQ(s.queue_running_jobs(QueueId(0)), 1);
  EXPECT_EQ(s.queue_used_cpu(QueueId(1)), 2000);
  EXPECT_EQ(s.queue_running_jobs(QueueId(1)), 2);
  EXPECT_EQ(s.queue_running_jobs(QueueId(7)), 0);
  ASSERT_EQ(s.running_shapes().size(), 2u);
  const ShapeCount& whole = s.running_shapes()[1];  // gpus 2 sorts after gpus 1
  EXPECT_EQ(whole.shape, TaskShape::Of(a));
  EXPECT_EQ(whole.tasks, 3);
  EXPECT_EQ(s.running_shapes()[0].shape, TaskShape::Of(c));
  ASSERT_TRUE(s.Release(JobId(1), 1).ok());
  EXPECT_EQ(s.queue_used_cpu(QueueId(0)), 0);
  EXPECT_EQ(s.queue_running_jobs(QueueId(0)), 0);
  ASSERT_EQ(s.running_shapes().size(), 2u);
  EXPECT_EQ(s.running_shapes()[1].tasks, 1);
  ASSERT_TRUE(s.Release(JobId(2), 1).ok());
  ASSERT_EQ(s.running_shapes().size(), 1u) << "a shape with no task left is dropped";
  ClusterState copy = s;
  ASSERT_TRUE(copy.Release(JobId(3), 2).ok());
  EXPECT_TRUE(copy.running_shapes().empty());
  EXPECT_EQ(s.running_shapes().size(), 1u) << "copies keep their own";
}

TEST(ClusterState, BindIsAllOrNothing) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  JobSpec j = Job(7, 2, 8);
  // Second task names the same GPUs as the first: the bind fails and nothing stays taken.
  Placement p{.tasks = {{.node = NodeId(0), .gpu_mask = 0xFF}, {.node = NodeId(0), .gpu_mask = 0xFF}}};
  Status st = s.Bind(j, p, 0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("job 7"), std::string::npos);
  EXPECT_EQ(s.free_whole_gpus(NodeId(0)), 8);
  EXPECT_EQ(s.FindRunning(JobId(7)), nullptr);
  EXPECT_EQ(s.used_milli(), 0);
}

TEST(ClusterState, UnhealthyAndHeldNodesLeaveTheAggregates) {
  ClusterState s = MakeCluster({.nodes = 2, .nodes_per_leaf = 2});
  const DomainId leaf = s.domains_at(Level::kLeaf)[0];
  s.SetHealth(NodeId(0), Health::kUnhealthy);
  EXPECT_EQ(s.FreeWholeGpus(leaf, kAnyModel), 8);
  EXPECT_EQ(s.total_gpus(), 8);
  EXPECT_FALSE(s.CheckBinding({.node = NodeId(0), .gpu_mask = 1}, {.gpus = 1}).ok());
  s.SetHeld(NodeId(1), true);
  EXPECT_EQ(s.FreeWholeGpus(leaf, kAnyModel), 0);
  s.SetHeld(NodeId(1), false);
  s.SetHealth(NodeId(0), Health::kHealthy);
  EXPECT_EQ(s.FreeWholeGpus(leaf, kAnyModel), 16);
  s.SetPower(NodeId(1), PowerState::kOff);
  EXPECT_EQ(s.FreeWholeGpus(leaf, kAnyModel), 8);
  EXPECT_EQ(s.total_gpus(), 16);  // off but healthy still counts for fair share
}

TEST(ClusterState, FractionalBookkeeping) {
  ClusterState s = MakeCluster({.nodes = 1, .gpus_per_node = 2, .nodes_per_leaf = 1});
  JobSpec j = testing::Fractional(1, 300);
  ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(0), .gpu_mask = 0b10}}}, 0).ok());
  EXPECT_EQ(s.gpu_free_milli(NodeId(0), 1), 700);
  EXPECT_EQ(s.free_whole_gpus(NodeId(0)), 1);
  const DomainId leaf = s.domains_at(Level::kLeaf)[0];
  EXPECT_EQ(s.aggregate(leaf, 0).partial_gpus, 1);
  EXPECT_EQ(s.TaskCapacityBound(leaf, j.task, kAnyModel), (1000 + 700) / 300);
  EXPECT_EQ(s.TasksThatFit(NodeId(0), j.task, kAnyModel), 3 + 2);
}

TEST(ClusterState, DistanceByCommonDomain) {
  ClusterState s = MakeCluster({.nodes = 8, .nodes_per_leaf = 2, .leaves_per_pod = 2});
  Level l;
  ASSERT_TRUE(s.Distance(NodeId(0), NodeId(0), &l));
  EXPECT_EQ(l, Level::kNode);
  ASSERT_TRUE(s.Distance(NodeId(0), NodeId(1), &l));
  EXPECT_EQ(l, Level::kLeaf);
  ASSERT_TRUE(s.Distance(NodeId(0), NodeId(3), &l));
  EXPECT_EQ(l, Level::kPod);
  ASSERT_TRUE(s.Distance(NodeId(0), NodeId(7), &l));
  EXPECT_EQ(l, Level::kFabric);
}

TEST(Types, ParseGpuModelsNamesUnknownModel) {
  ClusterSpec spec = MakeSpec({.models = {"V100M16", "V100M32", "T4"}});
  StatusOr<ModelMask> m = ParseGpuModels(spec, "V100M16|V100M32");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, 0b011u);
  EXPECT_EQ(*ParseGpuModels(spec, "nan"), kAnyModel);
  StatusOr<ModelMask> bad = ParseGpuModels(spec, "V100M16|H100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("H100"), std::string::npos);
}

TEST(Types, ValidateJobNamesTheField) {
  ClusterSpec spec = MakeSpec({});
  JobSpec j = Job(3, 1, 1);
  EXPECT_TRUE(ValidateJob(j, spec, 1).ok());
  JobSpec bad = j;
  bad.task.gpu_milli = 1500;
  Status st = ValidateJob(bad, spec, 1);
  EXPECT_NE(st.message().find("task.gpu_milli"), std::string::npos) << st.ToString();
  bad = j;
  bad.num_tasks = 0;
  EXPECT_NE(ValidateJob(bad, spec, 1).message().find("num_tasks"), std::string::npos);
  bad = j;
  bad.queue = QueueId(4);
  EXPECT_NE(ValidateJob(bad, spec, 1).message().find("queue"), std::string::npos);
  bad = j;
  bad.task.gpus = 9;  // no node has 9 GPUs
  EXPECT_NE(ValidateJob(bad, spec, 1).message().find("task"), std::string::npos);
  bad = j;
  bad.min_runtime_s = -1;
  EXPECT_NE(ValidateJob(bad, spec, 1).message().find("min_runtime_s"), std::string::npos);
  QueueSpec q{.name = "a", .weight = 0};
  EXPECT_NE(ValidateQueue(q, spec).message().find("weight"), std::string::npos);
}

// Copies share the topology, the spec (until one changes a node) and the running-job records:
// a change to either side must never show through to the other.
TEST(ClusterState, CopiesAreIndependent) {
  ClusterState a = MakeCluster({.nodes = 4, .nodes_per_leaf = 2, .leaves_per_pod = 2});
  const DomainId fabric = a.domains_at(Level::kFabric)[0];
  ASSERT_TRUE(a.Bind(Job(1, 1, 4), {.tasks = {{.node = NodeId(0), .gpu_mask = 0xF}}}, 0).ok());
  ClusterState b = a;
  ASSERT_TRUE(b.Release(JobId(1), 1).ok());
  ASSERT_TRUE(b.Bind(Job(2, 1, 8), {.tasks = {{.node = NodeId(1), .gpu_mask = 0xFF}}}, 1).ok());
  b.SetPower(NodeId(3), PowerState::kOff);
  b.SetHealth(NodeId(2), Health::kUnhealthy);

  ASSERT_NE(a.FindRunning(JobId(1)), nullptr);
  EXPECT_EQ(a.FindRunning(JobId(2)), nullptr);
  EXPECT_EQ(a.running().size(), 1u);
  EXPECT_EQ(a.node(NodeId(3)).power, PowerState::kOn);
  EXPECT_EQ(a.node(NodeId(2)).health, Health::kHealthy);
  EXPECT_TRUE(a.schedulable(NodeId(3)));
  EXPECT_EQ(a.FreeWholeGpus(fabric, kAnyModel), 28);
  EXPECT_EQ(a.total_gpus(), 32);

  EXPECT_EQ(b.FindRunning(JobId(1)), nullptr);
  ASSERT_NE(b.FindRunning(JobId(2)), nullptr);
  EXPECT_EQ(b.node(NodeId(3)).power, PowerState::kOff);
  EXPECT_EQ(b.node(NodeId(2)).health, Health::kUnhealthy);
  EXPECT_EQ(b.FreeWholeGpus(fabric, kAnyModel), 8);  // node 0 free again; 1 full; 2, 3 out
  EXPECT_EQ(b.total_gpus(), 24);
  // The original can still change on its own after the copy went its way.
  a.SetPower(NodeId(0), PowerState::kOff);
  EXPECT_EQ(b.node(NodeId(0)).power, PowerState::kOn);
}

// The running-job index (open addressing with backward-shift deletion) under many binds and
// releases in a scrambled order, with sparse ids that collide in the low bits.
TEST(ClusterState, RunningIndexFindsEveryJobThroughChurn) {
  ClusterState s = MakeCluster({.nodes = 64, .nodes_per_leaf = 8, .leaves_per_pod = 8});
  auto id_of = [](uint64_t k) { return (k << 20) | (k * 7919 % 13); };
  std::vector<bool> live(512, false);
  uint64_t x = 12345;
  for (int step = 0; step < 4000; ++step) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t k = (x >> 33) % 512;
    const JobId id(id_of(k));
    if (live[k]) {
      ASSERT_TRUE(s.Release(id, step).ok()) << "job " << k;
      live[k] = false;
    } else {
      JobSpec j = Job(id.value(), 1, 0);
      j.task.cpu_milli = 1;
      j.task.memory_bytes = 0;
      ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(static_cast<uint32_t>(k % 64))}}}, step).ok()) << "job " << k;
      live[k] = true;
    }
    if (step % 97 == 0) {
      size_t n = 0;
      for (uint64_t q = 0; q < 512; ++q) {
        const RunningJob* r = s.FindRunning(JobId(id_of(q)));
        ASSERT_EQ(r != nullptr, static_cast<bool>(live[q])) << "job " << q << " at step " << step;
        if (r != nullptr) {
          EXPECT_EQ(r->spec.id, JobId(id_of(q)));
          ++n;
        }
      }
      EXPECT_EQ(s.running().size(), n);
    }
  }
}

}  // namespace
}  // namespace gpool::sched
