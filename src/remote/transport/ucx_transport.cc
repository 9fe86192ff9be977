// The UCX transport's entry points (ucx_transport.h says how it works): the ucp context and its
// configuration (MakeUcxTransport: UCX_TLS, keepalive, peer error mode, wake-up support), the
// listener and the connector that bootstrap each connection over a TCP socket, and the helpers
// that read an endpoint's transport. The connection itself: ucx_internal.h and the files it names.
#include "remote/transport/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"
#include "remote/transport/socket.h"
#include "remote/transport/ucx_internal.h"

namespace gpool::remote::ucx {
namespace {

class UcxListener final : public Listener {
 public:
  UcxListener(std::shared_ptr<Context> ctx, std::unique_ptr<net::WakeableListenSocket> socket,
              const TransportOptions& options)
      : ctx_(std::move(ctx)), socket_(std::move(socket)), options_(options) {}

  StatusOr<std::unique_ptr<Connection>> Accept() override {
    for (;;) {
      // Handed over once the client's address blob is in (it sends it before it reads ours), so
      // Start's read never waits on a silent peer while other clients queue.
      GPOOL_ASSIGN_OR_RETURN(Fd sock, socket_->AcceptArrived(BlobSize, options_.handshake_timeout_ms));
      // The bootstrap socket stays open as the liveness channel: keepalive makes a dead host
      // show up on it (TcpLivenessOptions).
      if (!net::SetLiveness(sock.get(), options_.liveness).ok()) continue;
      auto conn = std::make_unique<UcxConnection>(ctx_, std::move(sock), options_);
      // A client that fails its handshake is dropped; the listener keeps going.
      if (conn->Start().ok()) return std::unique_ptr<Connection>(std::move(conn));
    }
  }

  void Close() override { socket_->Close(); }
  // A session process forked from the server: drops its copies of the listening socket and of
  // the connections AcceptArrived holds (other clients', whose bootstrap sockets are their
  // liveness channels: a copy kept here would hide their session's death from them).
  Status AbandonAfterFork() override {
    socket_->AbandonAfterFork();
    return Status::Ok();
  }
  std::string address() const override { return socket_->address(); }

 private:
  std::shared_ptr<Context> ctx_;
  std::unique_ptr<net::WakeableListenSocket> socket_;
  TransportOptions options_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<Context> ctx, const TransportOptions& options)
      : ctx_(std::move(ctx)), options_(options) {}
  std::string_view name() const override { return "ucx"; }

  StatusOr<std::unique_ptr<Listener>> Listen(std::string_view address) override {
    GPOOL_ASSIGN_OR_RETURN(auto socket, net::WakeableListenSocket::Listen(address));
    return std::unique_ptr<Listener>(new UcxListener(ctx_, std::move(socket), options_));
  }

  StatusOr<std::unique_ptr<Connection>> Connect(std::string_view address) override {
    GPOOL_ASSIGN_OR_RETURN(Fd fd, net::ConnectTcp(address));
    GPOOL_RETURN_IF_ERROR(net::SetLiveness(fd.get(), options_.liveness));
    auto conn = std::make_unique<UcxConnection>(ctx_, std::move(fd), options_);
    Status s = conn->Start();
    if (!s.ok()) return Status(s.code(), fmt::format("ucx connect to {}: {}", address, s.message()));
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  std::shared_ptr<Context> ctx_;
  TransportOptions options_;
};

// True when UCX_TLS (the option, else the environment) lists only transports with peer failure
// detection: tcp and the InfiniBand verbs ones. "all"/unset includes shared memory: false.
bool AllTransportsDetectPeerFailure(const std::string& option) {
  std::string tls = option;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env != nullptr ? env : "";
  }
  if (tls.empty() || tls.front() == '^') return false;
  for (std::string_view t : Split(tls, ',')) {
    bool ok = t == "tcp" || t.starts_with("rc") || t.starts_with("ud") || t.starts_with("dc") ||
              t == "ib";
    if (!ok) return false;
  }
  return true;
}

}  // namespace
}  // namespace gpool::remote::ucx

namespace gpool::remote {

std::string UcxAmTransport(std::string_view ep_info) {
  for (std::string_view line : Split(ep_info, '\n')) {
    const size_t lane = line.find("lane[");
    const size_t arrow = line.find("->");
    if (lane == std::string_view::npos || arrow == std::string_view::npos || arrow < lane) continue;
    bool am = false;
    for (std::string_view word : Split(line.substr(arrow + 2), ' ')) am = am || word == "am";
    if (!am) continue;
    // "lane[0]:  1:sysv/memory.0 md[1]": the resource number, then "transport/device".
    std::string_view rest = line.substr(lane, arrow - lane);
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return "";
    rest = Trim(rest.substr(colon + 1));
    const size_t name = rest.find(':');
    const size_t slash = rest.find('/');
    if (name == std::string_view::npos || slash == std::string_view::npos || slash < name) return "";
    return std::string(rest.substr(name + 1, slash - name - 1));
  }
  return "";
}

bool IsSharedMemoryTransport(std::string_view transport) {
  return transport == "posix" || transport == "sysv" || transport == "xpmem";
}

std::string UcxConnectionAmTransport(const Connection& connection) {
  const auto* ucx = dynamic_cast<const ucx::UcxConnection*>(&connection);
  return ucx != nullptr ? ucx->am_transport() : "";
}

StatusOr<std::unique_ptr<Transport>> MakeUcxTransport(const TransportOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::Internal("ucp_config_read: " + ucx::UcsError(st));
  if (!options.ucx_tls.empty()) {
    st = ucp_config_modify(config, "TLS", options.ucx_tls.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status::InvalidArgument(
          fmt::format("UCX_TLS '{}' rejected: {}", options.ucx_tls, ucx::UcsError(st)));
    }
  }
  // Keepalive for UCX's own tcp sockets and ucp endpoints (TransportOptions::liveness,
  // ucx_keepalive_interval_ms). KEEPALIVE_INTERVAL is ucp's own (UCX_KEEPALIVE_INTERVAL); the
  // others are the tcp transport's UCX_TCP_KEEP*: ucp_config_modify keeps names it does not
  // know and hands them to each transport's configuration, whose fields lack the "TCP_" prefix
  // (with it, UCX 1.13 silently applies nothing: remote_liveness_test reads the sockets back).
  std::vector<std::pair<std::string, std::string>> keepalive;
  const TcpLivenessOptions& live = options.liveness;
  if (live.keepalive_idle_s > 0) {
    // UCX keeps times in its tick clock and truncates them back to whole seconds for the
    // socket (measured: "7s" gave 6 s now and then); half a second more gives the seconds asked.
    keepalive.push_back({"KEEPIDLE", fmt::format("{}ms", live.keepalive_idle_s * 1000 + 500)});
    keepalive.push_back(
        {"KEEPINTVL", fmt::format("{}ms", std::max(1, live.keepalive_interval_s) * 1000 + 500)});
    keepalive.push_back({"KEEPCNT", fmt::format("{}", std::max(1, live.keepalive_count))});
  }
  if (options.ucx_keepalive_interval_ms > 0) {
    keepalive.push_back({"KEEPALIVE_INTERVAL", fmt::format("{}ms", options.ucx_keepalive_interval_ms)});
  }
  for (const auto& [name, value] : keepalive) {
    st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status::InvalidArgument(
          fmt::format("UCX_{}={} rejected: {}", name, value, ucx::UcsError(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  auto ctx = std::make_shared<ucx::Context>();
  ctx->peer_error_mode = ucx::AllTransportsDetectPeerFailure(options.ucx_tls);
  ctx->wakeup = true;
  st = ucp_init(&params, config, &ctx->handle);
  if (st != UCS_OK) {
    // Transports without event support: fall back to sleep-polling waits.
    params.features = UCP_FEATURE_TAG;
    ctx->wakeup = false;
    ctx->handle = nullptr;
    st = ucp_init(&params, config, &ctx->handle);
  }
  ucp_config_release(config);
  if (st != UCS_OK) {
    ctx->handle = nullptr;
    return Status::Unavailable(fmt::format("ucp_init (UCX_TLS={}): {}",
                                           options.ucx_tls.empty() ? "default" : options.ucx_tls,
                                           ucx::UcsError(st)));
  }
  return std::unique_ptr<Transport>(new ucx::UcxTransport(std::move(ctx), options));
}

}  // namespace gpool::remote
