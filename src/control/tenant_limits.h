// What the admin sets per tenant, and the checks that keep a tenant inside it.
//
// A tenant (one scheduler queue, src/sched) has a guarantee (`gpool controller --quota
// TENANT=GPUS`): GPUs it gets back, by reclaim if others borrowed them, whenever it asks for
// them. It has a cap (`--max-gpus TENANT=GPUS`): the most GPUs its running jobs hold at once,
// absent = the whole cluster. Both come from the controller's flags (ControllerOptions), never
// from the tenant. A job's priority is the tenant's own business: it orders that tenant's jobs
// only (src/sched/fairshare.h, preemption.h), so it needs no admin limit.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::control {

using TenantGpus = std::map<std::string, int64_t>;  // tenant -> whole GPUs

// Parses repeated "TENANT=GPUS" flag values (e.g. --max-gpus a=32) into *out. Errors name the
// flag and the value: "--max-gpus: bad GPU count in 'a=x'".
Status ParseTenantGpus(std::string_view flag, const std::vector<std::string>& values,
                       TenantGpus* out);

// Quotas and caps together: every value >= 0 and no cap below its tenant's quota (a guarantee
// the cap forbids using). Errors name the tenant and both flags.
Status ValidateTenantLimits(const TenantGpus& quotas, const TenantGpus& caps);

// OK, or the refusal of a job that asks more GPUs than its tenant may ever hold (its cap): such
// a job could never start. InvalidArgument naming gpus, the tenant and the cap.
Status CheckTenantCap(const v1::Job& j, const TenantGpus& caps);

// The job's GPUs in milli-GPU (a fraction counts its share, a gang all its tasks).
int64_t JobMilliGpus(const v1::Job& j);

}  // namespace gpool::control
