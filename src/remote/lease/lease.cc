#include "remote/lease/lease.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/units.h"

namespace gpool::remote {
namespace {

constexpr std::string_view kPrefix = "gpl1.";
constexpr int kPayloadVersion = 1;

Status Refuse(std::string_view why) {
  return Status::PermissionDenied(fmt::format("lease refused: {}", why));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string FormatLeaseTime(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", tm);
}

int64_t UnixClock::NowNanos() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

UnixClock* UnixClock::Default() {
  static UnixClock clock;
  return &clock;
}

Status ValidateGpuAddress(std::string_view gpu) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("bad GPU address '{}': {} (want HOST:PORT/INDEX)", gpu, why));
  };
  size_t slash = gpu.rfind('/');
  if (slash == std::string_view::npos) return bad("no /INDEX");
  size_t colon = gpu.rfind(':', slash);
  if (colon == std::string_view::npos || colon == 0) return bad("no HOST:PORT");
  auto number = [](std::string_view s, unsigned lo, unsigned hi) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size() && v >= lo && v <= hi;
  };
  if (!number(gpu.substr(colon + 1, slash - colon - 1), 1, 65535)) return bad("port not 1..65535");
  if (!number(gpu.substr(slash + 1), 0, 1023)) return bad("index not 0..1023");
  return Status::Ok();
}

std::string Base64UrlEncode(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()),
                          static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

StatusOr<std::string> Base64UrlDecode(std::string_view text) {
  if (text.size() % 4 == 1) return Status::InvalidArgument("base64url: impossible length");
  std::string std_b64(text);
  for (char& c : std_b64) {
    if (c == '-') {
      c = '+';
    } else if (c == '_') {
      c = '/';
    } else if (!std::isalnum(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument(fmt::format("base64url: bad character '{}'", c));
    }
  }
  size_t pad = (4 - std_b64.size() % 4) % 4;
  std_b64.append(pad, '=');
  std::string out(std_b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(std_b64.data()),
                          static_cast<int>(std_b64.size()));
  if (n < 0) return Status::InvalidArgument("base64url: undecodable");
  out.resize(static_cast<size_t>(n) - pad);  // EVP_DecodeBlock counts the padding as zeros
  // Only the canonical encoding is accepted: otherwise the unused low bits of the last character
  // let several distinct token strings carry the same signature (a malleable token).
  if (Base64UrlEncode(out) != text) return Status::InvalidArgument("base64url: non-canonical encoding");
  return out;
}

StatusOr<std::string> LoadLeaseKey(const std::string& path) {
  GPOOL_ASSIGN_OR_RETURN(std::string content, ReadFile(path));
  std::string_view trimmed = Trim(content);
  bool hex = !trimmed.empty() && trimmed.size() % 2 == 0 &&
             std::all_of(trimmed.begin(), trimmed.end(), [](char c) { return HexValue(c) >= 0; });
  std::string key;
  if (hex) {
    for (size_t i = 0; i < trimmed.size(); i += 2) {
      key.push_back(static_cast<char>(HexValue(trimmed[i]) * 16 + HexValue(trimmed[i + 1])));
    }
  } else {
    key = std::move(content);
  }
  if (key.size() < kMinLeaseKeyBytes) {
    return Status::InvalidArgument(fmt::format("{}: lease key has {} bytes{}, need at least {}",
                                               path, key.size(), hex ? " (hex)" : "",
                                               kMinLeaseKeyBytes));
  }
  return key;
}

StatusOr<LeaseAuthority> LeaseAuthority::Create(std::string key) {
  if (key.size() < kMinLeaseKeyBytes) {
    return Status::InvalidArgument(
        fmt::format("lease key has {} bytes, need at least {}", key.size(), kMinLeaseKeyBytes));
  }
  return LeaseAuthority(std::move(key));
}

std::string LeaseAuthority::Sign(std::string_view data) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

StatusOr<std::string> LeaseAuthority::Issue(const LeaseRequest& r, const Clock& clock) const {
  GPOOL_RETURN_IF_ERROR(ValidateGpuAddress(r.gpu));
  if (r.compute_milli < 1 || r.compute_milli > kMilliPerGpu) {
    return Status::InvalidArgument(
        fmt::format("compute share {} milli-GPU outside 1..1000", r.compute_milli));
  }
  if (!(r.ttl_seconds >= 1) || r.ttl_seconds > 366.0 * 86400) {
    return Status::InvalidArgument(fmt::format("lease ttl {} s outside 1 s..366 d", r.ttl_seconds));
  }
  int64_t now = clock.NowNanos() / 1000000000;
  nlohmann::json j = {{"v", kPayloadVersion},
                      {"gpu", r.gpu},
                      {"mem", r.memory_bytes},
                      {"milli", r.compute_milli},
                      {"tenant", r.tenant},
                      {"job", r.job},
                      {"iat", now},
                      {"exp", now + static_cast<int64_t>(std::ceil(r.ttl_seconds))}};
  std::string signed_part = std::string(kPrefix) + Base64UrlEncode(j.dump());
  return signed_part + "." + Base64UrlEncode(Sign(signed_part));
}

StatusOr<Lease> LeaseAuthority::Verify(std::string_view token, std::string_view expected_gpu,
                                       const Clock& clock) const {
  token = Trim(token);
  if (!token.starts_with(kPrefix)) return Refuse("malformed token (no gpl1. prefix)");
  size_t dot = token.rfind('.');
  if (dot < kPrefix.size()) return Refuse("malformed token (no signature)");
  std::string_view signed_part = token.substr(0, dot);
  StatusOr<std::string> sig = Base64UrlDecode(token.substr(dot + 1));
  if (!sig.ok()) return Refuse("malformed token (signature: " + sig.status().message() + ")");
  std::string want = Sign(signed_part);
  if (sig->size() != want.size() || CRYPTO_memcmp(sig->data(), want.data(), want.size()) != 0) {
    return Refuse("bad signature");
  }
  StatusOr<std::string> payload = Base64UrlDecode(signed_part.substr(kPrefix.size()));
  if (!payload.ok()) return Refuse("malformed token (payload: " + payload.status().message() + ")");
  Lease lease;
  try {
    nlohmann::json j = nlohmann::json::parse(*payload);
    if (j.at("v").get<int>() != kPayloadVersion) {
      return Refuse(fmt::format("unknown payload version {}", j.at("v").dump()));
    }
    lease.gpu = j.at("gpu").get<std::string>();
    lease.memory_bytes = j.at("mem").get<uint64_t>();
    lease.compute_milli = j.at("milli").get<int32_t>();
    lease.tenant = j.at("tenant").get<std::string>();
    lease.job = j.at("job").get<std::string>();
    lease.issued_at = j.at("iat").get<int64_t>();
    lease.expires_at = j.at("exp").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    // Signed by our key yet unreadable: a newer issuer, or a bug. Refuse either way.
    return Refuse(fmt::format("malformed payload ({})", e.what()));
  }
  int64_t now_ns = clock.NowNanos();
  if (now_ns >= lease.expires_at * int64_t{1000000000}) {
    return Refuse(fmt::format("expired at {} ({}), now {}", FormatLeaseTime(lease.expires_at),
                              lease.expires_at, FormatLeaseTime(now_ns / 1000000000)));
  }
  if (lease.gpu != expected_gpu) {
    return Refuse(fmt::format("wrong GPU: lease is for {}, this is {}", lease.gpu, expected_gpu));
  }
  return lease;
}

}  // namespace gpool::remote
