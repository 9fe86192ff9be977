// TCP-only behaviour of striped messages (the shared suite in transport_test.cc checks that they
// arrive intact): the extra data streams are moved by threads kept for the connection's life, not
// by threads started per message.
#include "remote/transport/tcp_transport.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>

namespace gpool::remote {
namespace {

// TIDs of this process's threads whose name starts with `prefix`.
std::set<std::string> ThreadsNamed(const std::string& prefix) {
  std::set<std::string> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(task.path() / "comm");
    std::string name;
    if (std::getline(f, name) && name.rfind(prefix, 0) == 0) {
      out.insert(task.path().filename().string() + " " + name);
    }
  }
  return out;
}

std::vector<std::byte> Bytes(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 31 + seed));
  return v;
}

TEST(TcpStripingTest, StripedMessagesReuseOneLaneThreadPerStreamAndSide) {
  TransportOptions o;
  o.tcp_data_streams = 2;
  o.stripe_min_bytes = 64 << 10;
  auto t = MakeTcpTransport(o);
  auto l = t->Listen("127.0.0.1:0");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto accepted = std::async(std::launch::async, [&] { return (*l)->Accept(); });
  auto c = t->Connect((*l)->address());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto s = accepted.get();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::unique_ptr<Connection> client = std::move(*c), server = std::move(*s);

  // Unstriped messages start no lanes.
  std::vector<std::byte> got;
  ASSERT_TRUE(client->Send(Bytes(1000, 1)).ok());
  ASSERT_TRUE(server->Recv(&got).ok());
  EXPECT_TRUE(ThreadsNamed("gpool-tcp-").empty());

  // The first striped message starts the client's 2 send lanes and the server's 2 receive lanes.
  auto big = Bytes(300 << 10, 2);
  ASSERT_TRUE(client->Send(big).ok());
  ASSERT_TRUE(server->Recv(&got).ok());
  EXPECT_TRUE(got == big);
  const std::set<std::string> lanes = ThreadsNamed("gpool-tcp-");
  EXPECT_EQ(ThreadsNamed("gpool-tcp-tx").size(), 2u);
  EXPECT_EQ(ThreadsNamed("gpool-tcp-rx").size(), 2u);

  // Many more, with and without a tail, including the other way: the client-to-server ones are
  // moved by the same threads (no thread per message), and every byte arrives.
  for (int i = 0; i < 50; ++i) {
    auto m = Bytes((200 << 10) + i * 1001, static_cast<uint8_t>(i));
    if (i % 2) {
      ByteSpan parts[2] = {ByteSpan(m.data(), 100), ByteSpan(m.data() + 100, m.size() - 100)};
      ASSERT_TRUE(client->Send(parts).ok());
    } else {
      ASSERT_TRUE(client->Send(m).ok());
    }
    ASSERT_TRUE(server->Recv(&got).ok());
    ASSERT_TRUE(got == m) << "message " << i;
  }
  EXPECT_EQ(ThreadsNamed("gpool-tcp-"), lanes);
  ASSERT_TRUE(server->Send(big).ok());
  ASSERT_TRUE(client->Recv(&got).ok());
  EXPECT_TRUE(got == big);
  EXPECT_EQ(ThreadsNamed("gpool-tcp-").size(), 8u);  // + the server's send, the client's receive

  // Closing lets the lanes go with their connection.
  client.reset();
  server.reset();
  EXPECT_TRUE(ThreadsNamed("gpool-tcp-").empty());
}

}  // namespace
}  // namespace gpool::remote
