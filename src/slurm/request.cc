#include "slurm/request.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/units.h"

namespace gpool::slurm {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' ||
                        s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' ||
                        s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Values go to the CLI as separate argv words (never through a shell), so only emptiness and
// control characters need refusing here.
Status CheckValue(std::string_view key, std::string_view value) {
  if (value.empty()) return Status::InvalidArgument(fmt::format("{}: empty value", key));
  for (char ch : value) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
      return Status::InvalidArgument(fmt::format("{}: control character in value", key));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<PluginConfig> ParsePluginArgs(const std::vector<std::string>& args) {
  PluginConfig c;
  for (const std::string& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("plugstack.conf argument '{}': want key=value", arg));
    }
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    Status ok = CheckValue(key, value);
    if (!ok.ok()) return ok.WithContext("plugstack.conf");
    if (key == "gpool") {
      c.gpool = value;
    } else if (key == "controller") {
      c.controller = value;
    } else if (key == "token_file") {
      c.token_file = value;
    } else if (key == "tenant") {
      c.tenant = value;
    } else if (key == "lib_dir") {
      c.lib_dir = value;
    } else if (key == "transport") {
      if (value != "tcp" && value != "ucx") {
        return Status::InvalidArgument(
            fmt::format("plugstack.conf transport={}: want tcp or ucx", value));
      }
      c.transport = value;
    } else if (key == "wait" || key == "max_time") {
      StatusOr<double> s = ParseDurationSeconds(value);
      if (!s.ok()) return s.status().WithContext(fmt::format("plugstack.conf {}", key));
      if (!(*s > 0)) {
        return Status::InvalidArgument(fmt::format("plugstack.conf {}={}: must be > 0", key, value));
      }
      (key == "wait" ? c.wait_s : c.hold_s) = *s;
    } else {
      return Status::InvalidArgument(fmt::format(
          "plugstack.conf: unknown argument '{}' (known: gpool, controller, token_file, tenant, "
          "lib_dir, transport, wait, max_time)",
          key));
    }
  }
  if (c.controller.empty()) {
    return Status::InvalidArgument("plugstack.conf: controller=HOST:PORT is required");
  }
  if (c.lib_dir.empty() && c.gpool.find('/') == std::string::npos) {
    return Status::InvalidArgument(
        "plugstack.conf: lib_dir=DIR is required when gpool= is not a path (the client runtime "
        "is found beside the gpool binary otherwise)");
  }
  return c;
}

StatusOr<GpuRequest> ParseGpusOption(std::string_view text) {
  std::string s(Trim(text));
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("--gpool-gpus={}: {}", s, why));
  };
  if (s.empty()) return bad("want a number of GPUs, e.g. 2, or a fraction of one, e.g. 0.5");
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) {
    return bad("want a number of GPUs, e.g. 2, or a fraction of one, e.g. 0.5");
  }
  if (!(v > 0)) return bad("must be > 0");
  GpuRequest r;
  if (v < 1) {
    // The controller's unit is a thousandth of a GPU; a request below it would silently become
    // something else, so it is refused, and anything else is rounded to the unit.
    long milli = std::lround(v * 1000);
    if (milli < 1) return bad("below the unit of a thousandth of a GPU (0.001)");
    if (milli >= 1000) return bad("rounds to a whole GPU: ask for 1");
    r.gpus = 1;
    r.gpu_milli = static_cast<int32_t>(milli);
    return r;
  }
  if (v != std::floor(v)) return bad("more than one GPU must be whole GPUs");
  if (v > 1e6) return bad("too many GPUs");
  r.gpus = static_cast<int32_t>(v);
  return r;
}

std::string StepRequestId(uint32_t job_id, uint32_t step_id) {
  return fmt::format("slurm-{}.{}", job_id, step_id);
}

namespace {
void AddClientFlags(const PluginConfig& c, std::vector<std::string>* argv) {
  argv->push_back("--controller");
  argv->push_back(c.controller);
  if (!c.token_file.empty()) {
    argv->push_back("--token-file");
    argv->push_back(c.token_file);
  }
}
}  // namespace

std::vector<std::string> SubmitArgv(const PluginConfig& c, const GpuRequest& r, uint32_t job_id,
                                    uint32_t step_id) {
  std::vector<std::string> argv = {c.gpool, "submit"};
  AddClientFlags(c, &argv);
  if (!c.tenant.empty()) {
    argv.push_back("--tenant");
    argv.push_back(c.tenant);
  }
  if (r.gpu_milli > 0) {
    argv.push_back("--gpu-fraction");
    argv.push_back(fmt::format("{:.3f}", r.gpu_milli / 1000.0));
  } else {
    argv.push_back("--gpus");
    argv.push_back(std::to_string(r.gpus));
  }
  long hold = std::lround(c.hold_s);
  argv.insert(argv.end(), {"--duration", fmt::format("{}s", hold), "--request-id",
                           StepRequestId(job_id, step_id), "--", "sleep", std::to_string(hold)});
  return argv;
}

std::vector<std::string> JobArgv(const PluginConfig& c, std::string_view verb,
                                 std::string_view id) {
  std::vector<std::string> argv = {c.gpool, "jobs", std::string(verb), std::string(id)};
  AddClientFlags(c, &argv);
  if (verb == "describe") {
    argv.push_back("-o");
    argv.push_back("json");
  }
  return argv;
}

StatusOr<std::string> ParseSubmitOutput(std::string_view out) {
  std::string_view id = Trim(out);
  if (id.empty() || id.find_first_of(" \t\n") != std::string_view::npos) {
    return Status::Internal(fmt::format("gpool submit: want one job id, got '{}'", id));
  }
  return std::string(id);
}

StatusOr<std::string> ParseJobState(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Internal("gpool jobs describe: output is not a JSON object");
  }
  auto it = j.find("state");
  if (it == j.end() || !it->is_string()) {
    return Status::Internal("gpool jobs describe: no \"state\" string in its output");
  }
  return it->get<std::string>();
}

StatusOr<StepGpus> ParseLeases(std::string_view out) {
  StepGpus g;
  int line_no = 0;
  while (!out.empty()) {
    size_t nl = out.find('\n');
    std::string_view line = Trim(out.substr(0, nl));
    out = nl == std::string_view::npos ? std::string_view() : out.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    std::vector<std::string_view> words;
    while (!line.empty()) {
      size_t sp = line.find(' ');
      words.push_back(line.substr(0, sp));
      line = sp == std::string_view::npos ? std::string_view() : Trim(line.substr(sp + 1));
    }
    if (words.size() != 3 || words[1].find('/') == std::string_view::npos) {
      return Status::Internal(fmt::format(
          "gpool jobs leases: line {}: want 'TASK HOST:PORT/INDEX TOKEN'", line_no));
    }
    if (words[1].find(',') != std::string_view::npos ||
        words[2].find(',') != std::string_view::npos) {
      return Status::Internal(fmt::format("gpool jobs leases: line {}: ',' in a field", line_no));
    }
    if (g.count > 0) {
      g.devices += ',';
      g.leases += ',';
    }
    g.devices += words[1];
    g.leases += words[2];
    ++g.count;
  }
  if (g.count == 0) return Status::Internal("gpool jobs leases: no leases for the job");
  return g;
}

std::string PrependLibraryPath(std::string_view lib_dir, std::string_view current) {
  if (current.empty()) return std::string(lib_dir);
  return fmt::format("{}:{}", lib_dir, current);
}

std::string ClientLibDir(const PluginConfig& c) {
  if (!c.lib_dir.empty()) return c.lib_dir;
  // ParsePluginArgs makes sure gpool= is a path when lib_dir is not set.
  return c.gpool.substr(0, c.gpool.rfind('/')) + "/../lib";
}

}  // namespace gpool::slurm
