#include "remote/transport/transport.h"

#include <fmt/format.h>

#include "remote/transport/tcp_transport.h"
#include "remote/transport/ucx_transport.h"

namespace gpool::remote {

StatusOr<std::unique_ptr<Transport>> MakeTransport(std::string_view name,
                                                   const TransportOptions& options) {
  if (name == "tcp") return MakeTcpTransport(options);
  if (name == "ucx") return MakeUcxTransport(options);
  return Status::InvalidArgument(fmt::format("unknown transport '{}': want tcp or ucx", name));
}

}  // namespace gpool::remote
