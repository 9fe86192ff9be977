// The UCX transport: one ucp worker and endpoint per connection, tag API messages.
//
// Bootstrap: Listen/Connect use a plain TCP socket to swap ucp worker addresses ({u32 magic
// 'GPU1', u32 length, address bytes} each way), then each side creates an endpoint to the other's
// worker. Addressing by worker address rather than ucp's sockaddr listener works with every
// UCX_TLS choice, shared memory included. The TCP socket then stays open, idle, as a liveness
// channel: the peer closing or dying shows up on it as EOF, which Recv turns into Unavailable
// (after draining what already arrived) even when UCX itself would not notice, as with shm.
// Messages: ucp_tag_send_nbx (an IOV datatype for gather sends) and ucp_tag_probe_nb +
// ucp_tag_msg_recv_nbx, so a message of any size lands whole in the caller's buffer; the tag
// matcher keeps one sender's messages in order. A message whose last gather part is large
// (>= 64 KiB over shared memory, >= 128 KiB over other transports) goes as two UCX messages, a
// head (tag says "head" and the tail's length) and the tail, contiguous and sent straight from
// the caller's buffer (eager up to 256 KiB in all, else rendezvous), which Send waits for: UCX's
// zero-copy rendezvous does not take IOV datatypes, and the bulk of a copy is always that last
// part; RecvSplit receives such a tail straight into the caller's buffer. Other messages up to
// 256 KiB are copied (into reused buffers) and sent eager (UCP_OP_ATTR_FLAG_FAST_CMPL), so Send
// returns without waiting for the receiver.
// Waiting: the waiting call's own thread progresses the worker (no hand-off to another thread)
// for 200 us, yielding the CPU on every empty poll after the first 2 us (from the first while the
// thread shares its CPU: its last yield let another thread run) as a plain ucp polling loop
// does, then arms it (UCP_FEATURE_WAKEUP) and sleeps in poll() on its event fd, a wake
// eventfd and the OOB socket, so a reply that comes within the spin costs no wake-up and an idle
// connection costs no CPU. A message costs no syscall of gpool's own (Send looks at the OOB
// socket on every 32nd message, and then only if it was not looked at in the last millisecond). A per-connection helper thread takes over progress
// (sleeping the same way) only when nobody waits: at once for a send left in flight, else 20-120
// ms after the last waiting call (a wait that ends wakes it only if a send is in flight).
// Where ucp_init refuses UCP_FEATURE_WAKEUP, waits fall back to 50 us sleep-polling.
// TransportOptions::ucx_tls sets UCX_TLS for this transport's context ("tcp", "posix,sysv,self",
// "rc,ud" on InfiniBand); UCX error handling mode PEER is used only when every listed transport
// supports it (tcp, rc, ud, dc), since asking for it drops shared memory; otherwise the OOB socket
// alone detects a dead peer. Thread safety: as for Connection (workers run
// UCS_THREAD_MODE_MULTI).
// Limits: Close() flushes outstanding sends for at most 2 s; a receive abandoned by Close keeps
// its buffer alive inside the connection until the connection is destroyed. A sleeping wait also
// wakes every 100 ms (a safety net against a missed kick), so an idle connection costs ~10
// wake-ups per second per sleeping thread. While both a sender and a receiver wait on one
// connection, a kick may be left pending and make their sleeps return at once until one of them
// is alone again (correct, but it polls meanwhile).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "remote/transport/transport.h"

namespace gpool::remote {

StatusOr<std::unique_ptr<Transport>> MakeUcxTransport(const TransportOptions& options);

// This process's UCX waits so far, over all connections: load-independent figures for benchmarks
// and tests (a round trip answered while spinning costs no sleep).
struct UcxWaitCounters {
  uint64_t sleeps = 0;    // times a waiting thread slept in poll() on the worker's event fd
  uint64_t kicked = 0;    // sleeps ended by another thread's kick (its progress, or Close)
  uint64_t timeouts = 0;  // sleeps that ran to their time limit (the safety net, or a drain)
  uint64_t yields = 0;    // sched_yield calls of waiting threads (a syscall each)
  uint64_t yields_switched = 0;  // yields that took >= 4 us: another thread ran on that CPU
  uint64_t oob_polls = 0;       // poll() syscalls on the liveness socket (PeerGone checks)
  uint64_t helper_runs = 0;     // times a helper thread took over progress (a thread wake-up)
  uint64_t helper_notifies = 0; // times a call woke the helper thread (a futex syscall)
};
UcxWaitCounters GetUcxWaitCounters();

// The UCX transport that carries an endpoint's messages (its active-message lane), from
// ucp_ep_print_info's text: "sysv", "posix", "tcp", "rc_mlx5"...; empty when the text has no such
// lane line (the format is UCX's debug output, UCX 1.13's here: "lane[0]:  1:sysv/memory.0 md[1]
// -> md[1]/sysv/sysdev[255] am am_bw#0"). Connections tune one threshold by it (a text UCX
// changes only loses that tuning). Exposed for tests.
std::string UcxAmTransport(std::string_view ep_info);
bool IsSharedMemoryTransport(std::string_view transport);  // posix, sysv, xpmem
// UcxAmTransport of a UCX connection's endpoint; empty for any other connection.
std::string UcxConnectionAmTransport(const Connection& connection);

}  // namespace gpool::remote
