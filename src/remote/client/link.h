// A client's connection to one GPU server session: handshake, request batching, replies.
//
// Asynchronous requests are appended to an outgoing batch and sent at the next synchronous call,
// when the batch passes kFlushBytes, or on Flush(); one ordered connection keeps them in program
// order, which is stronger than CUDA's per-stream order. Large host data travels as a separate
// gather part, never copied into the batch. Transport failures come back as Unavailable: the
// server or its worker is gone, and every later call fails fast the same way.
// Thread safety: none inside; callers serialize whole operations with mu().
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "remote/protocol/messages.h"
#include "remote/transport/transport.h"

namespace gpool::remote::client {

struct LinkOptions {
  std::string address;          // the server's control address HOST:PORT
  std::string transport = "tcp";  // data transport: tcp or ucx
  std::string token;            // lease token ("" when the server is --insecure)
  std::string client_name;      // for the server's logs
};

class ServerLink {
 public:
  static constexpr size_t kFlushBytes = 64 << 10;

  static StatusOr<std::unique_ptr<ServerLink>> Connect(const LinkOptions& options);
  ~ServerLink();

  const std::string& address() const { return address_; }
  uint32_t device_count() const { return hello_.device_count; }
  uint64_t mem_limit() const { return hello_.mem_limit; }
  std::mutex& mu() { return mu_; }

  // Queues an asynchronous request.
  template <class Msg>
  Status Post(Msg& m) {
    GPOOL_RETURN_IF_ERROR(broken_);
    batch_.AddRequest(m);
    if (batch_.bytes() >= kFlushBytes || batch_.frames() >= proto::kMaxFramesPerMessage - 1) {
      return Flush();
    }
    return Status::Ok();
  }
  // Sends queued requests plus `m`, whose last blob field is `tail`, sent uncopied.
  template <class Msg>
  Status PostWithTail(Msg& m, wire::ByteSpan tail) {
    GPOOL_RETURN_IF_ERROR(broken_);
    if (batch_.frames() >= proto::kMaxFramesPerMessage - 1) GPOOL_RETURN_IF_ERROR(Flush());
    batch_.AddRequestWithTail(m, tail);
    wire::ByteSpan parts[2] = {batch_.Finish(), tail};
    Status s = conn_->Send(parts);
    batch_.Reset();
    return Check(s);
  }
  // Sends queued requests plus `m` and waits for its reply.
  template <class Msg, class Body>
  Status Call(Msg& m, proto::ReplyHead* head, Body* body) {
    GPOOL_RETURN_IF_ERROR(broken_);
    batch_.AddRequest(m);
    GPOOL_RETURN_IF_ERROR(Flush());
    return ReadReply(static_cast<uint16_t>(Msg::kOp), head, body);
  }
  // Reads the next reply, which must answer `op`. Body blobs point into an internal buffer valid
  // until the next read.
  template <class Body>
  Status ReadReply(uint16_t op, proto::ReplyHead* head, Body* body) {
    GPOOL_RETURN_IF_ERROR(ReadFrame(op));
    return Check(proto::DecodeReply(frame_, head, body));
  }
  Status Flush();
  bool broken() const { return !broken_.ok(); }

  // Host-to-device copy, chunked (proto::kCopyChunkBytes); small ones ride in the batch, large
  // chunks go uncopied as gather parts. Asynchronous: errors come with a later reply.
  Status CopyToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream);
  // Device-to-host copy: all chunk requests go out at once, then the replies stream back into
  // `dst`. Returns the first reply error in *head (error or async_error non-zero).
  Status CopyFromDevice(std::byte* dst, uint64_t src, size_t n, uint64_t stream,
                        proto::ReplyHead* head);

 private:
  ServerLink() = default;
  Status ReadFrame(uint16_t op);
  Status Check(Status s);

  std::string address_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
  proto::HelloReply hello_;
  proto::BatchWriter batch_;
  std::vector<std::byte> in_;
  proto::Frame frame_;
  Status broken_;
  std::mutex mu_;
};

}  // namespace gpool::remote::client
