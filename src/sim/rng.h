// The simulator's seeded randomness: splitmix64, identical on every platform, so a seed gives
// the same workload, ties and results everywhere (the standard library's generators and
// distributions differ between implementations).
//
// Thread safety: none; each run owns its generators.
#ifndef GPOOL_SIM_RNG_H_
#define GPOOL_SIM_RNG_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>

namespace gpool::sim {

class SplitMix {
 public:
  // The seed is mixed with `salt`, so that users seeded alike draw different streams. Each user
  // keeps its own salt: changing one changes every figure measured with it.
  static constexpr uint64_t kWorkloadSalt = 0x9E3779B97F4A7C15ull;  // workload generators
  static constexpr uint64_t kPolicySalt = 0xD1B54A32D192ED03ull;    // the fill's policies, ties
  explicit SplitMix(uint64_t seed, uint64_t salt = kPolicySalt) : s_(seed ^ salt) {}

  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0) by modulo; the bias is negligible for these sizes.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }
  // Uniform in [0, n) (n > 0) from Uniform(): another stream than Below's for the same draws.
  size_t Index(size_t n) { return static_cast<size_t>(Uniform() * static_cast<double>(n)) % n; }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Exp(double rate) { return -std::log(1.0 - Uniform()) / rate; }
  // Standard normal by Box-Muller (one of the pair).
  double Normal() {
    const double u = 1.0 - Uniform(), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2 * std::numbers::pi * v);
  }

 private:
  uint64_t s_;
};

}  // namespace gpool::sim

#endif  // GPOOL_SIM_RNG_H_
