// Control-plane benchmarks (a small driver, not Google Benchmark: each case is an end-to-end run
// through gRPC and the SQLite store, reported as latency percentiles, rates and ratios).
//
//   control_bench bind      [--nodes 256] [--gang-gpus 128] [--iterations 200]
//       A hollow cluster of NODES x 8 GPUs registered over gRPC; one 128-GPU gang at a time is
//       submitted and timed until the job watch stream reports it running (all tasks bound and
//       durable), then cancelled. Reports p50/p99/max of submit -> bound.
//   control_bench submit    [--jobs 20000] [--clients 64]
//       CLIENTS threads submit 1-GPU jobs over gRPC (durable commits, no nodes: pure submit path).
//       Then the same number of threads do raw Store Txns of the same record size on a fresh
//       store. Reports jobs/s, Txn/s and their ratio, and the submit phase's CPU per submit
//       (getrusage), split into the client threads' own and the rest (the controller side).
//   control_bench heartbeat [--nodes 10000] [--seconds 20] [--clients 16]
//       The controller runs in a forked child process; NODES simulated nodes (CLIENTS threads)
//       register and heartbeat once a second each. Reports the heartbeat rate achieved and the
//       controller process's CPU (utime+stime from /proc) and peak RSS over the window.
//   control_bench retention [--jobs 100000] [--keep 10000] [--nodes 32] [--sample 10000]
//                           [--window 2000]
//       The controller (retention bound --keep ended jobs; -1 = off) runs in a forked child;
//       NODES hollow nodes x 8 GPUs (agent::RunHollowAgent, 100 ms heartbeats) run JOBS 1-GPU
//       jobs of duration 0 submitted over gRPC by 4 threads, at most WINDOW pending or running
//       at once. Every SAMPLE submits it prints the controller's RSS (VmRSS), the store's files
//       and the rate: the memory curve of a long-lived controller.
//   control_bench           (or with --benchmark_* flags, as scripts/bench.sh runs it)
//       all three at small sizes.
//
// Thread safety: a driver; threads are its own.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "agent/hollow.h"
#include "control/api.h"
#include "control/controller.h"
#include "control/store.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::control {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string TempDir() {
  std::string t = (std::filesystem::temp_directory_path() / "gpool-control-bench-XXXXXX").string();
  if (!mkdtemp(t.data())) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  return t;
}

// CPU (user + sys) of RUSAGE_SELF (the process) or RUSAGE_THREAD (the calling thread).
double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

struct Server {
  std::string dir;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<ApiServer> api;
  std::shared_ptr<grpc::Channel> channel;

  explicit Server(ControllerOptions o, std::string in_dir = TempDir()) : dir(std::move(in_dir)) {
    o.store_url = "sqlite:" + dir + "/state.db";
    auto c = Controller::Open(o);
    if (!c.ok()) {
      std::fprintf(stderr, "controller: %s\n", c.status().ToString().c_str());
      std::exit(1);
    }
    controller = std::move(*c);
    api = std::make_unique<ApiServer>(controller.get());
    ApiOptions ao;
    ao.grpc_listen = "127.0.0.1:0";
    Status s = api->Start(ao);
    if (!s.ok()) {
      std::fprintf(stderr, "api: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    controller->Start();
    channel = grpc::CreateChannel(fmt::format("127.0.0.1:{}", api->grpc_port()),
                                  grpc::InsecureChannelCredentials());
  }
  ~Server() {
    api->Shutdown();
    controller->Stop();
    api.reset();
    controller.reset();
    std::filesystem::remove_all(dir);
  }
};

void RegisterNodes(v1::NodeService::Stub* stub, int from, int to) {
  for (int i = from; i < to; ++i) {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(fmt::format("hollow-{:05d}", i));
    r.mutable_node()->set_gpus(8);
    r.mutable_node()->set_gpu_model("H100");
    r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
    r.mutable_node()->set_cpu_milli(128000);
    r.mutable_node()->set_memory_bytes(1024ull << 30);
    v1::RegisterNodeResponse resp;
    grpc::Status s = stub->Register(&ctx, r, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "register: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }
}

void Bind(int nodes, int gang_gpus, int iterations) {
  ControllerOptions o;
  o.schedule_interval = std::chrono::milliseconds(200);
  o.node_timeout = std::chrono::hours(1);  // no heartbeats in this case: only binding is timed
  Server srv(o);
  auto ns = v1::NodeService::NewStub(srv.channel);
  RegisterNodes(ns.get(), 0, nodes);
  auto js = v1::JobService::NewStub(srv.channel);
  grpc::ClientContext wctx;
  v1::WatchJobsRequest w;
  auto reader = js->Watch(&wctx, w);
  std::vector<double> lat;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    grpc::ClientContext ctx;
    v1::SubmitJobRequest r;
    r.set_tenant(i % 2 ? "research" : "prod");
    r.set_gpus(gang_gpus);
    r.set_duration_s(3600);
    v1::Job j;
    grpc::Status s = js->Submit(&ctx, r, &j);
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    v1::JobEvent ev;
    bool bound = false;
    while (!bound && reader->Read(&ev)) {
      bound = ev.job().id() == j.id() && ev.job().state() == "running" &&
              ev.job().allocations_size() == j.num_tasks();
    }
    if (!bound) {
      std::fprintf(stderr, "watch ended before %s was bound\n", j.id().c_str());
      std::exit(1);
    }
    lat.push_back(Seconds(Clock::now() - t0));
    grpc::ClientContext cctx;
    v1::CancelJobRequest c;
    c.set_id(j.id());
    (void)js->Cancel(&cctx, c, &j);
  }
  wctx.TryCancel();
  (void)reader->Finish();
  std::printf("bind: %d x %d-GPU gangs on %d hollow nodes (%d GPUs), submit -> all tasks bound "
              "(watch): p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
              iterations, gang_gpus, nodes, nodes * 8, 1e3 * Percentile(lat, 0.5),
              1e3 * Percentile(lat, 0.99), 1e3 * Percentile(lat, 1.0));
}

void SubmitRate(int jobs, int clients) {
  double job_rate = 0;
  size_t record_bytes = 0;
  {
    ControllerOptions o;
    Server srv(o);
    auto js = v1::JobService::NewStub(srv.channel);
    {  // one job to learn the record size
      grpc::ClientContext ctx;
      v1::SubmitJobRequest r;
      r.set_tenant("warmup");
      r.set_gpus(1);
      r.add_command("python");
      r.add_command("train.py");
      v1::Job j;
      (void)js->Submit(&ctx, r, &j);
      record_bytes = j.ByteSizeLong() * 3;  // JSON is about 3x the wire size
    }
    std::atomic<int> next{0}, failed{0};
    std::atomic<int64_t> client_cpu_us{0};
    double cpu0 = CpuSeconds(RUSAGE_SELF);
    auto t0 = Clock::now();
    std::vector<std::thread> th;
    for (int c = 0; c < clients; ++c) {
      th.emplace_back([&, c] {
        struct CpuOnExit {  // this client thread's own CPU, counted when it ends
          std::atomic<int64_t>* sum;
          ~CpuOnExit() { sum->fetch_add(static_cast<int64_t>(1e6 * CpuSeconds(RUSAGE_THREAD))); }
        } on_exit{&client_cpu_us};
        while (next.fetch_add(1) < jobs) {
          grpc::ClientContext ctx;
          v1::SubmitJobRequest r;
          r.set_tenant(fmt::format("t{}", c % 4));
          r.set_gpus(1);
          r.add_command("python");
          r.add_command("train.py");
          v1::Job j;
          if (!js->Submit(&ctx, r, &j).ok()) ++failed;
        }
      });
    }
    for (auto& t : th) t.join();
    double secs = Seconds(Clock::now() - t0);
    double cpu = CpuSeconds(RUSAGE_SELF) - cpu0;
    double client_cpu = 1e-6 * static_cast<double>(client_cpu_us.load());
    job_rate = jobs / secs;
    std::string m = srv.controller->MetricsText();
    auto count = [&](const std::string& name) {
      size_t p = m.find(name + " ");
      return p == std::string::npos ? 0.0 : std::stod(m.substr(p + name.size() + 1));
    };
    double commits = std::max(1.0, count("gpool_store_commit_seconds_count"));
    std::printf("submit: %d jobs from %d gRPC clients in %.2f s = %.0f jobs/s (%d failed); "
                "%.0f store commits (%.1f submits per commit, %.1f ms per commit: %.0f%% of "
                "the wall time in store Txn)\n",
                jobs, clients, secs, job_rate, failed.load(), commits, jobs / commits,
                1e3 * count("gpool_store_commit_seconds_sum") / commits,
                100 * count("gpool_store_commit_seconds_sum") / secs);
    // Clients and controller share this process and the machine's cores: the split says what
    // the controller side (its gRPC server, commit path, store, and gRPC's shared threads)
    // costs per submit, which is what limits the rate once the cores are busy.
    std::printf("submit: CPU (user+sys) %.0f us per submit: clients %.0f us, controller side "
                "%.0f us (%.2f cores busy on average)\n",
                1e6 * cpu / jobs, 1e6 * client_cpu / jobs, 1e6 * (cpu - client_cpu) / jobs,
                cpu / secs);
  }
  // The raw store: the same number of Txns of the same size, from the same number of threads.
  std::string dir = TempDir();
  auto store = OpenStore("sqlite:" + dir + "/raw.db");
  if (!store.ok()) {
    std::fprintf(stderr, "store: %s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  std::string value(record_bytes, 'x');
  std::atomic<int> next{0};
  auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (int c = 0; c < clients; ++c) {
    th.emplace_back([&] {
      int i;
      while ((i = next.fetch_add(1)) < jobs) {
        (void)(*store)->Txn(TxnRequest().Put(keys::Job(fmt::format("j{:08d}", i)), value));
      }
    });
  }
  for (auto& t : th) t.join();
  double secs = Seconds(Clock::now() - t0);
  double txn_rate = jobs / secs;
  store->reset();
  std::filesystem::remove_all(dir);
  std::printf("submit: raw store Txn (group commit, %zu-byte values, %d threads): %.0f Txn/s; "
              "controller submit / raw Txn = %.2f\n",
              record_bytes, clients, txn_rate, job_rate / txn_rate);
}

struct ProcStat {
  double cpu_s = 0;
  long rss_kib = 0;
};

ProcStat ReadProc(pid_t pid) {
  ProcStat p;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  std::getline(stat, line);
  size_t rp = line.rfind(')');
  std::vector<std::string> f;
  size_t i = rp + 2;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string::npos) j = line.size();
    f.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  // After "pid (comm) ": state is field 3; utime 14 and stime 15 are f[11], f[12].
  if (f.size() > 12) p.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / sysconf(_SC_CLK_TCK);
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) p.rss_kib = std::stol(line.substr(6));
  }
  return p;
}

// A controller in a process of its own (so that /proc shows its CPU and memory alone), on a
// SQLite store in `dir`, serving gRPC on a free port; runs until killed. Forked before this
// process touches gRPC. Exits the bench, naming `what`, when the child fails to start.
struct ChildController {
  pid_t pid = 0;
  int port = 0;
};
ChildController ForkController(const ControllerOptions& o, const std::string& dir, const char* what) {
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) std::exit(1);
  pid_t child = fork();
  if (child == 0) {  // the controller process: no gRPC was touched before the fork
    close(pipe_fd[0]);
    Server srv(o, dir);
    int port = srv.api->grpc_port();
    if (write(pipe_fd[1], &port, sizeof port) != sizeof port) _exit(1);
    for (;;) pause();  // the parent kills us
  }
  close(pipe_fd[1]);
  int port = 0;
  if (read(pipe_fd[0], &port, sizeof port) != sizeof port) {
    std::fprintf(stderr, "%s: controller child failed\n", what);
    std::exit(1);
  }
  close(pipe_fd[0]);
  return {child, port};
}

void Heartbeat(int nodes, int seconds, int clients) {
  ControllerOptions o;
  o.heartbeat_interval = std::chrono::milliseconds(1000);
  const auto [child, port] = ForkController(o, TempDir(), "heartbeat");
  auto channel = grpc::CreateChannel(fmt::format("127.0.0.1:{}", port),
                                     grpc::InsecureChannelCredentials());
  ProcStat idle = ReadProc(child);
  std::vector<std::thread> th;
  std::atomic<long> beats{0}, errors{0};
  std::atomic<bool> measuring{false}, stop{false};
  std::atomic<int> registered{0};
  for (int c = 0; c < clients; ++c) {
    th.emplace_back([&, c] {
      // Each client thread has its own channel: several HTTP/2 connections, like many agents.
      grpc::ChannelArguments args;
      args.SetInt("gpool.bench.client", c);
      auto ch = grpc::CreateCustomChannel(fmt::format("127.0.0.1:{}", port),
                                          grpc::InsecureChannelCredentials(), args);
      auto stub = v1::NodeService::NewStub(ch);
      int from = nodes * c / clients, to = nodes * (c + 1) / clients;
      RegisterNodes(stub.get(), from, to);
      ++registered;
      auto period = std::chrono::seconds(1);
      auto next = Clock::now();
      while (!stop) {
        for (int i = from; i < to && !stop; ++i) {
          grpc::ClientContext ctx;
          v1::HeartbeatRequest r;
          r.set_node(fmt::format("hollow-{:05d}", i));
          for (int g = 0; g < 8; ++g) {
            auto* t = r.add_telemetry();
            t->set_index(g);
            t->set_utilization(0.5);
            t->set_temperature_c(60);
          }
          v1::HeartbeatResponse resp;
          if (stub->Heartbeat(&ctx, r, &resp).ok()) {
            if (measuring) ++beats;
          } else {
            ++errors;
          }
        }
        next += period;
        std::this_thread::sleep_until(next);
      }
    });
  }
  while (registered < clients) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // reach steady state
  ProcStat a = ReadProc(child);
  auto t0 = Clock::now();
  measuring = true;
  long peak_rss = a.rss_kib;
  for (int s = 0; s < seconds; ++s) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    peak_rss = std::max(peak_rss, ReadProc(child).rss_kib);
  }
  measuring = false;
  ProcStat b = ReadProc(child);
  double wall = Seconds(Clock::now() - t0);
  stop = true;
  for (auto& t : th) t.join();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::printf("heartbeat: %d nodes, target %d/s; achieved %.0f heartbeats/s over %.1f s (%ld "
              "errors); controller CPU %.2f cores (%.1f us per heartbeat), RSS %.0f MiB (idle "
              "%.0f MiB)\n",
              nodes, nodes, beats / wall, wall, errors.load(), (b.cpu_s - a.cpu_s) / wall,
              1e6 * (b.cpu_s - a.cpu_s) / std::max(1L, beats.load()), peak_rss / 1024.0,
              idle.rss_kib / 1024.0);
}

// Bytes of the SQLite store's files (database and write-ahead log).
uint64_t StoreBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const char* f : {"/state.db", "/state.db-wal"}) {
    std::error_code ec;
    uint64_t n = std::filesystem::file_size(dir + f, ec);
    if (!ec) total += n;
  }
  return total;
}

void Retention(int jobs, int keep, int nodes, int sample_every, int window) {
  std::string dir = TempDir();
  ControllerOptions o;
  o.heartbeat_interval = std::chrono::milliseconds(100);
  o.keep_finished_jobs = keep;
  const auto [child, port] = ForkController(o, dir, "retention");
  const std::string address = fmt::format("127.0.0.1:{}", port);
  long rss_fresh = ReadProc(child).rss_kib;
  std::atomic<bool> stop{false};
  std::thread hollow([&] {
    agent::HollowOptions h;
    h.controller = address;
    h.nodes = nodes;
    h.heartbeat_interval = std::chrono::milliseconds(100);
    Status s = agent::RunHollowAgent(h, &stop);
    if (!s.ok()) std::fprintf(stderr, "hollow agent: %s\n", s.ToString().c_str());
  });
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto tenants = v1::TenantService::NewStub(channel);
  auto node_stub = v1::NodeService::NewStub(channel);
  for (;;) {  // all nodes registered
    grpc::ClientContext ctx;
    v1::ListNodesRequest r;
    v1::ListNodesResponse resp;
    if (node_stub->List(&ctx, r, &resp).ok() && resp.nodes_size() >= nodes) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Pending + running, polled (the submitters keep it under the window).
  std::atomic<long> active{0};
  std::atomic<bool> polling{true};
  std::thread poller([&] {
    while (polling) {
      grpc::ClientContext ctx;
      v1::ListTenantsRequest r;
      v1::ListTenantsResponse resp;
      if (tenants->List(&ctx, r, &resp).ok()) {
        long n = 0;
        for (const auto& t : resp.tenants()) n += t.pending_jobs() + t.running_jobs();
        active = n;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::atomic<int> next{0}, submitted{0};
  std::atomic<long> errors{0};
  std::vector<std::thread> th;
  for (int c = 0; c < 4; ++c) {
    th.emplace_back([&] {
      auto stub = v1::JobService::NewStub(channel);
      for (int k; (k = next++) < jobs;) {
        while (active.load() >= window) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        grpc::ClientContext ctx;
        v1::SubmitJobRequest r;
        r.set_tenant("bench");
        r.set_gpus(1);
        r.set_duration_s(0);
        r.set_client_request_id(fmt::format("retention-{}", k));
        v1::Job j;
        if (!stub->Submit(&ctx, r, &j).ok()) ++errors;
        ++active;  // counted until the next poll
        ++submitted;
      }
    });
  }
  std::printf("retention: %d jobs, keep %d ended jobs%s, %d hollow nodes x 8 GPUs; controller "
              "RSS fresh %.1f MiB\n",
              jobs, keep, keep < 0 ? " (retention off)" : "", nodes, rss_fresh / 1024.0);
  std::printf("%10s %10s %12s %10s %10s\n", "submitted", "RSS MiB", "store MiB", "jobs/s",
              "elapsed s");
  auto t0 = Clock::now();
  auto sample = [&](int n) {
    double el = Seconds(Clock::now() - t0);
    std::printf("%10d %10.1f %12.1f %10.0f %10.0f\n", n, ReadProc(child).rss_kib / 1024.0,
                StoreBytes(dir) / 1048576.0, n / el, el);
    std::fflush(stdout);
  };
  for (int mark = sample_every; mark <= jobs; mark += sample_every) {
    while (submitted.load() < mark) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sample(mark);
  }
  for (auto& t : th) t.join();
  auto give_up = Clock::now() + std::chrono::seconds(120);
  while (active.load() > 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a few retention passes
  std::printf("drained (%ld still active, %ld submit errors):\n", active.load(), errors.load());
  sample(jobs);
  polling = false;
  poller.join();
  stop = true;
  hollow.join();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::filesystem::remove_all(dir);
}

int IntFlag(int argc, char** argv, const char* name, int def) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return def;
}

}  // namespace
}  // namespace gpool::control

int main(int argc, char** argv) {
  using namespace gpool::control;
  std::string mode = argc > 1 && std::strncmp(argv[1], "--", 2) != 0 ? argv[1] : "all";
  if (mode == "heartbeat") {
    Heartbeat(IntFlag(argc, argv, "--nodes", 10000), IntFlag(argc, argv, "--seconds", 20),
              IntFlag(argc, argv, "--clients", 16));
  } else if (mode == "bind") {
    Bind(IntFlag(argc, argv, "--nodes", 256), IntFlag(argc, argv, "--gang-gpus", 128),
         IntFlag(argc, argv, "--iterations", 200));
  } else if (mode == "submit") {
    SubmitRate(IntFlag(argc, argv, "--jobs", 20000), IntFlag(argc, argv, "--clients", 64));
  } else if (mode == "retention") {
    Retention(IntFlag(argc, argv, "--jobs", 100000), IntFlag(argc, argv, "--keep", 10000),
              IntFlag(argc, argv, "--nodes", 32), IntFlag(argc, argv, "--sample", 10000),
              IntFlag(argc, argv, "--window", 2000));
  } else if (mode == "all") {  // small sizes, e.g. from scripts/bench.sh
    Heartbeat(2000, 5, 4);
    Bind(256, 128, 50);
    SubmitRate(5000, 32);
  } else {
    std::fprintf(stderr, "usage: control_bench [bind|submit|heartbeat|retention] [--flag N]...\n");
    return 2;
  }
  return 0;
}
