// Node-side management datagrams for one port: its state (SMP PortInfo) and its counters (PMA
// PortCounters / PortCountersExtended), what `smpquery portinfo` and `perfquery` report, through
// libibmad.
//
// Needs a umad device (on our machines: libumad2sim.so to ibsim, see ib/ibsim.h). The verbs data
// path is not here (src/agent).
//
// Limits: ports are addressed by LID, so the target needs a LID (an SM has run); 32-bit
// PortCounters saturate rather than wrap, and the 64-bit data/packet counters come from
// PortCountersExtended when the port answers it (ibsim does), else from the 32-bit ones; data
// counters count 4-byte words, as IB defines them (bytes = words x 4).
//
// Thread safety: a MadPort is one libibmad port; use it from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "fabric/model.h"

struct ibmad_port;

namespace gpool::ib {

struct PortState {
  std::string state;       // "Down", "Initialize", "Armed", "Active"
  std::string phys_state;  // "Sleep", "Polling", "Disabled", "LinkUp", ...
  int width = 0;           // active lanes: 1, 2, 4, 8, 12 (0 when the link is down)
  fabric::LinkSpeed speed = fabric::LinkSpeed::kSdr;  // active speed
  uint16_t lid = 0;        // the port's LID (for a switch: the switch's)
  uint16_t sm_lid = 0;
};

struct PortCounters {
  uint64_t xmit_data_words = 0, rcv_data_words = 0;  // 4-byte words
  uint64_t xmit_packets = 0, rcv_packets = 0;
  uint32_t symbol_errors = 0, link_error_recovery = 0, link_downed = 0;
  uint32_t rcv_errors = 0, xmit_discards = 0;
  uint32_t xmit_wait = 0;
  bool extended = false;  // the 64-bit counters came from PortCountersExtended
};

struct MadPortOptions {
  std::string ca_name;  // local CA; empty: the first
  int ca_port = 0;      // 0: the first active
  int timeout_ms = 0;   // 0: libibmad's default
};

class MadPort {
 public:
  static StatusOr<std::unique_ptr<MadPort>> Open(const MadPortOptions& options = {});
  ~MadPort();
  MadPort(const MadPort&) = delete;
  MadPort& operator=(const MadPort&) = delete;

  StatusOr<PortState> QueryState(uint16_t lid, int port);
  StatusOr<PortCounters> QueryCounters(uint16_t lid, int port);
  // Clears the port's counters (PortCounters and PortCountersExtended), as `perfquery -R`.
  Status ResetCounters(uint16_t lid, int port);

 private:
  MadPort() = default;
  ibmad_port* port_ = nullptr;
  int timeout_ms_ = 0;
};

}  // namespace gpool::ib
