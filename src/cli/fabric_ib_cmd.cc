// `gpool fabric discover`: the subnet as the local CA port sees it, written as the other fabric
// commands write fabrics, optionally checked against a planned fabric. `gpool fabric port`: one
// port's state and counters (smpquery portinfo / perfquery). See docs/cli.md and
// docs/infiniband.md. Errors go to stderr with exit status 1 (2 for bad flags).
#include "cli/fabric_ib_cmd.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "fabric/compare.h"
#include "fabric/load.h"
#include "fabric/writers.h"
#include "ib/discover.h"
#include "ib/port.h"

namespace gpool::cli {
namespace {

using Json = nlohmann::ordered_json;

int IbFail(std::string_view cmd, const Status& s) {
  fmt::print(stderr, "gpool fabric {}: {}\n", cmd, s.message());
  return 1;
}

struct DiscoverFlags {
  std::string ca;
  int port = 0;
  std::string cache;  // read an `ibnetdiscover --cache` file instead of the live fabric
  std::string naming = "auto";
  std::string out;
  std::string format = "ibnetdiscover";
  std::string output = "table";
  std::string expect;              // a planned fabric to compare with
  std::vector<std::string> ignore;  // guids, lids, rates
  int timeout_ms = 0;
};

int RunDiscover(const DiscoverFlags& d) {
  ib::DiscoverOptions o;
  o.ca_name = d.ca;
  o.ca_port = d.port;
  o.timeout_ms = d.timeout_ms;
  o.naming = d.naming == "guid"          ? ib::NodeNaming::kGuid
             : d.naming == "description" ? ib::NodeNaming::kDescription
                                         : ib::NodeNaming::kAuto;
  auto t0 = std::chrono::steady_clock::now();
  auto f = d.cache.empty() ? ib::DiscoverFabric(o) : ib::LoadIbndCache(d.cache, o);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!f.ok()) return IbFail("discover", f.status());

  Status same;
  if (!d.expect.empty()) {
    auto plan = fabric::LoadFabric(d.expect);
    if (!plan.ok()) return IbFail("discover", plan.status().WithContext("--expect"));
    fabric::CompareOptions c{.unknown_sysimg_matches = true};
    for (const auto& i : d.ignore) {
      if (i == "guids") c.guids = false;
      if (i == "lids") c.lids = false;
      if (i == "rates") c.rates = false;
    }
    same = fabric::SameFabric(*plan, *f, c);
    // A link whose ends disagree on rate matches no plan, even a plan that has it too: it runs
    // below what either end was built for.
    if (same.ok() && c.rates) {
      for (const auto* side : {&*f, &*plan}) {
        auto m = fabric::RateMismatches(*side);
        if (m.empty()) continue;
        same = Status::FailedPrecondition(fmt::format(
            "{} link{} whose ends disagree on rate in the {} fabric (first: {})", m.size(),
            m.size() == 1 ? "" : "s", side == &*f ? "live" : "planned", m.front()));
        break;
      }
    }
  }

  StatusOr<std::string> text = Status::Internal("no format");
  if (d.format == "ibnetdiscover") text = fabric::WriteIbnetdiscover(*f);
  else if (d.format == "ibsim") text = fabric::WriteIbsimNet(*f);
  else text = fabric::WriteJson(*f);
  if (!text.ok()) return IbFail("discover", text.status());
  if (d.out.empty() && d.expect.empty()) {
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }
  if (!d.out.empty())
    if (Status s = WriteFileAtomic(d.out, *text); !s.ok()) return IbFail("discover", s);
  std::string source = d.cache.empty() ? "live" : d.cache;
  if (d.output == "json") {
    Json j;
    j["source"] = source;
    if (!d.out.empty()) j["file"] = d.out;
    j["format"] = d.format;
    j["switches"] = f->num_switches();
    j["cas"] = f->num_cas();
    j["links"] = f->num_links();
    j["discover_ms"] = ms;
    if (!d.expect.empty()) {
      j["expect"] = d.expect;
      j["matches"] = same.ok();
      if (!same.ok()) j["difference"] = same.message();
    }
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("source      {}\n", source);
    if (!d.out.empty()) fmt::print("wrote       {} ({})\n", d.out, d.format);
    fmt::print("fabric      {} switches, {} cas, {} links\n", f->num_switches(), f->num_cas(),
               f->num_links());
    fmt::print("discovered  in {:.1f} ms\n", ms);
    if (!d.expect.empty())
      fmt::print("expect      {}: {}\n", d.expect, same.ok() ? "matches" : same.message());
  }
  return same.ok() ? 0 : 1;
}

struct PortFlags {
  int lid = 0;
  int port = 0;
  std::string ca;
  int ca_port = 0;
  bool reset = false;
  std::string output = "table";
};

int RunPort(const PortFlags& p) {
  if (p.lid <= 0 || p.lid > fabric::kMaxUnicastLid)
    return IbFail("port", Status::InvalidArgument(fmt::format("LID {}: expected 1..49151", p.lid)));
  auto m = ib::MadPort::Open({.ca_name = p.ca, .ca_port = p.ca_port});
  if (!m.ok()) return IbFail("port", m.status());
  auto lid = static_cast<uint16_t>(p.lid);
  auto st = (*m)->QueryState(lid, p.port);
  if (!st.ok()) return IbFail("port", st.status());
  auto c = (*m)->QueryCounters(lid, p.port);
  if (!c.ok()) return IbFail("port", c.status());
  if (p.reset)
    if (Status s = (*m)->ResetCounters(lid, p.port); !s.ok()) return IbFail("port", s);
  if (p.output == "json") {
    Json j;
    j["lid"] = p.lid;
    j["port"] = p.port;
    j["state"] = st->state;
    j["phys_state"] = st->phys_state;
    j["width"] = st->width;
    j["speed"] = std::string(fabric::LinkSpeedName(st->speed));
    j["port_lid"] = st->lid;
    j["sm_lid"] = st->sm_lid;
    j["counters"] = {{"xmit_data_words", c->xmit_data_words},
                     {"rcv_data_words", c->rcv_data_words},
                     {"xmit_packets", c->xmit_packets},
                     {"rcv_packets", c->rcv_packets},
                     {"symbol_errors", c->symbol_errors},
                     {"link_error_recovery", c->link_error_recovery},
                     {"link_downed", c->link_downed},
                     {"rcv_errors", c->rcv_errors},
                     {"xmit_discards", c->xmit_discards},
                     {"xmit_wait", c->xmit_wait},
                     {"extended", c->extended}};
    j["reset"] = p.reset;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("port            LID {} port {}\n", p.lid, p.port);
  fmt::print("state           {} ({})\n", st->state, st->phys_state);
  if (st->width) fmt::print("rate            {}x{}\n", st->width, fabric::LinkSpeedName(st->speed));
  fmt::print("sm lid          {}\n", st->sm_lid);
  fmt::print("xmit data       {} words ({} bytes)\n", c->xmit_data_words, c->xmit_data_words * 4);
  fmt::print("rcv data        {} words ({} bytes)\n", c->rcv_data_words, c->rcv_data_words * 4);
  fmt::print("packets         {} sent, {} received{}\n", c->xmit_packets, c->rcv_packets,
             c->extended ? "" : " (32-bit counters)");
  fmt::print("errors          symbol {}, recovery {}, downed {}, rcv {}, discards {}\n",
             c->symbol_errors, c->link_error_recovery, c->link_downed, c->rcv_errors,
             c->xmit_discards);
  fmt::print("xmit wait       {}\n", c->xmit_wait);
  if (p.reset) fmt::print("reset           counters cleared after reading\n");
  return 0;
}

}  // namespace

void RegisterFabricIbCommands(CLI::App* fab, int* exit_code) {
  auto d = std::make_shared<DiscoverFlags>();
  auto* dc = fab->add_subcommand("discover", "read the live fabric through libibnetdisc");
  dc->add_option("--ca", d->ca, "local CA to discover from (default: the first)");
  dc->add_option("--port", d->port, "its port (default: the first active)");
  dc->add_option("--cache", d->cache, "read an `ibnetdiscover --cache` file instead");
  dc->add_option("--naming", d->naming, "auto (default), guid or description")
      ->check(CLI::IsMember({"auto", "guid", "description"}));
  dc->add_option("--out", d->out, "write the fabric here (default: to stdout)");
  dc->add_option("--format", d->format, "ibnetdiscover (default), ibsim or json")
      ->check(CLI::IsMember({"ibnetdiscover", "ibsim", "json"}));
  dc->add_option("-o,--output", d->output, "summary with --out/--expect: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  dc->add_option("--expect", d->expect, "compare with a planned fabric; exit 1 when it differs");
  dc->add_option("--ignore", d->ignore, "with --expect: guids, lids and/or rates")
      ->check(CLI::IsMember({"guids", "lids", "rates"}));
  dc->add_option("--timeout-ms", d->timeout_ms, "per-MAD timeout (default libibnetdisc's)");
  dc->callback([d, exit_code] { *exit_code = RunDiscover(*d); });

  auto p = std::make_shared<PortFlags>();
  auto* pc = fab->add_subcommand("port", "one port's state and counters (PortInfo, PortCounters)");
  pc->add_option("LID", p->lid, "LID of the node")->required();
  pc->add_option("PORT", p->port, "port number (0 = a switch's management port)")->required();
  pc->add_option("--ca", p->ca, "local CA to send from (default: the first)");
  pc->add_option("--ca-port", p->ca_port, "its port (default: the first active)");
  pc->add_flag("--reset", p->reset, "clear the counters after reading them");
  pc->add_option("-o,--output", p->output, "table or json")->check(CLI::IsMember({"table", "json"}));
  pc->callback([p, exit_code] { *exit_code = RunPort(*p); });
}

}  // namespace gpool::cli
