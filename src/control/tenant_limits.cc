#include "control/tenant_limits.h"

#include <fmt/format.h>

#include <charconv>

#include "common/names.h"

namespace gpool::control {

Status ParseTenantGpus(std::string_view flag, const std::vector<std::string>& values,
                       TenantGpus* out) {
  for (const std::string& v : values) {
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(fmt::format("{}: want TENANT=GPUS, got '{}'", flag, v));
    }
    const std::string tenant = v.substr(0, eq);
    GPOOL_RETURN_IF_ERROR(ValidateName(fmt::format("{}: tenant", flag), tenant));
    const std::string_view n = std::string_view(v).substr(eq + 1);
    int64_t gpus = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), gpus);
    if (n.empty() || ec != std::errc() || p != n.data() + n.size() || gpus < 0) {
      return Status::InvalidArgument(
          fmt::format("{}: bad GPU count in '{}' (want a whole number >= 0)", flag, v));
    }
    (*out)[tenant] = gpus;
  }
  return Status::Ok();
}

Status ValidateTenantLimits(const TenantGpus& quotas, const TenantGpus& caps) {
  for (const auto& [t, q] : quotas) {
    if (q < 0) return Status::InvalidArgument(fmt::format("--quota {}: must be >= 0, got {}", t, q));
  }
  for (const auto& [t, c] : caps) {
    if (c < 0) return Status::InvalidArgument(fmt::format("--max-gpus {}: must be >= 0, got {}", t, c));
    auto q = quotas.find(t);
    if (q != quotas.end() && c < q->second) {
      return Status::InvalidArgument(fmt::format(
          "--max-gpus {}={} is below its --quota {}={}: the cap would forbid the guarantee", t,
          c, t, q->second));
    }
  }
  return Status::Ok();
}

int64_t JobMilliGpus(const v1::Job& j) {
  if (j.gpu_milli() > 0 && j.gpu_milli() < 1000) return int64_t{j.gpu_milli()} * j.num_tasks();
  return int64_t{j.gpus_per_task()} * j.num_tasks() * 1000;
}

Status CheckTenantCap(const v1::Job& j, const TenantGpus& caps) {
  auto c = caps.find(j.tenant());
  if (c == caps.end() || JobMilliGpus(j) <= c->second * 1000) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "gpus: {:g} is more than tenant {} may ever hold (its cap, set by --max-gpus, is {} GPUs): "
      "the job could never start", static_cast<double>(JobMilliGpus(j)) / 1000.0, j.tenant(),
      c->second));
}

}  // namespace gpool::control
