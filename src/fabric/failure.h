// Failures: take a link or a switch down and re-route incrementally.
//
// Only the destinations whose routes crossed the failed element are recomputed, as OpenSM's
// incremental sweeps do: they are read off the LFTs (for each switch at an end of the failed
// link, the LIDs whose entry exits through the failed port), then handed to fabric::Reroute.
// Every other entry keeps its value bit for bit -- unless, for ftree, the incremental result
// balances the load more than 10% worse than a full re-route would (FailureOptions), in which
// case the full re-route is taken and the report says so.
//
// Thread safety: FailAndReroute mutates the fabric (link/node state) and the tables; callers
// serialise it against any other use of either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::fabric {

struct FailureTarget {
  enum class Kind : uint8_t { kLink, kSwitch };
  Kind kind = Kind::kLink;
  LinkId link;   // kLink
  NodeId node;   // kSwitch
  std::string label;  // "sw1[3]" or the switch name, for reports
};

// Resolves "SWITCH[PORT]" (a switch name as the fabric spells it, then the port number in
// brackets) to the link cabled to that port. Errors name what did not match.
StatusOr<FailureTarget> ResolveLink(const Fabric& fabric, std::string_view ref);
// Resolves a switch by name.
StatusOr<FailureTarget> ResolveSwitch(const Fabric& fabric, std::string_view name);

// The destination LIDs whose LFT entries send traffic over `target`, sorted, each once: for a
// link, the LIDs that exit a switch end through the failed port (plus the LID of a CA end); for
// a switch, the LIDs its neighbours send towards it plus its own LID and those of the CAs cabled
// to it. Depends only on the tables and the cabling, not on link state.
std::vector<Lid> AffectedDestinations(const Fabric& fabric, const RoutingTables& tables,
                                      const FailureTarget& target);

struct FailureOptions {
  RouteOptions route;  // the engine must be the one that produced the tables
  // Count the CA pairs whose route crossed the failure (before) and those left without a route
  // (after). Costs O(affected destinations x (switches + CAs)); skip it for timing runs.
  bool count_pairs = true;
  // Balance check for ftree tables: the incremental re-route's all-to-all maximum load (flows
  // per directed link over its rate) may exceed a full re-route's by at most this fraction;
  // otherwise the full re-route's tables replace it and the report says so. ftree only: its
  // incremental mode balances differently from its full route (no common top switch per
  // destination), while minhop/updn re-route the affected destinations with their full
  // algorithm. Costs one full Route and two all-to-all analyses: 71 ms CPU in all on the
  // 2,268-HCA tree against 7.5 ms for the re-route alone (fabric_bench BM_FailLink). Negative:
  // no check.
  double max_excess_load = 0.10;
};

struct FailureReport {
  std::string target;                // label of the failed element
  std::vector<Lid> affected_lids;    // destinations re-routed
  size_t entries_changed = 0;        // LFT entries that differ after the re-route
  // With count_pairs: endpoint pairs (src port, dst LID over CA endpoints) whose route crossed
  // the failed element, how many still have no route afterwards (those touching a dead CA
  // link or a dead switch's CAs can have none), and all pairs for scale.
  size_t pairs_total = 0;
  size_t pairs_affected = 0;
  size_t pairs_unreachable_after = 0;
  // The balance check (FailureOptions::max_excess_load): whether it ran, the two all-to-all
  // maximum loads it compared, and whether the full re-route was taken (then entries_changed
  // counts every entry that differs, not only those of affected_lids).
  bool balance_checked = false;
  double incremental_max_load = 0;
  double full_max_load = 0;
  bool full_reroute = false;
  std::vector<std::string> notes;  // e.g. why the full re-route was taken
};

// Takes `target` down in `fabric`, re-routes the affected destinations in `tables` and reports.
// An element that is already down is an error (FailedPrecondition), as is a re-route failure.
StatusOr<FailureReport> FailAndReroute(Fabric* fabric, RoutingTables* tables,
                                       const FailureTarget& target,
                                       const FailureOptions& options);

}  // namespace gpool::fabric
