// GpuServer's accept path without forking a worker: the data address it tells clients, and that a
// peer that connects and never sends Hello cannot stop the accept loop.
#include "remote/server/server.h"

#include <thread>

#include <gtest/gtest.h>

#include "remote/protocol/messages.h"

namespace gpool::remote::server {
namespace {

TEST(DataAddressFor, WildcardListenerAdvertisesTheAddressTheClientReached) {
  EXPECT_EQ(DataAddressFor("0.0.0.0:41000", "10.1.2.3:7000", ""), "10.1.2.3:41000");
  EXPECT_EQ(DataAddressFor("[::]:41000", "[fd00::5]:7000", ""), "[fd00::5]:41000");
  EXPECT_EQ(DataAddressFor("0.0.0.0:41000", "127.0.0.1:7000", ""), "127.0.0.1:41000");
}

TEST(DataAddressFor, AdvertiseWinsAndSpecificListenersStay) {
  EXPECT_EQ(DataAddressFor("0.0.0.0:41000", "10.1.2.3:7000", "gpu7.example:7000"),
            "gpu7.example:41000");
  EXPECT_EQ(DataAddressFor("10.9.9.9:41000", "10.1.2.3:7000", ""), "10.9.9.9:41000");
  // No local address known (a transport without one): the worker's own address.
  EXPECT_EQ(DataAddressFor("0.0.0.0:41000", "", ""), "0.0.0.0:41000");
}

// Sends a Hello on `c` and returns the server's answer (error message, or data address).
StatusOr<std::string> Hello(Connection* c, const std::string& transport) {
  proto::Hello h;
  h.transport = transport;
  h.client = "server_test";
  proto::BatchWriter w;
  w.AddRequest(h);
  GPOOL_RETURN_IF_ERROR(c->Send(w.Finish()));
  std::vector<std::byte> msg;
  GPOOL_RETURN_IF_ERROR(c->Recv(&msg));
  GPOOL_ASSIGN_OR_RETURN(auto frames, proto::ParseMessage(msg));
  if (frames.size() != 1) return Status::InvalidArgument("want one frame");
  proto::ReplyHead head;
  proto::HelloReply reply;
  GPOOL_RETURN_IF_ERROR(proto::DecodeReply(frames[0], &head, &reply));
  return head.error != 0 ? head.message : reply.data_address;
}

TEST(GpuServer, SilentPeerDoesNotStopTheAcceptLoop) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.hello_timeout_ms = 300;
  GpuServer server(o);
  ASSERT_TRUE(server.Start().ok());
  std::thread serve([&] { (void)server.Serve(); });
  auto transport = MakeTransport("tcp", {});
  ASSERT_TRUE(transport.ok());
  // Completes the transport handshake, then says nothing.
  auto silent = (*transport)->Connect(server.address());
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  // A later client is still answered (here refused for its transport, which needs no worker).
  auto next = (*transport)->Connect(server.address());
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE((*next)->SetRecvTimeout(30000).ok());
  auto answer = Hello(next->get(), "carrier-pigeon");
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  if (answer.ok()) {
    EXPECT_NE(answer->find("speaks tcp"), std::string::npos) << *answer;
  }
  // The silent peer was dropped: its connection is closed by the server.
  ASSERT_TRUE((*silent)->SetRecvTimeout(30000).ok());
  std::vector<std::byte> msg;
  Status st = (*silent)->Recv(&msg);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message().find("timed out"), std::string::npos) << st.ToString();
  server.Stop();
  serve.join();
}

}  // namespace
}  // namespace gpool::remote::server
