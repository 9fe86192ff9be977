#include "remote/transport/ucx_transport.h"

namespace gpool::remote {

StatusOr<std::unique_ptr<Transport>> MakeUcxTransport(const TransportOptions&) {
  return Status::Unimplemented("ucx transport: not built yet (coming next)");
}

}  // namespace gpool::remote
