#include "remote/protocol/messages.h"

#include <gtest/gtest.h>

#include <cstring>

namespace gpool::remote::proto {
namespace {

std::vector<std::byte> Copy(wire::ByteSpan s) { return {s.begin(), s.end()}; }

TEST(Protocol, BatchRoundTripsFrames) {
  BatchWriter w;
  Malloc m{.device = 2, .size = 12345};
  w.AddRequest(m);
  std::vector<std::byte> params(24, std::byte{7});
  Launch l{.func = 9, .grid = {1, 2, 3}, .block = {4, 5, 6}, .shmem = 7, .stream = 11,
           .params = params};
  w.AddRequest(l);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  Malloc m2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &m2).ok());
  EXPECT_EQ(m2.device, 2u);
  EXPECT_EQ(m2.size, 12345u);
  Launch l2;
  ASSERT_TRUE(DecodeBody((*frames)[1], &l2).ok());
  EXPECT_EQ(l2.grid[2], 3u);
  EXPECT_EQ(l2.block[0], 4u);
  EXPECT_EQ(l2.stream, 11u);
  ASSERT_EQ(l2.params.size(), 24u);
  EXPECT_EQ(l2.params[23], std::byte{7});
}

// Version 2's device configuration ops, request and reply; a version 1 peer is refused by
// number (the ops would be unknown to it).
TEST(Wire, BufferGrowsKeepingItsBytesAndReusesItsRoomAfterClear) {
  wire::Buffer b;
  wire::Writer w(&b);
  // Past several doublings, in odd-sized pieces: every byte written must come back.
  for (uint32_t i = 0; i < 5000; ++i) {
    w.Put<uint32_t>(i);
    w.PutString(i % 7 == 0 ? "seven" : "");
  }
  wire::Reader r(b);
  std::string text;
  for (uint32_t i = 0; i < 5000; ++i) {
    ASSERT_EQ(r.Get<uint32_t>("i"), i);
    r.GetStringInto(&text, "s");
    ASSERT_EQ(text, i % 7 == 0 ? "seven" : "");
  }
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.remaining(), 0u);
  const std::byte* room = b.data();
  const size_t size = b.size();
  b.clear();
  EXPECT_TRUE(b.empty());
  for (uint32_t i = 0; i < size / 4; ++i) w.Put<uint32_t>(~i);
  EXPECT_EQ(b.data(), room);  // no new allocation for what fitted before
  EXPECT_EQ(b.size(), size / 4 * 4);
  uint32_t last;
  std::memcpy(&last, b.data() + b.size() - 4, 4);
  EXPECT_EQ(last, ~static_cast<uint32_t>(size / 4 - 1));
  // A moved-from buffer is empty and still usable.
  wire::Buffer moved = std::move(b);
  EXPECT_EQ(moved.data(), room);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): what a move leaves is the point
  wire::Writer again(&b);
  again.Put<uint64_t>(42);
  EXPECT_EQ(b.size(), 8u);
}

// Malloc, Free{77}, Malloc: a message of three requests.
std::vector<std::byte> ThreeRequests() {
  BatchWriter w;
  Malloc m{.device = 1, .size = 10};
  Free f{.ptr = 77};
  w.AddRequest(m);
  w.AddRequest(f);
  w.AddRequest(m);
  return Copy(w.Finish());
}

TEST(Protocol, ParsingIntoAReusedVectorReplacesItsFrames) {
  auto three = ThreeRequests();
  BatchWriter w;
  Free f{.ptr = 77};
  w.AddRequest(f);
  auto one = Copy(w.Finish());
  std::vector<Frame> frames;
  ASSERT_TRUE(ParseMessage(three, &frames).ok());
  ASSERT_EQ(frames.size(), 3u);
  ASSERT_TRUE(ParseMessage(one, &frames).ok());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].op, static_cast<uint16_t>(Op::kFree));
  Free got;
  ASSERT_TRUE(DecodeBody(frames[0], &got).ok());
  EXPECT_EQ(got.ptr, 77u);
  // A bad message fails the same way into a reused vector, and leaves none of the old frames.
  auto bad = three;
  bad[8] = std::byte{0xff};  // the first frame's op
  bad[9] = std::byte{0xff};
  Status s = ParseMessage(bad, &frames);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown op"), std::string::npos) << s.message();
  EXPECT_TRUE(frames.empty());
  // Reserved flags and a length past the end are refused too, each named.
  auto flagged = one;
  flagged[10] = std::byte{1};
  s = ParseMessage(flagged, &frames);
  EXPECT_NE(s.message().find("reserved flags"), std::string::npos) << s.message();
  auto overlong = one;
  overlong[12] = std::byte{0xff};
  s = ParseMessage(overlong, &frames);
  EXPECT_NE(s.message().find("exceeds"), std::string::npos) << s.message();
  // A detached tail: the last frame's payload stops short of its length by that much.
  ASSERT_TRUE(ParseMessage(wire::ByteSpan(one).first(one.size() - 3), &frames, 3).ok());
  EXPECT_EQ(frames[0].payload.size(), 5u);
  EXPECT_EQ(frames[0].detached, 3u);
  EXPECT_FALSE(ParseMessage(wire::ByteSpan(one).first(one.size() - 3), &frames, 9).ok());
}

// ParseMessage's fast parse takes exactly the messages its checked parse takes, with the same
// frames, and what it refuses gets the checked parse's error: every kind of damage, at every
// byte, of a three-frame message (and with detached tails of several lengths).
TEST(Protocol, FastAndCheckedParsesAgreeOnEveryDamagedByte) {
  const auto good = ThreeRequests();
  int refused = 0;
  auto agree = [&](wire::ByteSpan msg, size_t detached, const std::string& what) {
    std::vector<Frame> fast, checked;
    Status fs = ParseMessage(msg, &fast, detached);
    Status cs = ParseMessageChecked(msg, &checked, detached);
    ASSERT_EQ(fs, cs) << what;
    if (!fs.ok()) ++refused;
    ASSERT_EQ(fast.size(), checked.size()) << what;
    for (size_t i = 0; i < fast.size(); ++i) {
      EXPECT_EQ(fast[i].op, checked[i].op) << what;
      EXPECT_EQ(fast[i].payload.data(), checked[i].payload.data()) << what;
      EXPECT_EQ(fast[i].payload.size(), checked[i].payload.size()) << what;
      EXPECT_EQ(fast[i].detached, checked[i].detached) << what;
    }
  };
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t v : {0x00, 0x01, 0x7f, 0xff}) {
      auto bad = good;
      bad[at] = std::byte{v};
      agree(bad, 0, "byte " + std::to_string(at) + " = " + std::to_string(v));
    }
  }
  for (size_t n = 0; n <= good.size(); ++n) {
    agree(wire::ByteSpan(good).first(n), 0, "first " + std::to_string(n) + " bytes");
    for (size_t detached : {1, 3, 8, 9, 100}) {
      agree(wire::ByteSpan(good).first(n), detached,
            "first " + std::to_string(n) + " bytes, " + std::to_string(detached) + " detached");
    }
  }
  // The damage was seen: most of those are refused (not a test that passes by taking all).
  EXPECT_GT(refused, 100);
}

// AddReply writes a reply's head in one append; its bytes are those ReplyHead::Visit with an
// EncodeVisitor writes (the wire format), texts clamped alike.
TEST(Protocol, ReplyHeadBytesAreThoseItsVisitEncodes) {
  const std::string long_text(kMaxReplyTextBytes + 100, 'x');
  const std::vector<ReplyHead> heads = {
      ReplyHead{},
      ReplyHead{.error = 3, .message = "bad pointer"},
      ReplyHead{.error = 0, .async_error = 719, .async_message = "kernel k failed"},
      ReplyHead{.error = 1, .message = "m", .async_error = 2, .async_message = "a"},
      ReplyHead{.error = 2, .message = long_text, .async_error = 4, .async_message = long_text},
  };
  for (const ReplyHead& h : heads) {
    BatchWriter w;
    ReplyHead sent = h;
    IntValue body{.value = 42};
    w.AddReply(static_cast<uint16_t>(Op::kGetAttribute), sent, body);
    const auto message = Copy(w.Finish());
    auto frames = ParseMessage(message);
    ASSERT_TRUE(frames.ok()) << frames.status().ToString();
    // The expected bytes: the clamped head (AddReply clamped `sent`), then the body, visited.
    wire::Buffer want;
    wire::Writer ww(&want);
    EncodeVisitor v{&ww};
    ReplyHead expect = sent;
    expect.Visit(v);
    body.Visit(v);
    wire::ByteSpan got = (*frames)[0].payload;
    ASSERT_EQ(got.size(), want.size()) << h.message.size();
    EXPECT_EQ(std::memcmp(got.data(), wire::ByteSpan(want).data(), got.size()), 0);
    // And it decodes back.
    ReplyHead back;
    IntValue bv;
    ASSERT_TRUE(DecodeReply((*frames)[0], &back, &bv).ok());
    EXPECT_EQ(back.error, h.error);
    EXPECT_EQ(back.async_error, h.async_error);
    EXPECT_EQ(back.message, sent.message);
    EXPECT_EQ(back.async_message, sent.async_message);
    EXPECT_LE(back.message.size(), kMaxReplyTextBytes);
    EXPECT_EQ(bv.value, 42);
  }
}

TEST(Wire, StringsDecodeIntoReusedStrings) {
  BatchWriter w;
  ReplyHead h{.error = 2, .message = "first failure"};
  Empty e;
  w.AddReply(static_cast<uint16_t>(Op::kPing), h, e);
  auto with_text = Copy(w.Finish());
  w.Reset();
  ReplyHead quiet;
  w.AddReply(static_cast<uint16_t>(Op::kPing), quiet, e);
  auto without = Copy(w.Finish());
  ReplyHead got;
  auto f1 = ParseMessage(with_text);
  ASSERT_TRUE(f1.ok());
  ASSERT_TRUE(DecodeReply((*f1)[0], &got, &e).ok());
  EXPECT_EQ(got.message, "first failure");
  // Decoding a reply without text into the same head leaves no old text behind.
  auto f2 = ParseMessage(without);
  ASSERT_TRUE(f2.ok());
  ASSERT_TRUE(DecodeReply((*f2)[0], &got, &e).ok());
  EXPECT_EQ(got.error, 0);
  EXPECT_EQ(got.message, "");
}

TEST(Protocol, DeviceConfigOpsRoundTrip) {
  BatchWriter w;
  DeviceSetLimit set{.device = 1, .limit = 2, .value = uint64_t{64} << 20};
  w.AddRequest(set);
  SetDeviceFlags flags{.device = 1, .flags = 4};
  w.AddRequest(flags);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_STREQ(OpName((*frames)[0].op), "DeviceSetLimit");
  DeviceSetLimit set2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &set2).ok());
  EXPECT_EQ(set2.device, 1u);
  EXPECT_EQ(set2.limit, 2);
  EXPECT_EQ(set2.value, uint64_t{64} << 20);
  SetDeviceFlags flags2;
  ASSERT_TRUE(DecodeBody((*frames)[1], &flags2).ok());
  EXPECT_EQ(flags2.flags, 4u);

  BatchWriter r;
  ReplyHead h;
  U64Value v{.value = 8u << 20};
  r.AddReply(static_cast<uint16_t>(Op::kDeviceGetLimit), h, v);
  auto reply = Copy(r.Finish());
  auto rf = ParseMessage(reply);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  ReplyHead h2;
  U64Value v2;
  ASSERT_TRUE(DecodeReply((*rf)[0], &h2, &v2).ok());
  EXPECT_EQ(v2.value, 8u << 20);

  auto v1 = msg;
  v1[4] = std::byte{1};
  EXPECT_NE(ParseMessage(v1).status().message().find("protocol version 1 not supported"),
            std::string::npos);
}

// Version 3's posted 2-D ops: Memcpy2DAsync (the Memcpy2D body under an op with no reply) and
// Memset2D; a version 2 peer is refused by number.
TEST(Protocol, Version3TwoDimensionalOpsRoundTripAndArePosted) {
  BatchWriter w;
  std::vector<std::byte> rows(6, std::byte{5});
  Memcpy2DAsync c;
  c.kind = static_cast<uint8_t>(CopyKind::kHostToDevice);
  c.dst = 0x1000;
  c.dpitch = 512;
  c.width = 3;
  c.height = 2;
  c.stream = 7;
  c.data = rows;
  w.AddRequest(c);
  Memset2D m{.dst = 0x2000, .pitch = 256, .value = 0xab, .width = 100, .height = 4096, .stream = 9};
  w.AddRequest(m);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_STREQ(OpName((*frames)[0].op), "Memcpy2DAsync");
  EXPECT_STREQ(OpName((*frames)[1].op), "Memset2D");
  EXPECT_TRUE(GetOpInfo((*frames)[0].op)->async);
  EXPECT_TRUE(GetOpInfo((*frames)[1].op)->async);
  EXPECT_FALSE(GetOpInfo(static_cast<uint16_t>(Op::kMemcpy2D))->async);
  Memcpy2DAsync c2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &c2).ok());
  EXPECT_EQ(c2.dpitch, 512u);
  EXPECT_EQ(c2.height, 2u);
  EXPECT_EQ(c2.stream, 7u);
  ASSERT_EQ(c2.data.size(), 6u);
  Memset2D m2;
  ASSERT_TRUE(DecodeBody((*frames)[1], &m2).ok());
  EXPECT_EQ(m2.pitch, 256u);
  EXPECT_EQ(m2.value, 0xabu);
  EXPECT_EQ(m2.width, 100u);
  EXPECT_EQ(m2.height, 4096u);
  EXPECT_EQ(m2.stream, 9u);
  // A truncated Memset2D names its op and field.
  Frame cut = (*frames)[1];
  cut.payload = cut.payload.subspan(0, 20);
  Status st = DecodeBody(cut, &m2);
  EXPECT_NE(st.message().find("Memset2D"), std::string::npos) << st.ToString();

  auto v2 = msg;
  v2[4] = std::byte{2};
  EXPECT_NE(ParseMessage(v2).status().message().find("protocol version 2 not supported"),
            std::string::npos);
}

// Version 5's LaunchCooperative: a Launch body under its own op, posted like Launch; a version 4
// peer is refused by number.
TEST(Protocol, Version5CooperativeLaunchRoundTripsAndIsPosted) {
  BatchWriter w;
  std::vector<std::byte> params(12, std::byte{3});
  LaunchCooperative c;
  c.func = 5;
  c.grid = {4, 1, 1};
  c.block = {128, 1, 1};
  c.stream = 8;
  c.params = params;
  w.AddRequest(c);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 1u);
  EXPECT_EQ((*frames)[0].op, static_cast<uint16_t>(Op::kLaunchCooperative));
  EXPECT_STREQ(OpName((*frames)[0].op), "LaunchCooperative");
  EXPECT_TRUE(GetOpInfo((*frames)[0].op)->async);
  Launch l;  // the session decodes it as a Launch
  ASSERT_TRUE(DecodeBody((*frames)[0], &l).ok());
  EXPECT_EQ(l.func, 5u);
  EXPECT_EQ(l.grid[0], 4u);
  EXPECT_EQ(l.block[0], 128u);
  EXPECT_EQ(l.stream, 8u);
  ASSERT_EQ(l.params.size(), 12u);
  auto v4 = msg;
  v4[4] = std::byte{4};
  EXPECT_NE(ParseMessage(v4).status().message().find("protocol version 4 not supported"),
            std::string::npos);
}

// Version 6's GetModuleInfo: a synchronous request, for one server-local device (a module's
// variables exist once per device), whose reply lists every function (its layout or why there is
// none) and variable (its address on that device, or error) of a module. A version 5 peer is
// refused by number; every truncation of the reply and garbled counts fail to decode.
ModuleInfo SampleModuleInfo() {
  ModuleInfo m;
  m.functions.push_back({.func = 11, .params = {{0, 8}, {8, 4}}});
  m.functions.push_back({.func = 12, .error = 801, .message = "kernel k: no cuFuncGetParamInfo"});
  m.vars.push_back({.var = 21, .ptr = 0x7f0000001000, .size = 16});
  m.vars.push_back({.var = 22, .error = 13, .message = "symbol gB not found"});
  return m;
}

TEST(Protocol, Version6ModuleInfoRoundTrips) {
  BatchWriter w;
  GetModuleInfo q{.module = 42, .device = 3};
  w.AddRequest(q);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 1u);
  EXPECT_STREQ(OpName((*frames)[0].op), "GetModuleInfo");
  EXPECT_FALSE(GetOpInfo((*frames)[0].op)->async);
  GetModuleInfo q2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &q2).ok());
  EXPECT_EQ(q2.module, 42u);
  EXPECT_EQ(q2.device, 3u);
  // The device is part of the body: a request without it (as first drafted) is refused.
  GetModuleInfo short_q;
  Status cut = DecodeBody(Frame{(*frames)[0].op, (*frames)[0].payload.first(8)}, &short_q);
  EXPECT_NE(cut.message().find("device"), std::string::npos) << cut.ToString();
  auto v5 = msg;
  v5[4] = std::byte{5};
  EXPECT_NE(ParseMessage(v5).status().message().find("protocol version 5 not supported"),
            std::string::npos);

  BatchWriter r;
  ReplyHead head{.async_error = 719, .async_message = "kernel x failed"};
  ModuleInfo m = SampleModuleInfo();
  r.AddReply(static_cast<uint16_t>(Op::kGetModuleInfo), head, m);
  auto reply = Copy(r.Finish());
  auto rf = ParseMessage(reply);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  ReplyHead h;
  ModuleInfo got;
  ASSERT_TRUE(DecodeReply((*rf)[0], &h, &got).ok());
  EXPECT_EQ(h.async_error, 719);
  ASSERT_EQ(got.functions.size(), 2u);
  EXPECT_EQ(got.functions[0].func, 11u);
  EXPECT_EQ(got.functions[0].error, 0);
  ASSERT_EQ(got.functions[0].params.size(), 2u);
  EXPECT_EQ(got.functions[0].params[1].offset, 8u);
  EXPECT_EQ(got.functions[0].params[1].size, 4u);
  EXPECT_EQ(got.functions[1].error, 801);
  EXPECT_EQ(got.functions[1].message, "kernel k: no cuFuncGetParamInfo");
  EXPECT_TRUE(got.functions[1].params.empty());
  ASSERT_EQ(got.vars.size(), 2u);
  EXPECT_EQ(got.vars[0].ptr, 0x7f0000001000u);
  EXPECT_EQ(got.vars[0].size, 16u);
  EXPECT_EQ(got.vars[1].error, 13);
  EXPECT_EQ(got.vars[1].message, "symbol gB not found");
}

// Version 8: UnregisterModule (posted: no reply, ordered with the other posted ops) and
// DeviceReset (replied: it synchronizes) carry their module and device; a version 7 peer, whose
// server would keep unregistered modules and only synchronize at a reset, is refused by number.
TEST(Protocol, Version8UnregisterModuleIsPostedAndDeviceResetReplied) {
  EXPECT_GE(kVersion, 8);
  BatchWriter w;
  UnregisterModule u{.module = 42};
  DeviceReset d;
  d.device = 3;
  w.AddRequest(u);
  w.AddRequest(d);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 2u);
  EXPECT_STREQ(OpName((*frames)[0].op), "UnregisterModule");
  EXPECT_TRUE(GetOpInfo((*frames)[0].op)->async);
  EXPECT_STREQ(OpName((*frames)[1].op), "DeviceReset");
  EXPECT_FALSE(GetOpInfo((*frames)[1].op)->async);
  UnregisterModule u2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &u2).ok());
  EXPECT_EQ(u2.module, 42u);
  DeviceReset d2;
  ASSERT_TRUE(DecodeBody((*frames)[1], &d2).ok());
  EXPECT_EQ(d2.device, 3u);
  UnregisterModule cut;
  Status s = DecodeBody(Frame{(*frames)[0].op, (*frames)[0].payload.first(4)}, &cut);
  EXPECT_NE(s.message().find("module"), std::string::npos) << s.ToString();
  auto v7 = msg;
  v7[4] = std::byte{7};
  EXPECT_NE(ParseMessage(v7).status().message().find("protocol version 7 not supported"),
            std::string::npos);
}

// Version 9: virtual memory management. An allocator's sequence (reserve, create, map, set
// access, unmap, release, free) goes in one batch; every op is replied (its error belongs to its
// call), each field survives the trip, a body cut short names its op and field, and a version 8
// peer, whose server knows none of these ops, is refused by number.
TEST(Protocol, Version9VirtualMemoryOpsRoundTripAndAreReplied) {
  EXPECT_EQ(kVersion, 9);
  BatchWriter w;
  MemAddressReserve res{.device = 1, .size = uint64_t{1} << 30, .alignment = 2 << 20,
                        .hint = 0x7e0000000000};
  MemCreate cr{.device = 1, .size = 2 << 20};
  MemMap mp{.ptr = 0x7e0000200000, .size = 2 << 20, .offset = 0, .handle = 77};
  MemSetAccess ac{.ptr = 0x7e0000200000, .size = 4 << 20, .device = 1, .flags = 3};
  MemGranularity gr{.device = 1, .recommended = 1};
  MemUnmap um{.ptr = 0x7e0000200000, .size = 2 << 20};
  MemRelease rl{.handle = 77};
  MemAddressFree fr{.ptr = 0x7e0000000000, .size = uint64_t{1} << 30};
  w.AddRequest(res);
  w.AddRequest(cr);
  w.AddRequest(mp);
  w.AddRequest(ac);
  w.AddRequest(gr);
  w.AddRequest(um);
  w.AddRequest(rl);
  w.AddRequest(fr);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 8u);
  const char* names[] = {"MemAddressReserve", "MemCreate", "MemMap", "MemSetAccess",
                         "MemGranularity", "MemUnmap", "MemRelease", "MemAddressFree"};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_STREQ(OpName((*frames)[i].op), names[i]);
    EXPECT_FALSE(GetOpInfo((*frames)[i].op)->async) << names[i];
  }
  MemAddressReserve res2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &res2).ok());
  EXPECT_EQ(res2.device, 1u);
  EXPECT_EQ(res2.size, uint64_t{1} << 30);
  EXPECT_EQ(res2.alignment, 2u << 20);
  EXPECT_EQ(res2.hint, 0x7e0000000000u);
  MemCreate cr2;
  ASSERT_TRUE(DecodeBody((*frames)[1], &cr2).ok());
  EXPECT_EQ(cr2.device, 1u);
  EXPECT_EQ(cr2.size, 2u << 20);
  MemMap mp2;
  ASSERT_TRUE(DecodeBody((*frames)[2], &mp2).ok());
  EXPECT_EQ(mp2.ptr, 0x7e0000200000u);
  EXPECT_EQ(mp2.size, 2u << 20);
  EXPECT_EQ(mp2.offset, 0u);
  EXPECT_EQ(mp2.handle, 77u);
  MemSetAccess ac2;
  ASSERT_TRUE(DecodeBody((*frames)[3], &ac2).ok());
  EXPECT_EQ(ac2.size, 4u << 20);
  EXPECT_EQ(ac2.device, 1u);
  EXPECT_EQ(ac2.flags, 3u);
  MemGranularity gr2;
  ASSERT_TRUE(DecodeBody((*frames)[4], &gr2).ok());
  EXPECT_EQ(gr2.recommended, 1u);
  MemUnmap um2;
  ASSERT_TRUE(DecodeBody((*frames)[5], &um2).ok());
  EXPECT_EQ(um2.size, 2u << 20);
  MemRelease rl2;
  ASSERT_TRUE(DecodeBody((*frames)[6], &rl2).ok());
  EXPECT_EQ(rl2.handle, 77u);
  MemAddressFree fr2;
  ASSERT_TRUE(DecodeBody((*frames)[7], &fr2).ok());
  EXPECT_EQ(fr2.ptr, 0x7e0000000000u);
  // A map without its handle is refused, naming the op and the field.
  MemMap cut;
  Status s = DecodeBody(Frame{(*frames)[2].op, (*frames)[2].payload.first(24)}, &cut);
  EXPECT_NE(s.message().find("MemMap"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("handle"), std::string::npos) << s.ToString();
  auto v8 = msg;
  v8[4] = std::byte{8};
  EXPECT_NE(ParseMessage(v8).status().message().find("protocol version 8 not supported"),
            std::string::npos);
  // The reply to MemCreate carries the handle.
  BatchWriter r;
  ReplyHead head;
  U64Value handle{.value = 77};
  r.AddReply(static_cast<uint16_t>(Op::kMemCreate), head, handle);
  auto reply = Copy(r.Finish());
  auto rf = ParseMessage(reply);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  ReplyHead h;
  U64Value got;
  ASSERT_TRUE(DecodeReply((*rf)[0], &h, &got).ok());
  EXPECT_EQ(got.value, 77u);
}

// GetSymbol names the server-local device whose copy of the variable is wanted (protocol v6).
TEST(Protocol, Version6GetSymbolCarriesTheDevice) {
  BatchWriter w;
  GetSymbol q{.var = 9, .device = 1};
  w.AddRequest(q);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  GetSymbol got;
  ASSERT_TRUE(DecodeBody((*frames)[0], &got).ok());
  EXPECT_EQ(got.var, 9u);
  EXPECT_EQ(got.device, 1u);
  Status cut = DecodeBody(Frame{(*frames)[0].op, (*frames)[0].payload.first(8)}, &got);
  EXPECT_NE(cut.message().find("GetSymbol"), std::string::npos) << cut.ToString();
  EXPECT_NE(cut.message().find("device"), std::string::npos) << cut.ToString();
}

TEST(Protocol, Version6ModuleInfoRejectsTruncatedAndGarbledBodies) {
  wire::Buffer encoded;
  wire::Writer w(&encoded);
  EncodeVisitor ev{&w};
  ModuleInfo m = SampleModuleInfo();
  m.Visit(ev);
  const std::vector<std::byte> body(encoded.data(), encoded.data() + encoded.size());
  const uint16_t op = static_cast<uint16_t>(Op::kGetModuleInfo) | kReply;
  ModuleInfo ok;
  ASSERT_TRUE(DecodeBody(Frame{op, body}, &ok).ok());
  // Every cut short of the whole body fails, naming the op.
  for (size_t n = 0; n < body.size(); ++n) {
    ModuleInfo cut;
    Status s = DecodeBody(Frame{op, wire::ByteSpan(body).first(n)}, &cut);
    ASSERT_FALSE(s.ok()) << "a body cut to " << n << " of " << body.size() << " bytes decoded";
    EXPECT_NE(s.message().find("GetModuleInfo"), std::string::npos) << s.message();
  }
  auto trailing = body;
  trailing.push_back(std::byte{0});
  ModuleInfo t;
  EXPECT_FALSE(DecodeBody(Frame{op, trailing}, &t).ok());
  // A function count beyond the frame, and a parameter count inside the first function beyond it.
  auto huge = [&](size_t at, const char* field) {
    auto bad = body;
    const uint32_t n = 0x7fffffffu;
    std::memcpy(bad.data() + at, &n, sizeof n);
    ModuleInfo b;
    Status s = DecodeBody(Frame{op, bad}, &b);
    EXPECT_FALSE(s.ok()) << field;
    EXPECT_NE(s.message().find(std::string("count of '") + field + "' exceeds frame"),
              std::string::npos) << s.message();
  };
  huge(0, "functions");
  huge(4 + 8 + 4 + 4, "params");  // count, func, error, empty message's length
}

TEST(Protocol, TailBlobIsSentAsSeparatePart) {
  BatchWriter w;
  std::vector<std::byte> data(1000, std::byte{3});
  MemcpyH2D c{.dst = 0x1000, .stream = 5};
  w.AddRequestWithTail(c, data);
  auto head = Copy(w.Finish());
  std::vector<std::byte> whole = head;
  whole.insert(whole.end(), data.begin(), data.end());
  auto frames = ParseMessage(whole);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  MemcpyH2D c2;
  ASSERT_TRUE(DecodeBody((*frames)[0], &c2).ok());
  EXPECT_EQ(c2.dst, 0x1000u);
  EXPECT_EQ(c2.data.size(), 1000u);
  // Without the tail, the frame length points past the end: refused.
  EXPECT_FALSE(ParseMessage(head).ok());
}

// A reply whose blob the receiver took straight into its destination (Connection::RecvSplit):
// the message lacks the blob's bytes, ParseMessage is told how many, and the blob must end it.
TEST(Protocol, DetachedTailReplyDecodes) {
  BatchWriter w;
  std::vector<std::byte> data(5000, std::byte{9});
  ReplyHead h;
  Data d{.data = data};
  w.AddReplyWithTail(static_cast<uint16_t>(Op::kMemcpyD2H), h, d, data);
  auto head = Copy(w.Finish());
  auto frames = ParseMessage(head, data.size());
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ASSERT_EQ(frames->size(), 1u);
  EXPECT_EQ((*frames)[0].detached, data.size());
  ReplyHead h2;
  Data d2;
  ASSERT_TRUE(DecodeReplyDetached((*frames)[0], &h2, &d2).ok());
  EXPECT_EQ(h2.error, 0);
  EXPECT_TRUE(d2.data.empty());
  // A wrong detached length is refused: too long for the frame, or not the blob's length.
  EXPECT_FALSE(ParseMessage(head, data.size() + 1).ok());
  auto off = ParseMessage(head, data.size() - 1);
  ASSERT_FALSE(off.ok());
  std::vector<std::byte> longer = head;
  longer.push_back(std::byte{9});
  auto short_tail = ParseMessage(longer, data.size() - 1);
  ASSERT_TRUE(short_tail.ok());
  EXPECT_FALSE(DecodeReplyDetached((*short_tail)[0], &h2, &d2).ok());
}

TEST(Protocol, ReplyCarriesDeferredError) {
  BatchWriter w;
  ReplyHead h{.error = 0, .async_error = 719, .async_message = "kernel k failed"};
  Pointer p{.ptr = 0xdead};
  w.AddReply(static_cast<uint16_t>(Op::kMalloc), h, p);
  auto msg = Copy(w.Finish());
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok());
  EXPECT_EQ((*frames)[0].op, static_cast<uint16_t>(Op::kMalloc) | kReply);
  ReplyHead h2;
  Pointer p2;
  ASSERT_TRUE(DecodeReply((*frames)[0], &h2, &p2).ok());
  EXPECT_EQ(h2.async_error, 719);
  EXPECT_EQ(h2.async_message, "kernel k failed");
  EXPECT_EQ(p2.ptr, 0xdeadu);
}

// Version 7: a reply's texts are capped, so that a framed failure reply to a read is always
// shorter than kBareReplyMinBytes and the client can tell it from a bare reply by its size.
TEST(Protocol, Version7ReplyTextsAreCappedBelowABareReply) {
  BatchWriter w;
  const std::string long_text(3 * kMaxReplyTextBytes, 'x');
  ReplyHead h{.error = 1, .message = long_text, .async_error = 2, .async_message = long_text};
  Data none;
  w.AddReply(static_cast<uint16_t>(Op::kMemcpyD2H), h, none);
  auto msg = Copy(w.Finish());
  EXPECT_LT(msg.size(), kBareReplyMinBytes);
  auto frames = ParseMessage(msg);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  ReplyHead got;
  Data d;
  ASSERT_TRUE(DecodeReply((*frames)[0], &got, &d).ok());
  for (const std::string* t : {&got.message, &got.async_message}) {
    EXPECT_EQ(t->size(), kMaxReplyTextBytes);
    EXPECT_EQ(t->substr(0, 100), long_text.substr(0, 100));
    EXPECT_TRUE(t->ends_with("(cut)")) << t->substr(t->size() - 20);
  }
  ReplyHead short_text{.error = 1, .message = "bad"};
  BatchWriter w2;
  w2.AddReply(static_cast<uint16_t>(Op::kMemcpyD2H), short_text, none);
  EXPECT_EQ(short_text.message, "bad");
}

TEST(Protocol, RejectsMalformedMessages) {
  BatchWriter w;
  Free f{.ptr = 1};
  w.AddRequest(f);
  auto good = Copy(w.Finish());
  ASSERT_TRUE(ParseMessage(good).ok());

  auto bad_magic = good;
  bad_magic[0] = std::byte{0};
  EXPECT_NE(ParseMessage(bad_magic).status().message().find("magic"), std::string::npos);

  auto bad_version = good;
  bad_version[4] = std::byte{kVersion + 1};
  EXPECT_NE(ParseMessage(bad_version).status().message().find("version"), std::string::npos);

  auto bad_op = good;
  bad_op[8] = std::byte{0xee};
  EXPECT_NE(ParseMessage(bad_op).status().message().find("unknown op"), std::string::npos);

  auto truncated = good;
  truncated.pop_back();
  EXPECT_FALSE(ParseMessage(truncated).ok());

  auto trailing = good;
  trailing.push_back(std::byte{0});
  EXPECT_FALSE(ParseMessage(trailing).ok());

  // A body one byte short of its fields fails to decode, naming the op.
  Frame short_frame{static_cast<uint16_t>(Op::kFree), wire::ByteSpan(good).subspan(16, 7)};
  Free f2;
  Status s = DecodeBody(short_frame, &f2);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Free"), std::string::npos);
}

TEST(Protocol, RejectsHugeCountsAndStrings) {
  wire::Buffer buf;
  wire::Writer w(&buf);
  w.Put<uint32_t>(0xffffffffu);  // params count
  ParamInfo pi;
  wire::Reader r(buf);
  DecodeVisitor v{&r};
  pi.Visit(v);
  EXPECT_FALSE(r.ok());

  wire::Buffer s;
  wire::Writer ws(&s);
  ws.Put<uint64_t>(1);
  ws.Put<uint64_t>(2);
  ws.Put<uint32_t>(1u << 31);  // name length
  RegisterFunction rf;
  EXPECT_FALSE(DecodeBody(Frame{static_cast<uint16_t>(Op::kRegisterFunction), s}, &rf).ok());
}

TEST(Protocol, EveryOpHasAName) {
  for (uint16_t op = 1; op < static_cast<uint16_t>(Op::kMaxOp); ++op) {
    ASSERT_NE(GetOpInfo(op), nullptr);
    EXPECT_STRNE(OpName(op), "?");
  }
  EXPECT_EQ(GetOpInfo(0), nullptr);
  EXPECT_EQ(GetOpInfo(static_cast<uint16_t>(Op::kMaxOp)), nullptr);
  EXPECT_TRUE(GetOpInfo(static_cast<uint16_t>(Op::kLaunch))->async);
  EXPECT_FALSE(GetOpInfo(static_cast<uint16_t>(Op::kMalloc))->async);
}

}  // namespace
}  // namespace gpool::remote::proto
