// `gpool lease issue|verify`: signs and checks GPU session tokens (src/remote/lease/lease.h).
//
// The key file holds at least 32 bytes: either raw bytes or hex digits (e.g. made with
// `openssl rand -hex 32 > gpool.key`); the GPU servers are started with the same file.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/units.h"
#include "remote/lease/lease.h"

namespace gpool::cli {
namespace {

struct LeaseFlags {
  std::string key, gpu, mem, share = "1", ttl = "1h", tenant, job, output, token;
};

nlohmann::json LeaseJson(const remote::Lease& l) {
  return {{"gpu", l.gpu},       {"memory_bytes", l.memory_bytes}, {"compute_milli", l.compute_milli},
          {"tenant", l.tenant}, {"job", l.job},                   {"issued_at", l.issued_at},
          {"expires_at", l.expires_at}};
}

StatusOr<int32_t> ParseShare(const std::string& text) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || !(v > 0) || v > 1) {
    return Status::InvalidArgument(fmt::format("--share '{}': want a fraction in (0, 1]", text));
  }
  return static_cast<int32_t>(std::lround(v * kMilliPerGpu));
}

Status Issue(const LeaseFlags& f) {
  GPOOL_ASSIGN_OR_RETURN(std::string key, remote::LoadLeaseKey(f.key));
  GPOOL_ASSIGN_OR_RETURN(remote::LeaseAuthority authority, remote::LeaseAuthority::Create(key));
  remote::LeaseRequest r;
  r.gpu = f.gpu;
  if (!f.mem.empty()) {
    StatusOr<uint64_t> mem = ParseBytes(f.mem);
    if (!mem.ok()) return mem.status().WithContext("--mem");
    r.memory_bytes = *mem;
  }
  GPOOL_ASSIGN_OR_RETURN(r.compute_milli, ParseShare(f.share));
  StatusOr<double> ttl = ParseDurationSeconds(f.ttl);
  if (!ttl.ok()) return ttl.status().WithContext("--ttl");
  r.ttl_seconds = *ttl;
  r.tenant = f.tenant;
  r.job = f.job;
  const Clock& clock = *remote::UnixClock::Default();
  GPOOL_ASSIGN_OR_RETURN(std::string token, authority.Issue(r, clock));
  if (f.output == "json") {
    GPOOL_ASSIGN_OR_RETURN(remote::Lease lease, authority.Verify(token, r.gpu, clock));
    std::puts(nlohmann::json{{"token", token}, {"lease", LeaseJson(lease)}}.dump(2).c_str());
  } else {
    std::puts(token.c_str());
  }
  return Status::Ok();
}

Status Verify(const LeaseFlags& f) {
  GPOOL_ASSIGN_OR_RETURN(std::string key, remote::LoadLeaseKey(f.key));
  GPOOL_ASSIGN_OR_RETURN(remote::LeaseAuthority authority, remote::LeaseAuthority::Create(key));
  GPOOL_ASSIGN_OR_RETURN(remote::Lease l,
                         authority.Verify(f.token, f.gpu, *remote::UnixClock::Default()));
  if (f.output == "json") {
    std::puts(LeaseJson(l).dump(2).c_str());
  } else {
    std::printf("valid: gpu %s, memory %s, share %d milli, tenant '%s', job '%s', expires %lld\n",
                l.gpu.c_str(), l.memory_bytes == 0 ? "unlimited" : FormatBytes(l.memory_bytes).c_str(),
                l.compute_milli, l.tenant.c_str(), l.job.c_str(),
                static_cast<long long>(l.expires_at));
  }
  return Status::Ok();
}

void RegisterLease(CLI::App& app, const GlobalFlags&, int* exit_code) {
  CLI::App* lease = app.add_subcommand("lease", "issue and check GPU session leases");
  lease->require_subcommand(1);
  auto f = std::make_shared<LeaseFlags>();
  auto run = [f, exit_code](const char* name, Status (*fn)(const LeaseFlags&)) {
    Status s = fn(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "gpool lease %s: %s\n", name, s.ToString().c_str());
      *exit_code = 1;
    }
  };

  CLI::App* issue = lease->add_subcommand("issue", "sign a lease for one GPU and print the token");
  issue->add_option("--key", f->key, "key file: >= 32 raw bytes, or hex digits")->required();
  issue->add_option("--gpu", f->gpu, "HOST:PORT/INDEX of the GPU server's device")->required();
  issue->add_option("--mem", f->mem, "device memory limit, e.g. 8GiB (default: no limit)");
  issue->add_option("--share", f->share, "compute share, a fraction in (0, 1] (default 1)");
  issue->add_option("--ttl", f->ttl, "lifetime, e.g. 90s, 15m, 1h (default 1h)");
  issue->add_option("--tenant", f->tenant, "tenant the lease is charged to");
  issue->add_option("--job", f->job, "job id");
  issue->add_option("-o,--output", f->output, "json: token and decoded lease");
  issue->callback([run] { run("issue", Issue); });

  CLI::App* verify = lease->add_subcommand("verify", "check a token as a GPU server would");
  verify->add_option("--key", f->key, "key file")->required();
  verify->add_option("--gpu", f->gpu, "HOST:PORT/INDEX this server is")->required();
  verify->add_option("-o,--output", f->output, "json: the decoded lease");
  verify->add_option("token", f->token, "the token")->required();
  verify->callback([run] { run("verify", Verify); });
}

}  // namespace

GPOOL_REGISTER_COMMAND(RegisterLease);

}  // namespace gpool::cli
