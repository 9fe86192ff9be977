// UCX round trips by CPU placement: gpool's UCX Connection echo against a plain ucp tag
// ping-pong, each with its two ends on two CPUs and on one CPU, 48-byte messages.
//
// Why: on the 2-core build VM a round trip's cost depends first on whether its two ends share a
// CPU (shared memory ~1.2-1.7 us on two CPUs, ~9-15 us on one; UCX tcp ~17 us and ~31 us), which
// the scheduler decides, not the code; remote_bench's wall figures mix the two. Here each
// placement is forced (sched_setaffinity: client on CPU 0, echo on CPU 1 or CPU 0), and each
// figure is a percentile of the per-round-trip times: p10 is the cost of a round trip that
// neither end's preemption interrupted, which other load on the machine barely moves (it runs at
// load 10 as at load 2), unlike the mean. On a quiet machine p10, p50 and the mean agree.
//
//   UCX_TLS=shm,self build/bench/ucx_rt_bench [--n=20000] [--reps=3]
//   UCX_TLS=tcp      build/bench/ucx_rt_bench
//
// Each repetition runs every contender once (order reversed on odd repetitions), each against a
// fresh echo process; printed: medians over the repetitions of min/p10/p50 in us, the p10 ratio
// to the plain loop on the same placement, and gpool's waits per round trip (client process:
// yields, yields that found the CPU shared, sleeps; see UcxWaitCounters). Needs 2 CPUs.
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "plain_ucx.h"

#include "remote/transport/socket.h"
#include "remote/transport/transport.h"
#include "remote/transport/ucx_transport.h"

namespace gpool::remote {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBytes = 48;
constexpr char kStop = 0x7f;  // first byte of the message that ends a plain echo

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) std::perror("sched_setaffinity");
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "ucx_rt_bench: %s\n", what);
  std::exit(1);
}

// The plain ucp loop, as remote_bench's peer (plain_ucx.h).
using bench::PlainUcx;

// Forks an echo (plain or gpool) on `cpu`; returns its pid and address.
pid_t StartEcho(bool gpool, int cpu, std::string* address) {
  int fds[2];
  if (pipe(fds) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    PinTo(cpu);
    if (gpool) {
      auto t = MakeTransport("ucx", {});
      if (!t.ok()) _exit(1);
      auto l = (*t)->Listen("127.0.0.1:0");
      if (!l.ok()) _exit(1);
      std::string a = (*l)->address();
      if (write(fds[1], a.data(), a.size()) < 0) _exit(1);
      close(fds[1]);
      auto c = (*l)->Accept();
      if (!c.ok()) _exit(1);
      std::vector<std::byte> m;
      while ((*c)->Recv(&m).ok() && (*c)->Send(m).ok()) {
      }
    } else {
      auto l = net::ListenTcp("127.0.0.1:0");
      if (!l.ok()) _exit(1);
      std::string a = net::LocalAddress(l->get());
      if (write(fds[1], a.data(), a.size()) < 0) _exit(1);
      close(fds[1]);
      PlainUcx u;
      auto c = net::AcceptTcp(l->get());
      if (!c.ok() || !u.Init() || !u.Wire(c->get())) _exit(1);
      char buf[kBytes];
      while (u.Recv(buf, kBytes) && buf[0] != kStop && u.Send(buf, kBytes)) {
      }
      // Exit once the client closed its end (its endpoint first, then the socket); closing an
      // endpoint over tcp needs this end's progress.
      for (pollfd p{c->get(), POLLIN, 0}; ::poll(&p, 1, 0) == 0;) {
        if (ucp_worker_progress(u.worker) == 0) sched_yield();
      }
    }
    _exit(0);
  }
  close(fds[1]);
  char buf[256] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  if (n <= 0) Die("echo did not start");
  *address = std::string(buf, static_cast<size_t>(n));
  return pid;
}

struct Result {
  double min = 0, p10 = 0, p50 = 0;
  double yields = 0, switched = 0, sleeps = 0;  // gpool's client waits per round trip
};

// `round_trip` runs one; times `n` after 1,000 untimed ones.
Result Time(long n, const std::function<void()>& round_trip) {
  for (int i = 0; i < 1000; ++i) round_trip();
  std::vector<double> us(static_cast<size_t>(n));
  const UcxWaitCounters w0 = GetUcxWaitCounters();
  for (auto& t : us) {
    auto a = Clock::now();
    round_trip();
    t = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
  }
  const UcxWaitCounters w1 = GetUcxWaitCounters();
  std::sort(us.begin(), us.end());
  Result r;
  r.min = us.front();
  r.p10 = us[us.size() / 10];
  r.p50 = us[us.size() / 2];
  r.yields = static_cast<double>(w1.yields - w0.yields) / static_cast<double>(n);
  r.switched = static_cast<double>(w1.yields_switched - w0.yields_switched) / static_cast<double>(n);
  r.sleeps = static_cast<double>(w1.sleeps - w0.sleeps) / static_cast<double>(n);
  return r;
}

Result RunPlain(int echo_cpu, long n) {
  std::string address;
  pid_t pid = StartEcho(false, echo_cpu, &address);
  PlainUcx u;
  auto fd = net::ConnectTcp(address);
  if (!fd.ok() || !u.Init() || !u.Wire(fd->get())) Die("plain ucp setup failed");
  char buf[kBytes] = {0};
  Result r = Time(n, [&] {
    if (!u.Send(buf, kBytes) || !u.Recv(buf, kBytes)) Die("plain ucp echo failed");
  });
  buf[0] = kStop;
  (void)u.Send(buf, kBytes);
  u.Close();
  *fd = net::Fd();
  waitpid(pid, nullptr, 0);
  return r;
}

Result RunGpool(int echo_cpu, long n) {
  std::string address;
  pid_t pid = StartEcho(true, echo_cpu, &address);
  Result r;
  {
    auto t = MakeTransport("ucx", {});
    if (!t.ok()) Die("ucx transport");
    auto c = (*t)->Connect(address);
    if (!c.ok()) Die("gpool ucx connect failed");
    std::vector<std::byte> msg(kBytes), in;
    r = Time(n, [&] {
      if (!(*c)->Send(msg).ok() || !(*c)->Recv(&in).ok()) Die("gpool ucx echo failed");
    });
    (*c)->Close();
  }
  waitpid(pid, nullptr, 0);
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace
}  // namespace gpool::remote

int main(int argc, char** argv) {
  using namespace gpool::remote;  // NOLINT
  long n = 20000;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--n=", 0) == 0) {
      n = std::max(100L, std::atol(a.c_str() + 4));
    } else if (a.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::atoi(a.c_str() + 7));
    } else {
      std::fprintf(stderr, "usage: ucx_rt_bench [--n=ROUND_TRIPS] [--reps=N]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) Die("needs 2 CPUs");
  PinTo(0);
  const char* tls = std::getenv("UCX_TLS");
  std::printf("ucx_rt_bench: UCX_TLS=%s, %ld round trips of %zu B per figure, median of %d\n",
              tls ? tls : "(unset)", n, kBytes, reps);
  for (int echo_cpu : {1, 0}) {
    std::vector<Result> plain, gpool;
    for (int r = 0; r < reps; ++r) {
      if (r % 2 == 0) {
        plain.push_back(RunPlain(echo_cpu, n));
        gpool.push_back(RunGpool(echo_cpu, n));
      } else {
        gpool.push_back(RunGpool(echo_cpu, n));
        plain.push_back(RunPlain(echo_cpu, n));
      }
    }
    auto med = [](const std::vector<Result>& v, double Result::*f) {
      std::vector<double> x;
      for (const Result& r : v) x.push_back(r.*f);
      return Median(x);
    };
    std::vector<double> ratio;
    for (int r = 0; r < reps; ++r) ratio.push_back(gpool[r].p10 / plain[r].p10);
    std::printf("%s:\n", echo_cpu == 1 ? "two CPUs (client CPU 0, echo CPU 1)"
                                       : "one CPU (client and echo on CPU 0)");
    std::printf("  plain ucp ping-pong       min %6.2f p10 %6.2f p50 %6.2f us\n",
                med(plain, &Result::min), med(plain, &Result::p10), med(plain, &Result::p50));
    std::printf("  gpool Connection echo     min %6.2f p10 %6.2f p50 %6.2f us  p10 ratio %.2fx"
                "  client per round trip: yields %.2f (CPU shared %.2f) sleeps %.3f\n",
                med(gpool, &Result::min), med(gpool, &Result::p10), med(gpool, &Result::p50),
                Median(ratio), med(gpool, &Result::yields), med(gpool, &Result::switched),
                med(gpool, &Result::sleeps));
    std::fflush(stdout);
  }
  return 0;
}
