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

// A port that was free a moment ago (bound to 0, read back, closed). Racy only against other
// processes picking ports in the same instant.
inline int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
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
    std::unique_ptr<EtcdTestCluster> c(new EtcdTestCluster(options));
    c->dir_ = MakeTempDir("etcd");
    std::string initial;
    for (int i = 0; i < options.members; ++i) {
      Member m;
      m.name = fmt::format("m{}", i);
      m.client_port = PickFreePort();
      m.peer_port = PickFreePort();
      if (m.client_port == 0 || m.peer_port == 0) return Status::IoError("no free loopback port");
      initial += fmt::format("{}{}=http://127.0.0.1:{}", initial.empty() ? "" : ",", m.name,
                             m.peer_port);
      c->members_.push_back(m);
    }
    c->initial_cluster_ = initial;
    for (int i = 0; i < options.members; ++i) GPOOL_RETURN_IF_ERROR(c->Spawn(i));
    GPOOL_RETURN_IF_ERROR(c->WaitHealthy());
    return c;
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
          return Status::Internal(fmt::format("etcd member {} exited at start (log {}/{}.log)",
                                              m.name, dir_, m.name));
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
