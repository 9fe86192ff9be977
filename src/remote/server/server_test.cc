// GpuServer's accept path (each client's worker refuses it before any backend starts): the data
// address it tells clients, and that a peer that connects and never sends Hello holds up no one.
// LeaseGuardBackend over the emulated backend: only the leased device, within its lease's memory.
#include "remote/server/server.h"

#include <gtest/gtest.h>

#include "remote/protocol/messages.h"
#include "remote/server/lease_guard.h"
#include "remote/server/test_server.h"

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

// A GpuServer on 127.0.0.1 in a process of its own (test_server.h), killed, and its workers with
// it, when this goes out of scope. (Run on a thread of this test, a worker was once forked while
// the test's thread held an allocator lock, and hung: a flake under ASan.)
ServerOptions LocalOptions(int hello_timeout_ms) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.hello_timeout_ms = hello_timeout_ms;
  return o;
}
struct ServingServer {
  explicit ServingServer(int hello_timeout_ms)
      : address(testing::ForkServer(LocalOptions(hello_timeout_ms), &pid)) {}
  ~ServingServer() { testing::KillServer(pid); }
  bool started() const { return !address.empty() && transport.ok(); }
  StatusOr<std::unique_ptr<Connection>> Connect() { return (*transport)->Connect(address); }
  // A client asking for a data transport the server does not speak: its worker refuses it before
  // starting any backend. Returns the refusal's message.
  StatusOr<std::string> WrongTransportHello(int recv_timeout_ms) {
    GPOOL_ASSIGN_OR_RETURN(auto c, Connect());
    GPOOL_RETURN_IF_ERROR(c->SetRecvTimeout(recv_timeout_ms));
    return Hello(c.get(), "carrier-pigeon");
  }
  pid_t pid = -1;
  std::string address;  // initialised after pid, which ForkServer sets
  StatusOr<std::unique_ptr<Transport>> transport = MakeTransport("tcp", {});
};

TEST(GpuServer, SilentPeerDoesNotStopTheAcceptLoop) {
  ServingServer s(300);
  ASSERT_TRUE(s.started()) << "the server process did not start";
  // Completes the transport handshake, then says nothing.
  auto silent = s.Connect();
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  // A later client is still answered.
  auto answer = s.WrongTransportHello(30000);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_NE(answer->find("speaks tcp"), std::string::npos) << *answer;
  // The silent peer was dropped: its connection is closed by the server.
  ASSERT_TRUE((*silent)->SetRecvTimeout(30000).ok());
  std::vector<std::byte> msg;
  Status st = (*silent)->Recv(&msg);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message().find("timed out"), std::string::npos) << st.ToString();
}

// Each client's handshake runs in its own worker: a peer that says nothing for as long as the
// Hello deadline allows (60 s here) does not hold up the next client, which is answered long before
// that (its own receive gives up after 20 s; when the server served Hellos one by one, it did).
TEST(GpuServer, AHandshakeNeverWaitsForAnother) {
  ServingServer s(60000);
  ASSERT_TRUE(s.started()) << "the server process did not start";
  auto silent = s.Connect();
  ASSERT_TRUE(silent.ok()) << silent.status().ToString();
  for (int i = 0; i < 3; ++i) {  // the accept loop goes on serving after each refusal
    auto answer = s.WrongTransportHello(20000);
    ASSERT_TRUE(answer.ok()) << "client " << i << ": " << answer.status().ToString();
    EXPECT_NE(answer->find("speaks tcp"), std::string::npos) << *answer;
  }
  // The silent peer's worker still waits for its Hello: its connection is open.
  ASSERT_TRUE((*silent)->SetRecvTimeout(200).ok());
  std::vector<std::byte> msg;
  Status st = (*silent)->Recv(&msg);
  EXPECT_NE(st.message().find("timed out"), std::string::npos) << st.ToString();
}

// A guard as a worker has it: its grants claimed in the server's ledger (a ledger of its own).
struct LeaseGuard {
  LeaseGuard(Backend* inner, std::vector<DeviceGrant> grants) {
    auto l = LeaseLedger::Create();
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    if (!l.ok()) return;
    ledger = std::move(*l);
    std::vector<uint64_t> totals(static_cast<size_t>(inner->DeviceCount()));
    for (size_t d = 0; d < totals.size(); ++d) {
      uint64_t free = 0;
      EXPECT_TRUE(inner->MemGetInfo(static_cast<uint32_t>(d), &free, &totals[d]).ok());
    }
    auto entry = ledger->Join(LedgerClaims(grants, totals));
    EXPECT_TRUE(entry.ok()) << entry.status().ToString();
    if (entry.ok()) {
      guard = std::make_unique<LeaseGuardBackend>(inner, std::move(grants), ledger.get(), *entry);
    }
  }
  std::unique_ptr<LeaseLedger> ledger;
  std::unique_ptr<LeaseGuardBackend> guard;
};

TEST(LeaseGuardBackend, OnlyTheLeasedDeviceWithinItsLeasesMemory) {
  auto emulated = MakeEmulatedBackend({.devices = 2, .memory_bytes = uint64_t{64} << 20});
  ASSERT_TRUE(emulated.ok()) << emulated.status().ToString();
  LeaseGuard leased(emulated->get(), {{.device = 0, .memory_bytes = 1 << 20, .gpu = "h:7000/0"}});
  ASSERT_NE(leased.guard, nullptr);
  LeaseGuardBackend& guard = *leased.guard;
  uint64_t p = 0, q = 0, r = 0;
  Result other = guard.Malloc(1, 4096, &p);
  EXPECT_EQ(other.code, kErrNotPermitted);
  EXPECT_NE(other.message.find("on GPU h:7000/1 refused: this session's lease covers only h:7000/0"),
            std::string::npos) << other.message;
  EXPECT_EQ(guard.DeviceSync(1).code, kErrNotPermitted);
  EXPECT_EQ(guard.StreamCreate(1, 5, 0, 0).code, kErrNotPermitted);
  proto::Launch launch;
  launch.device = 1;
  uint64_t ns = 0;
  EXPECT_EQ(guard.Launch(launch, &ns).code, kErrNotPermitted);
  // Device 0 within its lease's 1 MiB.
  Result big = guard.Malloc(0, 2 << 20, &p);
  EXPECT_EQ(big.code, kErrMemoryAllocation);
  EXPECT_NE(big.message.find("its lease's memory limit is 1048576 bytes"), std::string::npos)
      << big.message;
  ASSERT_TRUE(guard.Malloc(0, 512 << 10, &p).ok());
  ASSERT_TRUE(guard.Malloc(0, 512 << 10, &q).ok());
  EXPECT_EQ(guard.Malloc(0, 1, &r).code, kErrMemoryAllocation);
  uint64_t free = 0, total = 0;
  ASSERT_TRUE(guard.MemGetInfo(0, &free, &total).ok());
  EXPECT_EQ(total, uint64_t{1} << 20);
  EXPECT_EQ(free, 0u);
  ASSERT_TRUE(guard.Free(q).ok());
  ASSERT_TRUE(guard.MemGetInfo(0, &free, &total).ok());
  EXPECT_EQ(free, uint64_t{512} << 10);
  EXPECT_TRUE(guard.Malloc(0, 512 << 10, &r).ok());
  proto::DeviceProps props;
  ASSERT_TRUE(guard.GetProps(0, &props).ok());
  EXPECT_EQ(props.total_global_mem, uint64_t{1} << 20);
}

// cudaDeviceReset on the leased device frees its lease's memory (the backend destroyed its
// allocations); on another device it is refused like any call.
TEST(LeaseGuardBackend, DeviceResetGivesTheLeasesMemoryBack) {
  auto emulated = MakeEmulatedBackend({.devices = 2, .memory_bytes = uint64_t{64} << 20});
  ASSERT_TRUE(emulated.ok()) << emulated.status().ToString();
  LeaseGuard leased(emulated->get(), {{.device = 0, .memory_bytes = 1 << 20, .gpu = "h:7000/0"}});
  ASSERT_NE(leased.guard, nullptr);
  LeaseGuardBackend& guard = *leased.guard;
  uint64_t p = 0;
  ASSERT_TRUE(guard.Malloc(0, 1 << 20, &p).ok());
  EXPECT_EQ(guard.Malloc(0, 1, &p).code, kErrMemoryAllocation);
  Result other = guard.DeviceReset(1);
  EXPECT_EQ(other.code, kErrNotPermitted);
  EXPECT_NE(other.message.find("cudaDeviceReset on GPU h:7000/1 refused"), std::string::npos)
      << other.message;
  ASSERT_TRUE(guard.DeviceReset(0).ok());
  uint64_t free = 0, total = 0;
  ASSERT_TRUE(guard.MemGetInfo(0, &free, &total).ok());
  EXPECT_EQ(free, uint64_t{1} << 20);
  EXPECT_TRUE(guard.Malloc(0, 1 << 20, &p).ok());
}

// Memory handles (cuMemCreate) count against the lease as cudaMalloc's memory does, from creation
// until the backend says they are gone (released and unmapped), and survive a device reset (they
// belong to no context); another device is refused like any call.
TEST(LeaseGuardBackend, MemoryHandlesCountAgainstTheLeaseUntilGone) {
  auto emulated = MakeEmulatedBackend({.devices = 2, .memory_bytes = uint64_t{64} << 20,
                                       .va_bytes = uint64_t{1} << 30});
  ASSERT_TRUE(emulated.ok()) << emulated.status().ToString();
  LeaseGuard leased(emulated->get(), {{.device = 0, .memory_bytes = 5 << 20, .gpu = "h:7000/0"}});
  ASSERT_NE(leased.guard, nullptr);
  LeaseGuardBackend& guard = *leased.guard;
  constexpr uint64_t kChunk = 2 << 20;
  uint64_t h1 = 0, h2 = 0, h3 = 0, va = 0;
  EXPECT_EQ(guard.MemCreate(1, kChunk, &h1).code, kErrNotPermitted);
  ASSERT_TRUE(guard.MemCreate(0, kChunk, &h1).ok());
  ASSERT_TRUE(guard.MemCreate(0, kChunk, &h2).ok());
  Result over = guard.MemCreate(0, kChunk, &h3);
  EXPECT_EQ(over.code, kErrMemoryAllocation);
  EXPECT_NE(over.message.find("cuMemCreate(2097152 bytes) on GPU h:7000/0 refused"),
            std::string::npos) << over.message;
  EXPECT_EQ(guard.Malloc(0, 2 << 20, &h3).code, kErrMemoryAllocation) << "cudaMalloc shares it";
  ASSERT_TRUE(guard.MemAddressReserve(0, 64 << 20, 0, 0, &va).ok());
  ASSERT_TRUE(guard.MemMap(va, kChunk, 0, h1).ok());
  std::vector<uint64_t> gone;
  ASSERT_TRUE(guard.MemRelease(h1, &gone).ok());
  EXPECT_TRUE(gone.empty());
  EXPECT_EQ(guard.MemCreate(0, kChunk, &h3).code, kErrMemoryAllocation) << "still mapped";
  ASSERT_TRUE(guard.MemUnmap(va, kChunk, &gone).ok());
  EXPECT_EQ(gone, std::vector<uint64_t>{h1});
  ASSERT_TRUE(guard.MemCreate(0, kChunk, &h3).ok()) << "the unmapped handle's memory is back";
  // A reset gives back cudaMalloc's memory, not the handles'.
  ASSERT_TRUE(guard.DeviceReset(0).ok());
  uint64_t p = 0;
  EXPECT_EQ(guard.Malloc(0, 2 << 20, &p).code, kErrMemoryAllocation);
  EXPECT_TRUE(guard.Malloc(0, 1 << 20, &p).ok());
}

}  // namespace
}  // namespace gpool::remote::server
