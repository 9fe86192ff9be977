#include "sched/remote_placement.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "sched/placement.h"
#include "sched/test_util.h"

namespace gpool::sched {
namespace {

using testing::ClusterShape;
using testing::Fill;
using testing::Job;
using testing::MakeSpec;
using testing::Sec;

// n0..n7, 8 GPUs each, 4 nodes per leaf, 2 leaves per pod; every GPU node serves its GPUs.
// `cpu_only` more nodes without GPUs are appended (in a leaf of their own, same pod).
ClusterState PoolCluster(int cpu_only = 0, bool serve = true, ClusterShape shape = {}) {
  shape.nodes += cpu_only;
  ClusterSpec spec = MakeSpec(shape);
  for (size_t i = 0; i < spec.nodes.size(); ++i) {
    if (static_cast<int>(i) >= shape.nodes - cpu_only) {
      spec.nodes[i].gpus = 0;
      spec.nodes[i].gpu_model = -1;
      spec.nodes[i].gpu_memory_bytes = 0;
    } else {
      spec.nodes[i].serves_gpus = serve;
    }
  }
  StatusOr<ClusterState> s = ClusterState::Create(std::move(spec));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

JobSpec RemoteJob(uint64_t id, int tasks, int gpus, GpuSource src = GpuSource::kRemote) {
  JobSpec j = Job(id, tasks, gpus);
  j.remote.source = src;
  return j;
}

// Uses the whole CPU of node n (so its free GPUs are stranded for local placement).
void TakeCpu(ClusterState& s, uint32_t n, uint64_t id) {
  JobSpec j = Job(id, 1, 0);
  j.task.cpu_milli = s.free_cpu(NodeId(n));
  j.task.memory_bytes = 0;
  ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n)}}}, 0).ok());
}

TEST(RemotePlacement, ACpuOnlyHostRunsTheTaskOnGpusOfItsLeaf) {
  // 8 GPU nodes in leaves 0,1; two CPU-only nodes in leaf 2.
  ClusterState s = PoolCluster(/*cpu_only=*/2);
  JobSpec j = RemoteJob(1, 1, 4);
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  const TaskBinding& b = p->tasks[0];
  EXPECT_TRUE(b.via_server);
  EXPECT_EQ(b.gpu_count(), 4);
  ASSERT_TRUE(s.CheckBinding(b, j.task).ok()) << s.CheckBinding(b, j.task).ToString();
  ASSERT_TRUE(s.Bind(j, *p, 0).ok());
  // The lent GPUs are allocated on their own nodes.
  int64_t whole = 0;
  for (uint32_t n = 0; n < 8; ++n) whole += s.free_whole_gpus(NodeId(n));
  EXPECT_EQ(whole, 64 - 4);
  EXPECT_GT(b.slowdown, 1.0);
}

TEST(RemotePlacement, StrandedGpusAreLentBeforeOthers) {
  // Node 1 has no CPU left: its 8 GPUs cannot serve a local task. A pooled task that doesn't
  // fit locally anywhere else takes them.
  ClusterState s = PoolCluster();
  for (uint32_t n = 0; n < 8; ++n) {
    if (n != 1) Fill(s, n, 8, 100 + n);
  }
  TakeCpu(s, 1, 200);
  JobSpec local = Job(1, 1, 2);
  EXPECT_FALSE(PlaceGang(s, local, {}).has_value());
  // The other nodes' GPUs are busy but their CPU is not: one of them hosts the task, with
  // node 1's GPUs.
  JobSpec pooled = RemoteJob(2, 1, 2, GpuSource::kPooled);
  std::optional<Placement> p = PlaceGang(s, pooled, {});
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->tasks[0].remote.size(), 1u);
  EXPECT_EQ(p->tasks[0].remote[0].node, NodeId(1));
  EXPECT_EQ(std::popcount(p->tasks[0].remote[0].gpu_mask), 2);
}

TEST(RemotePlacement, PooledStaysLocalWhenItFits) {
  ClusterState s = PoolCluster(2);
  JobSpec j = RemoteJob(1, 2, 4, GpuSource::kPooled);
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  for (const TaskBinding& b : p->tasks) {
    EXPECT_FALSE(b.via_server);
    EXPECT_TRUE(b.remote.empty());
    EXPECT_EQ(std::popcount(b.gpu_mask), 4);
  }
}

TEST(RemotePlacement, LocalJobsNeverGetRemoteGpus) {
  ClusterState s = PoolCluster(2);
  for (uint32_t n = 0; n < 8; ++n) Fill(s, n, 6, 100 + n);
  // 16 GPUs free in total, 2 per node: a local 4-GPU task fits nowhere.
  EXPECT_FALSE(PlaceGang(s, Job(1, 1, 4), {}).has_value());
  std::optional<Placement> p = PlaceGang(s, RemoteJob(2, 1, 4, GpuSource::kPooled), {});
  ASSERT_TRUE(p.has_value());  // aggregation: GPUs of two nodes
  EXPECT_EQ(p->tasks[0].gpu_count(), 4);
}

TEST(RemotePlacement, AggregatesGpusOfSeveralNodesInOneTask) {
  ClusterState s = PoolCluster(1);
  for (uint32_t n = 0; n < 8; ++n) Fill(s, n, 5, 100 + n);
  JobSpec j = RemoteJob(1, 1, 8);
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  const TaskBinding& b = p->tasks[0];
  EXPECT_EQ(b.gpu_count(), 8);
  EXPECT_GE(b.remote.size() + (b.gpu_mask ? 1 : 0), 3u);  // 3 free per node
  ASSERT_TRUE(s.Bind(j, *p, 0).ok());
}

TEST(RemotePlacement, NodesWithoutAGpuServerLendNothing) {
  ClusterState s = PoolCluster(2, /*serve=*/false);
  EXPECT_FALSE(PlaceGang(s, RemoteJob(1, 1, 1), {}).has_value());
  // Pooled still places locally.
  EXPECT_TRUE(PlaceGang(s, RemoteJob(2, 1, 1, GpuSource::kPooled), {}).has_value());
}

TEST(RemotePlacement, WithinLimitsHowFarTheGpusMayBe) {
  // Leaf 0: n0-n3 (GPUs), leaf 1: n4-n7 (GPUs), leaf 2 (pod 1): n8 CPU-only.
  ClusterState s = PoolCluster(1);
  JobSpec j = RemoteJob(1, 1, 1);
  j.remote.within = Level::kLeaf;
  // Take every GPU node's CPU: only n8 can host, and its leaf has no GPU.
  for (uint32_t n = 0; n < 8; ++n) TakeCpu(s, n, 100 + n);
  EXPECT_FALSE(PlaceGang(s, j, {}).has_value());
  j.remote.within = Level::kPod;
  EXPECT_FALSE(PlaceGang(s, j, {}).has_value()) << "n8 is in pod 1, the GPUs in pod 0";
  j.remote.within = Level::kFabric;
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].node, NodeId(8));
}

TEST(RemotePlacement, GpusOfTheHostsLeafComeFirst) {
  ClusterState s = PoolCluster(0);
  // Hosts: only n5 (leaf 1) has CPU.
  for (uint32_t n = 0; n < 8; ++n) {
    if (n != 5) TakeCpu(s, n, 100 + n);
  }
  Fill(s, 5, 8, 200);
  JobSpec j = RemoteJob(1, 1, 2);
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].node, NodeId(5));
  ASSERT_EQ(p->tasks[0].remote.size(), 1u);
  Level l;
  ASSERT_TRUE(s.Distance(NodeId(5), p->tasks[0].remote[0].node, &l));
  EXPECT_EQ(l, Level::kLeaf);
}

TEST(RemotePlacement, MaxSlowdownExcludesGpusBehindANarrowUplink) {
  ClusterShape shape;
  ClusterSpec spec = MakeSpec(shape);
  // Leaf uplinks: 4 nodes share 400 Gb/s (100 per node), a 4:1 oversubscription.
  for (DomainSpec& d : spec.domains) {
    if (d.level == Level::kLeaf) d.bandwidth_gbps = d.nominal_bandwidth_gbps = 400;
  }
  for (NodeSpec& n : spec.nodes) n.serves_gpus = true;
  ClusterState s = *ClusterState::Create(std::move(spec));
  const RemoteCostModel m;
  const double same_leaf = EstimateSlowdown(s, NodeId(0), NodeId(1), m);
  const double other_leaf = EstimateSlowdown(s, NodeId(0), NodeId(4), m);
  EXPECT_LT(same_leaf, other_leaf);
  EXPECT_DOUBLE_EQ(EstimateSlowdown(s, NodeId(0), NodeId(0), m), 1 + m.call_overhead);
  // Same leaf: 1 + 0.02 + 0.05 * (512 / (0.95 * 400) - 1).
  EXPECT_NEAR(same_leaf, 1 + 0.02 + 0.05 * (512 / 380.0 - 1), 1e-12);
  EXPECT_NEAR(other_leaf, 1 + 0.02 + 0.05 * (512 / 95.0 - 1), 1e-12);

  // Host n0 (its leaf's GPUs all taken), free GPUs only in leaf 1.
  for (uint32_t n = 0; n < 4; ++n) Fill(s, n, 8, 100 + n);
  for (uint32_t n = 4; n < 8; ++n) TakeCpu(s, n, 200 + n);
  JobSpec j = RemoteJob(1, 1, 1);
  j.remote.max_slowdown = (same_leaf + other_leaf) / 2;
  EXPECT_FALSE(PlaceGang(s, j, {}).has_value());
  j.remote.max_slowdown = other_leaf;
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->tasks[0].slowdown, other_leaf);
}

TEST(RemotePlacement, FractionsGoOnTheFullestGpuThatHoldsThem) {
  ClusterState s = PoolCluster(1);
  for (uint32_t n = 0; n < 8; ++n) TakeCpu(s, n, 100 + n);
  JobSpec a = RemoteJob(1, 1, 1);
  a.task.gpu_milli = 700;
  a.task.gpu_memory_bytes = 1ull << 30;
  std::optional<Placement> pa = PlaceGang(s, a, {});
  ASSERT_TRUE(pa.has_value());
  ASSERT_TRUE(s.Bind(a, *pa, 0).ok());
  JobSpec b = a;
  b.id = JobId(2);
  b.task.gpu_milli = 300;
  std::optional<Placement> pb = PlaceGang(s, b, {});
  ASSERT_TRUE(pb.has_value());
  ASSERT_EQ(pb->tasks[0].remote.size(), 1u);
  ASSERT_EQ(pa->tasks[0].remote.size(), 1u);
  EXPECT_EQ(pb->tasks[0].remote[0], pa->tasks[0].remote[0]) << "the 300 milli fills a's GPU";
}

TEST(RemotePlacement, GangTasksDoNotShareAGpuAndRespectRequiredLocality) {
  ClusterState s = PoolCluster(4);  // n8-n11 CPU-only, one leaf
  JobSpec j = RemoteJob(1, 4, 4);
  j.locality = {.level = Level::kLeaf, .required = true};
  std::optional<Placement> p = PlaceGang(s, j, {});
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(s.Bind(j, *p, 0).ok()) << "overlapping GPUs would fail the bind";
  const DomainId leaf = s.ancestor(p->tasks[0].node, Level::kLeaf);
  for (const TaskBinding& b : p->tasks) EXPECT_EQ(s.ancestor(b.node, Level::kLeaf), leaf);
}

TEST(RemotePlacement, IsDeterministic) {
  ClusterState s = PoolCluster(3);
  for (uint32_t n = 0; n < 8; ++n) Fill(s, n, n % 8, 100 + n);
  JobSpec j = RemoteJob(1, 3, 3, GpuSource::kPooled);
  std::optional<Placement> a = PlaceGang(s, j, {});
  std::optional<Placement> b = PlaceGang(s, j, {});
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(a->tasks.size(), b->tasks.size());
  for (size_t i = 0; i < a->tasks.size(); ++i) {
    EXPECT_EQ(a->tasks[i].node, b->tasks[i].node);
    EXPECT_EQ(a->tasks[i].gpu_mask, b->tasks[i].gpu_mask);
    EXPECT_EQ(a->tasks[i].remote, b->tasks[i].remote);
  }
}

TEST(RemotePlacement, CheckBindingRefusesWhatTheRuleNeverProduces) {
  ClusterState s = PoolCluster(1, /*serve=*/true);
  JobSpec j = RemoteJob(1, 1, 2);
  TaskBinding b{.node = NodeId(8), .via_server = true};
  b.remote = {{NodeId(0), 0b1}, {NodeId(0), 0b10}};
  EXPECT_FALSE(s.CheckBinding(b, j.task).ok()) << "one node twice";
  b.remote = {{NodeId(8), 0b11}};
  EXPECT_FALSE(s.CheckBinding(b, j.task).ok()) << "its own node as remote";
  b.remote = {{NodeId(0), 0b11}};
  b.via_server = false;
  EXPECT_FALSE(s.CheckBinding(b, j.task).ok()) << "remote GPUs without via_server";
  b.via_server = true;
  EXPECT_TRUE(s.CheckBinding(b, j.task).ok());
  b.remote = {{NodeId(0), 0b111}};
  EXPECT_FALSE(s.CheckBinding(b, j.task).ok()) << "3 GPUs for a 2-GPU task";
}

TEST(RemoteCost, ValidateNamesTheField) {
  RemoteCostModel m;
  EXPECT_TRUE(ValidateRemoteCostModel(m).ok());
  m.transfer_share = 2;
  Status st = ValidateRemoteCostModel(m);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("remote.transfer_share"), std::string::npos) << st.ToString();
  StatusOr<PolicyConfig> c = ParsePolicyConfig("remote.copy_efficiency=1.5");
  EXPECT_FALSE(c.ok());
  c = ParsePolicyConfig("remote.call_overhead=0.1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->remote_cost.call_overhead, 0.1);
}

TEST(RemoteJobs, ValidateJobAcceptsAggregationBeyondOneNode) {
  ClusterSpec spec = PoolCluster(1).spec();
  JobSpec j = RemoteJob(1, 1, 12);
  j.task.gpus = 12;
  // 12 GPUs > 8 per node: only with remote attachment.
  EXPECT_TRUE(ValidateJob(j, spec, 1).ok()) << ValidateJob(j, spec, 1).ToString();
  j.remote.source = GpuSource::kLocal;
  EXPECT_FALSE(ValidateJob(j, spec, 1).ok());
  j.remote.source = GpuSource::kRemote;
  j.remote.max_slowdown = 0.5;
  EXPECT_FALSE(ValidateJob(j, spec, 1).ok());
  for (NodeSpec& n : spec.nodes) n.serves_gpus = false;
  j.remote.max_slowdown = 0;
  EXPECT_FALSE(ValidateJob(j, spec, 1).ok()) << "no node lends GPUs";
}

// ---- The policy over remote placements: quotas, preemption, reclaim, power ----

Decisions Decide(const ClusterState& s, const std::vector<JobSpec>& pending,
                 const std::vector<QueueSpec>& queues, int64_t now, PolicyConfig c = {}) {
  SchedulingInput in{.state = &s, .pending = &pending, .queues = &queues, .now_ns = now};
  StatusOr<Decisions> d = testing::MakePolicy(c)->Schedule(in);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(d).value() : Decisions{};
}

// Every GPU node's CPU taken by a CPU-only job of queue q (ids 100..), so that only the CPU-only
// nodes can host; the GPUs stay free.
void StrandAllGpus(ClusterState& s, uint32_t q = 0) {
  for (uint32_t n = 0; n < 8; ++n) {
    JobSpec j = Job(100 + n, 1, 0, q);
    j.task.cpu_milli = s.free_cpu(NodeId(n));
    j.task.memory_bytes = 0;
    ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n)}}}, 0).ok());
  }
}

TEST(RemotePolicy, LentGpusCountAgainstTheQueueAndItsCap) {
  ClusterState s = PoolCluster(2);
  StrandAllGpus(s);
  std::vector<QueueSpec> queues = {{.name = "a", .tenant = "a", .max_gpus = 6}};
  std::vector<JobSpec> pending = {RemoteJob(1, 1, 4, GpuSource::kPooled),
                                  RemoteJob(2, 1, 4, GpuSource::kPooled)};
  pending[1].submit_ns = 1;
  Decisions d = Decide(s, pending, queues, Sec(10));
  ASSERT_EQ(d.binds.size(), 1u) << "the cap of 6 GPUs admits one 4-GPU job";
  EXPECT_EQ(d.binds[0].job, JobId(1));
  EXPECT_EQ(d.binds[0].placement.tasks[0].gpu_count(), 4);
  EXPECT_GE(d.binds[0].placement.tasks[0].node, NodeId(8)) << "only the CPU-only nodes host";
  ASSERT_TRUE(s.Bind(pending[0], d.binds[0].placement, Sec(10)).ok());
  EXPECT_EQ(s.queue_used_milli(QueueId(0)), 4000);
}

TEST(RemotePolicy, PriorityPreemptsForARemoteJob) {
  ClusterState s = PoolCluster(1);
  // Low-priority remote jobs on n8 use every GPU (8 jobs x 8 GPUs from the 8 servers).
  std::vector<QueueSpec> queues = {{.name = "a", .tenant = "a"}};
  StrandAllGpus(s);
  for (uint64_t i = 0; i < 8; ++i) {
    JobSpec low = RemoteJob(10 + i, 1, 8);
    std::optional<Placement> p = PlaceGang(s, low, {});
    ASSERT_TRUE(p.has_value()) << i;
    ASSERT_TRUE(s.Bind(low, *p, 0).ok());
  }
  JobSpec high = RemoteJob(1, 1, 8);
  high.priority = 10;
  high.submit_ns = Sec(100);
  Decisions d = Decide(s, {high}, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_GE(d.preemptions[0].victim, JobId(10));
  ASSERT_EQ(d.binds.size(), 1u);
  EXPECT_EQ(d.binds[0].job, JobId(1));
}

TEST(RemotePolicy, AnOwnerReclaimsGpusLentToABorrowersRemoteTasks) {
  ClusterState s = PoolCluster(1);
  // a is guaranteed 16 GPUs; b borrows all 64 through remote tasks hosted on n8.
  std::vector<QueueSpec> queues = {{.name = "a", .tenant = "a", .guaranteed_gpus = 16},
                                   {.name = "b", .tenant = "b"}};
  StrandAllGpus(s, 1);
  for (uint64_t i = 0; i < 8; ++i) {
    JobSpec borrow = RemoteJob(10 + i, 1, 8);
    borrow.queue = QueueId(1);
    std::optional<Placement> p = PlaceGang(s, borrow, {});
    ASSERT_TRUE(p.has_value()) << i;
    ASSERT_TRUE(s.Bind(borrow, *p, 0).ok());
  }
  JobSpec own = RemoteJob(1, 1, 8);
  own.submit_ns = Sec(100);
  Decisions d = Decide(s, {own}, queues, Sec(100));
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].reason, "reclaim");
  ASSERT_EQ(d.binds.size(), 1u);
}

TEST(RemotePolicy, ANodeLendingGpusIsNotIdle) {
  ClusterState s = PoolCluster(1);
  StrandAllGpus(s);
  // Free n3's CPU job: n3 idles. A remote task then borrows its GPUs.
  ASSERT_TRUE(s.Release(JobId(103), Sec(1)).ok());
  EXPECT_TRUE(s.idle(NodeId(3)));
  JobSpec j = RemoteJob(1, 1, 8);
  TaskBinding b{.node = NodeId(8), .via_server = true};
  b.remote = {{NodeId(3), 0xFF}};
  ASSERT_TRUE(s.Bind(j, {.tasks = {b}}, Sec(2)).ok());
  EXPECT_FALSE(s.idle(NodeId(3)));
  ASSERT_TRUE(s.Release(JobId(1), Sec(3)).ok());
  EXPECT_TRUE(s.idle(NodeId(3)));
  EXPECT_EQ(s.free_whole_gpus(NodeId(3)), 8);
}

TEST(RemotePolicy, SameInputSameDecisions) {
  auto run = [] {
    ClusterState s = PoolCluster(3);
    for (uint32_t n = 0; n < 8; ++n) Fill(s, n, n % 5 + 3, 100 + n);
    std::vector<QueueSpec> queues = {{.name = "a"}};
    std::vector<JobSpec> pending;
    for (uint64_t i = 0; i < 12; ++i) {
      JobSpec j = RemoteJob(1 + i, 1 + static_cast<int>(i % 2), 1 + static_cast<int>(i % 4),
                            i % 3 == 0 ? GpuSource::kRemote : GpuSource::kPooled);
      j.submit_ns = static_cast<int64_t>(i);
      pending.push_back(j);
    }
    return Decide(s, pending, queues, Sec(5));
  };
  Decisions a = run();
  Decisions b = run();
  ASSERT_EQ(a.binds.size(), b.binds.size());
  ASSERT_GT(a.binds.size(), 0u);
  for (size_t i = 0; i < a.binds.size(); ++i) {
    EXPECT_EQ(a.binds[i].job, b.binds[i].job);
    ASSERT_EQ(a.binds[i].placement.tasks.size(), b.binds[i].placement.tasks.size());
    for (size_t t = 0; t < a.binds[i].placement.tasks.size(); ++t) {
      EXPECT_EQ(a.binds[i].placement.tasks[t].node, b.binds[i].placement.tasks[t].node);
      EXPECT_EQ(a.binds[i].placement.tasks[t].remote, b.binds[i].placement.tasks[t].remote);
    }
  }
}

}  // namespace
}  // namespace gpool::sched
