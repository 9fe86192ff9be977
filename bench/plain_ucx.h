// The plain ucp peer of the UCX benchmarks (remote_bench, ucx_rt_bench): one worker, one
// endpoint, addresses swapped over a TCP socket, polling at both ends as ucx_perftest does except
// that an empty poll yields the CPU (pure spinning at both ends starves the peer on a loaded
// 2-core machine). No gather lists, no OOB liveness socket, no threads, no sleeping: the floor
// gpool's UCX Connection is measured against. UCX_TLS comes from the environment.
//
// Thread safety: one thread per instance (UCS_THREAD_MODE_SINGLE).
#pragma once

#include <sched.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ucp/api/ucp.h>

#include "remote/transport/socket.h"

namespace gpool::remote::bench {

struct PlainUcx {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;

  bool Init() {
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    if (ucp_init(&p, nullptr, &ctx) != UCS_OK) return false;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    return ucp_worker_create(ctx, &wp, &worker) == UCS_OK;
  }
  // Sends our worker address on `fd`, reads the peer's, and creates the endpoint.
  bool Wire(int fd) {
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if (ucp_worker_get_address(worker, &addr, &len) != UCS_OK) return false;
    uint64_t n = len;
    bool ok = net::WriteAll(fd, &n, sizeof n, "peer").ok() && net::WriteAll(fd, addr, len, "peer").ok();
    ucp_worker_release_address(worker, addr);
    if (!ok || !net::ReadAll(fd, &n, sizeof n, "peer").ok() || n > (1 << 20)) return false;
    std::vector<std::byte> remote(n);
    if (!net::ReadAll(fd, remote.data(), n, "peer").ok()) return false;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    return ucp_ep_create(worker, &ep_params, &ep) == UCS_OK;
  }
  bool Complete(ucs_status_ptr_t req) {
    if (req == nullptr) return true;
    if (UCS_PTR_IS_ERR(req)) return false;
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
      if (ucp_worker_progress(worker) == 0) sched_yield();  // the peer may need this CPU
    }
    ucp_request_free(req);
    return st == UCS_OK;
  }
  bool Send(void* buf, size_t n) {
    ucp_request_param_t p{};
    return Complete(ucp_tag_send_nbx(ep, buf, n, 1, &p));
  }
  bool Recv(void* buf, size_t n) {
    ucp_request_param_t p{};
    return Complete(ucp_tag_recv_nbx(worker, buf, n, 1, ~ucp_tag_t{0}, &p));
  }
  // Non-blocking send and receive of stream data (tag 2), completed by WaitAll.
  ucs_status_ptr_t PostSend(const void* buf, size_t n) {
    ucp_request_param_t p{};
    return ucp_tag_send_nbx(ep, buf, n, 2, &p);
  }
  ucs_status_ptr_t PostRecv(void* buf, size_t n) {
    ucp_request_param_t p{};
    return ucp_tag_recv_nbx(worker, buf, n, 2, ~ucp_tag_t{0}, &p);
  }
  bool WaitAll(std::vector<ucs_status_ptr_t>* reqs) {
    bool ok = true;
    for (ucs_status_ptr_t r : *reqs) ok = Complete(r) && ok;
    reqs->clear();
    return ok;
  }
  // Closes the endpoint (flushed, while the peer still lives) and frees everything: a context
  // left behind with an endpoint to a peer that exited kept UCX's async thread busy on CPU 0.
  void Close() {
    ucp_request_param_t p{};
    ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker);
      ucp_request_free(req);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
  }
};

}  // namespace gpool::remote::bench
