#include "remote/lease/lease.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace gpool::remote {
namespace {

constexpr int64_t kNow = 1790000000;  // 2026-09-21, Unix seconds
const std::string kKey(32, 'k');

LeaseRequest Request() {
  return {.gpu = "gpu-3:7000/1", .memory_bytes = 8ull << 30, .compute_milli = 500,
          .tenant = "vision", .job = "job-42", .ttl_seconds = 3600};
}

class LeaseTest : public testing::Test {
 protected:
  ManualClock clock_{kNow * 1000000000};
  LeaseAuthority authority_ = *LeaseAuthority::Create(kKey);
};

TEST_F(LeaseTest, IssuedLeaseVerifiesWithItsFields) {
  auto token = authority_.Issue(Request(), clock_);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_TRUE(token->starts_with("gpl1."));
  EXPECT_EQ(token->find_first_of("+/= \n"), std::string::npos) << *token;  // URL-safe, compact
  clock_.AdvanceSeconds(3599);
  auto lease = authority_.Verify(*token, "gpu-3:7000/1", clock_);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->gpu, "gpu-3:7000/1");
  EXPECT_EQ(lease->memory_bytes, 8ull << 30);
  EXPECT_EQ(lease->compute_milli, 500);
  EXPECT_EQ(lease->tenant, "vision");
  EXPECT_EQ(lease->job, "job-42");
  EXPECT_EQ(lease->issued_at, kNow);
  EXPECT_EQ(lease->expires_at, kNow + 3600);
}

TEST_F(LeaseTest, ExpiredLeaseIsRefusedNamingTheTime) {
  auto token = authority_.Issue(Request(), clock_);
  ASSERT_TRUE(token.ok());
  clock_.AdvanceSeconds(3600);
  auto lease = authority_.Verify(*token, "gpu-3:7000/1", clock_);
  EXPECT_EQ(lease.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(lease.status().message().find("expired at 2026-09-21T"), std::string::npos)
      << lease.status().message();
  EXPECT_NE(lease.status().message().find(std::to_string(kNow + 3600)), std::string::npos);
}

TEST_F(LeaseTest, WrongGpuIsRefused) {
  auto token = authority_.Issue(Request(), clock_);
  ASSERT_TRUE(token.ok());
  auto lease = authority_.Verify(*token, "gpu-3:7000/0", clock_);
  EXPECT_EQ(lease.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(lease.status().message().find("wrong GPU: lease is for gpu-3:7000/1, this is gpu-3:7000/0"),
            std::string::npos)
      << lease.status().message();
}

TEST_F(LeaseTest, TamperedOrForeignTokensFailTheSignature) {
  auto token = authority_.Issue(Request(), clock_);
  ASSERT_TRUE(token.ok());
  auto expect_bad_signature = [&](const std::string& t, const LeaseAuthority& a) {
    auto lease = a.Verify(t, "gpu-3:7000/1", clock_);
    EXPECT_EQ(lease.status().code(), StatusCode::kPermissionDenied) << t;
    EXPECT_NE(lease.status().message().find("bad signature"), std::string::npos)
        << lease.status().message();
  };
  // Another key.
  expect_bad_signature(*token, *LeaseAuthority::Create(std::string(32, 'x')));
  // A flipped signature character.
  std::string t = *token;
  t.back() = t.back() == 'A' ? 'B' : 'A';
  expect_bad_signature(t, authority_);
  // A payload rewritten to another GPU and a longer expiry, keeping the old signature.
  size_t dot = token->rfind('.');
  std::string payload = *Base64UrlDecode(token->substr(5, dot - 5));
  size_t at = payload.find("7000/1");
  ASSERT_NE(at, std::string::npos);
  payload.replace(at, 6, "7000/0");
  expect_bad_signature("gpl1." + Base64UrlEncode(payload) + token->substr(dot), authority_);
}

TEST_F(LeaseTest, MalformedTokensAreRefusedNotCrashed) {
  for (std::string bad : {"", "gpl1", "gpl1.", "gpl2.abc.def", "gpl1.abc", "gpl1.a$b.c",
                          "gpl1.abc.!!!!", "gpl1..", "gpl1.abcde.abcde"}) {
    auto lease = authority_.Verify(bad, "gpu-3:7000/1", clock_);
    EXPECT_EQ(lease.status().code(), StatusCode::kPermissionDenied) << bad;
  }
  // Correctly signed but unreadable payloads pass the signature and are still refused.
  for (std::string payload : {"{\"v\":1}", "not json", "{\"v\":2,\"gpu\":\"a:1/0\"}"}) {
    std::string signed_part = "gpl1." + Base64UrlEncode(payload);
    unsigned char mac[32];
    unsigned int len = 0;
    HMAC(EVP_sha256(), kKey.data(), static_cast<int>(kKey.size()),
         reinterpret_cast<const unsigned char*>(signed_part.data()), signed_part.size(), mac, &len);
    std::string token =
        signed_part + "." + Base64UrlEncode(std::string(reinterpret_cast<char*>(mac), len));
    auto lease = authority_.Verify(token, "gpu-3:7000/1", clock_);
    EXPECT_EQ(lease.status().code(), StatusCode::kPermissionDenied) << payload;
    EXPECT_EQ(lease.status().message().find("bad signature"), std::string::npos)
        << lease.status().message();
  }
}

TEST_F(LeaseTest, IssueValidatesItsRequest) {
  LeaseRequest r = Request();
  r.gpu = "gpu-3:7000";
  EXPECT_EQ(authority_.Issue(r, clock_).status().code(), StatusCode::kInvalidArgument);
  r = Request();
  r.compute_milli = 0;
  EXPECT_EQ(authority_.Issue(r, clock_).status().code(), StatusCode::kInvalidArgument);
  r.compute_milli = 1001;
  EXPECT_EQ(authority_.Issue(r, clock_).status().code(), StatusCode::kInvalidArgument);
  r = Request();
  r.ttl_seconds = 0;
  EXPECT_EQ(authority_.Issue(r, clock_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LeaseAuthority::Create(std::string(31, 'k')).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(GpuAddressTest, AcceptsHostPortIndexOnly) {
  for (const char* good : {"gpu-3:7000/1", "10.0.0.7:1/0", "[::1]:5000/1023"}) {
    EXPECT_TRUE(ValidateGpuAddress(good).ok()) << good;
  }
  for (const char* bad : {"", "host", "host:7000", "host:7000/", ":7000/1", "host:0/1",
                          "host:70000/1", "host:7000/1024", "host:7000/x", "host:/1"}) {
    Status s = ValidateGpuAddress(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Base64UrlTest, RoundTripsAndUsesTheUrlAlphabet) {
  EXPECT_EQ(Base64UrlEncode("hello?>"), "aGVsbG8_Pg");  // standard: aGVsbG8/Pg==
  EXPECT_EQ(*Base64UrlDecode("aGVsbG8_Pg"), "hello?>");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n = 0; n <= all.size(); n += 7) {
    std::string s = all.substr(0, n);
    auto back = Base64UrlDecode(Base64UrlEncode(s));
    ASSERT_TRUE(back.ok()) << n;
    EXPECT_EQ(*back, s) << n;
  }
  EXPECT_FALSE(Base64UrlDecode("abcde").ok());
  EXPECT_FALSE(Base64UrlDecode("ab+c").ok());
  // "aGVsbG8_Pg" ends in 'g' (100000): its low 4 bits are unused. 'h' sets one of them; a lenient
  // decoder would give the same bytes, so two token strings would share one signature.
  ASSERT_TRUE(Base64UrlDecode("aGVsbG8_Pg").ok());
  auto lenient = Base64UrlDecode("aGVsbG8_Ph");
  ASSERT_FALSE(lenient.ok());
  EXPECT_NE(lenient.status().message().find("non-canonical"), std::string::npos);
}

class KeyFileTest : public testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    std::filesystem::path p = std::filesystem::temp_directory_path() /
                              ("gpool_lease_" + std::to_string(getpid()) + "_" + name);
    std::ofstream(p, std::ios::binary) << content;
    paths_.push_back(p);
    return p.string();
  }
  void TearDown() override {
    for (auto& p : paths_) std::filesystem::remove(p);
  }
  std::vector<std::filesystem::path> paths_;
};

TEST_F(KeyFileTest, HexAndRawKeysLoad) {
  auto hex = LoadLeaseKey(Write("hex", std::string(64, 'a') + "\n"));
  ASSERT_TRUE(hex.ok()) << hex.status().ToString();
  EXPECT_EQ(*hex, std::string(32, '\xaa'));
  std::string raw(40, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 37 + 200);
  auto loaded = LoadLeaseKey(Write("raw", raw));
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded, raw);
}

TEST_F(KeyFileTest, ShortKeysAreRefusedWithThePath) {
  std::string path = Write("short", std::string(62, 'a'));  // 31 bytes as hex
  auto key = LoadLeaseKey(path);
  EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(key.status().message().find(path), std::string::npos);
  EXPECT_NE(key.status().message().find("31 bytes (hex)"), std::string::npos) << key.status().message();
  EXPECT_FALSE(LoadLeaseKey("/nonexistent/gpool.key").ok());
}

}  // namespace
}  // namespace gpool::remote
