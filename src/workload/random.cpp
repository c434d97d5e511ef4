#include "random.hpp"

#include <cmath>
#include <numbers>

namespace moestat::workload::detail {

Rng stream(std::uint64_t seed, std::uint64_t purpose, std::uint64_t a, std::uint64_t b) {
  std::uint64_t state = seed;
  std::uint64_t mixed = splitmix64(state) ^ purpose;
  mixed = splitmix64(mixed) ^ a;
  mixed = splitmix64(mixed) ^ b;
  return Rng(splitmix64(mixed));
}

double standard_normal(Rng& rng) {
  const double u = 1.0 - rng.uniform();  // (0, 1]: log stays finite
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * rng.uniform());
}

}  // namespace moestat::workload::detail
