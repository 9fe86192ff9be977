// Temporary bodies so that the public API links while it is being implemented. Every function
// fails loudly (Unimplemented or an empty result); this file disappears as the real ones land.
#include <climits>

#include "sched/backfill.h"
#include "sched/cluster.h"
#include "sched/fairshare.h"
#include "sched/fragmentation.h"
#include "sched/placement.h"
#include "sched/power.h"
#include "sched/preemption.h"
#include "sched/scheduler.h"

namespace gpool::sched {
namespace {
Status NotYet(const char* what) { return Status::Unimplemented(std::string("sched: ") + what + " not implemented yet"); }
}  // namespace

std::string_view LevelName(Level) { return "?"; }
StatusOr<Level> ParseLevel(std::string_view) { return NotYet("ParseLevel"); }
std::string_view PowerStateName(PowerState) { return "?"; }
std::string_view JobKindName(JobKind) { return "?"; }
StatusOr<JobKind> ParseJobKind(std::string_view) { return NotYet("ParseJobKind"); }
Status BuildUniformTopology(const UniformTopologyOptions&, ClusterSpec*) { return NotYet("BuildUniformTopology"); }
int FindGpuModel(const ClusterSpec&, std::string_view) { return -1; }
StatusOr<ModelMask> ParseGpuModels(const ClusterSpec&, std::string_view) { return NotYet("ParseGpuModels"); }
Status ValidateJob(const JobSpec&, const ClusterSpec&, size_t) { return NotYet("ValidateJob"); }
Status ValidateQueue(const QueueSpec&, const ClusterSpec&) { return NotYet("ValidateQueue"); }

int64_t RunningJob::expected_end_ns() const { return INT64_MAX; }
StatusOr<ClusterState> ClusterState::Create(ClusterSpec) { return NotYet("ClusterState::Create"); }
const std::vector<DomainId>& ClusterState::domains_at(Level l) const { return by_level_[static_cast<int>(l)]; }
DomainId ClusterState::ancestor(NodeId, Level) const { return DomainId(); }
bool ClusterState::Distance(NodeId, NodeId, Level*) const { return false; }
bool ClusterState::schedulable(NodeId) const { return false; }
uint32_t ClusterState::free_whole_mask(NodeId) const { return 0; }
int64_t ClusterState::TaskCapacityBound(DomainId, const TaskRequest&, ModelMask) const { return 0; }
int64_t ClusterState::FreeWholeGpus(DomainId, ModelMask) const { return 0; }
int32_t ClusterState::TasksThatFit(NodeId, const TaskRequest&, ModelMask) const { return 0; }
Status ClusterState::CheckBinding(const TaskBinding&, const TaskRequest&) const { return NotYet("CheckBinding"); }
Status ClusterState::Bind(const JobSpec&, const Placement&, int64_t) { return NotYet("Bind"); }
Status ClusterState::Release(JobId, int64_t) { return NotYet("Release"); }
void ClusterState::Apply(const TaskBinding&, const TaskRequest&, int, int64_t) {}
void ClusterState::SetHealth(NodeId, Health) {}
void ClusterState::SetPower(NodeId, PowerState) {}
const RunningJob* ClusterState::FindRunning(JobId) const { return nullptr; }

void UsageLedger::Advance(const ClusterState&, int64_t) {}
void UsageLedger::Add(QueueId, const QueueUsage&) {}
const QueueUsage& UsageLedger::usage(QueueId) const { static QueueUsage z; return z; }
double DominantShare(const ClusterState&, const UsageLedger*, const std::vector<QueueSpec>&, QueueId) { return 0; }
std::vector<size_t> OrderJobs(const std::vector<JobSpec>&, const ClusterState&, const UsageLedger*,
                              const std::vector<QueueSpec>&, int64_t, const OrderOptions&) { return {}; }
int64_t QueueQuotaMilli(const ClusterState&, const QueueSpec&) { return 0; }

WorkloadDistribution::WorkloadDistribution(std::vector<WorkloadClass> c) : classes_(std::move(c)) {}
WorkloadDistribution WorkloadDistribution::FromJobs(const std::vector<JobSpec>&) { return {}; }
double NodeFragmentation(const ClusterState&, NodeId, const WorkloadDistribution&) { return 0; }
double FragmentationOf(const NodeSpec&, const int32_t*, const uint64_t*, int64_t, uint64_t, const WorkloadDistribution&) { return 0; }
double ClusterFragmentation(const ClusterState&, const WorkloadDistribution&) { return 0; }
double FragmentationDelta(const ClusterState&, const TaskBinding&, const TaskRequest&, const WorkloadDistribution&) { return 0; }

std::optional<Placement> PlaceGang(const ClusterState&, const JobSpec&, const PlacementOptions&) { return std::nullopt; }
std::optional<Placement> PlaceInDomain(const ClusterState&, const JobSpec&, DomainId, int32_t, const PlacementOptions&) { return std::nullopt; }
std::optional<Placement> PlaceFirstFit(const ClusterState&, const JobSpec&, const PlacementOptions&) { return std::nullopt; }
Level PlacementSpan(const ClusterState&, const Placement&) { return Level::kFabric; }
int CountLeaves(const ClusterState&, const Placement&) { return 0; }

std::optional<Reservation> ComputeReservation(const ClusterState&, const JobSpec&, const PlacementOptions&, int64_t) { return std::nullopt; }
void ExcludeReserved(const Reservation&, std::vector<uint8_t>*) {}

double PreemptionCost(const RunningJob&, int64_t) { return 0; }
bool PastMinRuntime(const RunningJob&, int64_t) { return false; }
std::optional<PreemptionPlan> PlanPreemption(const ClusterState&, const JobSpec&, const std::vector<QueueSpec>&, int64_t, const PreemptionOptions&) { return std::nullopt; }

std::vector<PowerDecision> PlanPower(const ClusterState&, const PowerConfig&, const PowerInput&) { return {}; }

Status ValidatePolicyConfig(const PolicyConfig&) { return NotYet("ValidatePolicyConfig"); }
StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view) { return NotYet("ParsePolicyConfig"); }
StatusOr<std::unique_ptr<Policy>> MakeDefaultPolicy(const PolicyConfig&) { return NotYet("MakeDefaultPolicy"); }
Status ValidateInput(const SchedulingInput&) { return NotYet("ValidateInput"); }

}  // namespace gpool::sched
