#include "sim/baselines.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sched/backfill.h"
#include "sched/fairshare.h"
#include "sched/placement.h"
#include "sim/adapter.h"

namespace gpool::sim {

namespace {

using sched::ClusterState;
using sched::Decisions;
using sched::DomainId;
using sched::JobSpec;
using sched::Level;
using sched::NodeId;
using sched::Placement;
using sched::SchedulingInput;
using sched::TaskBinding;

// Free GPU capacity (milli) of the whole cluster: a cheap filter before trying a placement.
int64_t FreeMilli(const ClusterState& s) { return s.total_gpus() * 1000 - s.used_milli(); }

bool Bind(ClusterState* work, const JobSpec& job, Placement p, int64_t now, Decisions* d,
          bool backfilled = false) {
  if (!work->Bind(job, p, now).ok()) return false;
  d->binds.push_back({.job = job.id, .placement = std::move(p), .backfilled = backfilled});
  return true;
}

// Shapes that failed to place in this cycle. For placements whose success depends only on the
// total room for the job's tasks (first fit, FGD's per-task greedy), a shape that failed keeps
// failing while the cycle only takes capacity away, so a long queue of look-alike jobs costs
// one placement attempt instead of one each. Clear it whenever capacity comes back (a
// preemption). Decisions are the same as trying every job.
class FailedShapes {
 public:
  bool Has(const JobSpec& j) const { return failed_.count(KeyOf(j)) != 0; }
  void Add(const JobSpec& j) { failed_.insert(KeyOf(j)); }
  void Clear() { failed_.clear(); }

 private:
  using Key = std::tuple<int32_t, int32_t, uint64_t, int64_t, uint64_t, sched::ModelMask, int32_t,
                         uint8_t, bool, bool>;
  static Key KeyOf(const JobSpec& j) {
    return {j.task.gpus, j.task.gpu_milli, j.task.gpu_memory_bytes, j.task.cpu_milli,
            j.task.memory_bytes, j.gpu_models, j.num_tasks, static_cast<uint8_t>(j.locality.level),
            j.locality.required, j.allow_split};
  }
  std::set<Key> failed_;
};

// Whether p keeps a job with a required locality inside one domain of its level. Baselines
// place by their own rules; a required locality is a constraint on all of them, as in gpool's.
bool KeepsLocality(const ClusterState& s, const JobSpec& job, const Placement& p) {
  return !job.locality.required || sched::PlacementSpan(s, p) <= job.locality.level;
}

// First fit over nodes in id order; a job with a required locality is first fit inside the
// first domain of its level (in id order) that holds it.
std::optional<Placement> FirstFit(const ClusterState& s, const JobSpec& job) {
  auto p = sched::PlaceFirstFit(s, job, {});
  if (!p || KeepsLocality(s, job, *p)) return p;
  if (job.locality.level == Level::kNode) return std::nullopt;  // tasks of one node: no domain
  for (DomainId dom : s.domains_at(job.locality.level)) {
    auto q = sched::PlaceInDomain(s, job, dom, job.num_tasks, {});
    if (q && KeepsLocality(s, job, *q)) return q;
  }
  return std::nullopt;
}

std::vector<size_t> ByArrival(const std::vector<JobSpec>& pending) {
  std::vector<size_t> order(pending.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = pending[a], &y = pending[b];
    return x.submit_ns != y.submit_ns ? x.submit_ns < y.submit_ns : x.id < y.id;
  });
  return order;
}

// ---------------------------------------------------------------------------------------------
class FifoPolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "fifo"; }
  StatusOr<Decisions> Schedule(const SchedulingInput& in) const override {
    Decisions d;
    ClusterState work = *in.state;
    FailedShapes failed;
    for (size_t i : ByArrival(*in.pending)) {
      const JobSpec& job = (*in.pending)[i];
      if (job.total_milli_gpus() > FreeMilli(work) || failed.Has(job)) continue;
      auto p = FirstFit(work, job);
      if (p) {
        Bind(&work, job, std::move(*p), in.now_ns, &d);
      } else {
        failed.Add(job);
      }
    }
    return d;
  }
};

// ---------------------------------------------------------------------------------------------
class SlurmPolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "slurm"; }

  StatusOr<Decisions> Schedule(const SchedulingInput& in) const override {
    const auto& pending = *in.pending;
    Decisions d;
    ClusterState work = *in.state;
    std::vector<double> prio(pending.size());
    const double total = std::max<double>(1, static_cast<double>(work.total_gpus()) * 1000);
    for (size_t i = 0; i < pending.size(); ++i) {
      const JobSpec& j = pending[i];
      double age = std::min(1.0, static_cast<double>(in.now_ns - j.submit_ns) / 1e9 / (7 * 86400.0));
      double share = sched::DominantShare(*in.state, in.usage, *in.queues, j.queue);
      const auto& q = (*in.queues)[j.queue.value()];
      double norm = std::max(1e-6, static_cast<double>(q.guaranteed_gpus) * 1000 / total);
      double fs = std::exp2(-share / norm);
      double size = static_cast<double>(j.total_milli_gpus()) / total;
      prio[i] = 1000 * age + 1000 * fs + 1000 * size + 1000 * j.priority;
    }
    std::vector<size_t> order(pending.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (prio[a] != prio[b]) return prio[a] > prio[b];
      return pending[a].id < pending[b].id;
    });
    std::vector<uint8_t> excluded;
    bool reserved = false;
    for (size_t i : order) {
      const JobSpec& job = pending[i];
      std::optional<Placement> p;
      if (job.total_milli_gpus() <= FreeMilli(work)) p = Place(work, job, excluded);
      if (p) {
        Bind(&work, job, std::move(*p), in.now_ns, &d, reserved);
        continue;
      }
      if (!reserved) {
        // EASY: the top blocked job gets a reservation; later jobs only fill around it.
        sched::PlacementOptions po;
        auto r = sched::ComputeReservation(work, job, po, in.now_ns);
        if (r) {
          sched::ExcludeReserved(*r, &excluded);
          // ExcludeReserved sizes the mask only up to the last reserved node.
          excluded.resize(work.num_nodes(), 0);
          d.reservations.push_back(std::move(*r));
        }
        reserved = true;
      }
    }
    return d;
  }

 private:
  // topology/tree: the lowest level with a domain that holds the gang, best fit by free GPUs.
  static std::optional<Placement> Place(const ClusterState& s, const JobSpec& job,
                                        const std::vector<uint8_t>& excluded) {
    sched::PlacementOptions po;
    if (!excluded.empty()) po.excluded_nodes = &excluded;
    if (job.task.fractional()) return PlaceExclusiveFraction(s, job, excluded);
    const int64_t need = int64_t{job.task.gpus} * job.num_tasks;
    for (Level l : {Level::kLeaf, Level::kPod, Level::kFabric}) {
      // A required locality caps the levels tried (one task per node: node fits any leaf).
      if (job.locality.required && l > std::max(job.locality.level, Level::kLeaf)) break;
      std::vector<std::pair<int64_t, DomainId>> fits;
      for (DomainId dom : s.domains_at(l)) {
        int64_t free = s.FreeWholeGpus(dom, job.gpu_models);
        if (need == 0 || free >= need) fits.emplace_back(free, dom);
      }
      std::sort(fits.begin(), fits.end());
      for (const auto& [free, dom] : fits) {
        auto p = sched::PlaceInDomain(s, job, dom, job.num_tasks, po);
        if (p) return p;
      }
    }
    return std::nullopt;
  }

  // A fractional task on a wholly free GPU of the node with the fewest free GPUs (GRES GPUs are
  // exclusive; the rest of the GPU stays unused, as it would under Slurm without MPS shards).
  static std::optional<Placement> PlaceExclusiveFraction(const ClusterState& s, const JobSpec& job,
                                                         const std::vector<uint8_t>& excluded) {
    sched::TaskRequest whole = job.task;
    whole.gpu_milli = 0;
    int best = -1;
    int32_t best_free = INT32_MAX;
    for (size_t n = 0; n < s.num_nodes(); ++n) {
      NodeId id(static_cast<uint32_t>(n));
      if (n < excluded.size() && excluded[n]) continue;
      int32_t free = s.free_whole_gpus(id);
      if (free <= 0 || free >= best_free) continue;
      if (s.TasksThatFit(id, whole, job.gpu_models) < 1) continue;
      best = static_cast<int>(n);
      best_free = free;
    }
    if (best < 0) return std::nullopt;
    NodeId id(static_cast<uint32_t>(best));
    uint32_t mask = s.free_whole_mask(id);
    TaskBinding b{.node = id, .gpu_mask = mask & (~mask + 1), .gpu_milli = job.task.gpu_milli,
                  .gpu_memory_bytes = job.task.gpu_memory_bytes};
    if (!s.CheckBinding(b, job.task).ok()) return std::nullopt;
    return Placement{.tasks = {b}};
  }
};

// ---------------------------------------------------------------------------------------------
class TiresiasPolicy final : public sched::Policy {
 public:
  explicit TiresiasPolicy(const SimFeedback* fb) : fb_(fb) {}
  std::string_view name() const override { return "tiresias"; }

  StatusOr<Decisions> Schedule(const SchedulingInput& in) const override {
    const auto& pending = *in.pending;
    const double now_s = static_cast<double>(in.now_ns) / 1e9;
    Decisions d;
    ClusterState work = *in.state;
    auto level_of_pending = [&](const JobSpec& j) {
      if (now_s - static_cast<double>(j.submit_ns) / 1e9 > kStarveS) return 0;
      return Attained(j.id) >= kThresholdMilliS ? 1 : 0;
    };
    std::vector<size_t> order = ByArrival(pending);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return level_of_pending(pending[a]) < level_of_pending(pending[b]);
    });
    FailedShapes failed;
    // Shapes whose preemption search failed: it fails again for the same shape until a
    // preemption happens. Its victims are the same (jobs bound since ran 0 s and are no
    // candidates), the state has only lost room to binds since, and first fit succeeds exactly
    // when the total room suffices, so no prefix of the victims that failed can succeed now.
    // The search copies the state and sorts every running job: this saves most of tiresias'
    // time on long traces without changing a decision.
    FailedShapes failed_preempt;
    for (size_t i : order) {
      const JobSpec& job = pending[i];
      std::optional<Placement> p;
      if (job.total_milli_gpus() <= FreeMilli(work) && !failed.Has(job)) {
        p = FirstFit(work, job);
        if (!p) failed.Add(job);
      }
      if (!p && level_of_pending(job) == 0 && d.preemptions.size() < kMaxVictims &&
          !failed_preempt.Has(job)) {
        const size_t before = d.preemptions.size();
        p = Preempt(&work, job, in.now_ns, &d);
        if (d.preemptions.size() != before) {
          failed.Clear();  // room came back
          failed_preempt.Clear();
        } else {
          failed_preempt.Add(job);
        }
      }
      if (p) Bind(&work, job, std::move(*p), in.now_ns, &d);
    }
    return d;
  }

 private:
  static constexpr double kThresholdMilliS = 3600.0 * 1000;  // one GPU-hour
  static constexpr double kStarveS = 8 * 3600.0;
  static constexpr double kMinRunS = 600;  // don't preempt a job that just started
  static constexpr size_t kMaxVictims = 8;

  double Attained(sched::JobId id) const {
    return fb_ && id.value() < fb_->attained_milli_s.size() ? fb_->attained_milli_s[id.value()] : 0;
  }

  // Releases lower-queue running jobs (most attained service first) until `job` fits.
  std::optional<Placement> Preempt(ClusterState* work, const JobSpec& job, int64_t now,
                                   Decisions* d) const {
    std::vector<std::pair<double, sched::JobId>> cands;
    for (const auto& r : work->running()) {
      double ran = static_cast<double>(now - r.start_ns) / 1e9;
      if (!r.spec.preemptible || ran < std::max(kMinRunS, r.spec.min_runtime_s)) continue;
      double att = Attained(r.spec.id) + ran * static_cast<double>(r.spec.total_milli_gpus());
      if (att >= kThresholdMilliS) cands.emplace_back(-att, r.spec.id);
    }
    std::sort(cands.begin(), cands.end());
    ClusterState trial = *work;
    std::vector<sched::JobId> chosen;
    for (const auto& [neg, id] : cands) {
      if (d->preemptions.size() + chosen.size() >= kMaxVictims) break;
      if (!trial.Release(id, now).ok()) continue;
      chosen.push_back(id);
      if (job.total_milli_gpus() > FreeMilli(trial)) continue;
      auto p = FirstFit(trial, job);
      if (p) {
        for (auto v : chosen) {
          d->preemptions.push_back({.victim = v, .for_job = job.id, .reason = "least attained service"});
        }
        *work = std::move(trial);
        return p;
      }
    }
    return std::nullopt;
  }

  const SimFeedback* fb_;
};

// ---------------------------------------------------------------------------------------------
// gpool's policy under its own name, carrying the remote attachment the harness applies to the
// cluster and the jobs (the policy itself only reads JobSpec::remote and NodeSpec::serves_gpus).
class RemoteAttachPolicy final : public sched::Policy {
 public:
  RemoteAttachPolicy(std::unique_ptr<sched::Policy> gpool, const RemoteAttach& attach)
      : gpool_(std::move(gpool)), attach_(attach) {}
  std::string_view name() const override { return kGpoolRemote; }
  StatusOr<Decisions> Schedule(const SchedulingInput& in) const override { return gpool_->Schedule(in); }
  double usage_half_life_s() const override { return gpool_->usage_half_life_s(); }
  const RemoteAttach& attach() const { return attach_; }

 private:
  std::unique_ptr<sched::Policy> gpool_;
  RemoteAttach attach_;
};

}  // namespace

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> names = {"gpool",  "fifo",    "slurm",      "tiresias",
                                                 "random", "dotprod", "clustering", "packing",
                                                 "bestfit", "fgd",    std::string(kGpoolRemote)};
  return names;
}

const std::vector<std::string>& ReplayPolicyNames() {
  static const std::vector<std::string> names = {"gpool", "fifo", "slurm", "tiresias", "fgd"};
  return names;
}

const std::vector<std::string>& FillPolicyNames() {
  static const std::vector<std::string> names = {"gpool",   "random",  "dotprod", "clustering",
                                                 "packing", "bestfit", "fgd",     std::string(kGpoolRemote)};
  return names;
}

StatusOr<std::shared_ptr<const TypicalPods>> TargetWorkload(const SimCluster& cluster,
                                                            const Workload& workload) {
  sched::ClusterSpec spec = ToClusterSpec(cluster);
  TenantQueues q = MakeTenantQueues(workload, cluster.total_gpus());
  int32_t max_gpus = 0;
  for (const auto& h : cluster.hosts) max_gpus = std::max(max_gpus, h.gpus);
  std::vector<JobSpec> jobs;
  jobs.reserve(workload.jobs.size());
  for (const auto& j : workload.jobs) {
    GPOOL_ASSIGN_OR_RETURN(JobSpec s, ToJobSpec(j, spec, q, max_gpus));
    jobs.push_back(std::move(s));
  }
  return std::make_shared<const TypicalPods>(MakeTypicalPods(jobs));
}

const RemoteAttach* RemoteAttachOf(const sched::Policy& policy) {
  const auto* r = dynamic_cast<const RemoteAttachPolicy*>(&policy);
  return r ? &r->attach() : nullptr;
}

StatusOr<std::unique_ptr<sched::Policy>> MakePolicy(std::string_view name, const PolicyContext& ctx) {
  if (name == kGpoolRemote) {
    RemoteAttach attach = ctx.remote;
    attach.enabled = true;
    GPOOL_RETURN_IF_ERROR(ValidateRemoteAttach(attach));
    GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> gpool, MakePolicy("gpool", ctx));
    return std::unique_ptr<sched::Policy>(new RemoteAttachPolicy(std::move(gpool), attach));
  }
  if (name == "gpool") {
    // The simulator runs gpool with power management on: it is part of the default policy's job.
    std::string text = "power.enabled=true";
    if (!ctx.gpool_config.empty()) text += "," + ctx.gpool_config;
    GPOOL_ASSIGN_OR_RETURN(sched::PolicyConfig cfg, sched::ParsePolicyConfig(text));
    return sched::MakeDefaultPolicy(cfg);
  }
  if (name == "fifo") return std::unique_ptr<sched::Policy>(new FifoPolicy());
  if (name == "slurm") return std::unique_ptr<sched::Policy>(new SlurmPolicy());
  if (name == "tiresias") return std::unique_ptr<sched::Policy>(new TiresiasPolicy(ctx.feedback));
  if (name == "fgd") {
    if (!ctx.target) return Status::InvalidArgument("policy 'fgd' needs a target workload");
    return std::unique_ptr<sched::Policy>(new ScorePolicy(ScoreKind::kFgd, ctx.target));
  }
  static const std::pair<const char*, ScoreKind> kScore[] = {
      {"random", ScoreKind::kRandom},   {"dotprod", ScoreKind::kDotProd},
      {"clustering", ScoreKind::kClustering}, {"packing", ScoreKind::kPacking},
      {"bestfit", ScoreKind::kBestFit}};
  for (const auto& [n, kind] : kScore) {
    if (name == n) return std::unique_ptr<sched::Policy>(new ScorePolicy(kind, ctx.target));
  }
  return Status::InvalidArgument(fmt::format("unknown policy '{}' (expected one of {})", name,
                                             fmt::join(PolicyNames(), ", ")));
}

}  // namespace gpool::sim
