// A small deterministic random generator for everything that draws from a seed (the
// synthetic workload, random hot-expert masks), so the draws do not depend on the standard
// library.
#pragma once

#include <cstdint>

namespace moestat {

/// One step of SplitMix64: advances `state` and returns the next output.
std::uint64_t splitmix64(std::uint64_t& state) noexcept;

/// xoshiro256** seeded through SplitMix64. Used instead of <random>'s distributions, whose
/// output differs between standard libraries, so a seed gives the same draws everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  /// Uniform in [0, bound); bound must be positive.
  std::uint64_t below(std::uint64_t bound) noexcept;
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept;

 private:
  std::uint64_t state_[4];
};

}  // namespace moestat
