#include "remote/transport/socket.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace gpool::remote::net {
namespace {

TEST(SplitHostPortTest, AcceptsV4NamesAndBracketedV6) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:5000", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 5000);
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(SplitHostPort("gpu-7:65535", &host, &port).ok());
  EXPECT_EQ(host, "gpu-7");
}

TEST(SplitHostPortTest, RejectsBadPorts) {
  std::string host;
  uint16_t port = 0;
  for (const char* bad : {"host", "host:", "host:65536", "host:12x", "[::1:5", "[::1]5"}) {
    Status s = SplitHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }
}

TEST(SliceTest, CoversRangesAcrossParts) {
  std::vector<std::byte> a(5), b(0), c(7);
  std::vector<ByteSpan> parts = {ByteSpan(a), ByteSpan(b), ByteSpan(c)};
  auto v = SliceParts(parts, 3, 6);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].iov_base, a.data() + 3);
  EXPECT_EQ(v[0].iov_len, 2u);
  EXPECT_EQ(v[1].iov_base, c.data());
  EXPECT_EQ(v[1].iov_len, 4u);
  EXPECT_TRUE(SliceParts(parts, 12, 0).empty());
}

// Out of descriptors, a queued connection cannot be accepted and the listening socket stays
// readable: Accept backs off instead of retrying at once (which spun a core), and takes the
// connection once a descriptor is free. CPU time, with a wide margin: a spinning accept burns
// most of the second it is kept waiting, a backing-off one a few milliseconds.
// Not under the sanitizers: their runtime needs descriptors of its own while this test holds none
// (UBSan's vptr check opens a pipe to probe memory, fails, and reports a false error).
TEST(WakeableListenSocketTest, OutOfDescriptorsBacksOffInsteadOfSpinning) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "exhausts the process's descriptors, which the sanitizer runtime needs";
#endif
  auto l = WakeableListenSocket::Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto client = ConnectTcp((*l)->address());  // queued in the kernel, not accepted yet
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  std::vector<Fd> fillers;
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(::dup(0)) + 1;  // (that fd counts as a filler too)
  fillers.emplace_back(static_cast<int>(low.rlim_cur) - 1);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (int fd; (fd = ::dup(0)) >= 0;) fillers.emplace_back(fd);
  auto accepted = std::async(std::launch::async, [&] {
    StatusOr<Fd> s = (*l)->Accept();
    timespec cpu{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    return std::make_pair(std::move(s), cpu.tv_sec * 1000.0 + cpu.tv_nsec / 1e6);
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  fillers.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  if (accepted.wait_for(std::chrono::seconds(20)) != std::future_status::ready) (*l)->Close();
  auto [sock, cpu_ms] = accepted.get();
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  EXPECT_LT(cpu_ms, 200.0) << "Accept spun while out of descriptors";
}

// AcceptArrived (the listeners' gate in front of their blocking handshakes).
class AcceptArrivedTest : public testing::Test {
 protected:
  void SetUp() override {
    auto l = WakeableListenSocket::Listen("127.0.0.1:0");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(*l);
  }
  Fd Connect() {
    auto c = ConnectTcp(listener_->address());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : Fd();
  }
  // A header-and-length message, as the UCX bootstrap's: 1 byte of length, then that many.
  static size_t LengthPrefixed(std::span<const std::byte> p) {
    return p.empty() ? 1 : 1 + static_cast<size_t>(p[0]);
  }
  // AcceptArrived on a thread, failing (and closing the listener) after 20 s instead of hanging.
  StatusOr<Fd> AcceptWithin(int timeout_ms) {
    auto f = std::async(std::launch::async,
                        [&] { return listener_->AcceptArrived(LengthPrefixed, timeout_ms); });
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      listener_->Close();
      ADD_FAILURE() << "AcceptArrived did not return";
    }
    return f.get();
  }
  // A client that sends its whole message now is what `accepting` (an AcceptArrived running
  // since before) hands over, with nothing else left waiting.
  void ExpectALateClientHandedOver(std::future<StatusOr<Fd>>& accepting) {
    Fd late = Connect();
    const uint8_t all[2] = {1, 'k'};
    ASSERT_TRUE(WriteAll(late.get(), all, sizeof all, "listener").ok());
    if (accepting.wait_for(std::chrono::seconds(20)) != std::future_status::ready) listener_->Close();
    StatusOr<Fd> got = accepting.get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    uint8_t read[2] = {};
    ASSERT_TRUE(ReadAll(got->get(), read, sizeof read, "client").ok());
    EXPECT_EQ(read[1], 'k');
    EXPECT_EQ(listener_->waiting(), 0u);
  }
  std::unique_ptr<WakeableListenSocket> listener_;
};

// The connection whose whole first message arrived is handed over first, whatever the order of
// connecting; its bytes are still there to read (peeked, never consumed); the others wait.
TEST_F(AcceptArrivedTest, HandsOverTheConnectionWhoseMessageIsWhole) {
  Fd silent = Connect(), partial = Connect(), whole = Connect();
  const uint8_t part[2] = {5, 'a'}, all[4] = {3, 'x', 'y', 'z'};
  ASSERT_TRUE(WriteAll(partial.get(), part, sizeof part, "listener").ok());
  ASSERT_TRUE(WriteAll(whole.get(), all, sizeof all, "listener").ok());
  StatusOr<Fd> got = AcceptWithin(60000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  uint8_t read[4] = {};
  ASSERT_TRUE(ReadAll(got->get(), read, sizeof read, "client").ok());
  EXPECT_EQ(std::memcmp(read, all, sizeof all), 0);
  EXPECT_EQ(listener_->waiting(), 2u);
  // The partial one completes later and is handed over next; SO_RCVLOWAT is back to 1 on it
  // (a later 1-byte read returns at once).
  const uint8_t rest[4] = {'b', 'c', 'd', 'e'};
  ASSERT_TRUE(WriteAll(partial.get(), rest, sizeof rest, "listener").ok());
  got = AcceptWithin(60000);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  uint8_t first6[6] = {};
  ASSERT_TRUE(ReadAll(got->get(), first6, sizeof first6, "client").ok());
  EXPECT_EQ(first6[0], 5);
  EXPECT_EQ(first6[5], 'e');
  ASSERT_TRUE(WriteAll(partial.get(), "!", 1, "listener").ok());
  char one = 0;
  ASSERT_TRUE(SetTimeouts(got->get(), 5000).ok());
  ASSERT_TRUE(ReadAll(got->get(), &one, 1, "client").ok());
  EXPECT_EQ(one, '!');
  EXPECT_EQ(listener_->waiting(), 1u);  // the silent one
}

// A peer that never completes its message is closed after the timeout, one that hangs up is
// dropped, and neither is handed over.
TEST_F(AcceptArrivedTest, SilentPeersTimeOutAndClosedOnesAreDropped) {
  Fd silent = Connect(), quitter = Connect();
  const uint8_t part[1] = {9};
  ASSERT_TRUE(WriteAll(quitter.get(), part, sizeof part, "listener").ok());
  quitter.Reset();
  auto f = std::async(std::launch::async, [&] { return listener_->AcceptArrived(LengthPrefixed, 200); });
  // The silent peer sees the listener close it (EOF), within the 20 s this waits.
  ASSERT_TRUE(SetTimeouts(silent.get(), 20000).ok());
  char b;
  EXPECT_EQ(::recv(silent.get(), &b, 1, 0), 0) << "the silent connection was not closed";
  ExpectALateClientHandedOver(f);
}

// A peer that sends part of its message and then hangs up (FIN) can never complete it: it is
// dropped as soon as that is seen, not held (and, before, polled in a busy loop: EOF keeps the
// socket readable whatever SO_RCVLOWAT says) until the timeout.
TEST_F(AcceptArrivedTest, APeerThatHangsUpMidMessageIsDroppedAtOnce) {
  Fd quitter = Connect();
  const uint8_t part[2] = {9, 'a'};
  ASSERT_TRUE(WriteAll(quitter.get(), part, sizeof part, "listener").ok());
  ASSERT_EQ(::shutdown(quitter.get(), SHUT_WR), 0);
  auto f = std::async(std::launch::async,
                      [&] { return listener_->AcceptArrived(LengthPrefixed, 600000); });
  // The listener closes it (EOF here) long before its 600 s timeout; 20 s only bounds the wait.
  ASSERT_TRUE(SetTimeouts(quitter.get(), 20000).ok());
  char b;
  const ssize_t n = ::recv(quitter.get(), &b, 1, 0);  // EOF, or a reset: its bytes went unread
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET))
      << "a peer that hung up mid-message was kept: " << std::strerror(errno);
  ExpectALateClientHandedOver(f);
}

// A timeout of 0 or less means no bound, as for SetTimeouts: such a listener still hands over
// connections (before, each was dropped at once as past its deadline, and none ever came out).
TEST_F(AcceptArrivedTest, ATimeoutOfZeroMeansNoBound) {
  Fd first = Connect();
  const uint8_t part[1] = {1};
  ASSERT_TRUE(WriteAll(first.get(), part, sizeof part, "listener").ok());
  for (int timeout_ms : {0, -1}) {
    auto f = std::async(std::launch::async,
                        [&] { return listener_->AcceptArrived(LengthPrefixed, timeout_ms); });
    Fd whole = Connect();
    const uint8_t all[2] = {1, 'k'};
    ASSERT_TRUE(WriteAll(whole.get(), all, sizeof all, "listener").ok());
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) listener_->Close();
    StatusOr<Fd> got = f.get();
    ASSERT_TRUE(got.ok()) << "timeout " << timeout_ms << ": " << got.status().ToString();
    uint8_t read[2] = {};
    ASSERT_TRUE(ReadAll(got->get(), read, sizeof read, "client").ok());
    EXPECT_EQ(read[1], 'k');
  }
  EXPECT_EQ(listener_->waiting(), 1u);  // the partial one, with no deadline, still waits
}

}  // namespace
}  // namespace gpool::remote::net
