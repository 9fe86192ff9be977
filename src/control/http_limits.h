// The HTTP endpoint's limits on clients (http_server.h), apart so that ApiOptions (api.h) can
// hold them without including httplib.h (which must be compiled with the library's own flags:
// gpool_use_httplib in src/control/CMakeLists.txt).
#pragma once

#include <chrono>
#include <cstddef>

namespace gpool::control {

struct HttpLimits {
  // A request must be complete (head and body) this long after its connection opened or its
  // previous response was written; the response must be read within as long. Also the idle
  // limit of keep-alive connections.
  std::chrono::milliseconds request_timeout{10000};
  size_t max_connections = 512;          // open connections in total
  size_t max_connections_per_peer = 64;  // open connections per peer address
  size_t max_head_bytes = 16 * 1024;     // request line + headers
  size_t max_body_bytes = 16 * 1024;     // Content-Length
  size_t workers = 4;                    // threads running handlers on complete requests
  size_t keep_alive_max = 100;           // requests per connection
};

}  // namespace gpool::control
