// The UCX connection's life outside its messages (ucx_internal.h names the other parts): the
// bootstrap (Start: the worker, the swap of worker addresses over the TCP socket, the endpoint),
// that socket kept open as the liveness channel (PeerGone, Gone), Close (flush, then shut the
// socket) and teardown (the endpoint, outstanding sends, the helper thread, the worker).
#include "remote/transport/ucx_internal.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "remote/transport/socket.h"

namespace gpool::remote::ucx {
namespace {

Status SendBlob(int fd, const void* data, uint32_t size, std::string_view peer) {
  uint32_t header[2] = {kMagic, size};
  GPOOL_RETURN_IF_ERROR(net::WriteAll(fd, header, sizeof(header), peer));
  return net::WriteAll(fd, data, size, peer);
}

StatusOr<std::vector<std::byte>> RecvBlob(int fd, std::string_view peer) {
  uint32_t header[2];
  GPOOL_RETURN_IF_ERROR(net::ReadAll(fd, header, sizeof(header), peer));
  if (header[0] != kMagic) {
    return Status::InvalidArgument(
        fmt::format("{}: bad ucx handshake magic 0x{:08x} (not a gpool ucx peer?)", peer, header[0]));
  }
  if (header[1] == 0 || header[1] > kMaxAddressBytes) {
    return Status::InvalidArgument(fmt::format("{}: bad ucx address length {}", peer, header[1]));
  }
  std::vector<std::byte> blob(header[1]);
  GPOOL_RETURN_IF_ERROR(net::ReadAll(fd, blob.data(), blob.size(), peer));
  return blob;
}

}  // namespace

// The size of SendBlob's message from its first bytes (net::FirstMessageSize).
size_t BlobSize(std::span<const std::byte> peeked) {
  uint32_t header[2];
  if (peeked.size() < sizeof header) return sizeof header;
  std::memcpy(header, peeked.data(), sizeof header);
  if (header[0] != kMagic || header[1] == 0 || header[1] > kMaxAddressBytes) {
    return peeked.size();  // bad: RecvBlob reads it and says what is wrong
  }
  return sizeof header + header[1];
}

UcxConnection::UcxConnection(std::shared_ptr<Context> ctx, Fd oob, const TransportOptions& options)
    : ctx_(std::move(ctx)),
      oob_(std::move(oob)),
      options_(options),
      peer_error_mode_(ctx_->peer_error_mode) {
  peer_ = net::PeerAddress(oob_.get());
}

UcxConnection::~UcxConnection() {
  Close();
  {
    std::lock_guard<std::mutex> lk(pt_mu_);
    stop_progress_.store(true);
  }
  pt_cv_.notify_all();
  Kick();
  if (progress_thread_.joinable()) progress_thread_.join();
  if (ep_ != nullptr) CloseEndpoint();
  // The forced close completed every buffered send (with an error if it never left).
  for (PendingSend& p : pending_) {
    auto deadline = Clock::now() + std::chrono::milliseconds(200);
    while (ucp_request_check_status(p.request) == UCS_INPROGRESS && Clock::now() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(p.request);
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
}

Status UcxConnection::Start() {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  ucs_status_t st = ucp_worker_create(ctx_->handle, &wp, &worker_);
  if (st != UCS_OK) return Status::Internal("ucp_worker_create: " + UcsError(st));
  wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (wake_.get() < 0) return Status::Internal(fmt::format("eventfd: {}", std::strerror(errno)));
  if (ctx_->wakeup) {
    st = ucp_worker_get_efd(worker_, &efd_);
    if (st != UCS_OK) return Status::Internal("ucp_worker_get_efd: " + UcsError(st));
  }
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  st = ucp_worker_get_address(worker_, &addr, &addr_len);
  if (st != UCS_OK) return Status::Internal("ucp_worker_get_address: " + UcsError(st));
  GPOOL_RETURN_IF_ERROR(net::SetTimeouts(oob_.get(), options_.handshake_timeout_ms));
  Status sent = SendBlob(oob_.get(), addr, static_cast<uint32_t>(addr_len), peer_);
  ucp_worker_release_address(worker_, addr);
  GPOOL_RETURN_IF_ERROR(sent);
  GPOOL_ASSIGN_OR_RETURN(std::vector<std::byte> remote, RecvBlob(oob_.get(), peer_));
  GPOOL_RETURN_IF_ERROR(net::SetTimeouts(oob_.get(), 0));

  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
  if (peer_error_mode_) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) {
      static_cast<UcxConnection*>(arg)->peer_failed_.store(true);
    };
    ep.err_handler.arg = this;
  }
  st = ucp_ep_create(worker_, &ep, &ep_);
  if (st != UCS_OK) {
    ep_ = nullptr;
    return Status::Unavailable(fmt::format("ucp_ep_create to {}: {}", peer_, UcsError(st)));
  }
  am_transport_ = UcxAmTransport(EndpointInfo());
  split_tail_min_ = IsSharedMemoryTransport(am_transport_) ? kSplitTailMinShm : kSplitTailMinOther;
  polls_per_clock_read_ = IsSharedMemoryTransport(am_transport_) ? kPollsPerClockReadShm : 1;
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  return Status::Ok();
}

void UcxConnection::Close() {
  if (closed_.exchange(true)) return;
  // Push out what Send already handed to UCX, so a "send, then close" reaches the peer.
  if (!PeerGone()) {
    ucp_request_param_t param{};
    ucs_status_ptr_t req = ucp_worker_flush_nbx(worker_, &param);
    if (UCS_PTR_IS_PTR(req)) {
      auto deadline = Clock::now() + std::chrono::seconds(2);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline &&
             !PeerGone()) {
        if (ucp_worker_progress(worker_) == 0) sched_yield();
      }
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(worker_, req);
      ucp_request_free(req);
    }
  }
  ::shutdown(oob_.get(), SHUT_RDWR);  // tells the peer (and wakes our sleepers watching it)
  Kick();
}

// ucp_ep_print_info's text for this endpoint (its lanes and protocol thresholds).
std::string UcxConnection::EndpointInfo() const {
  char* text = nullptr;
  size_t length = 0;
  FILE* f = ::open_memstream(&text, &length);
  if (f == nullptr) return "";
  ucp_ep_print_info(ep_, f);
  std::fclose(f);
  std::string info(text, length);
  std::free(text);
  return info;
}

// True once the peer closed or died: EOF or error on the idle OOB socket, or a UCX error.
bool UcxConnection::PeerGone() {
  if (peer_failed_.load()) return true;
  pollfd p{oob_.get(), POLLIN, 0};
  g_oob_polls.fetch_add(1, std::memory_order_relaxed);
  last_oob_poll_ns_.store(CoarseNowNanos(), std::memory_order_relaxed);
  if (::poll(&p, 1, 0) <= 0) return false;
  char b;
  ssize_t n = ::recv(oob_.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    if (n < 0) oob_errno_.store(errno);  // ETIMEDOUT: keepalive gave up on the peer's host
    peer_failed_.store(true);
    return true;
  }
  return false;
}

Status UcxConnection::Gone() const {
  if (closed_.load()) return Status::Unavailable(fmt::format("connection to {} is closed", peer_));
  if (int e = oob_errno_.load(); e != 0) {
    return Status::Unavailable(fmt::format("{}: {}", peer_, net::SocketError(e)));
  }
  return Status::Unavailable(fmt::format("{} closed the connection", peer_));
}

// Closes the endpoint: forced (outstanding sends complete with an error) where both ends use
// peer error handling, which UCX requires for that; else flushing, given up after 1 s.
void UcxConnection::CloseEndpoint() {
  if (ep_ == nullptr) return;
  ucp_request_param_t param{};
  if (peer_error_mode_) {
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
  ep_ = nullptr;
  if (UCS_PTR_IS_PTR(req)) {
    auto deadline = Clock::now() + std::chrono::seconds(1);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(req);
  }
}

}  // namespace gpool::remote::ucx
