// Structural comparison of two fabrics, for round-trip tests and for checking a live fabric
// against a planned one; and the links whose two ends disagree on their rate.
//
// Nodes are matched by name, ports by number and links by their two (name, port) ends, so node
// ids and link order may differ. The first difference found is returned as an error naming it
// ("node 'sw1' port 3: linked to 'h2'[1] vs 'h3'[1]"); OK means the fabrics are the same in
// everything CompareOptions selects.
//
// Thread safety: a pure function over const fabrics.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

struct CompareOptions {
  bool guids = true;         // node GUIDs, system image GUIDs and CA port GUIDs
  bool lids = true;          // switch LIDs, CA port LIDs and LMCs
  bool rates = true;         // link widths and speeds, each end's own
  // With rates: compare what each link runs at (the lower width and speed of its two ends)
  // rather than each end's own. A live fabric (or ibsim) reports the negotiated rate at both ends
  // of a link whose ends a dump lists differently.
  bool negotiated_rates = false;
  bool descriptions = false; // node descriptions
  bool levels = false;       // switch levels (formats such as ibnetdiscover do not carry them)
  // A system image GUID of 0 (unknown: a dump without `sysimgguid=` lines, a generated switch)
  // matches any value. A live fabric always reports one (ibsim reports the node GUID).
  bool unknown_sysimg_matches = false;
};

// Returns OK when `a` and `b` describe the same fabric; otherwise FailedPrecondition naming the
// first difference, with a's value first.
Status SameFabric(const Fabric& a, const Fabric& b, const CompareOptions& options = {});

// Links whose two ends report different rates (width or speed), e.g. a switch port at 4xQDR
// cabled to a CA port at 4xDDR: such a link runs at the lower of each, usually because a cable or
// port trained down, and matches no plan. One line per link, in link order:
// "'leaf-1'[3] 4xQDR <-> 'h1'[1] 4xDDR: the ends disagree on rate; the link runs at 4xDDR".
std::vector<std::string> RateMismatches(const Fabric& fabric);

}  // namespace gpool::fabric
