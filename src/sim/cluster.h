// The simulated cluster: hosts with GPUs, CPU and memory, grouped into fabric domains (leaf =
// top-of-rack switch, pod = aggregation block), plus the network capacities the performance
// model needs. Built from the openb node list, the Lingjun Clos CSV, or a gpool Fabric.
//
// Thread safety: a value; const use from many threads is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpool::fabric {
class Fabric;
}

namespace gpool::sim {

class FabricRoutes;

struct SimHost {
  std::string name;
  int32_t gpus = 0;
  int64_t cpu_milli = 0;
  int64_t mem_mib = 0;
  std::string model;   // GPU model ("V100M16"); empty when unknown
  int32_t leaf = 0;    // index into SimCluster::leaf_names
  int32_t pod = 0;     // index into SimCluster::pod_names
  double nic_gbps = 0; // the host's network injection bandwidth (all its NICs)
  int64_t ca = -1;     // the fabric NodeId of its channel adapter (ClusterFromFabric); -1 none
};

struct SimCluster {
  std::vector<SimHost> hosts;
  std::vector<std::string> leaf_names;
  std::vector<std::string> pod_names;
  // Uplink capacity of each leaf towards its pod, and of each pod towards the core (Gb/s, one
  // direction). Sized by the loader: sum of host NICs over the oversubscription ratio, or the
  // fabric's own links.
  std::vector<double> leaf_uplink_gbps;
  std::vector<double> pod_uplink_gbps;
  std::string description;
  // The fabric's routes (fabric_routes.h) when the performance model follows them; null: the
  // aggregate-pipe model over leaf_uplink_gbps / pod_uplink_gbps (perf_model.h).
  std::shared_ptr<const FabricRoutes> routes;

  int64_t total_gpus() const;
  // Checks indices and capacities; the engine calls it before a run.
  Status Validate() const;
};

// Capacities used when the source has no link rates of its own (openb, Lingjun CSV).
struct ClusterNetOptions {
  double host_gbps = 1600;         // 8 x 200 Gb/s NICs per 8-GPU host
  double leaf_oversubscription = 1.0;
  double pod_oversubscription = 2.0;
};

// openb_node_list_gpu_node.csv: sn,cpu_milli,memory_mib,gpu,model. The list has no topology:
// hosts are grouped, in list order, into synthetic leaves of kOpenbHostsPerLeaf in one pod. Every
// openb task fits in one host, so the grouping never stretches a run time; it keeps the
// scheduler's per-domain aggregates small (one leaf per host made every cycle copy 1,213
// domains).
inline constexpr int kOpenbHostsPerLeaf = 32;
StatusOr<SimCluster> ParseOpenbNodes(std::string_view text, std::string_view filename,
                                     const ClusterNetOptions& net);

struct ClosCsvOptions {
  int32_t gpus_per_host = 8;
  int64_t cpu_milli_per_host = 96000;
  int64_t mem_mib_per_host = 1024 * 1024;
  std::string model = "A100";
  ClusterNetOptions net;
};
// The Lingjun topology CSV: ip,DSW,PSW,ASW. Leaf = the pair PSW+ASW (ASW names repeat under
// different PSWs), pod = PSW.
StatusOr<SimCluster> ParseClosCsv(std::string_view text, std::string_view filename,
                                  const ClosCsvOptions& options);

struct FabricClusterOptions {
  int32_t gpus_per_host = 8;
  int64_t cpu_milli_per_host = 96000;
  int64_t mem_mib_per_host = 1024 * 1024;
  std::string model = "H100";
  // Count only usable links (up, both ends up) in the capacities, and leave a leaf or pod whose
  // uplinks are all down at 0 Gb/s: the controller's view of a degraded fabric. The domain
  // structure (tiers, leaves, pods) is the cabling's either way, so the indices match a run
  // without it.
  bool usable_links_only = false;
};
// A host per channel adapter (CA) of a gpool Fabric. Leaf = the switch the CA's first port
// links to; pod = the group of leaves joined through switches below the top tier (a whole
// 2-tier fabric is one pod per leaf). Capacities come from the fabric's link rates.
StatusOr<SimCluster> ClusterFromFabric(const fabric::Fabric& f, const FabricClusterOptions& options);

// Each switch's tier by hop distance from the hosts (leaves, which touch a channel adapter, are
// tier 0); -1 for channel adapters and switches no host reaches. Indexed by fabric NodeId.
std::vector<int> SwitchTiers(const fabric::Fabric& f);

// Sniffs the header of a node file: "openb" (sn,...), "clos-csv" (ip,DSW,PSW,ASW), or an error.
StatusOr<std::string> DetectNodeFormat(std::string_view text, std::string_view filename);
// Reads a node file in the detected format.
StatusOr<SimCluster> ReadNodesFile(const std::string& path, const ClosCsvOptions& options);

}  // namespace gpool::sim
