// Small clusters shared by the simulator's tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sim/baselines.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/job.h"

namespace gpool::sim::test {

// One leaf of `hosts` hosts with 8 A100s each and uplinks that never bottleneck.
inline SimCluster OneLeaf(int hosts) {
  SimCluster c;
  c.pod_names = {"p0"};
  c.leaf_names = {"l0"};
  for (int h = 0; h < hosts; ++h) {
    c.hosts.push_back({.name = "h" + std::to_string(h), .gpus = 8, .cpu_milli = 64000,
                       .mem_mib = 512 * 1024, .model = "A100", .leaf = 0, .pod = 0,
                       .nic_gbps = 1600});
  }
  c.leaf_uplink_gbps = {1600.0 * hosts};
  c.pod_uplink_gbps = {1600.0 * hosts};
  return c;
}

// A job of `gpus` GPUs submitted at `submit` s that runs `run` s (communication share `comm`).
inline SimJob Job(double submit, double run, int gpus, double comm = 0) {
  SimJob j;
  j.name = "j" + std::to_string(static_cast<int>(submit));
  j.submit_s = submit;
  j.run_s = run;
  j.num_gpus = gpus;
  j.comm_fraction = comm;
  j.source = "test";
  return j;
}

// A finalized workload of `jobs` (numbered in submit order).
inline Workload Jobs(std::vector<SimJob> jobs) {
  Workload w;
  w.jobs = std::move(jobs);
  w.Finalize();
  return w;
}

// Runs `policy` (a MakePolicy name) on c and w with the engine's default options, but `fb`.
inline StatusOr<RunResult> RunPolicy(const SimCluster& c, const Workload& w, const std::string& policy,
                                     SimFeedback* fb = nullptr) {
  PolicyContext ctx;
  ctx.feedback = fb;
  if (policy == "fgd") {
    GPOOL_ASSIGN_OR_RETURN(ctx.target, TargetWorkload(c, w));
  }
  GPOOL_ASSIGN_OR_RETURN(auto p, MakePolicy(policy, ctx));
  EngineOptions o;
  o.feedback = fb;
  return RunSimulation(c, w, *p, o);
}

}  // namespace gpool::sim::test
