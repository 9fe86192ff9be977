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
// Thread safety: a pure function.
#pragma once

#include <string>

#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::fabric {

std::string WriteLftDump(const Fabric& fabric, const RoutingTables& tables);

}  // namespace gpool::fabric
