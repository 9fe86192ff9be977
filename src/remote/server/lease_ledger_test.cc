// The lease ledger: a lease's memory holds across all its sessions, the leases of one GPU cannot
// reserve more than it has, sessions without a limit share what no lease reserved, and a worker
// that died gives everything back. Sessions are entries joined in this process, or in forked
// children where a dead worker is the point.
#include "remote/server/lease_ledger.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace gpool::remote::server {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

LedgerClaim Claim(std::string lease, uint64_t limit, uint64_t total = 4 * kGiB, uint32_t dev = 0) {
  return {.device = dev,
          .lease_id = lease,
          .limit = limit,
          .device_total = total,
          .gpu = "h:7000/" + std::to_string(dev),
          .lease_name = lease.empty() ? "" : "the lease of tenant '" + lease + "'"};
}

StatusOr<int> JoinOne(LeaseLedger& l, LedgerClaim c) { return l.Join(std::span(&c, 1)); }

bool Has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Four sessions of one 256 MiB lease once held 800 MiB between them: each was checked alone.
TEST(LeaseLedger, SessionsOfOneLeaseShareItsMemory) {
  auto ledger = LeaseLedger::Create();
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  LeaseLedger& l = **ledger;
  std::vector<int> sessions;
  for (int i = 0; i < 4; ++i) {
    auto e = JoinOne(l, Claim("a", 256 * kMiB));
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    sessions.push_back(*e);
  }
  uint64_t held = 0;
  for (int e : sessions) {
    for (int k = 0; k < 2; ++k) {
      if (l.Take(e, 0, 100 * kMiB).ok()) held += 100 * kMiB;
    }
  }
  EXPECT_EQ(held, 200 * kMiB);
  Status s = l.Take(sessions[3], 0, 100 * kMiB);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(s.message(), "its lease's memory limit is 268435456 bytes and 209715200 are in "
                               "use (4 sessions of the lease)"))
      << s.message();
  // What the lease has left is what every one of its sessions sees.
  uint64_t limit = 0, free = 0;
  ASSERT_TRUE(l.Room(sessions[3], 0, &limit, &free));
  EXPECT_EQ(limit, 256 * kMiB);
  EXPECT_EQ(free, 56 * kMiB);
  // A free in one session is room for another; a session's end gives back all it held.
  l.Give(sessions[0], 0, 100 * kMiB);
  EXPECT_TRUE(l.Take(sessions[3], 0, 100 * kMiB).ok());
  EXPECT_FALSE(l.Take(sessions[2], 0, 100 * kMiB).ok());
  l.Leave(sessions[3]);
  EXPECT_TRUE(l.Take(sessions[2], 0, 100 * kMiB).ok());
  // Another lease of its own size is another reservation, not a share of this one.
  auto other = JoinOne(l, Claim("b", 256 * kMiB));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(l.Take(*other, 0, 256 * kMiB).ok());
}

// Two 3 GiB leases on a 4 GiB GPU both got their 3 GiB.
TEST(LeaseLedger, LeasesCannotReserveMoreThanTheGpuHas) {
  auto ledger = LeaseLedger::Create();
  ASSERT_TRUE(ledger.ok());
  LeaseLedger& l = **ledger;
  auto a = JoinOne(l, Claim("a", 3 * kGiB));
  ASSERT_TRUE(a.ok());
  auto b = JoinOne(l, Claim("b", 3 * kGiB));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Has(b.status().message(),
                  "the lease of tenant 'b' for GPU h:7000/0 reserves 3221225472 bytes, but the GPU "
                  "has 4294967296 bytes, of which 3221225472 are reserved by 1 other lease(s)"))
      << b.status().message();
  // More sessions of the admitted lease share its reservation: admitted.
  auto a2 = JoinOne(l, Claim("a", 3 * kGiB));
  EXPECT_TRUE(a2.ok()) << a2.status().ToString();
  // A lease that fits beside it is admitted; the reservation goes with the lease's last session.
  EXPECT_TRUE(JoinOne(l, Claim("c", 1 * kGiB)).ok());
  l.Leave(*a);
  EXPECT_FALSE(JoinOne(l, Claim("b", 3 * kGiB)).ok());
  l.Leave(*a2);
  EXPECT_TRUE(JoinOne(l, Claim("b", 3 * kGiB)).ok());
  // A lease bigger than the GPU (a "whole GPU" sized by another count than the backend's)
  // reserves all of it: admitted alone, not beside any other reservation.
  auto ledger2 = LeaseLedger::Create();
  ASSERT_TRUE(ledger2.ok());
  auto c = JoinOne(**ledger2, Claim("small", 1));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(JoinOne(**ledger2, Claim("huge", 5 * kGiB)).ok());
  (*ledger2)->Leave(*c);
  auto huge = JoinOne(**ledger2, Claim("huge", 5 * kGiB));
  ASSERT_TRUE(huge.ok()) << huge.status().ToString();
  EXPECT_FALSE(JoinOne(**ledger2, Claim("small", 1)).ok());
  auto unlimited = JoinOne(**ledger2, Claim("", 0));
  ASSERT_TRUE(unlimited.ok());
  EXPECT_FALSE((*ledger2)->Take(*unlimited, 0, 1).ok());
}

// Sessions without a limit (--insecure, a lease with mem 0) share the GPU less the reservations.
TEST(LeaseLedger, UnlimitedSessionsShareWhatNoLeaseReserved) {
  auto ledger = LeaseLedger::Create();
  ASSERT_TRUE(ledger.ok());
  LeaseLedger& l = **ledger;
  auto x = JoinOne(l, Claim("", 0)), y = JoinOne(l, Claim("", 0));
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_TRUE(l.Take(*x, 0, 3 * kGiB).ok());
  Status s = l.Take(*y, 0, 3 * kGiB);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(s.message(), "the GPU has 4294967296 bytes, of which 0 are reserved by 0 "
                               "lease(s) and 3221225472 are in use by sessions without a memory "
                               "limit"))
      << s.message();
  EXPECT_TRUE(l.Take(*y, 0, 1 * kGiB).ok());
  // One allocation beyond the whole GPU is left to the backend, whose refusal names its bound.
  EXPECT_TRUE(l.Take(*y, 0, 5 * kGiB).ok());
  l.Give(*y, 0, 5 * kGiB);
  // The GPU is full: a lease of any size would be promised memory others hold.
  EXPECT_FALSE(JoinOne(l, Claim("a", 1 * kMiB)).ok());
  l.Give(*x, 0, 3 * kGiB);
  auto a = JoinOne(l, Claim("a", 2 * kGiB));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // Now 2 GiB are reserved and 1 GiB held: one more GiB for the unlimited, then none.
  EXPECT_TRUE(l.Take(*x, 0, 1 * kGiB).ok());
  EXPECT_FALSE(l.Take(*x, 0, 1).ok());
  uint64_t limit = 0, free = 0;
  ASSERT_TRUE(l.Room(*x, 0, &limit, &free));
  EXPECT_EQ(limit, 4 * kGiB);
  EXPECT_EQ(free, 0u);
  // The lease's reservation is its own: it gets its 2 GiB.
  EXPECT_TRUE(l.Take(*a, 0, 2 * kGiB).ok());
  // Devices are separate.
  auto d1 = JoinOne(l, Claim("", 0, 4 * kGiB, 1));
  ASSERT_TRUE(d1.ok());
  EXPECT_TRUE(l.Take(*d1, 0, 1).ok());  // device 0 is not its: not accounted
  EXPECT_TRUE(l.Take(*d1, 1, 4 * kGiB).ok());
}

// A worker killed with -9 never calls Leave: its memory and its lease's reservation come back
// as soon as they are in anyone's way.
TEST(LeaseLedger, ADeadWorkersMemoryAndReservationComeBack) {
  auto ledger = LeaseLedger::Create(2);
  ASSERT_TRUE(ledger.ok());
  LeaseLedger& l = **ledger;
  auto mine = JoinOne(l, Claim("a", 1 * kGiB));
  ASSERT_TRUE(mine.ok());
  pid_t pid = fork();
  if (pid == 0) {
    auto e = JoinOne(l, Claim("a", 1 * kGiB));
    auto f = JoinOne(l, Claim("b", 3 * kGiB));  // no entry left (max 2): refused
    if (!e.ok() || f.ok() || f.status().code() != StatusCode::kResourceExhausted) _exit(2);
    auto g = JoinOne(l, Claim("", 0));
    if (g.ok()) _exit(3);
    if (!l.Take(*e, 0, 1 * kGiB).ok()) _exit(4);
    _exit(0);  // no Leave
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  ASSERT_EQ(WEXITSTATUS(st), 0);
  // The dead session's 1 GiB of the lease is back for its other session.
  EXPECT_TRUE(l.Take(*mine, 0, 1 * kGiB).ok());
  l.Leave(*mine);
  // And with the lease's last live session gone, so is its reservation (and the entry).
  auto b = JoinOne(l, Claim("b", 4 * kGiB));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
}

TEST(LeaseLedger, BadArgumentsAreRefused) {
  EXPECT_FALSE(LeaseLedger::Create(0).ok());
  auto ledger = LeaseLedger::Create();
  ASSERT_TRUE(ledger.ok());
  auto e = JoinOne(**ledger, Claim(std::string(65, 'x'), 1));
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpool::remote::server
