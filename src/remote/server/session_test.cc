// Session over a real TCP connection and the emulated backend, driven by hand-built messages:
// a host-to-device chunk that ends its message is received straight into device memory, after
// the frames before it have run; one bound for a bad destination is received into the message
// buffer instead and fails at the next reply, without touching memory around it.
#include "remote/server/session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>

namespace gpool::remote::server {
namespace {

using namespace proto;  // NOLINT: message structs

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 7 + seed + (i >> 9)));
  return v;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = MakeTransport("tcp", {});
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
    auto b = MakeEmulatedBackend({.memory_bytes = uint64_t{64} << 20});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(*b);
    session_ = std::make_unique<Session>(1, std::move(*s), backend_.get(), SessionLimits{});
    runner_ = std::thread([this] { run_status_ = session_->Run(); });
  }
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
  std::vector<std::byte> Read(uint64_t src, size_t n, ReplyHead* h) {
    BatchWriter w;
    MemcpyD2H m{.src = src, .size = n};
    w.AddRequest(m);
    EXPECT_TRUE(client_->Send(w.Finish()).ok());
    Data d;
    Reply(static_cast<uint16_t>(Op::kMemcpyD2H), h, &d);
    return std::vector<std::byte>(d.data.begin(), d.data.end());
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

TEST_F(SessionTest, ChunkIsReceivedInPlaceAfterTheFramesBeforeIt) {
  const size_t n = 256 << 10;
  uint64_t d = Malloc(n);
  std::vector<std::byte> data = Pattern(n, 1);
  MemsetThenChunk(d, n, 0x11, data);
  ReplyHead h;
  std::vector<std::byte> got = Read(d, n, &h);
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_TRUE(got == data) << "the memset queued before the chunk ran after it";
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().h2d_in_place, 1u);
  EXPECT_EQ(session_->stats().requests, 4u);  // malloc, memset, chunk, read
}

TEST_F(SessionTest, ChunkForABadDestinationIsDrainedAndFailsAtTheNextReply) {
  const size_t n = 256 << 10;
  uint64_t a = Malloc(n), b = Malloc(n);
  std::vector<std::byte> keep = Pattern(n, 2), data = Pattern(n, 3);
  MemsetThenChunk(b, n, 0, keep);  // b holds `keep`
  MemsetThenChunk(a + n / 2, n / 2, 0x33, data);  // half of it past a's end
  ReplyHead h;
  std::vector<std::byte> got_b = Read(b, n, &h);
  EXPECT_NE(h.async_error, 0) << "the bad chunk's error did not come with the next reply";
  EXPECT_NE(h.async_message.find("host-to-device"), std::string::npos) << h.async_message;
  EXPECT_TRUE(got_b == keep);
  // The memset before the bad chunk still ran, and the session goes on.
  std::vector<std::byte> got_a = Read(a + n / 2, n / 2, &h);
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  ASSERT_EQ(got_a.size(), n / 2);
  EXPECT_EQ(got_a[0], std::byte{0x33});
  EXPECT_EQ(got_a[n / 2 - 1], std::byte{0x33});
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().h2d_in_place, 1u);  // b's chunk only
}

}  // namespace
}  // namespace gpool::remote::server
