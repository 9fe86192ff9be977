// High-availability benchmark (a small driver, not Google Benchmark: each run needs processes).
//
//  1. Submit throughput of one controller on SQLite vs on etcd (one local member), same run:
//     `threads` clients submitting 1-GPU jobs (no scheduling), wall time and process CPU time.
//  2. Failover time: controller A (a forked child) leads with one registered 8-GPU node; it is
//     killed with SIGKILL; controller B (this process, a standby) must take over and bind a job
//     submitted to it. Measured: kill -> B leads, and kill -> the job is running. Repeated for
//     several lease TTLs.
//
// Usage: ha_bench [--submits N] [--threads T] [--reps R] [--ttls 2,3,5]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "control/controller.h"
#include "control/etcd_test_util.h"

namespace gpool::control {
namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

v1::SubmitJobRequest Job(const std::string& rid, int gpus) {
  v1::SubmitJobRequest r;
  r.set_client_request_id(rid);
  r.set_tenant("bench");
  r.set_gpus(gpus);
  r.set_duration_s(600);
  return r;
}

int SubmitThroughput(const std::string& name, const std::string& url, int submits, int threads) {
  ControllerOptions o;
  o.store_url = url;
  o.schedule_on_submit = false;
  auto c = Controller::Open(o);
  if (!c.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), c.status().ToString().c_str());
    return 1;
  }
  (*c)->SetAdvertiseAddress("127.0.0.1:1");
  (*c)->Start();  // on etcd: campaign (alone, so it leads at once)
  while (!(*c)->leading()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  double cpu0 = CpuSeconds();
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = t; i < submits; i += threads) {
        if (!(*c)->Submit(Job(fmt::format("{}-{}", name, i), 1)).ok()) failures++;
      }
    });
  }
  for (auto& th : ts) th.join();
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu = CpuSeconds() - cpu0;
  (*c)->Stop();
  std::printf("submit %-7s %5d jobs, %2d threads: %7.0f submits/s wall, %6.2f s wall, %5.2f s CPU "
              "(this process), %d failed\n",
              name.c_str(), submits, threads, submits / wall, wall, cpu, failures.load());
  return failures.load() == 0 ? 0 : 1;
}

// Controller A in a child process: registers a node, leads, then waits to be killed.
pid_t StartLeaderChild(const std::string& url, int ttl) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  ControllerOptions o;
  o.store_url = url;
  o.lease_ttl_s = ttl;
  auto c = Controller::Open(o);
  if (!c.ok()) _exit(2);
  (*c)->SetAdvertiseAddress("127.0.0.1:1");
  (*c)->Start();
  while (!(*c)->leading()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  v1::RegisterNodeRequest r;
  r.mutable_node()->set_name("n0");
  r.mutable_node()->set_gpus(8);
  r.mutable_node()->set_gpu_model("H100");
  if (!(*c)->RegisterNode(r).ok()) _exit(3);
  for (;;) pause();
}

int Failover(const std::string& url, int ttl, int rep) {
  pid_t a = StartLeaderChild(url, ttl);
  ControllerOptions o;
  o.store_url = url;
  o.lease_ttl_s = ttl;
  o.schedule_interval = std::chrono::milliseconds(100);
  auto b = Controller::Open(o);
  if (!b.ok()) return 1;
  // Wait until A leads with its node registered (B, not started yet, reads the store).
  auto store = OpenStore(url);
  if (!store.ok()) return 1;
  for (;;) {
    auto n = (*store)->Get(keys::Node("n0"));
    if (n.ok() && n->has_value()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (*b)->SetAdvertiseAddress("127.0.0.1:2");
  (*b)->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // B is a settled standby
  auto t0 = Clock::now();
  kill(a, SIGKILL);
  waitpid(a, nullptr, 0);
  while (!(*b)->leading()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  double lead = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string id;
  for (;;) {
    auto j = (*b)->Submit(Job(fmt::format("fo-{}-{}", ttl, rep), 1));
    if (j.ok()) {
      id = j->id();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (;;) {
    auto j = (*b)->GetJob(id);
    if (j.ok() && j->state() == "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double bound = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("failover ttl %d s rep %d: new leader after %.2f s, first job bound after %.2f s\n",
              ttl, rep, lead, bound);
  (*b)->Stop();
  return 0;
}

}  // namespace
}  // namespace gpool::control

int main(int argc, char** argv) {
  using namespace gpool::control;
  int submits = 2000, threads = 8, reps = 3;
  std::vector<int> ttls = {2, 3, 5};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--submits") submits = std::stoi(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else if (a == "--ttls") {
      ttls.clear();
      std::string s = argv[i + 1];
      for (size_t p = 0; p < s.size();) {
        size_t c = s.find(',', p);
        ttls.push_back(std::stoi(s.substr(p, c - p)));
        p = c == std::string::npos ? s.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  (void)gpool::InitLogging({.level = "error"});
  int rc = 0;
  {
    std::string dir = MakeTempDir("ha-bench");
    rc |= SubmitThroughput("sqlite", "sqlite:" + dir + "/state.db", submits, threads);
    std::filesystem::remove_all(dir);
    auto etcd = EtcdTestCluster::Start({});
    if (!etcd.ok()) {
      std::fprintf(stderr, "%s\n", etcd.status().ToString().c_str());
      return 1;
    }
    rc |= SubmitThroughput("etcd", (*etcd)->Url(), submits, threads);
  }
  for (int ttl : ttls) {
    for (int r = 0; r < reps; ++r) {
      // A fresh etcd per run: no leftover leases or keys.
      auto etcd = EtcdTestCluster::Start({});
      if (!etcd.ok()) return 1;
      rc |= Failover((*etcd)->Url(), ttl, r);
    }
  }
  return rc;
}
