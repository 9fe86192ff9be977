// Baseline policies, written against the sched library's Policy interface and building blocks,
// so they run in the same harness as gpool's default policy:
//
//   fifo      Kubernetes-default-like: arrival order, first fit over nodes in id order, no
//             head-of-line blocking (every pending job is tried each cycle), no preemption.
//   slurm     Slurm-like: multifactor priority (age, fair share 2^(-usage/share), job size,
//             QOS), EASY backfill behind one reservation for the top job, topology/tree switch
//             selection (the lowest-level switch domain that fits, best fit by free GPUs).
//             GPUs are exclusive as with GRES: a fractional request takes a wholly free GPU and
//             nothing else shares it.
//   tiresias  Tiresias-like: discretized two-queue least attained service (GPU-seconds; the
//             engine's SimFeedback gives service from earlier runs), FIFO within a queue,
//             starving jobs promoted, preemption of jobs in the lower queue for jobs in the
//             higher one, first-fit placement.
//   random, dotprod, clustering, packing, bestfit, fgd
//             the FGD paper's baselines and FGD, as its artifact defines them
//             (score_policies.h).
//   gpool     sched::MakeDefaultPolicy (with power management on unless configured off).
//   gpool+remote
//             gpool's policy with remote attachment (adapter.h, RemoteAttach): the engine and
//             the fill see it (RemoteAttachOf), mark every GPU host as serving its GPUs and submit
//             GPU jobs with JobSpec::remote; the policy's decisions are gpool's own (PlaceGang
//             places kPooled jobs locally when they fit, remotely otherwise).
//
// Thread safety: Schedule is const and reentrant, as sched::Policy requires.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/fragmentation.h"
#include "sim/score_policies.h"
#include "sched/scheduler.h"
#include "sim/adapter.h"
#include "sim/cluster.h"
#include "sim/engine.h"

namespace gpool::sim {

// What a policy may need beyond the per-cycle snapshot.
struct PolicyContext {
  const SimFeedback* feedback = nullptr;             // tiresias: attained service
  // fgd: the target workload (the trace's typical pods); see TargetWorkload.
  std::shared_ptr<const TypicalPods> target;
  std::string gpool_config;                          // "key=value,..." for sched::ParsePolicyConfig
  // gpool+remote: how GPU jobs ask for remote GPUs (`enabled` is implied by the name).
  RemoteAttach remote;
};

inline constexpr std::string_view kGpoolRemote = "gpool+remote";

// Names accepted by MakePolicy, in comparison order.
const std::vector<std::string>& PolicyNames();
// `--compare all` in a time replay: gpool, fifo, slurm, tiresias, fgd.
const std::vector<std::string>& ReplayPolicyNames();
// `--compare all` in a fill: gpool and the FGD paper's six (random .. fgd).
const std::vector<std::string>& FillPolicyNames();
// FGD's target workload: the typical pods of a workload on a cluster.
StatusOr<std::shared_ptr<const TypicalPods>> TargetWorkload(const SimCluster& cluster,
                                                            const Workload& workload);

StatusOr<std::unique_ptr<sched::Policy>> MakePolicy(std::string_view name, const PolicyContext& ctx);

// The remote attachment a policy made by MakePolicy runs with (gpool+remote), else null.
const RemoteAttach* RemoteAttachOf(const sched::Policy& policy);

}  // namespace gpool::sim
