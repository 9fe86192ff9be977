#include "sim/workload_gen.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "common/file.h"
#include "sim/parse_util.h"
#include "sim/rng.h"
#include "sim/trace.h"

namespace gpool::sim {

namespace {

}  // namespace

std::vector<std::pair<int32_t, double>> GangSizeDistribution(int32_t max_gpus) {
  // Weights per power of two, 1 .. 1024 GPUs.
  static constexpr double kWeights[] = {0.55, 0.08, 0.10, 0.12, 0.05, 0.035,
                                        0.025, 0.015, 0.01, 0.006, 0.004};
  std::vector<std::pair<int32_t, double>> d;
  for (int i = 0; i < 11 && (1 << i) <= max_gpus; ++i) d.emplace_back(1 << i, kWeights[i]);
  double sum = 0;
  for (auto& [g, w] : d) sum += w;
  for (auto& [g, w] : d) w /= sum;
  return d;
}

StatusOr<SyntheticOptions> ParseSyntheticSpec(std::string_view spec, SyntheticOptions o) {
  if (Trim(spec).empty()) return o;
  for (std::string_view kv : Split(spec, ',')) {
    kv = Trim(kv);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("synthetic spec: '{}' is not key=value", kv));
    }
    std::string_view k = Trim(kv.substr(0, eq)), v = Trim(kv.substr(eq + 1));
    std::string where = "synthetic spec";
    auto num = [&](double lo, double hi) -> StatusOr<double> {
      GPOOL_ASSIGN_OR_RETURN(double x, ParseDoubleField(v, k, where));
      if (x < lo || x > hi) {
        return Status::InvalidArgument(
            fmt::format("synthetic spec: '{}' = {} is outside {}..{}", k, x, lo, hi));
      }
      return x;
    };
    if (k == "jobs") {
      GPOOL_ASSIGN_OR_RETURN(double x, num(1, 1e8));
      o.jobs = static_cast<int64_t>(x);
    } else if (k == "load") {
      GPOOL_ASSIGN_OR_RETURN(o.load, num(0.001, 100));
    } else if (k == "rate" || k == "jobs_per_hour") {
      GPOOL_ASSIGN_OR_RETURN(o.jobs_per_hour, num(0, 1e9));
    } else if (k == "day_amplitude") {
      GPOOL_ASSIGN_OR_RETURN(o.day_amplitude, num(0, 1));
    } else if (k == "max_gpus") {
      GPOOL_ASSIGN_OR_RETURN(double x, num(1, 1 << 20));
      o.max_gpus = static_cast<int32_t>(x);
    } else if (k == "comm_min") {
      GPOOL_ASSIGN_OR_RETURN(o.comm_min, num(0, 1));
    } else if (k == "comm_max") {
      GPOOL_ASSIGN_OR_RETURN(o.comm_max, num(0, 1));
    } else if (k == "frac") {
      GPOOL_ASSIGN_OR_RETURN(o.frac_share, num(0, 1));
    } else if (k == "min_run_s") {
      GPOOL_ASSIGN_OR_RETURN(o.min_run_s, num(0, 1e9));
    } else if (k == "max_run_s") {
      GPOOL_ASSIGN_OR_RETURN(o.max_run_s, num(1, 1e9));
    } else if (k == "tenants") {
      GPOOL_ASSIGN_OR_RETURN(double x, num(1, 1000));
      o.tenants = static_cast<int32_t>(x);
    } else if (k == "est_known") {
      GPOOL_ASSIGN_OR_RETURN(o.est_known, num(0, 1));
    } else if (k == "seed") {
      GPOOL_ASSIGN_OR_RETURN(double x, num(0, 9e15));
      o.seed = static_cast<uint64_t>(x);
    } else {
      return Status::InvalidArgument(fmt::format(
          "synthetic spec: unknown key '{}' (known: jobs, load, rate, day_amplitude, max_gpus, "
          "comm_min, comm_max, frac, min_run_s, max_run_s, tenants, est_known, seed)",
          k));
    }
  }
  if (o.comm_min > o.comm_max) {
    return Status::InvalidArgument("synthetic spec: comm_min is above comm_max");
  }
  if (o.min_run_s > o.max_run_s) {
    return Status::InvalidArgument("synthetic spec: min_run_s is above max_run_s");
  }
  return o;
}

StatusOr<std::vector<double>> ReadRuntimes(std::string_view text, std::string_view filename) {
  std::vector<double> out;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    std::string_view first = Trim(Split(line, ',')[0]);
    if (first.empty() || first.front() == '#') continue;
    if (lines.line_number() == 1 && !(std::isdigit(static_cast<unsigned char>(first[0])) ||
                                      first[0] == '.')) {
      continue;  // header
    }
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    GPOOL_ASSIGN_OR_RETURN(double v, ParseDoubleField(first, "runtime", where));
    if (v < 0) return Status::InvalidArgument(fmt::format("{}: field 'runtime': negative", where));
    out.push_back(v);
  }
  if (out.empty()) return Status::InvalidArgument(fmt::format("{}: no run times", filename));
  return out;
}

StatusOr<Workload> GenerateSynthetic(const SyntheticOptions& o, const std::vector<double>& runtimes,
                                     int64_t cluster_gpus) {
  if (runtimes.empty()) return Status::InvalidArgument("synthetic: no run times to sample");
  if (cluster_gpus <= 0) return Status::InvalidArgument("synthetic: cluster has no GPUs");
  auto sizes = GangSizeDistribution(std::min<int64_t>(o.max_gpus, cluster_gpus));
  double mean_gpus = 0;
  for (auto& [g, w] : sizes) mean_gpus += g * w;
  mean_gpus = mean_gpus * (1 - o.frac_share) + 0.5 * o.frac_share;
  double mean_run = 0;
  for (double r : runtimes) mean_run += std::clamp(r, o.min_run_s, o.max_run_s);
  mean_run /= static_cast<double>(runtimes.size());
  double base_per_s = o.jobs_per_hour > 0
                          ? o.jobs_per_hour / 3600.0
                          : o.load * static_cast<double>(cluster_gpus) / (mean_gpus * mean_run);
  double max_rate = base_per_s * (1 + o.day_amplitude);
  SplitMix rng(o.seed, SplitMix::kWorkloadSalt);
  SplitMix est_rng(o.seed ^ 0xE57EE57Eull, SplitMix::kWorkloadSalt);  // has_estimate only: the jobs don't depend on est_known
  Workload w;
  w.jobs.reserve(static_cast<size_t>(o.jobs));
  double t = 0;
  std::vector<double> tenant_cdf;
  {
    double sum = 0;
    for (int i = 0; i < o.tenants; ++i) sum += i == 0 ? 4 : i == 1 ? 2 : 1;
    double acc = 0;
    for (int i = 0; i < o.tenants; ++i) {
      acc += (i == 0 ? 4 : i == 1 ? 2 : 1) / sum;
      tenant_cdf.push_back(acc);
    }
  }
  for (int64_t i = 0; i < o.jobs; ++i) {
    // Thinning: candidate arrivals at the peak rate, kept with probability rate(t) / peak.
    for (;;) {
      t += rng.Exp(max_rate);
      double rate = base_per_s * (1 + o.day_amplitude * std::sin(2 * std::numbers::pi * t / 86400));
      if (rng.Uniform() * max_rate <= rate) break;
    }
    SimJob j;
    j.name = fmt::format("syn-{}", i);
    j.submit_s = std::round(t * 1000) / 1000;
    j.run_s = std::clamp(runtimes[rng.Next() % runtimes.size()], o.min_run_s, o.max_run_s);
    if (rng.Uniform() < o.frac_share) {
      j.num_gpus = 1;
      j.gpu_milli = 100 * static_cast<int32_t>(1 + rng.Next() % 9);  // 0.1 .. 0.9
    } else {
      double u = rng.Uniform(), acc = 0;
      j.num_gpus = sizes.back().first;
      for (auto& [g, p] : sizes) {
        acc += p;
        if (u < acc) {
          j.num_gpus = g;
          break;
        }
      }
    }
    j.cpu_milli = int64_t{j.num_gpus} * 8000;
    j.mem_mib = int64_t{j.num_gpus} * 64 * 1024;
    j.comm_fraction = j.num_gpus > 1 ? o.comm_min + (o.comm_max - o.comm_min) * rng.Uniform() : 0;
    double tu = rng.Uniform();
    int tenant = 0;
    while (tenant + 1 < o.tenants && tu >= tenant_cdf[tenant]) ++tenant;
    j.tenant = fmt::format("tenant-{}", tenant);
    j.has_estimate = est_rng.Uniform() < o.est_known;
    j.source = fmt::format("synthetic job {}", i);
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, j.source));
    w.jobs.push_back(std::move(j));
  }
  w.Finalize();
  w.description = fmt::format(
      "synthetic gangs ({} jobs, load {:.2f}, max gang {} GPUs, seed {}, mean arrival {:.1f}/h)",
      o.jobs, o.load, o.max_gpus, o.seed, base_per_s * 3600);
  return w;
}

}  // namespace gpool::sim
