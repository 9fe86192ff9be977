// The UCX transport (ucp tag API). See ucx_transport.cc.
#pragma once

#include <memory>

#include "remote/transport/transport.h"

namespace gpool::remote {

StatusOr<std::unique_ptr<Transport>> MakeUcxTransport(const TransportOptions& options);

}  // namespace gpool::remote
