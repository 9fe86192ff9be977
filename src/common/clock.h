// The injectable clock.
//
// Nothing in gpool's libraries reads the system time directly: daemons pass a SystemClock, the
// simulator and tests pass a ManualClock they advance themselves, so that scheduling decisions
// are reproducible. Thread safety: SystemClock is thread-safe; ManualClock is thread-safe too
// (an atomic), so a test can advance it while a daemon thread reads it.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds since an arbitrary fixed epoch; never goes backwards.
  virtual int64_t NowNanos() const = 0;
  double NowSeconds() const { return static_cast<double>(NowNanos()) * 1e-9; }
};

// Monotonic wall time (CLOCK_MONOTONIC).
class SystemClock final : public Clock {
 public:
  int64_t NowNanos() const override;
  static SystemClock* Default();
};

// A clock that only moves when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_nanos = 0) : now_(start_nanos) {}
  int64_t NowNanos() const override { return now_.load(std::memory_order_relaxed); }
  void AdvanceNanos(int64_t d) { now_.fetch_add(d, std::memory_order_relaxed); }
  void AdvanceSeconds(double s) { AdvanceNanos(static_cast<int64_t>(s * 1e9)); }
  void SetNanos(int64_t t) { now_.store(t, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace gpool
