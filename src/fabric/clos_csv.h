// Builds a three-layer Clos fabric from a host-to-switch CSV such as the Alibaba Lingjun 2023
// topology (`ip,DSW,PSW,ASW`: DSW = core, PSW = aggregation, ASW = top-of-rack).
//
// ASW names repeat under different PSWs, so a ToR is the pair (PSW, ASW) and is named
// "<PSW>-<ASW>"; PSW names are taken as unique, and a PSW seen with several DSWs links to each of
// them. Hosts hang off their ToR as CAs named "<host> HCA-<k>" (with that description, the Linux
// convention SlurmHostName reads), where <host> is the ip column, cut to its first 16 characters
// when longer than 40 (the Lingjun ids are 64-hex hashes). Levels: ToR 0, aggregation 1, core 2.
//
// Wiring, and its limits: each host has `hcas_per_host` single-port HCAs (1, or 8 for a GPU
// node), all on its own ToR. Rail-optimised wiring (HCA k of every host in a group on rail
// switch k) is future work and fails with Unimplemented. Each ToR has `tor_uplinks` parallel
// links to its aggregation switch and each aggregation switch `agg_uplinks` to each of its cores.
// Every switch gets exactly the ports it uses (at most 254); links are 4xNDR unless `link` says
// otherwise. The CSV has no cabling, so port numbers are ours: a ToR's ports 1.. go to its hosts
// in file order (host-major, HCA-minor), then its uplinks; an aggregation switch's ports go down
// to its ToRs in file order, then up.
//
// Thread safety: stateless functions; safe to call concurrently.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

enum class HcaWiring : uint8_t {
  kSameTor,        // every HCA of a host on the host's ToR
  kRailOptimized,  // not implemented yet
};

struct ClosCsvOptions {
  std::string source_name = "<input>";  // for file:line in errors
  int hcas_per_host = 1;                // 1..64; 8 for rail-style GPU nodes
  HcaWiring wiring = HcaWiring::kSameTor;
  int tor_uplinks = 1;  // parallel ToR -> aggregation links
  int agg_uplinks = 1;  // parallel aggregation -> core links, per core
  LinkSpec link = {4, LinkSpeed::kNdr};
  bool assign_lids = true;
};

StatusOr<Fabric> ParseClosCsv(std::string_view text, const ClosCsvOptions& options);
// options.source_name is replaced by `path`.
StatusOr<Fabric> LoadClosCsv(const std::string& path, ClosCsvOptions options);

}  // namespace gpool::fabric
