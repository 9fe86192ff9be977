// Live fabric discovery: the subnet as libibnetdisc sees it (the library behind ibnetdiscover),
// turned into a fabric::Fabric.
//
// DiscoverFabric sends SMPs through libibumad from a local CA port (on our machines: through
// libumad2sim.so to ibsim, see ib/ibsim.h), so it needs a umad device; LoadIbndCache reads the
// cache file `ibnetdiscover --cache FILE` writes, with no device at all (tests, offline checks).
//
// How the model is filled, and why:
// - Names: ibnetdiscover names nodes "S-<guid>"/"H-<guid>"/"R-<guid>" (16 hex digits) and prints
//   the NodeDescription as a comment. Fabrics we write for ibsim use their node names as node
//   descriptions, so with NodeNaming::kAuto the descriptions become the names when every node
//   has one and no two are equal; otherwise every node gets ibnetdiscover's GUID name (mixing
//   would make names depend on which descriptions happen to be unique). Either way
//   Node::description keeps the NodeDescription.
// - GUIDs, system image GUIDs, switch LID/LMC (port 0), CA port GUIDs/LIDs/LMCs as discovered;
//   LIDs are not reassigned (0 stays 0 when no SM has run).
// - Links from each port's remote port, with the active width and speed: LinkSpeedActive
//   (SDR/DDR/QDR), overridden by LinkSpeedExtActive (FDR/EDR/HDR/NDR) when the port advertises
//   extended speeds. Levels are unknown (-1), as for any ibnetdiscover dump.
//
// Thread safety: libibnetdisc/libibumad keep per-process state; call from one thread at a time.
#pragma once

#include <string>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::ib {

enum class NodeNaming {
  kAuto,         // descriptions when all present and unique, else GUID names
  kGuid,         // always "S-<guid>" / "H-<guid>" / "R-<guid>"
  kDescription,  // always the description; an error if one is empty or repeated
};

struct DiscoverOptions {
  std::string ca_name;  // local CA to discover from (e.g. "mlx5_0"); empty: the first one
  int ca_port = 0;      // its port; 0: the first active one
  int timeout_ms = 0;   // per-MAD timeout; 0: libibnetdisc's default
  int retries = 0;      // 0: libibnetdisc's default
  NodeNaming naming = NodeNaming::kAuto;
};

// Discovers the subnet attached to the local CA port.
StatusOr<fabric::Fabric> DiscoverFabric(const DiscoverOptions& options = {});

// Reads an `ibnetdiscover --cache` file into a Fabric (naming as in options; other fields unused).
StatusOr<fabric::Fabric> LoadIbndCache(const std::string& path,
                                       const DiscoverOptions& options = {});

}  // namespace gpool::ib
