#include "remote/client/managed_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpool::remote::client::managed {
namespace {

uint64_t Page() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// An address range of `pages` pages that nothing in this process maps now (mapped, then
// unmapped): where a remote device address that is not host memory here would lie.
uint64_t FreeRange(uint64_t pages) {
  void* p = mmap(nullptr, pages * Page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  munmap(p, pages * Page());
  return reinterpret_cast<uint64_t>(p);
}

// Reads (volatile, so the compiler keeps the access) as a program's host code reads a
// __managed__ variable through the address NVIDIA's runtime stored.
int Read(uint64_t addr) { return *reinterpret_cast<volatile int*>(addr); }

// The handler's tests run in a fresh process each (death tests, re-executed): every one of them
// starts with no guard installed, and with the signal dispositions the test sets up.
void FreshProcessPerDeathTest() { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

TEST(ManagedGuardTest, FindsTheVariableWhoseDeviceRangeHoldsTheAddress) {
  const uint64_t base = FreeRange(4);
  // Two variables that share a page (as a library's variables do), and one further on.
  const uint64_t a = base + 16, b = base + 16 + 40, c = base + 2 * Page() + 8;
  EXPECT_EQ(Register("gA", a, 40, 0).reserve, Reserve::kReserved);
  EXPECT_EQ(Register("gB", b, 8, 0).reserve, Reserve::kReserved);  // its page is reserved already
  EXPECT_EQ(Register("gC", c, 4096, 1).reserve, Reserve::kReserved);
  EXPECT_TRUE(HandlerInstalled());

  ASSERT_NE(Find(a), nullptr);
  EXPECT_EQ(Message(Find(a)),
            fmt::format("gpool: FATAL: host access to __managed__ variable gA (device address "
                        "0x{:x}, 40 bytes, on device 0): managed memory is not remoted; access it "
                        "from kernels only, or copy it with cudaMemcpyFromSymbol/ToSymbol\n", a));
  EXPECT_EQ(Find(a + 39), Find(a));  // the last byte
  EXPECT_EQ(Find(a - 1), nullptr);
  ASSERT_NE(Find(a + 40), nullptr);  // one past gA is gB
  EXPECT_NE(Message(Find(a + 40)).find("variable gB (device address"), std::string::npos);
  EXPECT_EQ(Find(b + 8), nullptr);  // between gB and gC, on a reserved page: nobody's
  ASSERT_NE(Find(c + 4095), nullptr);
  EXPECT_NE(Message(Find(c + 4095)).find("variable gC (device address 0x"), std::string::npos);
  EXPECT_NE(Message(Find(c)).find("4096 bytes, on device 1)"), std::string::npos);
  EXPECT_EQ(Find(c + 4096), nullptr);

  // An unloaded library's variable is nobody's: its address may be another allocation's now.
  Unregister(b, 0);
  EXPECT_EQ(Find(b), nullptr);
  EXPECT_EQ(Find(a), Find(a + 39));
  Unregister(c, 0);  // another device's variable at that address: not this one
  EXPECT_NE(Find(c), nullptr);
}

TEST(ManagedGuardTest, ReservesTheRangeSoNoHostMappingCanBeMadeThere) {
  const uint64_t base = FreeRange(2);
  ASSERT_EQ(Register("gReserved", base + 100, 2 * Page() - 200, 0).reserve, Reserve::kReserved);
  // The program's own mapping there is refused: the range cannot become host memory.
  void* p = mmap(reinterpret_cast<void*>(base), Page(), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_EQ(errno, EEXIST);
}

// A device address that is also host memory here cannot be reserved: a read would return this
// process's bytes, not fault; Register says so (the driver stand-in warns with it).
TEST(ManagedGuardTest, SaysWhenTheRangeIsAlreadyHostMemoryHere) {
  std::vector<char> host(3 * Page());
  const uint64_t at = reinterpret_cast<uint64_t>(host.data()) + Page();
  Registration r = Register("gClash", at, 64, 0);
  EXPECT_EQ(r.reserve, Reserve::kMappedHere);
  EXPECT_NE(r.detail.find("is already mapped in this process"), std::string::npos) << r.detail;
  host[Page()] = 1;  // still the program's memory
  Unregister(at, 0);
}

TEST(ManagedGuardDeathTest, HostAccessPrintsTheFatalLineAndDiesOfTheSignal) {
  FreshProcessPerDeathTest();
  const uint64_t base = FreeRange(1);
  EXPECT_EXIT(
      {
        signal(SIGSEGV, SIG_DFL);  // whatever the sanitizers installed: the guard's death is plain
        Register("gManagedCounter", base + 64, 8, 2);
        Read(base + 68);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "gpool: FATAL: host access to __managed__ variable gManagedCounter \\(device address "
      "0x[0-9a-f]+, 8 bytes, on device 2\\): managed memory is not remoted; access it from "
      "kernels only, or copy it with cudaMemcpyFromSymbol/ToSymbol");
}

// A fault elsewhere is not the guard's: the disposition before it (here the default) applies, and
// nothing names a variable.
TEST(ManagedGuardDeathTest, OtherFaultsGetTheDefaultActionSilently) {
  FreshProcessPerDeathTest();
  const uint64_t base = FreeRange(3);
  EXPECT_EXIT(
      {
        signal(SIGSEGV, SIG_DFL);
        Register("gElsewhere", base + 2 * Page(), 8, 0);
        void* p = mmap(reinterpret_cast<void*>(base), Page(), PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED) std::_Exit(3);
        std::fprintf(stderr, "no FATAL line\n");
        Read(base);
      },
      ::testing::KilledBySignal(SIGSEGV),
      ::testing::AllOf(::testing::HasSubstr("no FATAL line"),
                       ::testing::Not(::testing::HasSubstr("gpool: FATAL"))));
}

// A handler installed before the guard still gets the faults that are not the guard's (here it
// says so and exits 7), and the guard's own fault does not reach it.
void PreviousHandler(int, siginfo_t*, void*) {
  static const char kSaid[] = "previous handler\n";
  (void)!write(STDERR_FILENO, kSaid, sizeof kSaid - 1);
  _exit(7);
}
void InstallPrevious() {
  struct sigaction sa {};
  sa.sa_sigaction = PreviousHandler;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
}

TEST(ManagedGuardDeathTest, ChainsToTheHandlerInstalledBefore) {
  FreshProcessPerDeathTest();
  const uint64_t base = FreeRange(3);
  EXPECT_EXIT(
      {
        InstallPrevious();
        Register("gChained", base + 2 * Page(), 8, 0);
        void* p = mmap(reinterpret_cast<void*>(base), Page(), PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED) std::_Exit(3);
        Read(base);
      },
      ::testing::ExitedWithCode(7), "previous handler");
  EXPECT_EXIT(
      {
        InstallPrevious();
        Register("gChained", base + 2 * Page(), 8, 0);
        Read(base + 2 * Page());
      },
      ::testing::KilledBySignal(SIGSEGV), "variable gChained \\(device address");
}

// Death by stack overflow still reaches the handler before the guard: the guard's handler runs
// on an alternate stack (the overflowing thread has none left).
int Recurse(int n) {
  volatile char pad[4096];
  pad[0] = static_cast<char>(n);
  return n <= 0 ? pad[0] : Recurse(n + 1) + pad[0];
}

TEST(ManagedGuardDeathTest, StackOverflowIsStillReportedByThePreviousHandler) {
  FreshProcessPerDeathTest();
  const uint64_t base = FreeRange(1);
  EXPECT_EXIT(
      {
        stack_t none{};
        none.ss_flags = SS_DISABLE;
        sigaltstack(&none, nullptr);  // the sanitizers' own, if any: the guard must set one up
        InstallPrevious();
        Register("gStack", base, 8, 0);
        Recurse(1);
      },
      ::testing::ExitedWithCode(7), "previous handler");
}

TEST(ManagedGuardDeathTest, NoHandlerUntilAVariableIsRegistered) {
  FreshProcessPerDeathTest();
  EXPECT_EXIT(
      {
        struct sigaction now {};
        sigaction(SIGSEGV, nullptr, &now);
        const bool ours = (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == Handler();
        std::_Exit(HandlerInstalled() || ours ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpool::remote::client::managed
