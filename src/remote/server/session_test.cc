// Session over a real TCP connection and the emulated backend, driven by hand-built messages:
// a host-to-device chunk that ends its message is received straight into device memory, after
// the frames before it have run; one bound for a bad destination is received into the message
// buffer instead and fails at the next reply, without touching memory around it. A run of
// device-to-host reads is pipelined through the backend's two read slots (StartD2H before the
// previous reply goes out), as the cuda backend's staging buffers need, with the right bytes in
// every reply.
#include "remote/server/session.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "common/file.h"
#include "remote/server/session_test_fixture.h"

namespace gpool::remote::server {
namespace {

using namespace proto;  // NOLINT: message structs

using test::Pattern;
using test::SessionTest;

TEST_F(SessionTest, ChunkIsReceivedInPlaceAfterTheFramesBeforeIt) {
  const size_t n = 256 << 10;
  uint64_t d = Malloc(n);
  std::vector<std::byte> data = Pattern(n, 1);
  MemsetThenChunk(d, n, 0x11, data);
  ReplyHead h;
  std::vector<std::byte> got = Read(d, n, &h);
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  EXPECT_TRUE(got == data) << "the memset queued before the chunk ran after it";
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().h2d_in_place, 1u);
  EXPECT_EQ(session_->stats().requests, 4u);  // malloc, memset, chunk, read
}

TEST_F(SessionTest, ChunkForABadDestinationIsDrainedAndFailsAtTheNextReply) {
  const size_t n = 256 << 10;
  uint64_t a = Malloc(n), b = Malloc(n);
  std::vector<std::byte> keep = Pattern(n, 2), data = Pattern(n, 3);
  MemsetThenChunk(b, n, 0, keep);  // b holds `keep`
  MemsetThenChunk(a + n / 2, n / 2, 0x33, data);  // half of it past a's end
  ReplyHead h;
  std::vector<std::byte> got_b = Read(b, n, &h);
  EXPECT_NE(h.async_error, 0) << "the bad chunk's error did not come with the next reply";
  EXPECT_NE(h.async_message.find("host-to-device"), std::string::npos) << h.async_message;
  EXPECT_TRUE(got_b == keep);
  // The memset before the bad chunk still ran, and the session goes on.
  std::vector<std::byte> got_a = Read(a + n / 2, n / 2, &h);
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  ASSERT_EQ(got_a.size(), n / 2);
  EXPECT_EQ(got_a[0], std::byte{0x33});
  EXPECT_EQ(got_a[n / 2 - 1], std::byte{0x33});
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().h2d_in_place, 1u);  // b's chunk only
}

class UcxSessionTest : public SessionTest {
 protected:
  std::string TransportName() override { return "ucx"; }
};

// Protocol v7 bare read replies (over UCX, where a reply's head costs the client a receive): a
// read of at least kBareReplyMinBytes that succeeds with nothing deferred is answered with its
// bytes alone; one below the size, one that fails, and one that must carry an earlier posted op's
// error are framed, so no error is ever dropped for speed.
TEST_F(UcxSessionTest, LargeSuccessfulReadsAreBareAndEveryErrorStillFramed) {
  const size_t n = kBareReplyMinBytes;
  std::vector<std::byte> data = Pattern(n, 5);
  uint64_t a = MallocHolding(data);
  ReplyHead h;
  bool bare = false;
  EXPECT_TRUE(Read(a, n, &h, &bare) == data);
  EXPECT_TRUE(bare) << "a successful read of kBareReplyMinBytes came back framed";
  EXPECT_EQ(h.error, 0) << h.message;
  std::vector<std::byte> small = Read(a, n - 1, &h, &bare);
  EXPECT_FALSE(bare);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), data.begin()));
  Read(a + 1, n, &h, &bare);  // one byte past the allocation
  EXPECT_FALSE(bare);
  EXPECT_EQ(h.error, kErrInvalidValue) << h.message;
  // A posted copy that fails, then a good read: the read is framed, with the copy's error.
  MemsetThenChunk(a + n / 2, n / 2, 0x33, std::vector<std::byte>(n, std::byte{1}));
  std::vector<std::byte> got = Read(a, n, &h, &bare);
  EXPECT_FALSE(bare) << "the deferred error was dropped from a bare reply";
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_NE(h.async_error, 0);
  EXPECT_EQ(got.size(), n);
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().bare_replies, 1u);
}

// Over TCP, which reads a reply's bulk bytes straight into place either way, reads stay framed.
TEST_F(SessionTest, OverTcpLargeReadsStayFramed) {
  std::vector<std::byte> data = Pattern(kBareReplyMinBytes, 6);
  uint64_t a = MallocHolding(data);
  ReplyHead h;
  bool bare = true;
  EXPECT_TRUE(Read(a, data.size(), &h, &bare) == data);
  EXPECT_FALSE(bare);
  EXPECT_EQ(h.error, 0) << h.message;
  client_->Close();
  runner_.join();
  EXPECT_EQ(session_->stats().bare_replies, 0u);
}

// A run of small reads in one message: over TCP their replies are gathered and leave a few at a
// time (Session::Emit; one sendmsg for up to 64 KiB of them), over UCX one by one; either way in
// order, each with its own bytes or error. A reply too large to gather (20 KiB) sends the ones
// gathered before it first, and a posted op's error still reaches the next reply.
class GatheredReadsTest : public SessionTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string TransportName() override { return GetParam(); }
};

TEST_P(GatheredReadsTest, ARunOfSmallReadsLeavesInFewSendsInOrder) {
  const size_t kReads = 120, n = 4096, big = 20 << 10;
  std::vector<std::byte> data = Pattern(kReads * n, 7);
  uint64_t a = MallocHolding(data);
  auto size_of = [&](size_t k) { return k == 60 ? big : n; };
  auto src_of = [&](size_t k) {
    if (k == 37) return a + data.size() - 100;  // runs past the allocation's end
    return a + (k * 1031) % (data.size() - big);
  };
  BatchWriter w;
  for (size_t k = 0; k < kReads; ++k) {
    MemcpyD2H m{.src = src_of(k), .size = size_of(k)};
    w.AddRequest(m);
  }
  ASSERT_TRUE(client_->Send(w.Finish()).ok());
  for (size_t k = 0; k < kReads; ++k) {
    ReplyHead h;
    std::vector<std::byte> got;
    ReadReply(size_of(k), &h, &got);
    if (k == 37) {
      EXPECT_EQ(h.error, kErrInvalidValue) << "read " << k << ": " << h.message;
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(h.error, 0) << "read " << k << ": " << h.message;
    ASSERT_EQ(got.size(), size_of(k)) << "read " << k;
    const size_t off = src_of(k) - a;
    ASSERT_TRUE(std::equal(got.begin(), got.end(), data.begin() + off))
        << "read " << k << " came back with the wrong bytes";
  }
  // A failed posted write, then a run of reads: the first reply carries the write's error.
  MemsetThenChunk(a + data.size() - 10, 10, 0, std::vector<std::byte>(n, std::byte{1}));
  BatchWriter w2;
  for (size_t k = 0; k < 3; ++k) {
    MemcpyD2H m{.src = a + k * n, .size = n};
    w2.AddRequest(m);
  }
  ASSERT_TRUE(client_->Send(w2.Finish()).ok());
  for (size_t k = 0; k < 3; ++k) {
    ReplyHead h;
    std::vector<std::byte> got;
    ReadReply(n, &h, &got);
    EXPECT_EQ(h.error, 0) << h.message;
    EXPECT_EQ(h.async_error != 0, k == 0) << "read " << k;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin() + k * n)) << "read " << k;
  }
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  const SessionStats& st = session_->stats();
  EXPECT_EQ(st.replies, 1 + kReads + 3);
  if (GetParam() == "ucx") {  // posts a send per message either way: nothing gathered
    EXPECT_EQ(st.sends, st.replies);
    return;
  }
  // Malloc, then the first run's 120 replies: 119 small ones, 64 KiB (15 replies) at a time,
  // around the large one, which goes with the ones gathered before it; then the second run's 3
  // in one. Each reply sent on its own would be 124 sends.
  EXPECT_GE(st.sends, 1u + 8u + 1u);
  EXPECT_LE(st.sends, 1u + 12u + 1u) << "the small read replies were not gathered";
}

INSTANTIATE_TEST_SUITE_P(Transports, GatheredReadsTest, ::testing::Values("tcp", "ucx"),
                         [](const auto& info) { return info.param; });

// A posted LaunchCooperative (protocol v5) reaches the backend's cooperative launch: the emulated
// backend launches it as any launch, so an unknown kernel fails as a launch would, reported with
// the next reply under the op's name.
TEST_F(SessionTest, CooperativeLaunchRunsAsALaunchOnTheEmulatedBackend) {
  LaunchCooperative c;
  c.func = 999;
  c.grid = {4, 1, 1};
  c.block = {128, 1, 1};
  ReplyHead h = PostThenPing(c);
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, kErrInvalidDeviceFunction) << h.async_message;
  EXPECT_NE(h.async_message.find("LaunchCooperative: unknown function id 999"), std::string::npos)
      << h.async_message;
}

// Protocol v6 GetModuleInfo, driven by hand: a module from the fatbin parser's fixture
// (testdata/remote/kernel.cu: plain and scale take (float*, const float*, int, Params{24 bytes}))
// with those two kernels, one whose name is not in its device code, and two variables; then a
// second module registered after the first was asked about.
class ModuleInfoTest : public SessionTest {
 protected:
  static constexpr uint64_t kModule = 1, kLate = 2;
  // Registers kModule (three functions, two variables) in one posted batch, as the client's
  // start-up storm does, then asks for its info.
  ModuleInfo RegisterAndFetch(ReplyHead* h) {
    auto image = ReadFile("testdata/remote/kernel_sm90.fatbin");
    EXPECT_TRUE(image.ok()) << image.status().ToString();
    image_ = image.ok() ? *image : "";
    BatchWriter w;
    RegisterModule rm{.module = kModule, .image = std::as_bytes(std::span(image_))};
    w.AddRequest(rm);
    const char* names[] = {"plain", "_Z5scalePfPKfi6Params", "_Z7missingv"};
    for (uint64_t i = 0; i < 3; ++i) {
      RegisterFunction rf{.module = kModule, .func = 11 + i, .name = names[i]};
      w.AddRequest(rf);
    }
    RegisterVar a{.module = kModule, .var = 21, .name = "gA", .size = 16};
    RegisterVar b{.module = kModule, .var = 22, .name = "gB", .size = 4, .constant = 1};
    w.AddRequest(a);
    w.AddRequest(b);
    return Fetch(w, kModule, h);
  }
  // Sends `w`'s frames plus GetModuleInfo{module, device} and returns its reply.
  ModuleInfo Fetch(BatchWriter& w, uint64_t module, ReplyHead* h, uint32_t device = 0) {
    GetModuleInfo q{.module = module, .device = device};
    w.AddRequest(q);
    EXPECT_TRUE(client_->Send(w.Finish()).ok());
    ModuleInfo info;
    Reply(static_cast<uint16_t>(Op::kGetModuleInfo), h, &info);
    return info;
  }
  template <class Msg, class Body>
  void Ask(Msg& q, ReplyHead* h, Body* body) {
    BatchWriter w;
    w.AddRequest(q);
    ASSERT_TRUE(client_->Send(w.Finish()).ok());
    Reply(static_cast<uint16_t>(Msg::kOp), h, body);
  }
  static std::vector<std::pair<uint32_t, uint32_t>> Slots(const std::vector<ParamSlot>& ps) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (const ParamSlot& p : ps) out.emplace_back(p.offset, p.size);
    return out;
  }
  const std::vector<std::pair<uint32_t, uint32_t>> kFourParams = {
      {0, 8}, {8, 8}, {16, 4}, {24, 24}};
  std::string image_;
};

TEST_F(ModuleInfoTest, ListsEveryFunctionAndVariableOfTheModuleWithItsOwnResult) {
  ReplyHead h;
  ModuleInfo info = RegisterAndFetch(&h);
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(h.async_error, 0) << h.async_message;
  ASSERT_EQ(info.functions.size(), 3u);
  EXPECT_EQ(info.functions[0].func, 11u);
  EXPECT_EQ(info.functions[0].error, 0) << info.functions[0].message;
  EXPECT_EQ(Slots(info.functions[0].params), kFourParams);
  EXPECT_EQ(info.functions[1].func, 12u);
  EXPECT_EQ(Slots(info.functions[1].params), kFourParams);
  // The kernel the device code lacks fails alone, naming itself.
  EXPECT_EQ(info.functions[2].func, 13u);
  EXPECT_EQ(info.functions[2].error, kErrInvalidDeviceFunction);
  EXPECT_NE(info.functions[2].message.find("_Z7missingv"), std::string::npos)
      << info.functions[2].message;
  EXPECT_TRUE(info.functions[2].params.empty());
  ASSERT_EQ(info.vars.size(), 2u);
  // Each variable's address is the one GetSymbol gives.
  for (const VarInfo& v : info.vars) {
    EXPECT_EQ(v.error, 0) << v.message;
    ReplyHead sh;
    Symbol sym;
    GetSymbol q{.var = v.var};
    Ask(q, &sh, &sym);
    EXPECT_EQ(sh.error, 0) << sh.message;
    EXPECT_EQ(v.ptr, sym.ptr) << "var " << v.var;
    EXPECT_NE(v.ptr, 0u);
    EXPECT_EQ(v.size, sym.size);
  }
  EXPECT_EQ(info.vars[0].var, 21u);
  EXPECT_EQ(info.vars[0].size, 16u);
  EXPECT_EQ(info.vars[1].var, 22u);
  EXPECT_EQ(info.vars[1].size, 4u);

  // A module registered after the first was asked about has its own info; the first's is
  // unchanged.
  BatchWriter w;
  RegisterModule late{.module = kLate, .image = std::as_bytes(std::span(image_))};
  RegisterFunction lf{.module = kLate, .func = 31, .name = "_Z4fillIdEvPT_S0_c"};
  w.AddRequest(late);
  w.AddRequest(lf);
  ModuleInfo li = Fetch(w, kLate, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_EQ(li.functions.size(), 1u);
  EXPECT_EQ(li.functions[0].func, 31u);
  EXPECT_EQ(Slots(li.functions[0].params),
            (std::vector<std::pair<uint32_t, uint32_t>>{{0, 8}, {8, 8}, {16, 1}}));
  EXPECT_TRUE(li.vars.empty());
  BatchWriter again;
  ModuleInfo first = Fetch(again, kModule, &h);
  EXPECT_EQ(first.functions.size(), 3u);
  EXPECT_EQ(first.vars.size(), 2u);
  EXPECT_EQ(session_->stats().replies_by_op[static_cast<size_t>(Op::kGetModuleInfo)], 3u);
}

TEST_F(ModuleInfoTest, AnUnknownOrUnregisteredModuleIsAnErrorNamingIt) {
  ReplyHead h;
  BatchWriter w;
  ModuleInfo none = Fetch(w, 77, &h);
  EXPECT_EQ(h.error, kErrInvalidResourceHandle);
  EXPECT_NE(h.message.find("module 77 is not registered"), std::string::npos) << h.message;
  EXPECT_TRUE(none.functions.empty());
  (void)RegisterAndFetch(&h);
  ASSERT_EQ(h.error, 0) << h.message;
  BatchWriter u;
  UnregisterModule um{.module = kModule};
  u.AddRequest(um);
  (void)Fetch(u, kModule, &h);
  EXPECT_EQ(h.error, kErrInvalidResourceHandle);
  EXPECT_NE(h.message.find("module 1 is not registered"), std::string::npos) << h.message;
}

// Two devices: each has its own copy of the module's variables (as each GPU's context loads its
// own copy of the module), so GetModuleInfo and GetSymbol answer per device, and a write to one
// device's copy leaves the other's alone. A device the server lacks fails each variable, naming
// it, while the layouts (the same on every device) are still given.
class ModuleInfoTwoDevicesTest : public ModuleInfoTest {
 protected:
  EmulatedOptions Options() override {
    EmulatedOptions o = ModuleInfoTest::Options();
    o.devices = 2;
    return o;
  }
  // Registers the module and fetches its info on device 0 (*d0) and device 1 (*d1).
  void RegisterAndFetchOnBoth(ModuleInfo* d0, ModuleInfo* d1) {
    ReplyHead h;
    *d0 = RegisterAndFetch(&h);
    ASSERT_EQ(h.error, 0) << h.message;
    BatchWriter w;
    *d1 = Fetch(w, kModule, &h, 1);
    ASSERT_EQ(h.error, 0) << h.message;
  }
};

TEST_F(ModuleInfoTwoDevicesTest, EachDeviceHasItsOwnCopyOfTheVariables) {
  ModuleInfo d0, d1;
  ASSERT_NO_FATAL_FAILURE(RegisterAndFetchOnBoth(&d0, &d1));
  ReplyHead h;
  ASSERT_EQ(d0.vars.size(), 2u);
  ASSERT_EQ(d1.vars.size(), 2u);
  EXPECT_EQ(d1.functions.size(), 3u);
  EXPECT_EQ(Slots(d1.functions[0].params), kFourParams);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(d1.vars[i].error, 0) << d1.vars[i].message;
    EXPECT_NE(d0.vars[i].ptr, d1.vars[i].ptr) << "var " << d0.vars[i].var;
    EXPECT_EQ(d0.vars[i].size, d1.vars[i].size);
    for (uint32_t dev : {0u, 1u}) {
      ReplyHead sh;
      Symbol sym;
      GetSymbol q{.var = d0.vars[i].var, .device = dev};
      Ask(q, &sh, &sym);
      EXPECT_EQ(sh.error, 0) << sh.message;
      EXPECT_EQ(sym.ptr, (dev == 0 ? d0 : d1).vars[i].ptr) << "var " << q.var << " device " << dev;
    }
  }
  // Device 0's gA set to ones; device 1's still reads zeros.
  BatchWriter put;
  Memset ms{.dst = d0.vars[0].ptr, .value = 1, .size = 16};
  put.AddRequest(ms);
  ASSERT_TRUE(client_->Send(put.Finish()).ok());
  ReplyHead rh;
  EXPECT_EQ(Read(d1.vars[0].ptr, 16, &rh), std::vector<std::byte>(16, std::byte{0}));
  EXPECT_EQ(rh.error, 0) << rh.message;
  EXPECT_EQ(rh.async_error, 0) << rh.async_message;
  EXPECT_EQ(Read(d0.vars[0].ptr, 16, &rh), std::vector<std::byte>(16, std::byte{1}));

  BatchWriter none;
  ModuleInfo d5 = Fetch(none, kModule, &h, 5);
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_EQ(d5.vars.size(), 2u);
  EXPECT_EQ(d5.vars[0].error, kErrInvalidDevice);
  EXPECT_NE(d5.vars[0].message.find("device 5 does not exist"), std::string::npos)
      << d5.vars[0].message;
  EXPECT_EQ(Slots(d5.functions[0].params), kFourParams);
}

// UnregisterModule (protocol v8: clients send it when a library is dlclose'd) frees the module's
// variables on every device, and the session's module counts show it.
TEST_F(ModuleInfoTwoDevicesTest, UnregisterModuleFreesItsVariablesOnEveryDevice) {
  auto free_memory = [&](uint32_t dev) {
    MemGetInfo q;
    q.device = dev;
    ReplyHead h;
    MemInfo m;
    Ask(q, &h, &m);
    EXPECT_EQ(h.error, 0) << h.message;
    return m.free;
  };
  const uint64_t before[2] = {free_memory(0), free_memory(1)};
  ReplyHead h;
  (void)RegisterAndFetch(&h);
  ASSERT_EQ(h.error, 0) << h.message;
  for (uint32_t dev : {0u, 1u}) EXPECT_LT(free_memory(dev), before[dev]) << "device " << dev;
  ReplyHead ph = PostThenPing(UnregisterModule{.module = kModule});
  EXPECT_EQ(ph.async_error, 0) << ph.async_message;
  for (uint32_t dev : {0u, 1u}) EXPECT_EQ(free_memory(dev), before[dev]) << "device " << dev;
  EXPECT_EQ(session_->stats().modules, 0u);
  EXPECT_EQ(session_->stats().peak_modules, 1u);
  // Registered again under a new id (a library dlopen'ed again): a fresh module.
  BatchWriter w;
  RegisterModule again{.module = kLate, .image = std::as_bytes(std::span(image_))};
  RegisterVar a{.module = kLate, .var = 41, .name = "gA", .size = 16};
  w.AddRequest(again);
  w.AddRequest(a);
  ModuleInfo info = Fetch(w, kLate, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_EQ(info.vars.size(), 1u);
  EXPECT_EQ(info.vars[0].error, 0) << info.vars[0].message;
  EXPECT_EQ(session_->stats().peak_modules, 1u);
}

// DeviceReset (protocol v8) of device 0 of two, under a 32 MiB session limit: device 0's
// allocation, stream and event are gone, its limit and flags are back at their defaults, its
// copy of a module variable reads zero again (the emulated backend's initial value), and the
// limit counts its memory as free; device 1 keeps everything.
class DeviceResetTest : public ModuleInfoTwoDevicesTest {
 protected:
  SessionLimits Limits() override { return {.memory_bytes = uint64_t{32} << 20}; }
  uint64_t MallocOn(uint32_t dev, uint64_t n, ReplyHead* h) {
    proto::Malloc q{.device = dev, .size = n};
    Pointer p;
    Ask(q, h, &p);
    return p.ptr;
  }
  template <class Msg>
  int32_t Error(Msg q) {
    ReplyHead h;
    Empty none;
    Ask(q, &h, &none);
    return h.error;
  }
};

TEST_F(DeviceResetTest, DestroysTheDevicesStateAndOnlyItsOwn) {
  ModuleInfo d0, d1;
  ASSERT_NO_FATAL_FAILURE(RegisterAndFetchOnBoth(&d0, &d1));
  ReplyHead h;
  ASSERT_EQ(d1.vars.size(), 2u);
  const uint64_t ptr0 = MallocOn(0, 16 << 20, &h), ptr1 = MallocOn(1, 4 << 20, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  BatchWriter setup;
  StreamCreate s0{.device = 0, .stream = 100}, s1{.device = 1, .stream = 101};
  EventCreate e0{.device = 0, .event = 200}, e1{.device = 1, .event = 201};
  Memset m0{.dst = d0.vars[0].ptr, .value = 1, .size = 16}, m1{.dst = d1.vars[0].ptr, .value = 1, .size = 16};
  setup.AddRequest(s0), setup.AddRequest(s1), setup.AddRequest(e0), setup.AddRequest(e1);
  setup.AddRequest(m0), setup.AddRequest(m1);
  ASSERT_TRUE(client_->Send(setup.Finish()).ok());
  ASSERT_EQ(Error(DeviceSetLimit{.device = 0, .limit = 0, .value = 4096}), 0);
  ASSERT_EQ(Error(SetDeviceFlags{.device = 0, .flags = 4}), 0);

  DeviceReset reset;
  reset.device = 0;
  ASSERT_EQ(Error(reset), 0);

  EXPECT_EQ(Read(d0.vars[0].ptr, 16, &h), std::vector<std::byte>(16, std::byte{0}));
  EXPECT_EQ(Read(d1.vars[0].ptr, 16, &h), std::vector<std::byte>(16, std::byte{1}));
  EXPECT_EQ(Error(Free{.ptr = ptr0}), kErrInvalidDevicePointer);
  StreamSync ss0, ss1;
  ss0.stream = 100, ss1.stream = 101, ss1.device = 1;
  EXPECT_EQ(Error(ss0), kErrInvalidResourceHandle);
  EXPECT_EQ(Error(ss1), 0);
  EventQuery q0, q1;
  q0.event = 200, q1.event = 201;
  EXPECT_EQ(Error(q0), kErrInvalidResourceHandle);
  EXPECT_EQ(Error(q1), 0);
  U64Value v;
  DeviceGetLimit gl{.device = 0, .limit = 0};
  Ask(gl, &h, &v);
  EXPECT_EQ(v.value, 1024u);  // CUDA's default stack size
  GetDeviceFlags gf;
  gf.device = 0;
  Ask(gf, &h, &v);
  EXPECT_EQ(v.value, 0u);
  // The session limit sees device 0's 16 MiB as free again: 4 MiB (device 1) + 28 MiB fit.
  (void)MallocOn(0, 28 << 20, &h);
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(Error(Free{.ptr = ptr1}), 0);
}

// A server whose driver cannot report layouts (--emulated-no-param-info): every function carries
// that reason, so the client falls back to its fatbin parser per kernel; variables are unaffected.
class ModuleInfoNoParamInfoTest : public ModuleInfoTest {
 protected:
  EmulatedOptions Options() override {
    EmulatedOptions o = ModuleInfoTest::Options();
    o.answer_param_info = false;
    return o;
  }
};

TEST_F(ModuleInfoNoParamInfoTest, EveryFunctionSaysWhyAndVariablesStillResolve) {
  ReplyHead h;
  ModuleInfo info = RegisterAndFetch(&h);
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_EQ(info.functions.size(), 3u);
  for (const FunctionInfo& f : info.functions) {
    EXPECT_NE(f.error, 0) << f.func;
    EXPECT_TRUE(f.params.empty());
  }
  EXPECT_EQ(info.functions[0].error, kErrNotSupported);
  EXPECT_NE(info.functions[0].message.find("kernel plain: cuFuncGetParamInfo is not available"),
            std::string::npos) << info.functions[0].message;
  ASSERT_EQ(info.vars.size(), 2u);
  for (const VarInfo& v : info.vars) {
    EXPECT_EQ(v.error, 0) << v.message;
    EXPECT_NE(v.ptr, 0u);
  }
}

// The emulated backend behind a staging decorator that reads as the cuda backend does: StartD2H
// only notes the read and fills its slot's buffer with junk; the bytes arrive at FinishD2H. A
// reply sent before its FinishD2H, or a slot started twice without one, shows.
class StagedReads final : public Backend {
 public:
  explicit StagedReads(std::unique_ptr<Backend> b) : b_(std::move(b)) {}
  bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) override {
    if (b_->HostView(src, size).size() != size || size == 0) {
      log_ += "x ";  // refused: the session takes CopyD2H
      return false;
    }
    Slot& s = slots_[slot];
    if (s.busy) log_ += "DOUBLE ";
    s = Slot{.busy = true, .src = src, .stream = stream};
    s.buf.assign(size, std::byte{0xee});
    log_ += "s" + std::to_string(slot) + " ";
    return true;
  }
  Result FinishD2H(int slot, std::span<const std::byte>* data) override {
    Slot& s = slots_[slot];
    log_ += "f" + std::to_string(slot) + " ";
    if (!s.busy) return Err(kErrUnknown, "finish without start");
    s.busy = false;
    Result r = b_->CopyD2H(s.buf.data(), s.src, s.buf.size(), s.stream);
    *data = s.buf;
    return r;
  }
  std::string log_;

  std::string_view name() const override { return "staged"; }
  int DeviceCount() override { return b_->DeviceCount(); }
  Result GetProps(uint32_t d, proto::DeviceProps* o) override { return b_->GetProps(d, o); }
  Result GetAttribute(uint32_t d, int32_t a, int32_t* v) override { return b_->GetAttribute(d, a, v); }
  Result MemGetInfo(uint32_t d, uint64_t* f, uint64_t* t) override { return b_->MemGetInfo(d, f, t); }
  Result Malloc(uint32_t d, uint64_t n, uint64_t* p) override { return b_->Malloc(d, n, p); }
  Result Free(uint64_t p) override { return b_->Free(p); }
  Result CopyH2D(uint64_t d, std::span<const std::byte> s, uint64_t st) override { return b_->CopyH2D(d, s, st); }
  Result CopyD2H(std::byte* d, uint64_t s, uint64_t n, uint64_t st) override { return b_->CopyD2H(d, s, n, st); }
  std::span<const std::byte> HostView(uint64_t, uint64_t) override { return {}; }  // as cuda
  Result CopyD2D(uint64_t d, uint64_t s, uint64_t n, uint64_t st) override { return b_->CopyD2D(d, s, n, st); }
  Result Memset(uint64_t d, uint8_t v, uint64_t n, uint64_t st) override { return b_->Memset(d, v, n, st); }
  Result Copy2D(const proto::Memcpy2D& c, std::byte* o) override { return b_->Copy2D(c, o); }
  Result LoadModule(uint64_t m, std::span<const std::byte> i) override { return b_->LoadModule(m, i); }
  Result RegisterFunction(uint64_t m, uint64_t f, const std::string& n) override { return b_->RegisterFunction(m, f, n); }
  Result RegisterVar(uint64_t m, uint64_t v, const std::string& n, uint64_t s, bool c) override {
    return b_->RegisterVar(m, v, n, s, c);
  }
  Result UnloadModule(uint64_t m) override { return b_->UnloadModule(m); }
  Result GetParamInfo(uint64_t f, proto::ParamInfo* o) override { return b_->GetParamInfo(f, o); }
  Result GetSymbol(uint64_t v, uint32_t d, uint64_t* p, uint64_t* s) override {
    return b_->GetSymbol(v, d, p, s);
  }
  Result FuncAttributes(uint64_t f, proto::FuncAttrs* o) override { return b_->FuncAttributes(f, o); }
  Result Occupancy(uint64_t f, int32_t b, uint64_t s, int32_t* n) override { return b_->Occupancy(f, b, s, n); }
  Result Launch(const proto::Launch& l, uint64_t* ns) override { return b_->Launch(l, ns); }
  Result StreamCreate(uint32_t d, uint64_t i, uint32_t f, int32_t p) override { return b_->StreamCreate(d, i, f, p); }
  Result StreamDestroy(uint64_t i) override { return b_->StreamDestroy(i); }
  Result StreamSync(uint32_t d, uint64_t i) override { return b_->StreamSync(d, i); }
  Result StreamQuery(uint32_t d, uint64_t i) override { return b_->StreamQuery(d, i); }
  Result StreamWaitEvent(uint32_t d, uint64_t s, uint64_t e) override { return b_->StreamWaitEvent(d, s, e); }
  Result EventCreate(uint32_t d, uint64_t i, uint32_t f) override { return b_->EventCreate(d, i, f); }
  Result EventRecord(uint32_t d, uint64_t e, uint64_t s) override { return b_->EventRecord(d, e, s); }
  Result EventSync(uint64_t e) override { return b_->EventSync(e); }
  Result EventQuery(uint64_t e) override { return b_->EventQuery(e); }
  Result EventElapsed(uint64_t s, uint64_t e, float* ms) override { return b_->EventElapsed(s, e, ms); }
  Result EventDestroy(uint64_t e) override { return b_->EventDestroy(e); }
  Result DeviceSync(uint32_t d) override { return b_->DeviceSync(d); }

 private:
  struct Slot {
    bool busy = false;
    uint64_t src = 0, stream = 0;
    std::vector<std::byte> buf;
  };
  std::unique_ptr<Backend> b_;
  Slot slots_[2];
};

class StagedReadsTest : public SessionTest {
 protected:
  std::unique_ptr<Backend> Wrap(std::unique_ptr<Backend> b) override {
    auto w = std::make_unique<StagedReads>(std::move(b));
    staged_ = w.get();
    return w;
  }
  StagedReads* staged_ = nullptr;
};

// A backend that does not implement cooperative launches (this decorator forwards Launch only)
// refuses LaunchCooperative loudly instead of running it as a plain launch.
TEST_F(StagedReadsTest, CooperativeLaunchIsRefusedByABackendWithoutIt) {
  LaunchCooperative c;
  c.func = 999;
  ReplyHead h = PostThenPing(c);
  EXPECT_EQ(h.async_error, kErrNotSupported) << h.async_message;
  EXPECT_NE(h.async_message.find("cannot launch cooperatively"), std::string::npos)
      << h.async_message;
}

TEST_F(StagedReadsTest, ARunOfReadsIsPipelinedThroughTwoSlots) {
  const size_t n = 64 << 10;
  uint64_t d = Malloc(4 * n);
  std::vector<std::byte> data = Pattern(4 * n, 4);
  MemsetThenChunk(d, 4 * n, 0, data);
  // Five reads in one message; the third runs past the allocation's end.
  BatchWriter w;
  const uint64_t src[5] = {d, d + n, d + 3 * n + 1, d + 2 * n, d + 3 * n};
  for (uint64_t s : src) {
    MemcpyD2H m{.src = s, .size = n};
    w.AddRequest(m);
  }
  staged_->log_.clear();
  ASSERT_TRUE(client_->Send(w.Finish()).ok());
  for (int k = 0; k < 5; ++k) {
    ReplyHead h;
    std::vector<std::byte> got;
    ReadReply(n, &h, &got);
    if (k == 2) {
      EXPECT_EQ(h.error, kErrInvalidValue) << "read " << k << ": " << h.message;
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(h.error, 0) << "read " << k << ": " << h.message;
    const size_t off = src[k] - d;
    ASSERT_EQ(got.size(), n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin() + off))
        << "read " << k << " came back with the wrong bytes";
  }
  // Each read starts before the previous one's reply is sent (its finish); the refused one (x)
  // takes the unpipelined path; no slot is started twice.
  EXPECT_EQ(staged_->log_, "s0 s1 f0 x f1 s1 s0 f1 f0 ");
  client_->Close();
  runner_.join();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  EXPECT_EQ(session_->stats().requests, 8u);  // malloc, memset, chunk, five reads
}

// A lease bounds its session: at the deadline the client gets SessionEnd naming why, the
// connection closes and Run returns PermissionDenied. The clock is a ManualClock, so the tests
// decide when the deadline passes; nothing depends on timing.
class SessionDeadlineTest : public SessionTest {
 protected:
  static constexpr int64_t kDeadline = int64_t{100} * 1000000000;
  void Prepare(Session& s) override {
    s.SetDeadline({.clock = &clock_,
                   .at_nanos = kDeadline,
                   .error = 800,
                   .why = "lease for GPU h:1/0 expired at T",
                   .max_sleep_ms = max_sleep_ms_});
  }
  // The next message must be the server's SessionEnd; then the connection closes.
  void ExpectSessionEnd() {
    ASSERT_TRUE(client_->Recv(&in_).ok());
    auto frames = ParseMessage(in_);
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    ASSERT_EQ(frames->size(), 1u);
    ASSERT_EQ((*frames)[0].op, static_cast<uint16_t>(Op::kSessionEnd) | kReply);
    ReplyHead h;
    SessionEnd body;
    ASSERT_TRUE(DecodeReply((*frames)[0], &h, &body).ok());
    EXPECT_EQ(h.error, 800);
    EXPECT_EQ(h.message, "lease for GPU h:1/0 expired at T");
    Status closed = client_->Recv(&in_);
    EXPECT_EQ(closed.code(), StatusCode::kUnavailable) << closed.ToString();
    runner_.join();
    EXPECT_EQ(run_status_.code(), StatusCode::kPermissionDenied) << run_status_.ToString();
    EXPECT_NE(run_status_.message().find("expired at T"), std::string::npos) << run_status_.ToString();
  }
  ManualClock clock_{kDeadline - 1000000000};
  int max_sleep_ms_ = 600000;  // the watchdog never looks again by itself: requests must check
};

TEST_F(SessionDeadlineTest, ARequestAfterTheDeadlineGetsSessionEndNotItsReply) {
  EXPECT_NE(Malloc(4096), 0u);  // before: served
  clock_.SetNanos(kDeadline);
  BatchWriter w;
  proto::Malloc m{.size = 4096};
  w.AddRequest(m);
  ASSERT_TRUE(client_->Send(w.Finish()).ok());
  ExpectSessionEnd();
}

class IdleSessionDeadlineTest : public SessionDeadlineTest {
 protected:
  void SetUp() override {
    max_sleep_ms_ = 5;  // the watchdog re-reads the ManualClock often
    SessionDeadlineTest::SetUp();
  }
};

TEST_F(IdleSessionDeadlineTest, AnIdleSessionEndsAtTheDeadline) {
  EXPECT_NE(Malloc(4096), 0u);
  clock_.SetNanos(kDeadline + 1);
  // No request: the watchdog alone ends it.
  ExpectSessionEnd();
}

}  // namespace
}  // namespace gpool::remote::server
