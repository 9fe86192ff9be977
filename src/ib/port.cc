#include "ib/port.h"

#include <infiniband/mad.h>

#include <fmt/format.h>

namespace gpool::ib {
namespace {

constexpr size_t kMadBuf = 1024;
constexpr uint32_t kPortCapHasExtSpeeds = 1u << 14;  // CapabilityMask.IsExtendedSpeedsSupported  // libibmad answers need room for a whole MAD and more

std::string StateName(uint32_t s) {
  switch (s) {
    case 1: return "Down";
    case 2: return "Initialize";
    case 3: return "Armed";
    case 4: return "Active";
    case 5: return "ActiveDefer";
  }
  return fmt::format("state {}", s);
}

std::string PhysName(uint32_t s) {
  switch (s) {
    case 1: return "Sleep";
    case 2: return "Polling";
    case 3: return "Disabled";
    case 4: return "PortConfigurationTraining";
    case 5: return "LinkUp";
    case 6: return "LinkErrorRecovery";
    case 7: return "PhyTest";
  }
  return fmt::format("phys state {}", s);
}

int LaneCount(uint32_t mask) {
  switch (mask) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
  }
  return 0;
}

}  // namespace

StatusOr<std::unique_ptr<MadPort>> MadPort::Open(const MadPortOptions& options) {
  int classes[] = {IB_SMI_CLASS, IB_SMI_DIRECT_CLASS, IB_PERFORMANCE_CLASS};
  std::string ca = options.ca_name;
  ibmad_port* p = mad_rpc_open_port(ca.empty() ? nullptr : ca.data(), options.ca_port, classes, 3);
  if (!p)
    return Status::Unavailable(fmt::format(
        "cannot open a MAD port on {} port {} (no InfiniBand device or no umad access; under "
        "ibsim run with LD_PRELOAD=libumad2sim.so)",
        ca.empty() ? "the first CA" : ca, options.ca_port));
  std::unique_ptr<MadPort> m(new MadPort());
  m->port_ = p;
  m->timeout_ms_ = options.timeout_ms;
  return m;
}

MadPort::~MadPort() {
  if (port_) mad_rpc_close_port(port_);
}

StatusOr<PortState> MadPort::QueryState(uint16_t lid, int port) {
  if (lid == 0) return Status::InvalidArgument("LID 0: the port has no LID (has an SM run?)");
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  if (!smp_query_via(buf, &id, IB_ATTR_PORT_INFO, static_cast<unsigned>(port),
                     static_cast<unsigned>(timeout_ms_), port_))
    return Status::Unavailable(fmt::format("PortInfo query of LID {} port {} failed", lid, port));
  PortState s;
  s.state = StateName(mad_get_field(buf, 0, IB_PORT_STATE_F));
  s.phys_state = PhysName(mad_get_field(buf, 0, IB_PORT_PHYS_STATE_F));
  s.width = LaneCount(mad_get_field(buf, 0, IB_PORT_LINK_WIDTH_ACTIVE_F));
  s.lid = static_cast<uint16_t>(mad_get_field(buf, 0, IB_PORT_LID_F));
  s.sm_lid = static_cast<uint16_t>(mad_get_field(buf, 0, IB_PORT_SMLID_F));
  // Extended speeds count only when the port advertises them; a switch advertises its
  // capabilities on port 0 (its external ports' CapabilityMask may be empty).
  uint32_t cap = mad_get_field(buf, 0, IB_PORT_CAPMASK_F);
  if (!(cap & kPortCapHasExtSpeeds) && port != 0) {
    uint8_t p0[kMadBuf] = {};
    if (smp_query_via(p0, &id, IB_ATTR_PORT_INFO, 0, static_cast<unsigned>(timeout_ms_), port_))
      cap = mad_get_field(p0, 0, IB_PORT_CAPMASK_F);
  }
  uint32_t ext = (cap & kPortCapHasExtSpeeds) ? mad_get_field(buf, 0, IB_PORT_LINK_SPEED_EXT_ACTIVE_F) : 0;
  switch (ext) {
    case 1: s.speed = fabric::LinkSpeed::kFdr; break;
    case 2: s.speed = fabric::LinkSpeed::kEdr; break;
    case 4: s.speed = fabric::LinkSpeed::kHdr; break;
    case 8: s.speed = fabric::LinkSpeed::kNdr; break;
    default:
      switch (mad_get_field(buf, 0, IB_PORT_LINK_SPEED_ACTIVE_F)) {
        case 2: s.speed = fabric::LinkSpeed::kDdr; break;
        case 4: s.speed = fabric::LinkSpeed::kQdr; break;
        default: s.speed = fabric::LinkSpeed::kSdr; break;
      }
  }
  if (s.state == "Down") s.width = 0;
  return s;
}

StatusOr<PortCounters> MadPort::QueryCounters(uint16_t lid, int port) {
  if (lid == 0) return Status::InvalidArgument("LID 0: the port has no LID (has an SM run?)");
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  if (!pma_query_via(buf, &id, port, static_cast<unsigned>(timeout_ms_), IB_GSI_PORT_COUNTERS,
                     port_))
    return Status::Unavailable(
        fmt::format("PortCounters query of LID {} port {} failed", lid, port));
  PortCounters c;
  c.symbol_errors = mad_get_field(buf, 0, IB_PC_ERR_SYM_F);
  c.link_error_recovery = mad_get_field(buf, 0, IB_PC_LINK_RECOVERS_F);
  c.link_downed = mad_get_field(buf, 0, IB_PC_LINK_DOWNED_F);
  c.rcv_errors = mad_get_field(buf, 0, IB_PC_ERR_RCV_F);
  c.xmit_discards = mad_get_field(buf, 0, IB_PC_XMT_DISCARDS_F);
  c.xmit_wait = mad_get_field(buf, 0, IB_PC_XMT_WAIT_F);
  c.xmit_data_words = mad_get_field(buf, 0, IB_PC_XMT_BYTES_F);
  c.rcv_data_words = mad_get_field(buf, 0, IB_PC_RCV_BYTES_F);
  c.xmit_packets = mad_get_field(buf, 0, IB_PC_XMT_PKTS_F);
  c.rcv_packets = mad_get_field(buf, 0, IB_PC_RCV_PKTS_F);
  uint8_t ext[kMadBuf] = {};
  if (pma_query_via(ext, &id, port, static_cast<unsigned>(timeout_ms_), IB_GSI_PORT_COUNTERS_EXT,
                    port_)) {
    c.extended = true;
    c.xmit_data_words = mad_get_field64(ext, 0, IB_PC_EXT_XMT_BYTES_F);
    c.rcv_data_words = mad_get_field64(ext, 0, IB_PC_EXT_RCV_BYTES_F);
    c.xmit_packets = mad_get_field64(ext, 0, IB_PC_EXT_XMT_PKTS_F);
    c.rcv_packets = mad_get_field64(ext, 0, IB_PC_EXT_RCV_PKTS_F);
  }
  return c;
}

Status MadPort::ResetCounters(uint16_t lid, int port) {
  if (lid == 0) return Status::InvalidArgument("LID 0: the port has no LID (has an SM run?)");
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  if (!performance_reset_via(buf, &id, port, 0xffffffff, static_cast<unsigned>(timeout_ms_),
                             IB_GSI_PORT_COUNTERS, port_))
    return Status::Unavailable(fmt::format("PortCounters reset of LID {} port {} failed", lid, port));
  uint8_t ext[kMadBuf] = {};
  // Extended counters are optional; a port without them has nothing more to clear.
  (void)performance_reset_via(ext, &id, port, 0xffffffff, static_cast<unsigned>(timeout_ms_),
                              IB_GSI_PORT_COUNTERS_EXT, port_);
  return Status::Ok();
}

}  // namespace gpool::ib
