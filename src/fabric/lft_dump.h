// OpenSM-style dump of linear forwarding tables (what `--lft-out` writes).
//
// The text follows opensm-lfts.dump as OpenSM 3.3 writes it (dump_ucast_lfts in
// osm_dump.c), so tools and eyes used to that file read it unchanged:
//
//   Unicast lids [0-12] of switch Lid 1 guid 0x0002c90300000100 ('leaf-0'):
//   0x0001 000 # Switch portguid 0x0002c90300000100: 'leaf-0'
//   0x0005 001 # Channel Adapter portguid 0x0002c90300000501: 'host0001 mlx5_0'
//   ...
//   12 lids dumped
//
// One block per switch in node-id order. A line per LID that has an entry (LIDs without a route
// are left out, as OpenSM leaves out ports past the switch's last one); the port is three decimal
// digits, 000 meaning the switch itself. The comment names the node owning the LID, "unknown
// node and type" when none does. The description is the node's name, since gpool's model keeps
// names where OpenSM prints node descriptions. The "lids dumped" trailer carries the table's
// highest LID, as OpenSM's does (not the count of lines).
//
// ReadLftDump reads that file back, as OpenSM writes it with `-D 0x43` or `--dump_files_dir`
// (opensm-lfts.dump), into RoutingTables over a Fabric, so link-load analysis and the scheduler
// run on the routes the subnet really uses:
// - A block header names its switch by GUID ("... switch Lid 1 guid 0x... ('leaf-0'):"); the
//   switch is found by GUID in the fabric (an unknown GUID or a non-switch is an error).
// - Each route line is `0xLID PORT # comment`: LID in hex, port in decimal (0 = the switch). A
//   port beyond the switch's ports or a LID beyond 0xBFFF is an error. Lines may come in any
//   order; a LID listed twice in one block is an error.
// - The comment's "portguid 0x...", when present, names the port that owns the LID in OpenSM's
//   subnet. With check_lid_owners (default) it must be the port that owns that LID in the fabric
//   (switch GUID for a switch LID, CA port GUID for a CA LID): routes are only meaningful on a
//   model whose LIDs are the subnet's, e.g. one discovered after OpenSM ran. A LID the fabric
//   does not assign is an error for the same reason.
// - Switches without a block keep no routes (kNoRoute), and a note says how many.
// - "N lids dumped" trailers, blank lines and other '#' lines are skipped.
// Errors name the source and line ("opensm-lfts.dump:12: ...").
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::fabric {

std::string WriteLftDump(const Fabric& fabric, const RoutingTables& tables);

struct LftReadOptions {
  std::string source_name = "<input>";  // for errors
  std::string engine = "opensm";        // RoutingTables::engine of the result
  bool check_lid_owners = true;          // see above
};
StatusOr<RoutingTables> ReadLftDump(std::string_view text, const Fabric& fabric,
                                    const LftReadOptions& options = {});

}  // namespace gpool::fabric
