// SmpProbe: the few subnet-management queries a trap handler needs, each one MAD by LID through
// libibmad: a node's description and GUID (to name the trap's issuer) and one port's link phase
// (PortInfo PortState/PortPhysicalState), with a short timeout and few retries so that a probe
// of an unreachable port fails fast instead of stalling the handler for libibmad's default
// (seconds with retries). Targets are LIDs (routed by the switches' tables) or directed routes
// (port lists from the local node, as OpenSM's own sweeps use).
//
// Unlike MadPort::QueryState it asks nothing else (one MAD per port, no speed decoding), because
// a trap handler probes every connected port of a switch.
//
// Needs a umad device (under ibsim: LD_PRELOAD=libumad2sim.so, see ib/ibsim.h). LID routes go
// through the switches' forwarding tables, so right after a failure a probe of a switch whose
// route crossed the dead element times out until the SM has re-routed: callers retry later.
//
// Thread safety: one SmpProbe is one libibmad port; use it from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct ibmad_port;

namespace gpool::ib {

enum class LinkPhase {
  kDown,    // PortState Down (physically Sleep/Polling/Disabled: no peer)
  kInit,    // physically up, not yet Active (the SM has not finished with it)
  kActive,  // Active (or ActiveDefer)
};
const char* LinkPhaseName(LinkPhase p);

struct SmpProbeOptions {
  std::string ca_name;   // local CA; empty: the first
  int ca_port = 0;       // 0: the first active
  int timeout_ms = 100;  // per MAD
  int retries = 1;       // libibmad retries after a timeout
};

class SmpProbe {
 public:
  static StatusOr<std::unique_ptr<SmpProbe>> Open(const SmpProbeOptions& options = {});
  ~SmpProbe();
  SmpProbe(const SmpProbe&) = delete;
  SmpProbe& operator=(const SmpProbe&) = delete;

  // NodeDescription (trailing NULs/spaces trimmed).
  StatusOr<std::string> NodeDescription(uint16_t lid);
  // NodeInfo.NodeGUID.
  StatusOr<uint64_t> NodeGuid(uint16_t lid);
  // PortInfo of `port` (1-based) of the node at `lid`.
  StatusOr<LinkPhase> PortPhase(uint16_t lid, int port);

  // The same by directed route: the out-ports from the local node (empty: the local node). DR
  // SMPs bypass the forwarding tables, so they work while the SM is still re-routing.
  StatusOr<std::string> NodeDescriptionDr(const std::vector<uint8_t>& path);
  StatusOr<uint64_t> NodeGuidDr(const std::vector<uint8_t>& path);
  StatusOr<LinkPhase> PortPhaseDr(const std::vector<uint8_t>& path, int port);

  int64_t mads_sent() const { return mads_; }

 private:
  SmpProbe() = default;
  // One SMP Get; `what` names the target in errors.
  Status Query(void* id, unsigned attr, unsigned mod, uint8_t* buf, const std::string& what);
  static StatusOr<LinkPhase> Phase(const uint8_t* buf);
  ibmad_port* port_ = nullptr;
  SmpProbeOptions options_;
  int64_t mads_ = 0;
};

}  // namespace gpool::ib
