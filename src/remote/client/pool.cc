#include "remote/client/pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace gpool::remote::client {

PoolEnv ParsePoolEnv(const char* d, const char* lease, const char* transport) {
  PoolEnv env;
  if (lease) env.token = lease;
  if (transport) env.transport = transport;
  if (!d || !*d) {
    env.env_error = "GPOOL_DEVICES is not set: no GPUs (run the program with `gpool run`)";
    return env;
  }
  std::string s = d;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? s.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t slash = item.rfind('/');
    DeviceRef ref;
    ref.server = item.substr(0, slash);
    if (slash != std::string::npos) {
      char* end = nullptr;
      ref.index = static_cast<uint32_t>(strtoul(item.c_str() + slash + 1, &end, 10));
      if (*end != '\0' || slash + 1 == item.size()) {
        env.env_error = fmt::format("GPOOL_DEVICES entry '{}': index after '/' is not a number", item);
        env.devices.clear();
        return env;
      }
    }
    if (ref.server.find(':') == std::string::npos) {
      env.env_error = fmt::format("GPOOL_DEVICES entry '{}': want HOST:PORT/INDEX", item);
      env.devices.clear();
      return env;
    }
    env.devices.push_back(ref);
  }
  if (env.devices.empty()) env.env_error = "GPOOL_DEVICES lists no devices";
  return env;
}

PoolEnv ReadPoolEnv() {
  return ParsePoolEnv(getenv("GPOOL_DEVICES"), getenv("GPOOL_LEASE"), getenv("GPOOL_TRANSPORT"));
}

PciAddr PoolPciAddress(const std::vector<DeviceRef>& devices,
                       const std::vector<std::pair<int, int>>& own, int dev) {
  std::vector<std::string> servers;  // in order of first appearance
  for (const DeviceRef& d : devices) {
    if (std::find(servers.begin(), servers.end(), d.server) == servers.end()) {
      servers.push_back(d.server);
    }
  }
  const std::string& server = devices[dev].server;
  int ordinal = static_cast<int>(std::find(servers.begin(), servers.end(), server) - servers.begin());
  std::vector<PciAddr> seen;  // of this server's devices up to `dev`
  for (int d = 0; d <= dev; ++d) {
    if (devices[d].server != server) continue;
    PciAddr a{ordinal, own[d].first, own[d].second};
    if (std::find(seen.begin(), seen.end(), a) != seen.end()) {
      a.domain = static_cast<int>(servers.size()) + d;
    }
    seen.push_back(a);
  }
  return seen.back();
}

StatusOr<std::unique_ptr<ServerLink>> ConnectServer(const PoolEnv& env, const std::string& server) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  LinkOptions o{.address = server, .transport = env.transport, .token = env.token,
                .client_name = fmt::format("{}:{}", host, getpid())};
  return ServerLink::Connect(o);
}

}  // namespace gpool::remote::client
