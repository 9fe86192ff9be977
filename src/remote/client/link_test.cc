// ServerLink against a real emulated GPU server (forked before any thread exists), over TCP and
// UCX: device-to-host copies (synchronous and asynchronous, chunked, received straight into the
// destination), their ordering with later work, errors of asynchronous reads at the next sync,
// and the pump's flush of a batch nobody else sends; 2-D copies with pitches (writes posted, reads
// spread to their pitch) and 2-D memsets. No timing is asserted: waits are bounded
// liveness checks (a broken pump fails them after 30 s).
#include "remote/client/link.h"

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

#include "remote/server/test_server.h"

namespace gpool::remote::client {
namespace {

std::string g_addr[3];  // tcp, ucx; tcp with two devices
pid_t g_pid[3] = {-1, -1, -1};

std::string StartServer(const std::string& transport, pid_t* pid, int devices = 1) {
  server::ServerOptions o;
  o.transport = transport;
  o.emulated.memory_bytes = uint64_t{1} << 30;
  o.emulated.devices = devices;
  return server::testing::ForkServer(o, pid);
}

class Servers : public ::testing::Environment {
 public:
  void SetUp() override {
    g_addr[0] = StartServer("tcp", &g_pid[0]);
    g_addr[1] = StartServer("ucx", &g_pid[1]);
    g_addr[2] = StartServer("tcp", &g_pid[2], /*devices=*/2);
  }
  void TearDown() override {
    for (pid_t p : g_pid) server::testing::KillServer(p);
  }
};

class LinkTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const char* transport = GetParam() == 0 ? "tcp" : "ucx";
    ASSERT_FALSE(g_addr[GetParam()].empty()) << "server did not start";
    auto l = ServerLink::Connect({.address = g_addr[GetParam()], .transport = transport});
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    link_ = std::move(*l);
  }
  uint64_t Malloc(uint64_t size) {
    proto::Malloc m{.size = size};
    proto::Pointer p;
    proto::ReplyHead h;
    EXPECT_TRUE(link_->Call(m, &h, &p).ok());
    EXPECT_EQ(h.error, 0) << h.message;
    return p.ptr;
  }
  proto::ReplyHead Sync() {
    proto::DeviceSync s;
    proto::ReplyHead h;
    proto::Empty none;
    EXPECT_TRUE(link_->Call(s, &h, &none).ok());
    return h;
  }
  // One burst a program syncs itself: four asynchronous reads of dst.size()/4 bytes each from
  // `d`, answered by their own replies (ServerLink::SyncStream); dst must then equal `want`.
  // Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  void SyncedReadBurst(uint64_t d, std::vector<std::byte>& dst,
                       const std::vector<std::byte>& want) {
    std::lock_guard<std::mutex> lk(link_->mu());
    std::fill(dst.begin(), dst.end(), std::byte{0});
    const size_t n = dst.size() / 4;
    proto::ReplyHead h;
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(link_->CopyFromDevice(dst.data() + i * n, d + i * n, n, 0, &h, true).ok());
    }
    ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
    ASSERT_EQ(h.error, 0) << h.message;
    ASSERT_TRUE(dst == want);
  }
  std::unique_ptr<ServerLink> link_;
};

// Ends the process, naming the test, if it is still alive after `limit` (a deadlock).
class Watchdog {
 public:
  Watchdog(const char* what, std::chrono::seconds limit)
      : thread_([this, what, limit] {
          std::unique_lock<std::mutex> lk(mu_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            std::fprintf(stderr, "%s: still running after %llds: deadlocked\n", what,
                         static_cast<long long>(limit.count()));
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::vector<std::byte> Pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 131 + seed + (i >> 12)));
  return v;
}

TEST_P(LinkTest, SyncDeviceToHostOfManySizes) {
  std::lock_guard<std::mutex> lk(link_->mu());
  for (size_t n : {size_t{1}, size_t{4096}, size_t{65535}, size_t{65536}, size_t{1} << 20,
                   (size_t{9} << 20) + 3}) {
    uint64_t d = Malloc(n);
    std::vector<std::byte> src = Pattern(n, static_cast<uint8_t>(n)), dst(n, std::byte{0});
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h).ok());
    ASSERT_EQ(h.error, 0) << h.message;
    ASSERT_EQ(h.async_error, 0) << h.async_message;
    EXPECT_TRUE(src == dst) << "size " << n;
  }
}

// An asynchronous read is ordered before later work (the memset after it does not show in what
// it read) and its data is in place once a synchronizing call returns.
TEST_P(LinkTest, AsyncDeviceToHostIsOrderedAndLandsBySync) {
  std::lock_guard<std::mutex> lk(link_->mu());
  const size_t n = (size_t{10} << 20) + 17;  // three chunks, the last one short
  uint64_t d = Malloc(n);
  std::vector<std::byte> src = Pattern(n, 9), dst(n, std::byte{0}), small(100, std::byte{0});
  ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, /*async=*/true).ok());
  ASSERT_TRUE(link_->CopyFromDevice(small.data(), d + 1000, small.size(), 0, &h, true).ok());
  proto::Memset ms{.dst = d, .value = 0xEE, .size = n};
  ASSERT_TRUE(link_->Post(ms).ok());
  proto::ReplyHead s = Sync();
  EXPECT_EQ(s.async_error, 0) << s.async_message;
  EXPECT_TRUE(src == dst);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), src.begin() + 1000));
  // And the memset did run after them.
  std::vector<std::byte> after(4096);
  ASSERT_TRUE(link_->CopyFromDevice(after.data(), d, after.size(), 0, &h).ok());
  EXPECT_EQ(after[0], std::byte{0xEE});
  EXPECT_EQ(after[4095], std::byte{0xEE});
}

// Nobody calls the link after the asynchronous read: the pump receives it anyway.
TEST_P(LinkTest, AsyncDeviceToHostLandsWithoutAnotherCall) {
  const size_t n = size_t{5} << 20;
  std::vector<std::byte> src = Pattern(n, 3), dst(n, std::byte{0});
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    uint64_t d = Malloc(n);
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, true).ok());
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (link_->pending_reads() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(link_->pending_reads(), 0u);
  EXPECT_TRUE(src == dst);
}

TEST_P(LinkTest, AsyncDeviceToHostErrorComesWithTheNextSync) {
  std::lock_guard<std::mutex> lk(link_->mu());
  std::vector<std::byte> dst(1 << 20);
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), 0x10, dst.size(), 0, &h, true).ok());
  EXPECT_EQ(h.error, 0);  // nothing reported yet
  proto::ReplyHead s = Sync();
  EXPECT_NE(s.async_error, 0);
  EXPECT_NE(s.async_message.find("device to host"), std::string::npos) << s.async_message;
  EXPECT_EQ(Sync().async_error, 0);  // reported once
}

// A queued request that no later call sends is sent by the pump within a couple of ticks.
TEST_P(LinkTest, QueuedWorkIsFlushedWithoutAnotherCall) {
  uint64_t d;
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    d = Malloc(64);
  }
  uint64_t before = link_->pump_flushes();
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    proto::Memset ms{.dst = d, .value = 0x5A, .size = 64};
    ASSERT_TRUE(link_->Post(ms).ok());
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (link_->pump_flushes() == before && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(link_->pump_flushes(), before) << "the queued memset was never sent";
  std::lock_guard<std::mutex> lk(link_->mu());
  std::vector<std::byte> out(64);
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(out.data(), d, out.size(), 0, &h).ok());
  EXPECT_EQ(out[63], std::byte{0x5A});
}

// Small asynchronous reads stay queued (a burst shares one send); nobody calls the link again,
// so the pump must send them before it waits for their replies, or they never land.
TEST_P(LinkTest, QueuedSmallAsyncReadsAreSentByThePumpAndLand) {
  const size_t n = 1000;
  std::vector<std::byte> src = Pattern(8 * n, 5), dst(8 * n, std::byte{0});
  uint64_t before;
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    uint64_t d = Malloc(src.size());
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    ASSERT_EQ(Sync().async_error, 0);
    before = link_->pump_flushes();
    proto::ReplyHead h;
    for (size_t i = 0; i < 8; ++i) {
      ASSERT_TRUE(link_->CopyFromDevice(dst.data() + i * n, d + i * n, n, 0, &h, true).ok());
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (link_->pending_reads() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(link_->pending_reads(), 0u);
  EXPECT_GT(link_->pump_flushes(), before) << "the reads were not left queued";
  EXPECT_TRUE(src == dst);
}

// Synchronous calls and copies are received by their callers, so they never wake a sleeping pump
// (each wake-up is a thread hop competing with the copy's threads for a core); an asynchronous
// read that nobody collects does wake it, and lands.
TEST_P(LinkTest, SynchronousCopiesLeaveThePumpAsleepAndAnAsyncReadWakesIt) {
  const size_t n = 64 << 10;
  std::vector<std::byte> src = Pattern(n, 7), dst(n), late(n, std::byte{0});
  uint64_t d;
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    d = Malloc(n);
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());  // a 64 KiB chunk goes at once
    ASSERT_EQ(Sync().async_error, 0);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!link_->pump_asleep() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(link_->pump_asleep()) << "an idle link's pump never went to sleep";
  const uint64_t wakes = link_->pump_wakes();
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    for (int i = 0; i < 20; ++i) {
      std::fill(dst.begin(), dst.end(), std::byte{0});
      proto::ReplyHead h;
      ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, i % 2 ? n : 4096, 0, &h).ok());
      ASSERT_EQ(h.error, 0) << h.message;
      ASSERT_TRUE(std::equal(dst.begin(), dst.begin() + (i % 2 ? n : 4096), src.begin()));
    }
    ASSERT_EQ(Sync().async_error, 0);
  }
  EXPECT_EQ(link_->pump_wakes(), wakes) << "synchronous copies woke the pump";
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(late.data(), d, n, 0, &h, /*async=*/true).ok());
  }
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (link_->pending_reads() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(link_->pending_reads(), 0u) << "the sleeping pump never collected the async read";
  EXPECT_TRUE(late == src);
  EXPECT_GT(link_->pump_wakes(), wakes);
}

// Callers never disarm the pump's timer (an arm-and-disarm pair of timerfd_settime calls per burst
// cost ~7 us on a paravirtualized VM): bursts of asynchronous work, each synced by the program,
// arm it again only after the pump consumed the previous arming, so armings never outnumber the
// pump's wake-ups, however many bursts there are (the old code armed once per burst, never woke).
TEST_P(LinkTest, SyncedBurstsArmThePumpTimerAtMostOncePerPumpWakeUp) {
  const size_t n = 1024, kBursts = 200;
  std::vector<std::byte> src = Pattern(4 * n, 9), dst(4 * n);
  uint64_t d;
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    d = Malloc(src.size());
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    ASSERT_EQ(Sync().async_error, 0);
  }
  const uint64_t arms = link_->timer_arms(), wakes = link_->pump_wakes();
  for (size_t b = 0; b < kBursts; ++b) {
    // Reads answered by their own replies, then posted work synced by a round trip (Call): the
    // two ways a program's sync ends a burst.
    ASSERT_NO_FATAL_FAILURE(SyncedReadBurst(d, dst, src)) << "burst " << b;
    std::lock_guard<std::mutex> lk(link_->mu());
    proto::Memset ms{.dst = d, .value = 0, .size = 0};
    ASSERT_TRUE(link_->Post(ms).ok());
    ASSERT_EQ(Sync().async_error, 0);
  }
  // +2: a wake-up counted before the snapshot may clear the flag after it.
  EXPECT_LE(link_->timer_arms() - arms, link_->pump_wakes() - wakes + 2)
      << "armings " << link_->timer_arms() - arms << " for " << kBursts << " synced bursts";
}

// The pump's tick: back to kFlushTick once it acts, doubled up to kMaxPumpTick while the program
// does the work itself, unchanged on a first look that finds work.
TEST(PumpTick, BacksOffWhileTheProgramWorksAndResetsWhenThePumpActs) {
  using std::chrono::microseconds;
  const auto kMin = ServerLink::kFlushTick, kMax = ServerLink::kMaxPumpTick;
  EXPECT_EQ(ServerLink::NextPumpTick(kMin, false, true), 2 * kMin);
  EXPECT_EQ(ServerLink::NextPumpTick(2 * kMin, false, true), 4 * kMin);
  EXPECT_EQ(ServerLink::NextPumpTick(kMax, false, true), kMax);
  EXPECT_EQ(ServerLink::NextPumpTick(microseconds(3000), false, true), kMax);
  EXPECT_EQ(ServerLink::NextPumpTick(kMax, true, true), kMin);
  EXPECT_EQ(ServerLink::NextPumpTick(kMax, true, false), kMin);
  EXPECT_EQ(ServerLink::NextPumpTick(2 * kMin, false, false), 2 * kMin);
}

// A program that keeps its own bursts moving backs the pump's tick off (so it wakes a quarter as
// often), and the pump still sends work that nobody sends afterwards, then ticks fast again.
TEST_P(LinkTest, SteadyBurstsBackThePumpOffAndWorkLeftQueuedStillGoes) {
  const size_t n = 1024;
  std::vector<std::byte> src = Pattern(4 * n, 5), dst(4 * n);
  uint64_t d;
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    d = Malloc(src.size());
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    ASSERT_EQ(Sync().async_error, 0);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t bursts = 0;
  while (link_->pump_tick() < ServerLink::kMaxPumpTick &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_NO_FATAL_FAILURE(SyncedReadBurst(d, dst, src)) << "burst " << bursts;
    ++bursts;
  }
  ASSERT_EQ(link_->pump_tick(), ServerLink::kMaxPumpTick)
      << "the tick never backed off over " << bursts << " bursts";
  const uint64_t flushes = link_->pump_flushes();
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    proto::Memset ms{.dst = d, .value = 0x3c, .size = 16};
    ASSERT_TRUE(link_->Post(ms).ok());
  }
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // The pump counts its flush before it sets its tick, so wait for both.
  while ((link_->pump_flushes() == flushes || link_->pump_tick() == ServerLink::kMaxPumpTick) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GT(link_->pump_flushes(), flushes) << "the queued memset was never sent";
  // Acting set it to kFlushTick; one arming made before the flush may still fire, find nothing
  // and double it once (the one-shot timer holds one expiry, and nothing here arms it again).
  EXPECT_LE(link_->pump_tick(), 2 * ServerLink::kFlushTick) << "acting did not reset the tick";
  std::lock_guard<std::mutex> lk(link_->mu());
  std::vector<std::byte> back(16);
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(back.data(), d, back.size(), 0, &h).ok());
  EXPECT_EQ(back, std::vector<std::byte>(16, std::byte{0x3c}));
}

// Host-to-device chunks are received straight into device memory once the frames queued before
// them have run: a memset queued before a copy to the same bytes must not overwrite it, and one
// queued after it must. 64 KiB rides with a tail on TCP; 1 MiB is split on UCX too.
TEST_P(LinkTest, HostToDeviceInPlaceKeepsOrderWithQueuedWork) {
  std::lock_guard<std::mutex> lk(link_->mu());
  for (size_t n : {size_t{64} << 10, size_t{1} << 20}) {
    uint64_t d = Malloc(n);
    std::vector<std::byte> src = Pattern(n, 21), dst(n, std::byte{0});
    proto::Memset before{.dst = d, .value = 0x11, .size = n};
    ASSERT_TRUE(link_->Post(before).ok());
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    proto::Memset after{.dst = d, .value = 0x22, .size = 16};
    ASSERT_TRUE(link_->Post(after).ok());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h).ok());
    ASSERT_EQ(h.error, 0) << h.message;
    ASSERT_EQ(h.async_error, 0) << h.async_message;
    EXPECT_EQ(dst[0], std::byte{0x22}) << "size " << n;
    EXPECT_EQ(dst[15], std::byte{0x22}) << "size " << n;
    EXPECT_TRUE(std::equal(dst.begin() + 16, dst.end(), src.begin() + 16)) << "size " << n;
  }
}

// A chunk bound for freed or out-of-range device memory is drained and fails at the next sync;
// nothing lands next to it, and the session goes on working.
TEST_P(LinkTest, HostToDeviceIntoBadMemoryFailsCleanly) {
  std::lock_guard<std::mutex> lk(link_->mu());
  const size_t n = size_t{1} << 20;
  uint64_t a = Malloc(n), b = Malloc(n), gone = Malloc(n);
  std::vector<std::byte> src = Pattern(n, 33), keep = Pattern(n, 44), out(n);
  ASSERT_TRUE(link_->CopyToDevice(b, keep, 0).ok());
  proto::Free f{.ptr = gone};
  proto::ReplyHead h;
  proto::Empty none;
  ASSERT_TRUE(link_->Call(f, &h, &none).ok());
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_TRUE(link_->CopyToDevice(gone, src, 0).ok());
  proto::ReplyHead s = Sync();
  EXPECT_NE(s.async_error, 0) << "copy into freed memory";
  EXPECT_NE(s.async_message.find("host-to-device"), std::string::npos) << s.async_message;
  // Past a's end: half of it would land in whatever follows a.
  ASSERT_TRUE(link_->CopyToDevice(a + n / 2, src, 0).ok());
  s = Sync();
  EXPECT_NE(s.async_error, 0) << "copy past an allocation's end";
  ASSERT_TRUE(link_->CopyFromDevice(out.data(), b, n, 0, &h).ok());
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_TRUE(out == keep);
  ASSERT_TRUE(link_->CopyToDevice(a, src, 0).ok());
  ASSERT_TRUE(link_->CopyFromDevice(out.data(), a, n, 0, &h).ok());
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_TRUE(out == src);
}

// Protocol v7: a read of at least kBareReplyMinBytes comes back bare (its bytes alone) when all
// went well, but framed when it must carry an earlier posted op's error; the client tells them
// apart by size, so the framed one's error reaches the caller and its bytes still land.
TEST_P(LinkTest, ALargeReadCarryingAnEarlierErrorIsFramedAndReportsIt) {
  std::lock_guard<std::mutex> lk(link_->mu());
  for (size_t n : {proto::kBareReplyMinBytes, size_t{1} << 20}) {
    uint64_t d = Malloc(n);
    std::vector<std::byte> src = Pattern(n, 51), out(n, std::byte{0});
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    proto::Memset bad{.dst = 0x10, .value = 1, .size = 16};  // no such memory: fails, posted
    ASSERT_TRUE(link_->Post(bad).ok());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(out.data(), d, n, 0, &h).ok());
    EXPECT_EQ(h.error, 0) << h.message;
    EXPECT_NE(h.async_error, 0) << "size " << n << ": the posted memset's error was lost";
    EXPECT_TRUE(out == src) << "size " << n;
    EXPECT_EQ(Sync().async_error, 0);  // reported once
  }
}

// Host rows of `width` bytes, `pitch` apart, with a filler byte between rows (to see that a copy
// into them leaves the gaps alone).
std::vector<std::byte> Pitched(size_t width, size_t pitch, size_t height, uint8_t seed) {
  std::vector<std::byte> v((height - 1) * pitch + width, std::byte{0xC3});
  for (size_t r = 0; r < height; ++r) {
    for (size_t i = 0; i < width; ++i) v[r * pitch + i] = std::byte(static_cast<uint8_t>(r * 7 + i * 13 + seed));
  }
  return v;
}
bool SameRows(const std::vector<std::byte>& a, size_t apitch, const std::vector<std::byte>& b,
              size_t bpitch, size_t width, size_t height) {
  for (size_t r = 0; r < height; ++r) {
    if (!std::equal(a.begin() + r * apitch, a.begin() + r * apitch + width, b.begin() + r * bpitch)) {
      return false;
    }
  }
  return true;
}

// 2-D copies with pitches != width both ways and device to device: host-to-device and
// device-to-device are posted (no reply is received for them: the reply count does not move), the
// rows land right and the gaps between host rows stay untouched. Shapes: rows copied into the
// batch, rows sent as a tail, rows over several requests, rows wider than a chunk.
TEST_P(LinkTest, TwoDimensionalCopiesWithPitchesRoundTripAndPostTheirWrites) {
  std::lock_guard<std::mutex> lk(link_->mu());
  struct Shape { size_t width, height, spitch, dpitch, hpitch; };
  for (const Shape& sh : {Shape{100, 37, 200, 512, 150}, Shape{3000, 300, 3001, 3072, 4000},
                          Shape{1000, 5000, 1000, 1024, 1003}, Shape{2000, 2500, 2048, 2000, 2000},
                          Shape{(size_t{5} << 20) + 1, 2, (size_t{5} << 20) + 9,
                                (size_t{5} << 20) + 64, (size_t{5} << 20) + 3}}) {
    const size_t dev_bytes = (sh.height - 1) * sh.dpitch + sh.width;
    uint64_t a = Malloc(dev_bytes), b = Malloc(dev_bytes);
    std::vector<std::byte> src = Pitched(sh.width, sh.spitch, sh.height, 1);
    const uint64_t replies = link_->replies();
    ASSERT_TRUE(link_->CopyToDevice2D(a, sh.dpitch, src.data(), sh.spitch, sh.width, sh.height, 0).ok());
    proto::Memcpy2DAsync d2d;
    d2d.kind = static_cast<uint8_t>(proto::CopyKind::kDeviceToDevice);
    d2d.dst = b;
    d2d.dpitch = sh.dpitch;
    d2d.src = a;
    d2d.spitch = sh.dpitch;
    d2d.width = sh.width;
    d2d.height = sh.height;
    ASSERT_TRUE(link_->Post(d2d).ok());
    EXPECT_EQ(link_->replies(), replies) << "a posted 2-D copy waited for a reply, width " << sh.width;
    // Back from both, into host rows of yet another pitch.
    std::vector<std::byte> from_a = Pitched(sh.width, sh.hpitch, sh.height, 99);
    std::vector<std::byte> from_b = from_a;
    const std::vector<std::byte> untouched = from_a;
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice2D(from_a.data(), sh.hpitch, a, sh.dpitch, sh.width,
                                        sh.height, 0, &h).ok());
    ASSERT_EQ(h.error, 0) << h.message;
    ASSERT_EQ(h.async_error, 0) << h.async_message;
    ASSERT_TRUE(link_->CopyFromDevice2D(from_b.data(), sh.hpitch, b, sh.dpitch, sh.width,
                                        sh.height, 0, &h, /*async=*/true).ok());
    ASSERT_EQ(Sync().async_error, 0);
    EXPECT_TRUE(SameRows(from_a, sh.hpitch, src, sh.spitch, sh.width, sh.height)) << "width " << sh.width;
    EXPECT_TRUE(SameRows(from_b, sh.hpitch, src, sh.spitch, sh.width, sh.height)) << "width " << sh.width;
    for (size_t r = 0; r + 1 < sh.height; ++r) {  // the gaps between host rows
      size_t gap = r * sh.hpitch + sh.width;
      ASSERT_TRUE(std::equal(from_a.begin() + gap, from_a.begin() + (r + 1) * sh.hpitch,
                             untouched.begin() + gap)) << "row " << r << " width " << sh.width;
      ASSERT_TRUE(std::equal(from_b.begin() + gap, from_b.begin() + (r + 1) * sh.hpitch,
                             untouched.begin() + gap)) << "row " << r << " width " << sh.width;
    }
    for (uint64_t p : {a, b}) {
      proto::Free f{.ptr = p};
      proto::Empty none;
      ASSERT_TRUE(link_->Call(f, &h, &none).ok());
    }
  }
}

// One Memset2D request sets every row and leaves the bytes between rows alone; a posted 2-D copy
// into a bad range fails at the next sync, naming itself; an asynchronous 2-D read from a bad
// range too.
TEST_P(LinkTest, Memset2DSetsRowsAndPosted2DErrorsComeWithTheNextSync) {
  std::lock_guard<std::mutex> lk(link_->mu());
  const size_t width = 48, pitch = 64, height = 4096;
  uint64_t d = Malloc(pitch * height);
  proto::Memset clear{.dst = d, .value = 0x11, .size = pitch * height};
  ASSERT_TRUE(link_->Post(clear).ok());
  const uint64_t replies = link_->replies();
  proto::Memset2D m{.dst = d, .pitch = pitch, .value = 0x1AB, .width = width, .height = height};
  ASSERT_TRUE(link_->Post(m).ok());
  EXPECT_EQ(link_->replies(), replies);
  std::vector<std::byte> out(pitch * height);
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(out.data(), d, out.size(), 0, &h).ok());
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_EQ(h.async_error, 0) << h.async_message;
  for (size_t r = 0; r < height; ++r) {
    ASSERT_EQ(out[r * pitch], std::byte{0xAB}) << "row " << r;
    ASSERT_EQ(out[r * pitch + width - 1], std::byte{0xAB}) << "row " << r;
    ASSERT_EQ(out[r * pitch + width], std::byte{0x11}) << "row " << r;
  }
  // Rows running past the allocation: refused whole, at the next sync.
  proto::Memset2D past{.dst = d, .pitch = pitch, .value = 1, .width = width, .height = height + 1};
  ASSERT_TRUE(link_->Post(past).ok());
  proto::ReplyHead s = Sync();
  EXPECT_NE(s.async_error, 0);
  EXPECT_NE(s.async_message.find("Memset2D"), std::string::npos) << s.async_message;
  std::vector<std::byte> rows(width * 10);
  ASSERT_TRUE(link_->CopyToDevice2D(0x10, pitch, rows.data(), width, width, 10, 0).ok());
  s = Sync();
  EXPECT_NE(s.async_error, 0);
  EXPECT_NE(s.async_message.find("Memcpy2DAsync"), std::string::npos) << s.async_message;
  std::vector<std::byte> back(pitch * 10);
  ASSERT_TRUE(link_->CopyFromDevice2D(back.data(), pitch, 0x10, pitch, width, 10, 0, &h, true).ok());
  EXPECT_EQ(h.error, 0);  // nothing reported yet
  s = Sync();
  EXPECT_NE(s.async_error, 0);
  EXPECT_NE(s.async_message.find("cudaMemcpy2DAsync (device to host)"), std::string::npos)
      << s.async_message;
  EXPECT_EQ(Sync().async_error, 0);  // reported once
}

// An asynchronous 2-D read nobody collects is received by the pump, rows spread to their pitch.
TEST_P(LinkTest, Async2DDeviceToHostLandsWithoutAnotherCall) {
  const size_t width = 300, pitch = 320, height = 200;
  std::vector<std::byte> src = Pitched(width, width, height, 5);
  std::vector<std::byte> dst(pitch * height, std::byte{0});
  {
    std::lock_guard<std::mutex> lk(link_->mu());
    uint64_t d = Malloc(src.size());
    ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice2D(dst.data(), pitch, d, width, width, height, 0, &h, true).ok());
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (link_->pending_reads() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(link_->pending_reads(), 0u);
  EXPECT_TRUE(SameRows(dst, pitch, src, width, width, height));
}

// An asynchronous read still pending (its request queued, or sent and its reply not taken),
// then a large write: the server answers the read while the client sends the write's bulk bytes.
// Over UCX both sends are rendezvous that wait for the other side to receive, and the two sides
// deadlocked until the link landed pending reads before a bulk send. Bounded: a deadlock fails
// the test at CTest's timeout.
TEST_P(LinkTest, AnAsynchronousReadThenALargeWriteDoNotDeadlock) {
  // A deadlock would hang the whole binary until CTest's timeout, naming no test: watched here.
  Watchdog dog("AnAsynchronousReadThenALargeWriteDoNotDeadlock", std::chrono::seconds(30));
  std::lock_guard<std::mutex> lk(link_->mu());
  const size_t n = size_t{1} << 20;
  uint64_t d = Malloc(n), d_big = Malloc(size_t{9} << 20);
  std::vector<std::byte> src = Pattern(n, 8), dst(n, std::byte{0});
  ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
  for (size_t write : {size_t{256} << 10, size_t{1} << 20, size_t{9} << 20}) {
    std::fill(dst.begin(), dst.end(), std::byte{0});
    std::vector<std::byte> big = Pattern(write, static_cast<uint8_t>(write >> 10));
    proto::ReplyHead h;
    ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, /*async=*/true).ok());
    ASSERT_TRUE(link_->CopyToDevice(d_big, big, 0).ok()) << write;
    EXPECT_TRUE(dst == src) << "the read did not land before the " << write << "-byte write";
    std::vector<std::byte> back(write);
    ASSERT_TRUE(link_->CopyFromDevice(back.data(), d_big, write, 0, &h).ok());
    EXPECT_EQ(h.error, 0) << h.message;
    EXPECT_TRUE(back == big) << write;
  }
}

// The same with a request message grown large (a module's image, 16 MiB of junk the server
// keeps unloaded until first use) while a sent read's reply is still on its way: no deadlock,
// since a sent read's reply is received by the pump when no caller does (within a few ticks).
TEST_P(LinkTest, ASentReadThenALargeRequestDoNotDeadlock) {
  Watchdog dog("ASentReadThenALargeRequestDoNotDeadlock", std::chrono::seconds(30));
  std::lock_guard<std::mutex> lk(link_->mu());
  const size_t n = size_t{4} << 20;  // a chunk's worth of reads is sent at once
  uint64_t d = Malloc(n);
  std::vector<std::byte> src = Pattern(n, 2), dst(n, std::byte{0});
  ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
  proto::ReplyHead h;
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, /*async=*/true).ok());
  std::vector<std::byte> image(size_t{16} << 20, std::byte{0x5c});
  proto::RegisterModule r{.module = 900, .image = image};
  ASSERT_TRUE(link_->Post(r).ok());
  proto::ReplyHead s = Sync();
  EXPECT_EQ(s.async_error, 0) << s.async_message;
  EXPECT_TRUE(dst == src);
}

// A stream sync whose stream's last work was a read (the program's "cudaMemcpyAsync D2H;
// cudaStreamSynchronize") is answered by the read's reply: no round trip of its own. Anything
// queued after the read, another stream, or a failure sends it to the server as before.
TEST_P(LinkTest, AStreamSyncRightAfterItsReadsIsAnsweredByTheirReplies) {
  std::lock_guard<std::mutex> lk(link_->mu());
  ASSERT_EQ(link_->device_count(), 1u);
  const size_t n = size_t{1} << 20;
  uint64_t d = Malloc(n);
  std::vector<std::byte> src = Pattern(n, 4), dst(n, std::byte{0}), small(100, std::byte{0});
  ASSERT_TRUE(link_->CopyToDevice(d, src, 0).ok());
  proto::ReplyHead h;
  uint64_t replies = link_->replies();
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());  // after a write: the server is asked
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(link_->replies(), replies + 1);
  EXPECT_EQ(link_->syncs_elided(), 0u);

  replies = link_->replies();
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, /*async=*/true).ok());
  ASSERT_TRUE(link_->CopyFromDevice(small.data(), d + 7, small.size(), 0, &h, true).ok());
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_EQ(link_->syncs_elided(), 1u);
  EXPECT_EQ(link_->replies(), replies + 2) << "the sync waited for a reply of its own";
  EXPECT_EQ(link_->pending_reads(), 0u);
  EXPECT_TRUE(dst == src) << "the sync returned before the read landed";
  EXPECT_TRUE(std::equal(small.begin(), small.end(), src.begin() + 7));

  // Queries (cudaStreamQuery, often in a loop) likewise: the read's reply is the only one.
  std::fill(dst.begin(), dst.end(), std::byte{0});
  replies = link_->replies();
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, true).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(link_->QueryStream(0, 0, &h).ok());
    EXPECT_EQ(h.error, 0) << h.message;
  }
  EXPECT_EQ(link_->syncs_elided(), 4u);
  EXPECT_EQ(link_->replies(), replies + 1);
  EXPECT_TRUE(dst == src);
  // After other work a query goes to the server (and still says the stream is done).
  proto::Memset busy{.dst = d + n - 16, .value = 0x11, .size = 16};
  ASSERT_TRUE(link_->Post(busy).ok());
  ASSERT_TRUE(link_->QueryStream(0, 0, &h).ok());
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(link_->replies(), replies + 2);
  EXPECT_EQ(link_->syncs_elided(), 4u);

  // Work queued after the read: the sync must wait for it on the server.
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, true).ok());
  proto::Memset ms{.dst = d, .value = 0x5A, .size = 16};
  ASSERT_TRUE(link_->Post(ms).ok());
  replies = link_->replies();
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
  EXPECT_EQ(link_->syncs_elided(), 4u);
  EXPECT_EQ(link_->replies(), replies + 2);  // the read's, then the sync's own

  // Copies sent outside a plain batch (a 64 KiB one as a gather part; a 9 MiB one in chunks)
  // are later work too.
  std::vector<std::byte> big((size_t{9} << 20) + 5, std::byte{0x42});
  uint64_t d_big = Malloc(big.size());
  // (The read lands before such a write is sent: see LandReadsBeforeBulkSend and
  // AnAsynchronousReadThenALargeWriteDoNotDeadlock.)
  for (size_t write : {size_t{64} << 10, big.size()}) {
    replies = link_->replies();
    ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, true).ok());
    ASSERT_TRUE(link_->CopyToDevice(d_big, std::span<const std::byte>(big.data(), write), 0).ok());
    ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
    EXPECT_EQ(link_->replies(), replies + 2) << "a sync after a " << write << "-byte write";
    EXPECT_EQ(link_->syncs_elided(), 4u);
  }

  // A read on a stream that does not exist fails (the emulated backend checks it as the cuda
  // one does), so the sync of that stream is asked, and reports it.
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 77, &h, true).ok());
  ASSERT_TRUE(link_->SyncStream(0, 77, &h).ok());
  EXPECT_NE(h.async_error, 0) << "a read on an unknown stream succeeded";
  EXPECT_EQ(link_->syncs_elided(), 4u);

  // Another stream than the read's: asked (stream 77 does not exist, which the server says).
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), d, n, 0, &h, true).ok());
  ASSERT_TRUE(link_->SyncStream(0, 77, &h).ok());
  EXPECT_NE(h.error, 0) << "a sync of an unknown stream was answered locally";
  EXPECT_EQ(link_->syncs_elided(), 4u);

  // A failed read: the sync goes to the server and reports it, once.
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), 0x10, n, 0, &h, true).ok());
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
  EXPECT_NE(h.async_error, 0);
  EXPECT_NE(h.async_message.find("device to host"), std::string::npos) << h.async_message;
  EXPECT_EQ(link_->syncs_elided(), 4u);
  // A synchronous read that failed: the next sync asks too.
  ASSERT_TRUE(link_->CopyFromDevice(dst.data(), 0x10, n, 0, &h).ok());
  EXPECT_NE(h.error, 0);
  replies = link_->replies();
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_EQ(link_->replies(), replies + 1);
  EXPECT_EQ(link_->syncs_elided(), 4u);

  // A 2-D read counts as a read; and once all is well again, syncs are answered locally again.
  std::vector<std::byte> rows(64 * 10);
  ASSERT_TRUE(link_->CopyFromDevice2D(rows.data(), 64, d + 4096, 128, 64, 10, 0, &h, true).ok());
  ASSERT_TRUE(link_->SyncStream(0, 0, &h).ok());
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_EQ(link_->syncs_elided(), 5u);
  EXPECT_TRUE(std::equal(rows.begin(), rows.begin() + 64, src.begin() + 4096));
  EXPECT_TRUE(std::equal(rows.begin() + 64, rows.begin() + 128, src.begin() + 4096 + 128));
}

// On a server with two devices the default stream is not answered locally (the read ran on its
// pointer's device, which the link does not know); a stream of its own still is.
TEST(LinkTwoDevices, DefaultStreamSyncIsAskedAndAnOwnStreamIsNot) {
  ASSERT_FALSE(g_addr[2].empty()) << "server did not start";
  auto l = ServerLink::Connect({.address = g_addr[2], .transport = "tcp"});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ServerLink& link = **l;
  ASSERT_EQ(link.device_count(), 2u);
  std::lock_guard<std::mutex> lk(link.mu());
  proto::Malloc m{.device = 1, .size = 4096};
  proto::Pointer p;
  proto::ReplyHead h;
  ASSERT_TRUE(link.Call(m, &h, &p).ok());
  ASSERT_EQ(h.error, 0) << h.message;
  std::vector<std::byte> dst(4096);
  ASSERT_TRUE(link.CopyFromDevice(dst.data(), p.ptr, dst.size(), 0, &h, true).ok());
  uint64_t replies = link.replies();
  ASSERT_TRUE(link.SyncStream(0, 0, &h).ok());
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(link.replies(), replies + 2);
  EXPECT_EQ(link.syncs_elided(), 0u);

  proto::StreamCreate sc{.device = 1, .stream = 41};
  ASSERT_TRUE(link.Post(sc).ok());
  ASSERT_TRUE(link.CopyFromDevice(dst.data(), p.ptr, dst.size(), 41, &h, true).ok());
  replies = link.replies();
  ASSERT_TRUE(link.SyncStream(1, 41, &h).ok());
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_EQ(link.replies(), replies + 1);
  EXPECT_EQ(link.syncs_elided(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Transports, LinkTest, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? "tcp" : "ucx"; });

// ---- A link over a scripted server connection (ServerLink::OverConnection) ----

// Answers each message with the next scripted reply and records what it was sent.
class ScriptedServer final : public Connection {
 public:
  explicit ScriptedServer(std::vector<std::vector<std::byte>> replies)
      : replies_(std::move(replies)) {}
  Status Send(std::span<const ByteSpan> parts) override {
    std::vector<std::byte> m;
    for (const ByteSpan& p : parts) m.insert(m.end(), p.begin(), p.end());
    sent_.push_back(std::move(m));
    return Status::Ok();
  }
  Status Recv(std::vector<std::byte>* message) override {
    if (next_ >= replies_.size()) return Status::Unavailable("script done");
    *message = replies_[next_++];
    return Status::Ok();
  }
  void Close() override {}
  std::string peer() const override { return "script"; }
  const std::vector<std::vector<std::byte>>& sent() const { return sent_; }

 private:
  std::vector<std::vector<std::byte>> replies_;
  size_t next_ = 0;
  std::vector<std::vector<std::byte>> sent_;
};

std::vector<std::byte> ReplyTo(proto::Op op, int32_t error) {
  proto::BatchWriter w;
  proto::ReplyHead head{.error = error, .message = error ? "scripted failure" : ""};
  proto::Empty none;
  w.AddReply(static_cast<uint16_t>(op), head, none);
  wire::ByteSpan m = w.Finish();
  return {m.begin(), m.end()};
}

TEST(LinkOverConnection, CallsSendTheQueuedWorkThenTheRequestAndCheckTheReplysOp) {
  auto conn = std::make_unique<ScriptedServer>(std::vector<std::vector<std::byte>>{
      ReplyTo(proto::Op::kPing, 0), ReplyTo(proto::Op::kPing, 7),
      ReplyTo(proto::Op::kDeviceSync, 0)});
  ScriptedServer* server = conn.get();
  auto link = ServerLink::OverConnection(std::move(conn), "scripted:1");
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  std::lock_guard<std::mutex> lk((*link)->mu());
  proto::ReplyHead h;
  proto::Empty none;
  proto::Ping ping;
  // Posted work rides in the same message as the call that follows it.
  proto::Memset m{.dst = 0x1000, .value = 1, .size = 8};
  ASSERT_TRUE((*link)->Post(m).ok());
  ASSERT_TRUE((*link)->Call(ping, &h, &none).ok());
  EXPECT_EQ(h.error, 0);
  ASSERT_EQ(server->sent().size(), 1u);
  auto frames = proto::ParseMessage(server->sent()[0]);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_EQ((*frames)[0].op, static_cast<uint16_t>(proto::Op::kMemset));
  EXPECT_EQ((*frames)[1].op, static_cast<uint16_t>(proto::Op::kPing));
  // A failed call reports the server's error and leaves the link usable.
  ASSERT_TRUE((*link)->Call(ping, &h, &none).ok());
  EXPECT_EQ(h.error, 7);
  EXPECT_EQ(h.message, "scripted failure");
  // A reply to another request breaks the link, naming both.
  Status s = (*link)->Call(ping, &h, &none);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("scripted:1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Ping"), std::string::npos) << s.message();
  EXPECT_TRUE((*link)->broken());
  EXPECT_EQ((*link)->Call(ping, &h, &none).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpool::remote::client

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  // A death test's child (re-executed: managed_guard_test.cc) runs one statement and needs no
  // servers; forked there, they would keep its pipe to the parent open after it died.
  bool death_test_child = false;
  for (int i = 1; i < argc; ++i) {
    death_test_child |= std::string_view(argv[i]).find("internal_run_death_test") !=
                        std::string_view::npos;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (!death_test_child) ::testing::AddGlobalTestEnvironment(new gpool::remote::client::Servers);
  return RUN_ALL_TESTS();
}
