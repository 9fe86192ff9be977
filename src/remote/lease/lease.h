// Leases: the session tokens without which no one runs code on a GPU server.
//
// A lease names one GPU (HOST:PORT/INDEX, as the server advertises itself), its limits (device
// memory bytes, compute share in milli-GPU), who holds it (tenant, job) and when it expires. It
// travels as a compact text token:
//     gpl1.<base64url(payload)>.<base64url(HMAC-SHA256(key, "gpl1.<base64url(payload)>"))>
// where the payload is a small JSON object {"v":1,"gpu":..,"mem":..,"milli":..,"tenant":..,
// "job":..,"iat":..,"exp":..} (times in Unix seconds). The signature covers the exact encoded
// bytes, so no canonical form is needed; the payload is parsed only after the signature checks,
// compared in constant time (CRYPTO_memcmp). The controller (or `gpool lease issue`) and the GPU
// servers share one key of at least 32 bytes.
//
// Time: expiry is wall-clock time, read from an injected Clock whose epoch must be the Unix epoch
// (UnixClock in daemons, ManualClock in tests); a monotonic clock would not agree across hosts.
// Thread safety: LeaseAuthority is immutable after construction and safe to share.
// A lease bounds its session, not only its start: the GPU server ends a session when its
// lease expires (server/session.h, SessionDeadline), so a short TTL is a real bound.
// Limits: no revocation list (short TTLs instead) and no renewal of a running session; one key
// (rotate by restarting with a new key).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace gpool::remote {

inline constexpr size_t kMinLeaseKeyBytes = 32;

struct Lease {
  std::string gpu;           // "HOST:PORT/INDEX"
  uint64_t memory_bytes = 0;  // 0: no limit below the device's own
  int32_t compute_milli = 1000;  // share of the GPU's compute, 1..1000
  std::string tenant;
  std::string job;
  int64_t issued_at = 0;   // Unix seconds
  int64_t expires_at = 0;  // Unix seconds; the lease is refused from this second on
};

struct LeaseRequest {
  std::string gpu;
  uint64_t memory_bytes = 0;
  int32_t compute_milli = 1000;
  std::string tenant;
  std::string job;
  double ttl_seconds = 3600;
};

// CLOCK_REALTIME in nanoseconds: a Clock whose epoch is the Unix epoch, for leases.
class UnixClock final : public Clock {
 public:
  int64_t NowNanos() const override;
  static UnixClock* Default();
};

// "2026-11-30T22:40:00Z" for Unix seconds, as lease messages write times.
std::string FormatLeaseTime(int64_t unix_seconds);

// Checks "HOST:PORT/INDEX" (non-empty host, port 1..65535, index 0..1023).
Status ValidateGpuAddress(std::string_view gpu);

// Reads a key file: a file holding only hex digits (an optional trailing newline aside) is hex,
// anything else is the raw key bytes. Either way at least 32 bytes of key.
StatusOr<std::string> LoadLeaseKey(const std::string& path);

class LeaseAuthority {
 public:
  // `key` is the raw key (>= 32 bytes).
  static StatusOr<LeaseAuthority> Create(std::string key);

  // Signs a lease for `request`, issued now and expiring ttl_seconds later.
  StatusOr<std::string> Issue(const LeaseRequest& request, const Clock& clock) const;
  // Returns the lease if `token` is well formed, correctly signed, unexpired and names
  // `expected_gpu`; otherwise PermissionDenied saying which: "bad signature", "expired at T",
  // "for gpu X, not Y", or "malformed token".
  StatusOr<Lease> Verify(std::string_view token, std::string_view expected_gpu,
                         const Clock& clock) const;

 private:
  explicit LeaseAuthority(std::string key) : key_(std::move(key)) {}
  std::string Sign(std::string_view data) const;

  std::string key_;
};

// base64url without padding (RFC 4648 section 5), as tokens use it.
std::string Base64UrlEncode(std::string_view data);
StatusOr<std::string> Base64UrlDecode(std::string_view text);

}  // namespace gpool::remote
