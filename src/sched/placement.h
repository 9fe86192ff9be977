// Gang placement in two levels.
//
// Level one picks the fabric domain: the smallest level (leaf, then pod, then fabric) at which
// some domain can hold the whole gang; among those, the one that needs the fewest children
// (leaves of a pod, pods of a fabric), then the one left with the least free capacity
// afterwards (best fit), so whole domains stay free for future big gangs. A domain that
// lost bandwidth to failed links ranks after healthy ones. When a gang must span several
// children (a pod-level gang over leaves), it takes the fewest children: largest capacity
// first, the last one the smallest that covers the rest.
//
// Level two places tasks on nodes inside the chosen domain: whole-GPU tasks best-fit on the
// nodes with the fewest free GPUs that still fit; fractional tasks go on the GPU where the FGD
// fragmentation grows least (fragmentation.h), ties to the fullest GPU.
//
// With a fabric load view (ClusterState::fabric_load, fabric_load.h), a gang that must span
// children ranks domains by the contention on the uplinks it would cross first (the least
// shared plan), then fewest children, then best fit, and takes the least loaded children of
// equal capacity; PlaceGang only (PlaceInDomain and first fit ignore the view). A gang inside one
// leaf crosses no uplink, so leaf choice is unchanged. Without a view decisions are exactly as
// before. Limits: the view is the caller's snapshot (rings placed in the same cycle are not in
// it), and the choice is per leaf/pod, not per uplink port (the routes pick the port).
//
// GPU model constraints and node health are honoured; a gang is placed whole or not at all, and
// never across domains its locality forbids. Required locality at level L: one domain of L.
// Preferred locality at L: start at L's smallest domains and go up only when nothing fits.
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <optional>
#include <vector>

#include "sched/cluster.h"
#include "sched/fragmentation.h"
#include "sched/remote_cost.h"
#include "sched/types.h"

namespace gpool::sched {

struct PlacementOptions {
  // Target workload for fractional packing; empty = pure best fit on the fullest GPU.
  const WorkloadDistribution* workload = nullptr;
  // Nodes that must not be used (reservations, what-if); indexed by node, empty = none.
  const std::vector<uint8_t>* excluded_nodes = nullptr;
  // Domains to try first (a queue's guaranteed domains); empty = none.
  const std::vector<DomainId>* preferred_domains = nullptr;
  // Tests only: the plain scans (every domain of a level; in PlanPreemption a fresh copy of the
  // state, a full sort of the candidates and a walk over every victim's nodes) instead of the
  // pruned ones, to check that both take the same decisions (fastpath_test.cc). Slower, never
  // different.
  bool reference_scan = false;
  // Power-managed clusters: how long a suspended node takes to resume (0 = never wait for one).
  // With a fabric load view (ClusterState::fabric_load) and this set, PlaceGang declines a gang
  // that the powered-on nodes hold only across more leaves than the same gang would need with
  // the suspended nodes back on, for up to kResumeWaits x this after the job's submission: the
  // caller counts it as demand, resumes nodes, and places it whole a boot later (WaitForResume).
  double resume_latency_s = 0;
  int64_t now_ns = 0;  // the cycle's time, for that bound
  // Remote attachment's cost model (remote_cost.h); null = the defaults.
  const RemoteCostModel* remote_cost = nullptr;
};

// PlaceGang waits for resumes at most this many resume latencies after a job's submission.
inline constexpr double kResumeWaits = 3;
// ...or this share of its estimated run time, when longer (big gangs resume in several rounds).
inline constexpr double kResumeRuntimeShare = 0.25;

// Places every task of `job` or returns nullopt when it doesn't fit now. `waits_for_resume`, when
// given, is set to whether the nullopt is WaitForResume's: the powered-on nodes hold the gang,
// but only across more leaves than it would need with the suspended nodes back on.
std::optional<Placement> PlaceGang(const ClusterState& state, const JobSpec& job,
                                   const PlacementOptions& options, bool* waits_for_resume = nullptr);

// Level two alone: places `count` tasks of `job` on nodes under domain d (any level), or
// nullopt. Exposed for baseline policies that choose domains their own way.
std::optional<Placement> PlaceInDomain(const ClusterState& state, const JobSpec& job,
                                       DomainId d, int32_t count, const PlacementOptions& options);

// First fit over nodes in id order, ignoring the fabric: the simplest baseline, and a
// correctness oracle in tests.
std::optional<Placement> PlaceFirstFit(const ClusterState& state, const JobSpec& job,
                                       const PlacementOptions& options);

// Largest level the placement spans (kNode when every task is on one node), or kFabric+1 cast
// when it spans fabrics. Used by tests and metrics ("how many leaves did this gang touch").
Level PlacementSpan(const ClusterState& state, const Placement& p);
// Number of distinct leaf domains a placement touches.
int CountLeaves(const ClusterState& state, const Placement& p);

}  // namespace gpool::sched
