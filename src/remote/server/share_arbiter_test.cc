// The compute-share arbiter across real processes (forked, as the server's session workers are).
// Kernel time is charged, not slept, so the assertions are on counts of admitted launches, never
// on timings: whatever the scheduler does, a session cannot get ahead of its share by more than
// the slice.
#include "remote/server/share_arbiter.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <gtest/gtest.h>

namespace gpool::remote::server {
namespace {

constexpr uint64_t kMs = 1'000'000;

struct Board {  // shared with the children
  std::atomic<int> ready;
  std::atomic<int> total;
  std::atomic<int> count[4];
};

Board* NewBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return new (p) Board{};
}

// Runs `sessions` children with the given shares, all backlogged with 1 ms kernels, until
// `launches` have been admitted in all; returns each one's count.
std::vector<int> RunBacklogged(ShareArbiter* arb, const std::vector<uint32_t>& shares, int launches) {
  Board* b = NewBoard();
  std::vector<pid_t> pids;
  for (size_t i = 0; i < shares.size(); ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      auto slot = arb->Join(shares[i]);
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

TEST(ShareArbiter, BadOptionsAreRefused) {
  EXPECT_FALSE(ShareArbiter::Create({.max_sessions = 0}).ok());
  EXPECT_FALSE(ShareArbiter::Create({.devices = 17}).ok());
}

}  // namespace
}  // namespace gpool::remote::server
