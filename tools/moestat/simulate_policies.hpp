// The policies `moestat simulate` compares, and which rows its table shows.
#pragma once

#include <cstdint>
#include <memory>
#include <moestat/plan/rebalance_policy.hpp>
#include <moestat/plan/replay.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moestat::cli {

/// The roles of the policies, as PolicyRoster::roles names them (plan::kComparisonRows').
std::vector<std::string> policy_roles();

struct PolicyRoster {
  std::vector<std::unique_ptr<plan::RebalancePolicy>> policies;
  /// [policies] "never", "sglang-default", "vllm-default", "interval" (the tuned grid),
  /// "threshold" (the tuned grid) or "advisor".
  std::vector<std::string> roles;

  /// The table's rows: (index into the results, label): never, the two defaults, the grid
  /// policy of each family with the fewest lost seconds, the advisor.
  std::vector<std::pair<std::size_t, std::string>> shown(
      const std::vector<plan::PolicyReplay>& results) const;
  /// The policies of the given roles (all of them when `roles` is empty).
  PolicyRoster only(const std::vector<std::string>& roles) &&;
};

/// A fresh set of policies (they keep state across a replay): never; SGLang's default (every
/// 1000 passes on the last 1000, threshold 1.0, which always rebalances); vLLM's (every 3000
/// on the last 1000); with DeepSeek's planner, intervals of 250-4000 passes and thresholds
/// 0.7-0.9 checked every 250 or 1000 passes; with few-copies replanning, an interval of 1000
/// and thresholds 0.7 and 0.8 checked every 250; the advisor (seeded with `seed`,
/// pricing time and moves as `cost`), every 100 passes on the last 2000.
PolicyRoster simulation_policies(std::uint64_t seed, const plan::ReplayCost& cost);

}  // namespace moestat::cli
