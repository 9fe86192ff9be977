// The policy entry point.
//
// A Policy is a function of (cluster state, pending queue, queues, usage, time) that returns
// Decisions: binds, preemptions, node suspends and resumes. It does no I/O, starts no threads,
// keeps no globals and takes its clock (SchedulingInput::now_ns) and randomness
// (SchedulingInput::seed) from the caller: the same input gives the same decisions.
//
// How a caller (the simulator, the controller) uses it, once per cycle:
//   ClusterState state = *ClusterState::Create(spec);      // once; keep it current
//   UsageLedger ledger(config.fairshare_half_life_s);       // once
//   auto policy = *MakeDefaultPolicy(config);               // once
//   ...
//   ledger.Advance(state, now);
//   SchedulingInput in{.state = &state, .pending = &pending, .queues = &queues,
//                      .usage = &ledger, .now_ns = now, .seed = seed};
//   GPOOL_ASSIGN_OR_RETURN(Decisions d, policy->Schedule(in));
//   for (auto& p : d.preemptions) state.Release(p.victim, now);   // and requeue the victim
//   for (auto& b : d.binds) state.Bind(job_of(b.job), b.placement, now);
//   for (auto& p : d.power) state.SetPower(p.node, p.target == kOn ? kResuming : kSuspending);
//   // ...and SetPower(kOn / kOff) when the boot or shutdown completes (after boot latency).
//
// Other policies (FIFO first-fit, Slurm-like, Tiresias-like, FGD-like baselines in src/sim)
// implement Policy themselves out of the building blocks: ClusterState (fit checks,
// bookkeeping, aggregates), placement.h, fragmentation.h, fairshare.h, backfill.h,
// preemption.h and power.h.
//
// Thread safety: a Policy must be safe to call from one thread at a time; Schedule is const.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster.h"
#include "sched/fairshare.h"
#include "sched/remote_cost.h"
#include "sched/short_job_preemption.h"
#include "sched/types.h"

namespace gpool::sched {

struct SchedulingInput {
  const ClusterState* state = nullptr;          // required
  const std::vector<JobSpec>* pending = nullptr;  // required; any order
  const std::vector<QueueSpec>* queues = nullptr;  // required; JobSpec::queue indexes it
  const UsageLedger* usage = nullptr;           // optional: current allocation only if null
  int64_t now_ns = 0;
  uint64_t seed = 0;                            // for policies that randomise; gpool doesn't
  // Fill Decisions::waits (why each unbound pending job waits). Off by default: the simulator
  // has no one to tell, and formatting a reason per pending job per cycle is not free.
  bool explain = false;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Errors: InvalidArgument for a bad input (a job naming a queue that doesn't exist, ...).
  virtual StatusOr<Decisions> Schedule(const SchedulingInput& in) const = 0;
  // Half-life of the usage ledger (fairshare.h) a caller keeps for this policy: the simulator
  // builds its ledger with it. 7 days unless the policy is configured otherwise (the default
  // policy: PolicyConfig::fairshare_half_life_s).
  virtual double usage_half_life_s() const { return 7 * 24 * 3600.0; }
};

struct PowerConfig {
  bool enabled = false;
  double idle_timeout_s = 600;     // suspend a node idle this long
  int64_t warm_buffer_gpus = 16;   // keep at least this many free GPUs powered on
  // ...and at least as many as the jobs submitted in the last arrival_window_s asked for
  // (pending or running; PowerInput::recent_arrival_gpus): arrivals come in bursts and a
  // boot takes boot_latency_s, so capacity that follows demand one boot behind makes every
  // job of a burst wait a boot (docs/simulator/openb-replay.md). The idle timeout's length: a node
  // resumed for a burst stays on that long anyway. 0 = the fixed buffer only. The policy and
  // the controller's own PlanPower call (src/control/node_power.cc) both pass the arrivals.
  double arrival_window_s = 600;
  double boot_latency_s = 180;     // resume to ready
  // Boot waves: with 8 per cycle and 32 at once, a 1,024-GPU gang arriving at a half-suspended
  // cluster waited up to four boot latencies (docs/simulator.md); 128 lets it wait about one.
  int max_resumes_per_cycle = 128;
  int max_suspends_per_cycle = 8;
  int max_resuming = 128;          // nodes booting at once
  // The boot-storm limit scales with the cluster: both resume limits above are raised to
  // ceil(max_resuming_fraction x the healthy GPU nodes). A boot storm loads what is provisioned
  // per rack and per cluster (PDU inrush, PXE/image and DHCP servers, the management network),
  // so a fixed count is the wrong unit: 128 is 21% of a 607-node cluster and 1% of a
  // 10,000-node one. The default, 1, lets the pending demand (never more: PlanPower resumes
  // only the GPUs it is short of) boot every suspended node in one wave, as Slurm's default
  // ResumeRate (300 nodes a minute, 900 within one 180-s boot) does on clusters of up to 900
  // nodes. Measured on openb's burst over half its nodes (docs/simulator/loaded-replay.md):
  // 0, 0.5, 0.75, 0.9 and 1 give average JCTs of 6271, 6051, 5817, 5670 and 5633 s, since every
  // wave held back costs the burst a boot. A site whose power or provisioning can't take that
  // sets a lower fraction, or 0 for the fixed limits only.
  double max_resuming_fraction = 1;
  // Used by the controller, which applies the decisions (src/control/node_power.h): a node
  // still resuming after resume_timeout_s is resumed again, up to resume_retries times; then it
  // is marked failed to resume (not schedulable, not resumed again until it reports back).
  double resume_timeout_s = 600;
  int resume_retries = 2;
};

// Configuration of the default ("gpool") policy.
struct PolicyConfig {
  double fairshare_half_life_s = 7 * 24 * 3600.0;
  // A job that waited this long goes first in its priority class, by age (no starvation). Not
  // shorter: under overload a short age makes most of the queue "starved": the order becomes
  // plain FIFO, undoing fair share and least-work-first (docs/simulator/synthetic-gangs.md).
  double starvation_age_s = 8 * 3600.0;
  // Inside a queue's fair-share turn, least estimated work (GPUs x run time) first rather than
  // oldest first (OrderOptions::least_work_first); jobs without an estimate rank as
  // least_work_unknown says (by default as if they ran the mean estimate pending).
  bool least_work_first = true;
  // How least_work_first ranks jobs without an estimate (key least_work_unknown=last|mean).
  // At the mean of the estimates pending: on the synthetic workload with half the jobs
  // estimated it cut average JCT on the loaded seeds and was about even on the light one
  // (docs/simulator/synthetic-gangs.md, "Jobs without a run-time estimate"); `last` let such
  // jobs wait behind all estimated work until they starved.
  UnknownEstimate least_work_unknown = UnknownEstimate::kMean;
  bool backfill = true;            // EASY backfill behind the head reservation
  int max_reservations = 1;
  // EASY proper: jobs whose estimated end precedes a reservation's start may use its nodes.
  // false = conservative (reserved nodes only for the reserved job), for comparison.
  bool backfill_reserved_nodes = true;
  // A blocked job gets a reservation only once it has waited this long; before that it is just
  // retried each cycle. A reservation buys a bounded wait for one gang at the price of capacity
  // held for it; a gang that will likely fit by itself soon needn't pay that. 0 = at once.
  double reserve_after_s = 0;
  // The reservation goes to the oldest blocked job of the queue whose turn it is, not to the
  // first blocked job in the scheduling order: the first blocked job names the queue (the
  // tenant that fair share and the guarantees put next), and a blocked job of that queue takes
  // the reservation only if no older job of the queue that may still take it (not bound,
  // capped or too big for the cluster in this cycle) remains. The reservation is what bounds a
  // big gang's wait, so inside the tenant it belongs to the job that has waited longest, as in
  // EASY's FCFS head; least-work-first decides who goes first among the jobs that fit, and a
  // preempted (requeued, so older) job gets its place back. Reserving for the least-work head
  // instead held nodes idle for a job that was seldom next a cycle later (new short jobs keep
  // taking the head). The reservation stays with the tenant whose turn it is: an older job of
  // another tenant, e.g. a borrower's job just reclaimed, doesn't take it ahead of the jobs of
  // a tenant that fair share puts first (src/control/controller_limits_test.cc,
  // PriorityDoesNotBuyGpusInsideAnotherTenantsGuarantee), measured in the loaded replay
  // (docs/simulator/loaded-replay.md). Limit: an older job later in the order that is then skipped
  // for a cap reached within the cycle still denies the newer ones of its queue for that cycle.
  bool reserve_oldest = true;
  // Run time assumed for running jobs without an estimate when computing a reservation (a time
  // limit); 0 = they never end, and a gang blocked by them gets no reservation.
  double assumed_runtime_s = 24 * 3600.0;
  bool priority_preemption = true;
  bool reclaim = true;             // preempt borrowers when an owner needs its quota back
  bool fragmentation_aware = true; // FGD packing of fractional tasks
  int max_preemptions_per_cycle = 16;
  // Pending jobs with short estimates preempt running jobs with far more work left
  // (short_job_preemption.h); keys short_preempt.*. On: it is what closes the average-JCT gap
  // to Tiresias under overload (docs/simulator/synthetic-gangs.md).
  ShortJobPreemptionConfig short_preempt;
  PowerConfig power;
  // Remote attachment's cost model (remote_cost.h); keys remote.*.
  RemoteCostModel remote_cost;
};

// Errors name the field: "policy.power.idle_timeout_s: must be > 0, got -1".
Status ValidatePolicyConfig(const PolicyConfig& c);
// Parses "key=value,key=value" (keys as the field names, power.* for PowerConfig) over defaults;
// unknown keys and bad values are errors naming the key.
StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view text);

// The default policy, "gpool": ordering (fairshare.h), quota limits, two-level placement
// (placement.h), EASY backfill (backfill.h), priority preemption and reclaim (preemption.h),
// and power management (power.h).
StatusOr<std::unique_ptr<Policy>> MakeDefaultPolicy(const PolicyConfig& config);

// Checks the parts of an input every policy needs: non-null pointers, valid jobs and queues.
Status ValidateInput(const SchedulingInput& in);

}  // namespace gpool::sched
