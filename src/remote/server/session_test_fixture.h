// The fixture of the session tests (session_test.cc, session_vmm_test.cc): a Session over a real
// TCP (or UCX) connection and the emulated backend, run on its own thread, with the test as its
// client sending hand-built messages. Subclasses pick the transport, the backend's options, the
// session's limits, a backend decorator and the deadline through the virtual hooks.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "remote/server/session.h"

namespace gpool::remote::server::test {

using namespace proto;  // NOLINT: message structs (this namespace only)

inline std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 7 + seed + (i >> 9)));
  return v;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = MakeTransport(TransportName(), {});
    ASSERT_TRUE(t.ok());
    transport_ = std::move(*t);
    auto l = transport_->Listen("127.0.0.1:0");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(*l);
    auto accepted = std::async(std::launch::async, [&] { return listener_->Accept(); });
    auto c = transport_->Connect(listener_->address());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
    auto s = accepted.get();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto b = MakeEmulatedBackend(Options());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = Wrap(std::move(*b));
    session_ = std::make_unique<Session>(1, std::move(*s), backend_.get(), Limits());
    Prepare(*session_);
    runner_ = std::thread([this] { run_status_ = session_->Run(); });
  }
  // The transport between the test (the client) and the session.
  virtual std::string TransportName() { return "tcp"; }
  // The emulated backend's options (a subclass may change them).
  virtual EmulatedOptions Options() { return {.memory_bytes = uint64_t{64} << 20}; }
  // The session's limits (a subclass may set them).
  virtual SessionLimits Limits() { return {}; }
  // The backend the session runs on (a subclass may put a decorator around the emulated one).
  virtual std::unique_ptr<Backend> Wrap(std::unique_ptr<Backend> b) { return b; }
  // Called before the session runs (a subclass may set its deadline).
  virtual void Prepare(Session&) {}
  void TearDown() override {
    if (client_) client_->Close();
    if (runner_.joinable()) runner_.join();
  }
  // Receives the next message, which must be one reply to `op`, and decodes it.
  template <class Body>
  void Reply(uint16_t op, ReplyHead* head, Body* body) {
    ASSERT_TRUE(client_->Recv(&in_).ok());
    auto frames = ParseMessage(in_);
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    ASSERT_EQ(frames->size(), 1u);
    ASSERT_EQ((*frames)[0].op, op | kReply);
    ASSERT_TRUE(DecodeReply((*frames)[0], head, body).ok());
  }
  // Posts `op` (no reply of its own), then a Ping; returns the Ping's reply head, which carries
  // the posted op's error, if any, as its deferred error.
  template <class Msg>
  ReplyHead PostThenPing(Msg msg) {  // (a copy: AddRequest visits it non-const)
    BatchWriter w;
    w.AddRequest(msg);
    Ping p;
    w.AddRequest(p);
    EXPECT_TRUE(client_->Send(w.Finish()).ok());
    ReplyHead h;
    Empty none;
    Reply(static_cast<uint16_t>(Op::kPing), &h, &none);
    return h;
  }
  uint64_t Malloc(uint64_t n) {
    BatchWriter w;
    proto::Malloc m{.size = n};
    w.AddRequest(m);
    EXPECT_TRUE(client_->Send(w.Finish()).ok());
    ReplyHead h;
    Pointer p;
    Reply(static_cast<uint16_t>(Op::kMalloc), &h, &p);
    EXPECT_EQ(h.error, 0) << h.message;
    return p.ptr;
  }
  // Receives the reply to a read of `n` bytes, bare (its bytes alone: a success) or framed, into
  // *h and *data; *bare says which it was.
  void ReadReply(size_t n, ReplyHead* h, std::vector<std::byte>* data, bool* bare = nullptr) {
    ASSERT_TRUE(client_->Recv(&in_).ok());
    *h = ReplyHead{};
    const bool is_bare = n >= kBareReplyMinBytes && in_.size() == n;
    if (bare != nullptr) *bare = is_bare;
    if (is_bare) {
      *data = in_;
      return;
    }
    auto frames = ParseMessage(in_);
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    ASSERT_EQ(frames->size(), 1u);
    ASSERT_EQ((*frames)[0].op, static_cast<uint16_t>(Op::kMemcpyD2H) | kReply);
    Data d;
    ASSERT_TRUE(DecodeReply((*frames)[0], h, &d).ok());
    data->assign(d.data.begin(), d.data.end());
  }
  void SendRead(uint64_t src, size_t n) {
    BatchWriter w;
    MemcpyD2H m{.src = src, .size = n};
    w.AddRequest(m);
    EXPECT_TRUE(client_->Send(w.Finish()).ok());
  }
  std::vector<std::byte> Read(uint64_t src, size_t n, ReplyHead* h, bool* bare = nullptr) {
    SendRead(src, n);
    std::vector<std::byte> data;
    ReadReply(n, h, &data, bare);
    return data;
  }
  // A new allocation holding `data`.
  uint64_t MallocHolding(const std::vector<std::byte>& data) {
    uint64_t a = Malloc(data.size());
    MemsetThenChunk(a, data.size(), 0, data);
    return a;
  }
  // One message: a memset of [dst, dst+n) to `before`, then the chunk `data` at dst as its tail.
  void MemsetThenChunk(uint64_t dst, size_t n, uint8_t before, const std::vector<std::byte>& data) {
    BatchWriter w;
    Memset ms{.dst = dst, .value = before, .size = n};
    w.AddRequest(ms);
    MemcpyH2D c{.dst = dst};
    w.AddRequestWithTail(c, data);
    const ByteSpan parts[2] = {w.Finish(), data};
    ASSERT_TRUE(client_->Send(parts).ok());
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Session> session_;
  std::thread runner_;
  Status run_status_;
  std::vector<std::byte> in_;
};

}  // namespace gpool::remote::server::test
