// The compute-share arbiter across real processes (forked, as the server's session workers are).
// Kernel time is charged, not slept, so the assertions are on counts of admitted launches, never
// on timings: whatever the scheduler does, a session cannot get ahead of its share by more than
// the slice.
#include "remote/server/share_arbiter.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include "remote/protocol/messages.h"
#include "remote/server/session.h"
#include "remote/transport/transport.h"

namespace gpool::remote::server {
namespace {

constexpr uint64_t kMs = 1'000'000;

struct Board {  // shared with the children
  std::atomic<int> ready;
  std::atomic<int> total;
  std::atomic<int> count[4];
  // Counts of sessions 0 and 1 when `total` passed snap_at[k] (SessionsEnforceTheirShares).
  int snap_at[2];
  std::atomic<int> snap[2][2];
};

Board* NewBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return new (p) Board{};
}

// Runs `sessions` children with the given shares, all backlogged with 1 ms kernels, until
// `launches` have been admitted in all; returns each one's count. `leases[i]`, when given and not
// empty, is the lease session i shares its group on device 0 with.
std::vector<int> RunBacklogged(ShareArbiter* arb, const std::vector<uint32_t>& shares, int launches,
                               const std::vector<std::string>& leases = {}) {
  Board* b = NewBoard();
  std::vector<pid_t> pids;
  for (size_t i = 0; i < shares.size(); ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<ShareGroup> groups;
      if (i < leases.size() && !leases[i].empty()) {
        groups.push_back({.device = 0, .lease_id = leases[i], .share_milli = shares[i]});
      }
      auto slot = arb->Join(shares[i], groups);
      if (!slot.ok()) _exit(2);
      arb->Admit(*slot, 0);  // active before anyone starts counting
      b->ready.fetch_add(1);
      while (b->ready.load() < static_cast<int>(shares.size())) usleep(100);
      while (b->total.fetch_add(1) < launches) {
        b->count[i].fetch_add(1);
        arb->Charge(*slot, 0, 1 * kMs);
        arb->Admit(*slot, 0);
      }
      arb->Idle(*slot);
      arb->Leave(*slot);
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::vector<int> out;
  for (size_t i = 0; i < shares.size(); ++i) out.push_back(b->count[i].load());
  munmap(b, sizeof(Board));
  return out;
}

TEST(ShareArbiter, BackloggedSessionsSplitKernelTimeByShare) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok()) << arb.status().ToString();
  std::vector<int> c = RunBacklogged(arb->get(), {750, 250}, 4000);
  ASSERT_GT(c[1], 0);
  double ratio = static_cast<double>(c[0]) / c[1];
  EXPECT_GT(ratio, 2.7) << c[0] << " vs " << c[1];
  EXPECT_LT(ratio, 3.3) << c[0] << " vs " << c[1];
}

TEST(ShareArbiter, ThreeSessionsEqualShares) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok());
  std::vector<int> c = RunBacklogged(arb->get(), {200, 200, 200}, 3000);
  for (int n : c) {
    EXPECT_GT(n, 900);
    EXPECT_LT(n, 1100);
  }
}

// A lease's share holds for the lease: two sessions of lease `a` (share 0.5) against one of lease
// `b` (0.5) split the GPU 1:1 between the leases, not 2:1 as three sessions of 0.5 each would.
TEST(ShareArbiter, SessionsOfOneLeaseShareItsShare) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok());
  std::vector<int> c = RunBacklogged(arb->get(), {500, 500, 500}, 3000, {"a", "a", "b"});
  ASSERT_GT(c[2], 0);
  double ratio = static_cast<double>(c[0] + c[1]) / c[2];
  EXPECT_GT(ratio, 0.9) << c[0] << " + " << c[1] << " vs " << c[2];
  EXPECT_LT(ratio, 1.1) << c[0] << " + " << c[1] << " vs " << c[2];
  ShareArbiter& a = **arb;
  std::vector<ShareGroup> too_long = {{.device = 0, .lease_id = std::string(65, 'x')}};
  EXPECT_EQ(a.Join(500, too_long).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShareArbiter, IdleSessionHoldsNobodyBack) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok());
  ShareArbiter& a = **arb;
  auto small = a.Join(100), big = a.Join(900);
  ASSERT_TRUE(small.ok() && big.ok());
  a.Admit(*big, 0);
  a.Charge(*big, 0, kMs);
  a.Idle(*big);
  for (int i = 0; i < 1000; ++i) {
    a.Admit(*small, 0);
    a.Charge(*small, 0, kMs);
  }
  EXPECT_EQ(a.stats(*small).admitted, 1000u);
  EXPECT_EQ(a.stats(*small).waits, 0u);
  // Back from idle, the big session starts level with the small one: it banked no credit, so
  // the small one (10 s of virtual time ahead of big's old clock) is not starved now.
  a.Admit(*big, 0);
  a.Admit(*small, 0);
  EXPECT_EQ(a.stats(*small).waits, 0u);
}

TEST(ShareArbiter, DeadSessionsSlotIsReclaimed) {
  auto arb = ShareArbiter::Create({.max_sessions = 2});
  ASSERT_TRUE(arb.ok());
  ShareArbiter& a = **arb;
  pid_t pid = fork();
  if (pid == 0) {
    auto slot = a.Join(1000);
    if (!slot.ok()) _exit(2);
    a.Admit(*slot, 0);  // active, never charged, never leaves
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  auto mine = a.Join(10);
  ASSERT_TRUE(mine.ok());
  // The dead session looks active with virtual time 0; without reclaiming it this would wait.
  for (int i = 0; i < 100; ++i) {
    a.Admit(*mine, 0);
    a.Charge(*mine, 0, kMs);
  }
  EXPECT_EQ(a.stats(*mine).admitted, 100u);
  auto other = a.Join(10);  // the dead one's slot
  EXPECT_TRUE(other.ok()) << other.status().ToString();
  auto third = a.Join(10);
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
}

TEST(ShareArbiter, DevicesAreArbitratedSeparately) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok());
  ShareArbiter& a = **arb;
  auto x = a.Join(500), y = a.Join(500);
  ASSERT_TRUE(x.ok() && y.ok());
  a.Admit(*y, 1);  // y is busy on device 1 only
  for (int i = 0; i < 100; ++i) {
    a.Admit(*x, 0);
    a.Charge(*x, 0, 10 * kMs);
  }
  EXPECT_EQ(a.stats(*x).waits, 0u);
}

// A backend whose every kernel "runs" 1 ms (charged, not slept) and counts itself on the board.
// With `deferred`, like the cuda backend, a kernel's time is not known at launch: it is reported
// by the next TakeKernelTime() (as timing events harvested later), and Launch reports nothing.
class CountingBackend final : public Backend {
 public:
  CountingBackend(Board* b, int index, bool deferred) : b_(b), index_(index), deferred_(deferred) {}
  uint64_t TakeKernelTime(uint32_t) override { return std::exchange(uncharged_ns_, 0); }
  std::string_view name() const override { return "counting"; }
  int DeviceCount() override { return 1; }
  Result GetProps(uint32_t, proto::DeviceProps*) override { return {}; }
  Result GetAttribute(uint32_t, int32_t, int32_t*) override { return {}; }
  Result MemGetInfo(uint32_t, uint64_t*, uint64_t*) override { return {}; }
  Result Malloc(uint32_t, uint64_t, uint64_t*) override { return {}; }
  Result Free(uint64_t) override { return {}; }
  Result CopyH2D(uint64_t, std::span<const std::byte>, uint64_t) override { return {}; }
  Result CopyD2H(std::byte*, uint64_t, uint64_t, uint64_t) override { return {}; }
  std::span<const std::byte> HostView(uint64_t, uint64_t) override { return {}; }
  Result CopyD2D(uint64_t, uint64_t, uint64_t, uint64_t) override { return {}; }
  Result Memset(uint64_t, uint8_t, uint64_t, uint64_t) override { return {}; }
  Result Copy2D(const proto::Memcpy2D&, std::byte*) override { return {}; }
  Result LoadModule(uint64_t, std::span<const std::byte>) override { return {}; }
  Result RegisterFunction(uint64_t, uint64_t, const std::string&) override { return {}; }
  Result RegisterVar(uint64_t, uint64_t, const std::string&, uint64_t, bool) override { return {}; }
  Result UnloadModule(uint64_t) override { return {}; }
  Result GetParamInfo(uint64_t, proto::ParamInfo*) override { return {}; }
  Result GetSymbol(uint64_t, uint32_t, uint64_t*, uint64_t*) override { return {}; }
  Result FuncAttributes(uint64_t, proto::FuncAttrs*) override { return {}; }
  Result Occupancy(uint64_t, int32_t, uint64_t, int32_t*) override { return {}; }
  Result Launch(const proto::Launch&, uint64_t* ns) override {
    // A real (if short) duration, so the two sessions overlap in time even on a loaded machine;
    // what is charged is a fixed 1 ms, so the split does not depend on how long it really took.
    usleep(100);
    b_->count[index_].fetch_add(1);
    int total = b_->total.fetch_add(1) + 1;
    for (int k = 0; k < 2; ++k) {
      if (total == b_->snap_at[k]) {
        b_->snap[k][0] = b_->count[0].load();
        b_->snap[k][1] = b_->count[1].load();
      }
    }
    if (deferred_) {
      uncharged_ns_ += kMs;
      *ns = 0;
    } else {
      *ns = kMs;
    }
    return {};
  }
  Result StreamCreate(uint32_t, uint64_t, uint32_t, int32_t) override { return {}; }
  Result StreamDestroy(uint64_t) override { return {}; }
  Result StreamSync(uint32_t, uint64_t) override { return {}; }
  Result StreamQuery(uint32_t, uint64_t) override { return {}; }
  Result StreamWaitEvent(uint32_t, uint64_t, uint64_t) override { return {}; }
  Result EventCreate(uint32_t, uint64_t, uint32_t) override { return {}; }
  Result EventRecord(uint32_t, uint64_t, uint64_t) override { return {}; }
  Result EventSync(uint64_t) override { return {}; }
  Result EventQuery(uint64_t) override { return {}; }
  Result EventElapsed(uint64_t, uint64_t, float*) override { return {}; }
  Result EventDestroy(uint64_t) override { return {}; }
  Result DeviceSync(uint32_t) override { return {}; }

 private:
  Board* b_;
  int index_;
  bool deferred_;
  uint64_t uncharged_ns_ = 0;
};

// The wiring: two real Sessions (in two processes, as the server's workers), each with all its
// launches already sent by its client before it starts, so both are backlogged from the start;
// the arbiter splits the launches 3:1 by share. Counted between 400 and 1,600 launches in all:
// after both have surely started, before either runs out (2,000 each). With `deferred_time` the
// backends report kernel time after the fact (as the cuda backend's timing events do), which the
// Session must charge through TakeKernelTime().
void ExpectSessionsSplitByShare(bool deferred_time) {
  auto arb = ShareArbiter::Create({});
  ASSERT_TRUE(arb.ok());
  Board* b = NewBoard();
  const uint32_t shares[2] = {750, 250};
  b->snap_at[0] = 400;
  b->snap_at[1] = 1600;
  const int kPerSession = 2000, kPerMessage = 500;
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      auto t = MakeTransport("tcp", {.tcp_data_streams = 0});
      auto l = (*t)->Listen("127.0.0.1:0");
      if (!l.ok()) _exit(2);
      std::unique_ptr<Connection> server_side;
      std::thread accept([&] { server_side = std::move(*(*l)->Accept()); });
      auto client = (*t)->Connect((*l)->address());
      accept.join();
      if (!client.ok() || !server_side) _exit(2);
      auto slot = (*arb)->Join(shares[i]);
      if (!slot.ok()) _exit(2);
      std::atomic<bool> sent{false};
      std::thread sender([&] {
        proto::BatchWriter w;
        for (int m = 0; m < kPerSession / kPerMessage; ++m) {
          w.Reset();
          for (int k = 0; k < kPerMessage; ++k) {
            proto::Launch launch{.func = 1};
            w.AddRequest(launch);
          }
          if (!(*client)->Send(w.Finish()).ok()) break;
        }
        sent = true;
      });
      // Start serving once both clients have sent everything (or filled their socket buffers).
      for (int k = 0; k < 200 && !sent.load(); ++k) usleep(1000);
      b->ready.fetch_add(1);
      while (b->ready.load() < 2) usleep(100);
      CountingBackend backend(b, i, deferred_time);
      SessionLimits limits{.compute_share = shares[i] / 1000.0};
      Session session(1, std::move(server_side), &backend, limits, arb->get(), *slot);
      std::thread serve([&] { (void)session.Run(); });
      sender.join();
      while (b->count[i].load() < kPerSession) usleep(1000);
      (*client)->Close();
      serve.join();
      (*arb)->Leave(*slot);
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  int c0 = b->snap[1][0] - b->snap[0][0], c1 = b->snap[1][1] - b->snap[0][1];
  munmap(b, sizeof(Board));
  ASSERT_GT(c1, 0);
  double ratio = static_cast<double>(c0) / c1;
  EXPECT_GT(ratio, 2.4) << c0 << " vs " << c1;
  EXPECT_LT(ratio, 3.6) << c0 << " vs " << c1;
}

TEST(ShareArbiter, SessionsEnforceTheirShares) { ExpectSessionsSplitByShare(false); }

TEST(ShareArbiter, SessionsEnforceSharesFromKernelTimeKnownAfterTheFact) {
  ExpectSessionsSplitByShare(true);
}

TEST(ShareArbiter, BadOptionsAreRefused) {
  EXPECT_FALSE(ShareArbiter::Create({.max_sessions = 0}).ok());
  EXPECT_FALSE(ShareArbiter::Create({.devices = 17}).ok());
}

}  // namespace
}  // namespace gpool::remote::server
