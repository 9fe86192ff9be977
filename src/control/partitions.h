// Tenant isolation and QoS through OpenSM: a pure generator of partitions.conf, the QoS policy
// and the opensm.conf QoS keys from the tenants and the ports their running jobs hold.
//
// - One partition per tenant, P_Key derived from the tenant name (FNV-1a into 0x0001..0x7ffe,
//   probing upwards on a collision, tenants in name order), so a tenant keeps its P_Key as other
//   tenants come and go (unless a collision's probe order changes: rare, stated here). Members:
//   the port GUIDs of the HCAs of the nodes the tenant's running jobs hold, full membership.
// - The management partition (Default, 0x7fff): every port limited (it can reach the SM and
//   full members only), switches and the configured management ports full, and `SELF=full`
//   last (a later ALL_CAS=limited would otherwise demote the SM's own port).
// - QoS: an SL per tenant (options.tenant_sl, else default_sl), written as a qos-ulps policy
//   (`any, pkey 0x.... : SL`) so that the SA answers a tenant's path records with its SL; the
//   opensm.conf keys `qos TRUE`, qos_max_vls, qos_high_limit, qos_vlarb_high/low (weights per
//   VL), qos_sl2vl (SL s on VL min(s, max_vls-1)), and the two file paths.
//
// Apply (control/fabric_monitor.h) writes the files atomically and sends SIGHUP to OpenSM.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::control {

struct TenantPorts {
  std::string tenant;
  std::vector<uint64_t> port_guids;  // duplicates are dropped
};

struct PartitionOptions {
  std::vector<uint64_t> management_ports;  // full members of the management partition
  std::map<std::string, int> tenant_sl;    // tenant -> SL 0..15
  int default_sl = 0;
  int max_vls = 8;                         // 1, 2, 4, 8 or 15
  int high_limit = 0;                      // qos_high_limit
  std::vector<int> vl_weights;             // low-priority VL arbitration weight per VL (0..255); empty = 4 each
  std::vector<int> high_vls;               // VLs in the high-priority table (weight 255 each)
  std::string partitions_path;             // written into opensm.conf
  std::string qos_policy_path;
};

struct PartitionPlan {
  std::map<std::string, uint16_t> pkeys;  // tenant -> 15-bit P_Key
  std::map<std::string, int> sls;         // tenant -> SL
  std::string partitions_conf;
  std::string qos_policy;
  std::string opensm_conf;  // the QoS and partition keys of opensm.conf
};

// P_Keys for these tenants (see the header comment). Error beyond 32,766 tenants.
StatusOr<std::map<std::string, uint16_t>> AssignPkeys(const std::vector<std::string>& tenants);

// Errors name the field: a bad SL ("tenant_sl[t]: SL 16 outside 0..15"), max_vls, a weight.
StatusOr<PartitionPlan> PlanPartitions(const std::vector<TenantPorts>& tenants,
                                       const PartitionOptions& options);

}  // namespace gpool::control
