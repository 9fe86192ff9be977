// Dead-peer detection (TcpLivenessOptions): the options are on the real sockets of both ends
// (read back with getsockopt from this process's own descriptors), over TCP and on UCX's
// bootstrap/liveness socket and its own tcp transport's sockets; and a peer process that stops
// (SIGSTOP: its kernel still acknowledges, so keepalive alone would never fire) ends a send that
// fills its receive window with a clear "connection timed out" error, through TCP_USER_TIMEOUT,
// instead of blocking forever. No timing is asserted: only that the wait ends, and how.
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "remote/transport/transport.h"

namespace gpool::remote {
namespace {

struct SockInfo {
  int fd;
  uint16_t local_port, peer_port;
};

uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

// This process's connected TCP sockets.
std::vector<SockInfo> ConnectedTcpSockets() {
  std::vector<SockInfo> out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(d)) continue;
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0, proto = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    len = sizeof(proto);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
      continue;  // listening or unconnected
    }
    out.push_back({fd, PortOf(local), PortOf(peer)});
  }
  closedir(d);
  return out;
}

int IntOpt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  EXPECT_EQ(getsockopt(fd, level, name, &v, &len), 0);
  return v;
}

void ExpectLiveness(int fd, const TcpLivenessOptions& o, const std::string& what) {
  SCOPED_TRACE(what + " fd " + std::to_string(fd));
  EXPECT_EQ(IntOpt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(IntOpt(fd, IPPROTO_TCP, TCP_KEEPIDLE), o.keepalive_idle_s);
  EXPECT_EQ(IntOpt(fd, IPPROTO_TCP, TCP_KEEPINTVL), o.keepalive_interval_s);
  EXPECT_EQ(IntOpt(fd, IPPROTO_TCP, TCP_KEEPCNT), o.keepalive_count);
  EXPECT_EQ(IntOpt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), o.user_timeout_ms);
}

uint16_t ListenerPort(const Listener& l) {
  const std::string a = l.address();
  return static_cast<uint16_t>(std::stoi(a.substr(a.rfind(':') + 1)));
}

// Values unlike the defaults and unlike the kernel's, so a socket left alone cannot pass.
TransportOptions Odd() {
  TransportOptions o;
  o.liveness = {.keepalive_idle_s = 7, .keepalive_interval_s = 3, .keepalive_count = 5,
                .user_timeout_ms = 12345};
  return o;
}

TEST(Liveness, TcpSocketsOfBothEndsCarryTheOptions) {
  TransportOptions o = Odd();
  o.tcp_data_streams = 2;
  auto t = MakeTransport("tcp", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto l = (*t)->Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto accepted = std::async(std::launch::async, [&] { return (*l)->Accept(); });
  auto c = (*t)->Connect((*l)->address());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto s = accepted.get();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  uint16_t port = ListenerPort(**l);
  int client_side = 0, server_side = 0;
  for (const SockInfo& k : ConnectedTcpSockets()) {
    if (k.peer_port == port) {
      ++client_side;
      ExpectLiveness(k.fd, o.liveness, "client");
    } else if (k.local_port == port) {
      ++server_side;
      ExpectLiveness(k.fd, o.liveness, "server");
    }
  }
  // The control stream and two data streams on each end.
  EXPECT_EQ(client_side, 3);
  EXPECT_EQ(server_side, 3);
}

TEST(Liveness, UcxLivenessSocketAndUcxTcpSocketsCarryKeepalive) {
  TransportOptions o = Odd();
  o.ucx_tls = "tcp";
  auto t = MakeTransport("ucx", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto before = ConnectedTcpSockets();
  auto l = (*t)->Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto accepted = std::async(std::launch::async, [&] { return (*l)->Accept(); });
  auto c = (*t)->Connect((*l)->address());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto s = accepted.get();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // A round trip each way, so UCX's tcp transport has connected its own sockets.
  std::vector<std::byte> msg(100, std::byte{1}), in;
  ASSERT_TRUE((*c)->Send(msg).ok());
  ASSERT_TRUE((*s)->Recv(&in).ok());
  ASSERT_TRUE((*s)->Send(msg).ok());
  ASSERT_TRUE((*c)->Recv(&in).ok());
  uint16_t port = ListenerPort(**l);
  int oob = 0, ucx_own = 0;
  for (const SockInfo& k : ConnectedTcpSockets()) {
    bool old = false;
    for (const SockInfo& b : before) old |= b.fd == k.fd;
    if (old) continue;
    if (k.peer_port == port || k.local_port == port) {
      ++oob;
      ExpectLiveness(k.fd, o.liveness, "ucx liveness socket");
    } else {
      // UCX's tcp transport: keepalive from UCX_TCP_KEEP* (set through ucp_config_modify; UCX
      // sets no TCP_USER_TIMEOUT of its own). UCX 1.13 turns keepalive on only on the sockets
      // it connects, not on those it accepts: those must carry our values, none UCX's defaults.
      SCOPED_TRACE("ucx tcp socket fd " + std::to_string(k.fd));
      if (IntOpt(k.fd, SOL_SOCKET, SO_KEEPALIVE) != 1) continue;
      ++ucx_own;
      EXPECT_EQ(IntOpt(k.fd, IPPROTO_TCP, TCP_KEEPIDLE), o.liveness.keepalive_idle_s);
      EXPECT_EQ(IntOpt(k.fd, IPPROTO_TCP, TCP_KEEPINTVL), o.liveness.keepalive_interval_s);
      EXPECT_EQ(IntOpt(k.fd, IPPROTO_TCP, TCP_KEEPCNT), o.liveness.keepalive_count);
    }
  }
  EXPECT_EQ(oob, 2);
  EXPECT_GE(ucx_own, 1);
}

// A server process that accepts one TCP transport connection and then stops itself (SIGSTOP),
// as a hung or debugged peer would. Forked before this process has any thread or transport.
TEST(Liveness, SendToAStoppedPeerEndsWithAClearTimeout) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    auto t = MakeTransport("tcp", {.tcp_data_streams = 0});
    if (!t.ok()) _exit(2);
    auto l = (*t)->Listen("127.0.0.1:0");
    if (!l.ok()) _exit(3);
    std::string a = (*l)->address() + "\n";
    if (write(pipefd[1], a.data(), a.size()) != static_cast<ssize_t>(a.size())) _exit(4);
    auto c = (*l)->Accept();
    if (!c.ok()) _exit(5);
    raise(SIGSTOP);
    _exit(0);
  }
  close(pipefd[1]);
  std::string address;
  char ch;
  while (read(pipefd[0], &ch, 1) == 1 && ch != '\n') address.push_back(ch);
  close(pipefd[0]);
  ASSERT_FALSE(address.empty());

  TransportOptions o;
  o.tcp_data_streams = 0;
  o.liveness.user_timeout_ms = 500;
  auto t = MakeTransport("tcp", o);
  ASSERT_TRUE(t.ok());
  auto c = (*t)->Connect(address);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status));
  // Far more than both socket buffers hold: the send blocks on the stopped reader's shut
  // window until TCP_USER_TIMEOUT gives up on it.
  std::vector<std::byte> big(size_t{256} << 20);
  Status s = (*c)->Send(big);
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  ASSERT_FALSE(s.ok()) << "a send of 256 MiB to a stopped reader completed";
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("connection timed out"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(address), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace gpool::remote
