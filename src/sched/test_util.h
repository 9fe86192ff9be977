// Helpers shared by the scheduler tests: small clusters and jobs built in a line.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "sched/cluster.h"
#include "sched/scheduler.h"
#include "sched/types.h"

namespace gpool::sched::testing {

struct ClusterShape {
  int nodes = 8;
  int gpus_per_node = 8;
  int nodes_per_leaf = 4;
  int leaves_per_pod = 2;
  std::vector<std::string> models = {"A100"};
  int64_t cpu_milli = 64000;
  uint64_t memory_bytes = 512ull << 30;
  uint64_t gpu_memory_bytes = 80ull << 30;
};

inline ClusterSpec MakeSpec(const ClusterShape& s) {
  ClusterSpec spec;
  spec.gpu_models = s.models;
  for (int i = 0; i < s.nodes; ++i) {
    spec.nodes.push_back({.name = "n" + std::to_string(i),
                          .gpus = s.gpus_per_node,
                          .gpu_model = s.gpus_per_node > 0 ? 0 : -1,
                          .gpu_memory_bytes = s.gpu_memory_bytes,
                          .cpu_milli = s.cpu_milli,
                          .memory_bytes = s.memory_bytes});
  }
  Status st = BuildUniformTopology(
      {.nodes_per_leaf = s.nodes_per_leaf, .leaves_per_pod = s.leaves_per_pod}, &spec);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return spec;
}

inline ClusterState MakeCluster(const ClusterShape& s) {
  StatusOr<ClusterState> c = ClusterState::Create(MakeSpec(s));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

inline JobSpec Job(uint64_t id, int32_t tasks, int32_t gpus, uint32_t queue = 0) {
  JobSpec j;
  j.id = JobId(id);
  j.name = "j" + std::to_string(id);
  j.queue = QueueId(queue);
  j.num_tasks = tasks;
  j.task.gpus = gpus;
  j.task.cpu_milli = 1000;
  j.task.memory_bytes = 1ull << 30;
  return j;
}

inline JobSpec Fractional(uint64_t id, int32_t milli, uint32_t queue = 0) {
  JobSpec j = Job(id, 1, 1, queue);
  j.task.gpu_milli = milli;
  j.task.gpu_memory_bytes = 1ull << 30;
  return j;
}

// The default policy with `c`; a bad config fails the test.
inline std::unique_ptr<Policy> MakePolicy(PolicyConfig c = {}) {
  StatusOr<std::unique_ptr<Policy>> p = MakeDefaultPolicy(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

inline int64_t Sec(double s) { return static_cast<int64_t>(s * 1e9); }

// Occupies `gpus` GPUs (the lowest ones) of node n with a one-task filler job `id`.
inline void Fill(ClusterState& s, uint32_t n, int gpus, uint64_t id) {
  JobSpec j = Job(id, 1, gpus);
  ASSERT_TRUE(s.Bind(j, {.tasks = {{.node = NodeId(n), .gpu_mask = (1u << gpus) - 1}}}, 0).ok());
}

}  // namespace gpool::sched::testing
