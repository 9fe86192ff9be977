// A lease's limits hold per lease, across all its sessions at once, and the leases of one GPU
// cannot together take more than it has: a real `gpool gpu-server` (emulated backend, one 4 GiB
// GPU, under a key) and several client sessions over TCP on loopback, each a connection of its
// own and so a worker process of its own on the server. One client is a separate process killed
// with -9, as a user's program may be.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "common/file.h"
#include "remote/client/link.h"
#include "remote/lease/lease.h"
#include "remote/protocol/messages.h"
#include "subprocess.h"

namespace gpool::remote {
namespace {

using client::ServerLink;
using testing::Subprocess;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kErrMemoryAllocation = 2;

bool Has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// `gpool gpu-server` with one emulated GPU of 4 GiB: under a lease key (its holder signs tokens
// with authority()), or --insecure.
class GpuServer {
 public:
  explicit GpuServer(bool keyed = true) {
    std::vector<std::string> argv = {GPOOL_BIN, "--log-level", "info", "gpu-server",
                                     "--backend", "emulated", "--emulated-memory", "4GiB",
                                     "--listen", "127.0.0.1:0"};
    const std::string key_file = ::testing::TempDir() + "/gpool_lease_sharing_" +
                                 std::to_string(getpid()) + ".key";
    if (keyed) {
      EXPECT_TRUE(WriteFileAtomic(key_file, std::string(64, 'c')).ok());  // hex: 32 x 0xcc
      argv.insert(argv.end(), {"--key", key_file});
    } else {
      argv.push_back("--insecure");
    }
    proc_ = std::make_unique<Subprocess>(argv);
    const bool started = proc_->WaitFor(" (backend", 20000);
    std::remove(key_file.c_str());
    if (!started) {
      ADD_FAILURE() << "gpu-server did not start:\n" << proc_->output();
      return;
    }
    const std::string& out = proc_->output();
    const std::string mark = "listening on ";
    size_t at = out.find(mark) + mark.size();
    address_ = out.substr(at, out.find(' ', at) - at);
  }
  const std::string& address() const { return address_; }
  std::string gpu() const { return address_ + "/0"; }
  Subprocess& proc() { return *proc_; }

  std::string Token(uint64_t memory, const std::string& tenant) {
    auto authority = LeaseAuthority::Create(std::string(32, '\xcc'));
    EXPECT_TRUE(authority.ok());
    auto token = authority->Issue(
        {.gpu = gpu(), .memory_bytes = memory, .tenant = tenant, .job = tenant + "-job"},
        *UnixClock::Default());
    EXPECT_TRUE(token.ok()) << token.status().ToString();
    return token.ok() ? *token : "";
  }

 private:
  std::unique_ptr<Subprocess> proc_;
  std::string address_;
};

StatusOr<std::unique_ptr<ServerLink>> Connect(const GpuServer& s, const std::string& token) {
  return ServerLink::Connect({.address = s.address(), .token = token, .client_name = "lease-test"});
}

// cudaMalloc's request on device 0: the reply's head (error 0: allocated).
proto::ReplyHead Malloc(ServerLink& l, uint64_t size) {
  proto::Malloc m{.device = 0, .size = size};
  proto::Pointer p;
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l.mu());
  Status s = l.Call(m, &h, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return h;
}

proto::MemInfo MemGetInfo(ServerLink& l) {
  proto::MemGetInfo q;
  proto::MemInfo m;
  proto::ReplyHead h;
  std::lock_guard<std::mutex> lk(l.mu());
  EXPECT_TRUE(l.Call(q, &h, &m).ok());
  EXPECT_EQ(h.error, 0) << h.message;
  return m;
}

// Retries `try_once` until it returns true or 20 s pass: a session's end reaches the server when
// its worker sees the connection close, a moment after the client is gone.
template <class Fn>
bool Eventually(Fn&& try_once) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!try_once()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Four sessions of one 256 MiB lease held 800 MiB at once, each checked alone.
TEST(LeaseSharing, SessionsOfOneLeaseStayWithinItTogether) {
  GpuServer server;
  ASSERT_FALSE(server.address().empty());
  const std::string token = server.Token(256 * kMiB, "a");
  // One session in a process of its own, forked before this one starts any thread, holding
  // 100 MiB of the lease until it is killed.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t holder = fork();
  if (holder == 0) {
    close(ready[0]);
    auto l = Connect(server, token);
    if (!l.ok() || Malloc(**l, 100 * kMiB).error != 0) _exit(2);
    if (write(ready[1], "R", 1) != 1) _exit(3);
    for (;;) pause();
  }
  ASSERT_GT(holder, 0);
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the holder could not allocate";
  close(ready[0]);

  std::vector<std::unique_ptr<ServerLink>> sessions;
  for (int i = 0; i < 4; ++i) {
    auto l = Connect(server, token);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    sessions.push_back(std::move(*l));
  }
  // Every session sees the lease's limit and what all its sessions left of it.
  proto::MemInfo info = MemGetInfo(*sessions[0]);
  EXPECT_EQ(info.total, 256 * kMiB);
  EXPECT_EQ(info.free, 156 * kMiB);
  uint64_t allocated = 100 * kMiB;  // the holder's
  std::string refusal;
  for (auto& l : sessions) {
    for (int k = 0; k < 2; ++k) {
      proto::ReplyHead h = Malloc(*l, 100 * kMiB);
      if (h.error == 0) {
        allocated += 100 * kMiB;
      } else {
        EXPECT_EQ(h.error, kErrMemoryAllocation) << h.message;
        refusal = h.message;
      }
    }
  }
  EXPECT_EQ(allocated, 200 * kMiB) << "the sessions of one 256 MiB lease hold more than it";
  EXPECT_TRUE(Has(refusal, "cudaMalloc(104857600 bytes) on GPU " + server.gpu() +
                               " refused: its lease's memory limit is 268435456 bytes and "
                               "209715200 are in use (5 sessions of the lease)"))
      << refusal;

  // The holder is killed with -9: its worker ends, and its 100 MiB are the lease's again.
  kill(holder, SIGKILL);
  int st = 0;
  ASSERT_EQ(waitpid(holder, &st, 0), holder);
  EXPECT_TRUE(Eventually([&] { return Malloc(*sessions[3], 100 * kMiB).error == 0; }))
      << "the killed client's memory was never given back to its lease\n"
      << server.proc().output();
  EXPECT_EQ(Malloc(*sessions[2], 100 * kMiB).error, kErrMemoryAllocation);
}

// A worker that dies (killed with -9 here; a crash alike) never tells the ledger its session
// ended: what it held comes back when it is in another session's way.
TEST(LeaseSharing, ADeadWorkersMemoryComesBackToItsLease) {
  GpuServer server;
  ASSERT_FALSE(server.address().empty());
  const std::string token = server.Token(256 * kMiB, "a");
  auto first = Connect(server, token);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(Malloc(**first, 200 * kMiB).error, 0);
  // Its worker: the server logs "session N for CLIENT (PEER) in worker PID at ADDRESS".
  ASSERT_TRUE(server.proc().WaitFor(" in worker ", 10000)) << server.proc().output();
  const std::string& log = server.proc().output();
  const pid_t worker = static_cast<pid_t>(std::atoi(log.c_str() + log.rfind(" in worker ") + 11));
  ASSERT_GT(worker, 0) << log;
  auto second = Connect(server, token);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Malloc(**second, 200 * kMiB).error, kErrMemoryAllocation);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  EXPECT_TRUE(Eventually([&] { return Malloc(**second, 200 * kMiB).error == 0; }))
      << "the dead worker's memory never came back to its lease\n"
      << server.proc().output();
}

// Two 3 GiB leases on a 4 GiB GPU both got 3 GiB. The second is now refused at admission, naming
// itself and the GPU, and admitted once the first lease's last session has ended.
TEST(LeaseSharing, LeasesCannotTogetherExceedTheGpu) {
  GpuServer server;
  ASSERT_FALSE(server.address().empty());
  const std::string a = server.Token(3 * kGiB, "a"), b = server.Token(3 * kGiB, "b");
  auto first = Connect(server, a);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(Malloc(**first, 3 * kGiB).error, 0);
  auto second = Connect(server, b);
  ASSERT_FALSE(second.ok()) << "two 3 GiB leases admitted on a 4 GiB GPU";
  EXPECT_EQ(second.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(Has(second.status().message(),
                  "GPU server " + server.address() + " refused the session: lease refused: the "
                  "lease of tenant 'b' (job 'b-job') for GPU " + server.gpu() +
                  " reserves 3221225472 bytes, but the GPU has 4294967296 bytes, of which "
                  "3221225472 are reserved by 1 other lease(s)"))
      << second.status().message();
  // Another session of the admitted lease is no new reservation: admitted, within the lease.
  auto again = Connect(server, a);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Malloc(**again, 1).error, kErrMemoryAllocation);
  // A lease that fits beside it is admitted and gets its memory.
  auto small = Connect(server, server.Token(1 * kGiB, "c"));
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  EXPECT_EQ(Malloc(**small, 1 * kGiB).error, 0);
  small->reset();
  // The first lease's sessions end: its reservation goes with the last one.
  first->reset();
  again->reset();
  EXPECT_TRUE(Eventually([&] { return Connect(server, b).ok(); }))
      << "lease b was never admitted after lease a's sessions ended\n"
      << server.proc().output();
}

// Without leases (--insecure) every session may use the whole GPU, but not all of them together.
TEST(LeaseSharing, SessionsWithoutLeasesCannotTogetherExceedTheGpu) {
  GpuServer server(/*keyed=*/false);
  ASSERT_FALSE(server.address().empty());
  auto x = Connect(server, ""), y = Connect(server, "");
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(Malloc(**x, 3 * kGiB).error, 0);
  proto::ReplyHead h = Malloc(**y, 3 * kGiB);
  EXPECT_EQ(h.error, kErrMemoryAllocation) << "two sessions hold 6 GiB of a 4 GiB GPU";
  EXPECT_TRUE(Has(h.message, "the GPU has 4294967296 bytes, of which 0 are reserved by 0 lease(s) "
                             "and 3221225472 are in use by sessions without a memory limit"))
      << h.message;
  EXPECT_EQ(MemGetInfo(**y).free, 1 * kGiB);
  EXPECT_EQ(Malloc(**y, 1 * kGiB).error, 0);
}

}  // namespace
}  // namespace gpool::remote
