// Where the controller's (and the hollow agent's) fabric comes from: a fabric file (ibnetdiscover
// dump, ibsim net, Clos CSV: anything fabric::LoadFabric reads) or a generator spec.
//
// Generator specs mirror `gpool fabric gen`: "gen:brief" (the brief's 2,048-GPU NDR fabric:
// 256 hosts x 8 rail-optimised HCAs, 2-level fat-tree of 64-port switches) and
// "gen:fat-tree[:key=value,...]" with keys levels, radix, pods, leaves, core-links,
// hcas-per-node, hosts (the FatTreeOptions of fabric/generators.h). Torus and dragonfly specs are
// not accepted here (an error says so): write them to a file with `gpool fabric gen` first.
//
// Hosts: a CA named "host0001 mlx5_3" belongs to host "host0001" (the text before the first
// space, as ibnetdiscover names HCAs "<hostname> <device>"); a name without a space is its own
// host. Hosts are listed in fabric (CA id) order, each with its CAs in id order.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::control {

StatusOr<fabric::Fabric> LoadFabricSource(const std::string& source);

struct FabricHost {
  std::string name;
  std::vector<fabric::NodeId> cas;  // in CA id order: cas[r] is rail r
};
std::string_view HostNameOfCa(std::string_view ca_name);
std::vector<FabricHost> FabricHosts(const fabric::Fabric& f);

}  // namespace gpool::control
