// The TCP transport: length-prefixed frames over TCP_NODELAY sockets, gather sends with sendmsg
// (one syscall for header and parts), and optional extra data streams for bulk messages.
//
// Wire format (all integers little-endian):
//   handshake, client -> server on every socket: Hello {u32 magic 'GPT1', u8 kind (0 control,
//     1 data), u8 index, u16 data_streams, u64 token}; the server answers the control socket with
//     {u32 magic, u32 reserved, u64 token} and the client then opens its data sockets quoting the
//     token. A connection is returned by Accept once all its data sockets arrived.
//   frame on the control socket: u64 header = length | (striped ? 1 << 63 : 0) | (tail ? 1 << 62
//     : 0), then, when the tail bit is set, a u64 tail length (the last gather part's size, sent
//     when it is at least kTailMinBytes: the receiver may place it, see RecvPlaced), then the
//     payload.
//     A striped message's payload is cut into (1 + data_streams) contiguous slices; slice 0 follows
//     the header on the control socket, slice i goes on data socket i, written and read by one
//     thread per socket.
// Limits: no TLS or authentication here (leases authorize sessions above). Accept hands a socket
// to its blocking handshake only once its hello is in (WakeableListenSocket::AcceptArrived), so a
// silent client holds no one up; one that stalls after its hello (a data stream that never comes,
// a reply it does not read) can still hold Accept up to handshake_timeout_ms. Thread safety: as
// for Connection.
#pragma once

#include <memory>

#include "remote/transport/transport.h"

namespace gpool::remote {

std::unique_ptr<Transport> MakeTcpTransport(const TransportOptions& options);

}  // namespace gpool::remote
