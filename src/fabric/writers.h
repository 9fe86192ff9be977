// Writers that turn a Fabric into the files other tools read.
//
// - WriteIbnetdiscover: ibnetdiscover's text dump, with the GUIDs, LIDs, LMCs, descriptions and
//   width/speed tokens real dumps carry, so ParseNet reads it back to the same fabric
//   (SameFabric). Switch records come first, then CAs, then routers, as ibnetdiscover orders
//   them. vendid/devid lines are left out: the model does not keep them. A switch with a level
//   (Node::level) gets a `# gpool: level N` comment line under its header, so a generated tree
//   loads back with its tiers even where hosts leave leaves empty (see ibnetdiscover.h).
// - WriteIbsimNet: the same grammar arranged for ibsim + OpenSM. Switch records come first and
//   the first record is where ibsim attaches the SM: by default the first leaf switch (level 0,
//   or any switch) that has a CA attached, else the first switch. GUID lines before each record
//   keep the fabric's GUIDs; widths and speeds go in the port comments (`lid 3 4xNDR`), which is
//   where ibsim reads them (rather than `w=`/`s=` masks, which it reads as enabled sets). Level
//   comment lines as above (ibsim skips comment lines). ibsim
//   limits node names to 64 characters without '#' or '@'; names that break this are an error.
//   Checked by hand with Debian 12's ibsim 0.10: it loads these files (jabl dumps, a generated
//   3-level fat-tree), but that version knows speeds only up to HDR, so NDR/XDR links print
//   "cannot parse speed" once per port and run at ibsim's default speed there.
// - WriteSlurmTopology: Slurm's topology.conf for topology/tree (see SlurmHostName).
// - WriteDot: Graphviz, switches as boxes ranked by level, CAs as ellipses, links labelled with
//   their ports and rate.
// - WriteJson: {"switches", "cas", "routers", "links" (counts), "nodes": [...], "edges": [...]}.
//
// Thread safety: stateless functions over a const Fabric; safe to call concurrently.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

StatusOr<std::string> WriteIbnetdiscover(const Fabric& fabric);

struct IbsimWriteOptions {
  // Node whose record goes first (where ibsim attaches the SM). Empty: chosen as described above.
  std::string sm_node;
};
StatusOr<std::string> WriteIbsimNet(const Fabric& fabric, const IbsimWriteOptions& options = {});

// The host a CA belongs to, as Slurm names nodes. Linux sets a CA's node description to
// "<hostname> <device>" ("node001 HCA-1", "r-ufm101 mlx5_0"), so when the description's second
// word starts with "HCA" or "mlx" the host is its first word. Otherwise a name that is not
// ibnetdiscover's generated "H-<guid>" gives its first word ("node001 HCA-1" -> "node001"), and
// anything else is the whole name with characters Slurm cannot take replaced by '_' (old dumps
// describe CAs by model, "MT23108 InfiniHost ...", which names no host).
std::string SlurmHostName(const Node& ca);

// Compresses host names into a Slurm hostlist: node001..node018 -> "node[001-018]". Zero-padded
// numbers keep their width; numbers of different widths are only merged when none is padded.
std::string CompressHostlist(std::vector<std::string> names);

struct SlurmWriteOptions {
  // Prefix for every switch name (Slurm switch names share one namespace with nothing else, but
  // a prefix helps when several fabrics are merged). Empty by default.
  std::string switch_prefix;
  // Site names by node GUID (node_name_map.h, `--node-name-map`): a CA found here gives its host
  // name (the first word of its mapped name: "gpu001 mlx5_0" -> gpu001), a switch its switch
  // name; nodes not in the map keep the names below.
  const std::unordered_map<uint64_t, std::string>* node_names = nullptr;
};
// Levels: ComputeSwitchLevels (levels.h), the switches' own levels when every switch has one
// (generators, Clos CSV, files gpool wrote), else inferred from the switch graph.
// Every switch-to-switch link is listed once, from its upper end: a switch lists as Switches= all
// its neighbours one level down (a leaf under each of its spines), and a leaf its hosts as Nodes=.
// Slurm 22.05's topology/tree refuses the upward direction ("switch ... has both child switches
// and nodes", "Switch configuration is not a tree"), so links are not listed from both ends. A
// host sits under the leaf of its first CA (lowest node id): topology/tree has one leaf per node,
// so a rail-optimised host whose CAs reach several leaves cannot be described exactly. Switches
// with no host below them are left out with a comment.
StatusOr<std::string> WriteSlurmTopology(const Fabric& fabric, const SlurmWriteOptions& options = {});

std::string WriteDot(const Fabric& fabric);

// indent < 0: one line.
std::string WriteJson(const Fabric& fabric, int indent = 2);

}  // namespace gpool::fabric
