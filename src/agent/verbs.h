// HCAs and their ports through libibverbs. The device path (VerbsHcas) is small and separate
// from the mapping of verbs' enums onto gpool's fabric model (tested without a device).
// Without RDMA devices (this machine, CI) List returns an empty list.
//
// Thread safety: the mapping functions are pure; VerbsHcas holds no state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agent/inventory.h"
#include "fabric/model.h"

namespace gpool::agent {

// ibv_port_attr::active_width (1=1x, 2=4x, 4=8x, 8=12x, 16=2x) -> lanes; 0 when unknown.
int IbWidthLanes(uint8_t active_width);
// ibv_port_attr::active_speed (1=SDR, 2=DDR, 4=QDR, 8=FDR10, 16=FDR, 32=EDR, 64=HDR, 128=NDR,
// 256=XDR from active_speed_ex) -> the model's speed; false when unknown.
bool IbSpeed(uint32_t active_speed, fabric::LinkSpeed* speed);
// "4xNDR" and lanes x lane rate (Gb/s, nominal) for a port; "unknown" / 0 when either is unknown.
std::string IbRate(uint8_t active_width, uint32_t active_speed, double* gbps);
// ibv_port_state (0 nop, 1 down, 2 init, 3 armed, 4 active, 5 active_defer) -> "down", ...
std::string IbPortState(int state);
// A GUID as ibnetdiscover prints it: "0x" and 16 hex digits.
std::string FormatGuid(uint64_t guid);

// The live source: every port of every RDMA device (ibv_get_device_list).
class VerbsHcas : public HcaSource {
 public:
  StatusOr<std::vector<HcaPortInfo>> List() override;
};

}  // namespace gpool::agent
