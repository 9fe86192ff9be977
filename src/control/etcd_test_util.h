// EtcdTestCluster: real etcd members (/usr/bin/etcd) on free loopback ports in a fresh temporary
// directory, for tests and benchmarks. Test-only.
//
// Each member is a child process; the destructor SIGKILLs the ones still running and removes the
// directory. Short raft timings (heartbeat 50 ms, election 500 ms) keep elections fast; etcd's
// minimum lease TTL follows from them (1.5 election timeouts, rounded up to whole seconds).
//
// Thread safety: not thread-safe; one thread drives a cluster.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "common/status.h"
#include "control/store_test_util.h"

namespace gpool::control {

// Loopback ports that were free a moment ago (bound to 0, read back, closed). Each is held
// bound until all are picked, so they are distinct (bind(0) may hand back a port just closed).
// Racy only against other processes binding in the gap; EtcdTestCluster::Start retries for that.
inline std::vector<int> PickFreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      if (fd >= 0) ::close(fd);
      break;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  if (static_cast<int>(ports.size()) != n) ports.clear();
  return ports;
}
inline int PickFreePort() {
  std::vector<int> p = PickFreePorts(1);
  return p.empty() ? 0 : p[0];
}

struct EtcdTestOptions {
  int members = 1;
  int heartbeat_ms = 50;
  int election_ms = 500;
  std::string etcd_binary = "/usr/bin/etcd";
};

class EtcdTestCluster {
 public:
  static StatusOr<std::unique_ptr<EtcdTestCluster>> Start(const EtcdTestOptions& options) {
    if (::access(options.etcd_binary.c_str(), X_OK) != 0) {
      return Status::FailedPrecondition(fmt::format(
          "{} not found: install etcd-server (scripts/setup.sh)", options.etcd_binary));
    }
    // A member that exits at start most likely lost a port to another process in the gap
    // between picking and binding (tests run in parallel): start afresh on new ports.
    Status last;
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::unique_ptr<EtcdTestCluster> c(new EtcdTestCluster(options));
      last = c->StartOnce();
      if (last.ok()) return c;
      if (last.message().find("exited at start") == std::string::npos) return last;
    }
    return last;
  }

  ~EtcdTestCluster() {
    for (int i = 0; i < static_cast<int>(members_.size()); ++i) Kill(i);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string Endpoints() const {
    std::string out;
    for (const Member& m : members_) {
      out += fmt::format("{}127.0.0.1:{}", out.empty() ? "" : ",", m.client_port);
    }
    return out;
  }
  std::string Url() const { return "etcd://" + Endpoints(); }
  const std::string& dir() const { return dir_; }
  int size() const { return static_cast<int>(members_.size()); }

  // SIGKILL member i (no-op when it is not running).
  void Kill(int i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    ::kill(m.pid, SIGKILL);
    ::waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }
  // Starts member i again on its data directory and ports.
  Status Restart(int i) {
    GPOOL_RETURN_IF_ERROR(Spawn(i));
    return WaitHealthy();
  }

 private:
  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0;
    pid_t pid = -1;
  };

  explicit EtcdTestCluster(const EtcdTestOptions& o) : options_(o) {}

  Status StartOnce() {
    dir_ = MakeTempDir("etcd");
    const std::vector<int> ports = PickFreePorts(2 * options_.members);
    if (ports.empty()) return Status::IoError("no free loopback port");
    std::string initial;
    for (int i = 0; i < options_.members; ++i) {
      Member m;
      m.name = fmt::format("m{}", i);
      m.client_port = ports[2 * i];
      m.peer_port = ports[2 * i + 1];
      initial += fmt::format("{}{}=http://127.0.0.1:{}", initial.empty() ? "" : ",", m.name,
                             m.peer_port);
      members_.push_back(m);
    }
    initial_cluster_ = initial;
    for (int i = 0; i < options_.members; ++i) GPOOL_RETURN_IF_ERROR(Spawn(i));
    return WaitHealthy();
  }

  Status Spawn(int i) {
    Member& m = members_[i];
    std::string client = fmt::format("http://127.0.0.1:{}", m.client_port);
    std::string peer = fmt::format("http://127.0.0.1:{}", m.peer_port);
    std::vector<std::string> args = {
        options_.etcd_binary, "--name", m.name, "--data-dir", dir_ + "/" + m.name,
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", initial_cluster_, "--initial-cluster-state", "new",
        "--initial-cluster-token", "gpool-test",
        "--heartbeat-interval", std::to_string(options_.heartbeat_ms),
        "--election-timeout", std::to_string(options_.election_ms),
        "--max-txn-ops", "10000", "--max-request-bytes", "16777216",
        "--logger", "zap", "--log-outputs", dir_ + "/" + m.name + ".log"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) return Status::IoError("fork failed");
    if (pid == 0) {
      int null = ::open("/dev/null", O_RDWR);
      if (null >= 0) {
        ::dup2(null, 1);
        ::dup2(null, 2);
      }
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    m.pid = pid;
    return Status::Ok();
  }

  // Waits (a hang guard, not a timing assertion) until every running member reports healthy.
  Status WaitHealthy() {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (Member& m : members_) {
      if (m.pid <= 0) continue;
      for (;;) {
        int status = 0;
        if (::waitpid(m.pid, &status, WNOHANG) == m.pid) {
          m.pid = -1;
          // The directory goes with the cluster: quote the end of the member's log.
          std::string tail;
          if (FILE* f = std::fopen((dir_ + "/" + m.name + ".log").c_str(), "r")) {
            char buf[4096];
            size_t got;
            while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) tail.append(buf, got);
            std::fclose(f);
            if (tail.size() > 600) tail = tail.substr(tail.size() - 600);
          }
          return Status::Internal(fmt::format("etcd member {} exited at start (status {}); its log ends: {}",
                                              m.name, status, tail));
        }
        httplib::Client cli("127.0.0.1", m.client_port);
        cli.set_connection_timeout(std::chrono::milliseconds(200));
        cli.set_read_timeout(std::chrono::seconds(2));
        auto r = cli.Get("/health");
        if (r && r->status == 200 && r->body.find("\"true\"") != std::string::npos) break;
        if (std::chrono::steady_clock::now() > give_up) {
          return Status::Unavailable(fmt::format("etcd member {} not healthy after 30 s (log {}/{}.log)",
                                                 m.name, dir_, m.name));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return Status::Ok();
  }

  const EtcdTestOptions options_;
  std::string dir_;
  std::string initial_cluster_;
  std::vector<Member> members_;
};

}  // namespace gpool::control
