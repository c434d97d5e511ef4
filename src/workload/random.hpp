// Internal: the workload's random streams, shared by the generator and its popularity law.
#pragma once

#include <cstdint>
#include <moestat/rng.hpp>
#include <span>
#include <utility>

namespace moestat::workload::detail {

/// What a stream is for; with the seed and up to two indices it names one stream.
enum Purpose : std::uint64_t {
  kPopularity = 1,
  kPlacement = 2,
  kBatch = 3,
  kIds = 4,
  kDrift = 5,
};

/// One stream per (seed, purpose, a, b), so every pass and layer has its own sequence.
Rng stream(std::uint64_t seed, std::uint64_t purpose, std::uint64_t a, std::uint64_t b = 0);

/// A standard normal draw (Box-Muller; libm's log, sqrt and cos, so no <random>).
double standard_normal(Rng& rng);

template <typename T>
void shuffle(std::span<T> values, Rng& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    std::swap(values[i - 1], values[static_cast<std::size_t>(rng.below(i))]);
  }
}

}  // namespace moestat::workload::detail
