// Synthetic router output for the benchmarks: top-k ids drawn with a per-layer Zipf-like
// expert popularity, so hot experts repeat as they do in real DeepSeek-V3 traffic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace moestat::bench {

/// Zipf exponent of expert popularity. 0.4 makes the hottest of 288 slots receive about 6x
/// the mean load with top-8, close to the median layer of the SGLang DeepSeek-V3 statistics
/// in shared/data (5x in decode, 7x in prefill).
inline constexpr double kZipfExponent = 0.4;

/// [num_tokens, top_k] row-major ids in [0, num_experts); each row holds top_k distinct
/// experts. `layer` seeds which experts are popular, so layers differ as in a real model.
template <typename Id>
std::vector<Id> make_skewed_topk_ids(std::int64_t num_tokens, std::int64_t num_experts,
                                     std::int64_t top_k, std::int64_t layer) {
  std::mt19937_64 rng(0x5eed0000ULL + std::uint64_t(layer));
  // Rank r of the popularity order gets weight 1 / (r + 1)^s; a per-layer shuffle decides
  // which expert holds which rank.
  auto expert_of_rank = std::vector<std::int64_t>(std::size_t(num_experts));
  std::iota(expert_of_rank.begin(), expert_of_rank.end(), 0);
  std::shuffle(expert_of_rank.begin(), expert_of_rank.end(), rng);
  auto weights = std::vector<double>(std::size_t(num_experts));
  for (std::int64_t rank = 0; rank < num_experts; ++rank) {
    weights[std::size_t(rank)] = 1.0 / std::pow(double(rank + 1), kZipfExponent);
  }
  std::discrete_distribution<std::int64_t> draw_rank(weights.begin(), weights.end());

  auto ids = std::vector<Id>(std::size_t(num_tokens * top_k));
  for (std::int64_t token = 0; token < num_tokens; ++token) {
    Id* row = ids.data() + token * top_k;
    for (std::int64_t column = 0; column < top_k;) {
      const auto expert = Id(expert_of_rank[std::size_t(draw_rank(rng))]);
      // Rejection keeps the row's experts distinct, as a router's top-k is.
      if (std::find(row, row + column, expert) == row + column) row[column++] = expert;
    }
  }
  return ids;
}

}  // namespace moestat::bench
