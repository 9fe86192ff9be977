#include "remote/client/link.h"

#include <cstring>

#include <fmt/format.h>

namespace gpool::remote::client {

ServerLink::~ServerLink() {
  if (conn_) {
    (void)Flush();
    conn_->Close();
  }
}

StatusOr<std::unique_ptr<ServerLink>> ServerLink::Connect(const LinkOptions& o) {
  std::unique_ptr<ServerLink> link(new ServerLink());
  link->address_ = o.address;
  // Control handshake over TCP; the server answers with its session worker's data address.
  GPOOL_ASSIGN_OR_RETURN(auto tcp, MakeTransport("tcp", {.max_message_bytes = 1 << 20}));
  auto control = tcp->Connect(o.address);
  if (!control.ok()) {
    return Status::Unavailable(fmt::format("GPU server {} unreachable: {}", o.address,
                                           control.status().message()));
  }
  proto::Hello hello{.token = o.token, .client = o.client_name, .transport = o.transport};
  proto::BatchWriter w;
  w.AddRequest(hello);
  GPOOL_RETURN_IF_ERROR((*control)->Send(w.Finish()));
  std::vector<std::byte> msg;
  Status rs = (*control)->Recv(&msg);
  if (!rs.ok()) {
    return Status::Unavailable(fmt::format("GPU server {} closed the handshake: {}", o.address,
                                           rs.message()));
  }
  (*control)->Close();
  GPOOL_ASSIGN_OR_RETURN(auto frames, proto::ParseMessage(msg));
  if (frames.size() != 1 || frames[0].op != (uint16_t(proto::Op::kHello) | proto::kReply)) {
    return Status::InvalidArgument(fmt::format("GPU server {}: unexpected handshake reply", o.address));
  }
  proto::ReplyHead head;
  GPOOL_RETURN_IF_ERROR(proto::DecodeReply(frames[0], &head, &link->hello_));
  if (head.error != 0) {
    return Status::PermissionDenied(fmt::format("GPU server {} refused the session: {}", o.address,
                                                head.message));
  }
  // Data connection to the session's own worker.
  GPOOL_ASSIGN_OR_RETURN(link->transport_, MakeTransport(o.transport, {}));
  auto data = link->transport_->Connect(link->hello_.data_address);
  if (!data.ok()) {
    return Status::Unavailable(fmt::format("GPU server {}: session worker at {} unreachable: {}",
                                           o.address, link->hello_.data_address,
                                           data.status().message()));
  }
  link->conn_ = std::move(*data);
  proto::Attach at{.session = link->hello_.session, .nonce = link->hello_.nonce};
  proto::Empty none;
  Status as = link->Call(at, &head, &none);
  if (!as.ok()) return as;
  if (head.error != 0) {
    return Status::PermissionDenied(fmt::format("GPU server {}: attach refused: {}", o.address,
                                                head.message));
  }
  return link;
}

Status ServerLink::Check(Status s) {
  if (s.ok()) return s;
  if (broken_.ok()) {
    broken_ = Status::Unavailable(fmt::format("lost the GPU server {} ({})", address_, s.message()));
    conn_->Close();
  }
  return broken_;
}

Status ServerLink::Flush() {
  GPOOL_RETURN_IF_ERROR(broken_);
  if (batch_.empty()) return Status::Ok();
  Status s = conn_->Send(batch_.Finish());
  batch_.Reset();
  return Check(s);
}

Status ServerLink::ReadFrame(uint16_t op) {
  GPOOL_RETURN_IF_ERROR(broken_);
  GPOOL_RETURN_IF_ERROR(Check(conn_->Recv(&in_)));
  auto frames = proto::ParseMessage(in_);
  if (!frames.ok()) return Check(frames.status());
  if (frames->size() != 1 || (*frames)[0].op != (op | proto::kReply)) {
    return Check(Status::InvalidArgument(
        fmt::format("expected one reply to {}, got {} frame(s) starting with op {}",
                    proto::OpName(op), frames->size(), (*frames)[0].op)));
  }
  frame_ = (*frames)[0];
  return Status::Ok();
}

Status ServerLink::CopyToDevice(uint64_t dst, wire::ByteSpan src, uint64_t stream) {
  constexpr size_t kInline = 64 << 10;
  size_t n = src.size();
  for (size_t off = 0; off < n || (n == 0 && off == 0); off += proto::kCopyChunkBytes) {
    size_t len = std::min(proto::kCopyChunkBytes, n - off);
    proto::MemcpyH2D m{.dst = dst + off, .stream = stream};
    if (len <= kInline) {
      m.data = src.subspan(off, len);
      GPOOL_RETURN_IF_ERROR(Post(m));
    } else {
      GPOOL_RETURN_IF_ERROR(PostWithTail(m, src.subspan(off, len)));
    }
    if (n == 0) break;
  }
  return Status::Ok();
}

Status ServerLink::CopyFromDevice(std::byte* dst, uint64_t src, size_t n, uint64_t stream,
                                  proto::ReplyHead* head) {
  *head = proto::ReplyHead{};
  if (n == 0) return Status::Ok();
  size_t chunks = (n + proto::kCopyChunkBytes - 1) / proto::kCopyChunkBytes;
  for (size_t i = 0; i < chunks; ++i) {
    size_t off = i * proto::kCopyChunkBytes;
    proto::MemcpyD2H m{.src = src + off, .size = std::min(proto::kCopyChunkBytes, n - off),
                       .stream = stream};
    GPOOL_RETURN_IF_ERROR(Post(m));
  }
  GPOOL_RETURN_IF_ERROR(Flush());
  for (size_t i = 0; i < chunks; ++i) {
    size_t off = i * proto::kCopyChunkBytes;
    size_t len = std::min(proto::kCopyChunkBytes, n - off);
    proto::ReplyHead h;
    proto::Data d;
    GPOOL_RETURN_IF_ERROR(ReadReply(static_cast<uint16_t>(proto::Op::kMemcpyD2H), &h, &d));
    if (h.error == 0 && h.async_error == 0 && d.data.size() != len) {
      h.error = 999;
      h.message = fmt::format("device-to-host chunk of {} bytes came back with {}", len,
                              d.data.size());
    }
    if (h.error == 0 && h.async_error == 0) {
      std::memcpy(dst + off, d.data.data(), len);
    } else if (head->error == 0 && head->async_error == 0) {
      *head = std::move(h);  // keep reading: every request has its reply
    }
  }
  return Status::Ok();
}

}  // namespace gpool::remote::client
