// The rebalance simulator: replays one traffic scenario under several policies at once (each
// pass is drawn once and served by every policy's placement) and scores them.
//
//   std::vector<std::unique_ptr<plan::RebalancePolicy>> policies;
//   policies.push_back(plan::never_policy());
//   policies.push_back(plan::interval_policy({.every = 1000, .window = 1000}));
//   std::vector<plan::PolicyReplay> r = plan::replay(scenario, policies, options);
//   // r[i].mean_balancedness, r[i].moved_experts, r[i].lost_seconds()
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <moestat/placement.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/rebalance_policy.hpp>
#include <moestat/plan/traffic.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::plan {

/// What time the simulator charges, so that balance and moves add up in seconds: the
/// advisor's model (advisor.hpp). A pass's MoE time is the sum over layers of its busiest
/// GPU's load, so for its work it takes `seconds_per_balanced_pass / b`, b the pass's sum
/// ratio (sum over layers of the mean GPU load / sum of the max); against perfect balance it
/// loses `seconds_per_balanced_pass * (1 / b - 1)`. A rebalance stalls serving for the
/// MoveCost of the slots it refills.
struct ReplayCost {
  double seconds_per_balanced_pass = 0.01;
  /// DeepSeek-V3: one expert's three FP8 matrices (3 x 7168 x 2048 bytes) per layer, each GPU
  /// receiving over its own 50 GB/s link.
  MoveCost move_cost{.bytes_per_expert = 3.0 * 7168 * 2048, .link_bytes_per_second = 50e9};
};

struct ReplayOptions {
  EplbConfig config{};
  ReplayCost cost{};
  std::uint64_t seed = 1;
  /// Passes summed into one row of the windows policies see and one point of a timeline;
  /// every policy's check interval and window must be multiples of it. Rules that look at a
  /// window's sum or mean balancedness see the same with any block; the advisor judges on
  /// rows, so finer blocks let it judge sooner after a change.
  std::int64_t block_passes = 10;
};

struct RebalanceEvent {
  std::int64_t pass = 0;               ///< The placement takes effect from this pass.
  std::int64_t moved_experts = 0;      ///< Slots whose expert changed, over all layers.
  std::int64_t max_moved_per_gpu = 0;  ///< The most of them one GPU receives.
  double seconds = 0.0;                ///< Their MoveCost.
};

/// One policy's replay.
struct PolicyReplay {
  std::string policy{};
  std::int64_t num_passes = 0;
  /// Mean over passes of served balancedness (SGLang's: mean over loaded layers of
  /// mean / max GPU load).
  double mean_balancedness = 0.0;
  std::int64_t moved_experts = 0;
  std::vector<RebalanceEvent> rebalances{};
  /// Sum over passes of seconds_per_balanced_pass (1 / b - 1), b the pass's sum ratio.
  double imbalance_seconds = 0.0;
  double move_seconds = 0.0;  ///< Sum of the rebalances' seconds.
  /// [ceil(num_passes / block_passes)] mean served balancedness of each block of passes.
  std::vector<double> block_balancedness{};

  /// The combined score: time lost to imbalance and to moves (lower is better).
  double lost_seconds() const noexcept { return imbalance_seconds + move_seconds; }
};

/// A row of a comparison of rebalancing policies: the family its policy belongs to (the role
/// `moestat simulate --policy` and its JSON name) and the label the row shows.
struct ComparisonRow {
  std::string_view role;
  std::string_view label;
};
/// The rows `moestat simulate` prints and its timelines draw, in order.
inline constexpr std::array<ComparisonRow, 6> kComparisonRows{{{"never", "never"},
                                                               {"sglang-default", "SGLang default"},
                                                               {"vllm-default", "vLLM default"},
                                                               {"interval", "best interval"},
                                                               {"threshold", "best threshold"},
                                                               {"advisor", "advisor"}}};

/// The rows of a comparison: for each of kComparisonRows whose role some policy has
/// (`roles[i]` is policy i's, `lost_seconds[i]` its PolicyReplay::lost_seconds), in that
/// order, (the row's index in kComparisonRows, the policy of that role with the fewest lost
/// seconds, the first on a tie). The grids hold several policies of a role; a role no policy
/// has is left out. moestat::Error when the two spans differ in length.
std::vector<std::pair<std::size_t, std::size_t>> comparison_rows(
    std::span<const std::string> roles, std::span<const double> lost_seconds);

/// Replays `scenario` (drawn with `options.seed`) from `initial` under every policy, all on
/// the same passes. Each pass is served under each policy's placement in force; after it,
/// policies whose check is due decide, and a new placement serves from the next pass.
/// moestat::Error on an invalid scenario or config, a placement of another shape, or a
/// policy whose interval or window is not a positive multiple of `block_passes`.
std::vector<PolicyReplay> replay(const TrafficScenario& scenario, const Placement& initial,
                                 std::span<const std::unique_ptr<RebalancePolicy>> policies,
                                 const ReplayOptions& options);

/// A pass served under a placement, as evaluate_placement's `balancedness` and
/// `balancedness_sum_ratio` (1 and 1 without a loaded layer), without its per-layer report.
struct ServedBalance {
  double balancedness = 1.0;  ///< Mean over loaded layers of mean / max GPU load.
  double sum_ratio = 1.0;     ///< Sum over loaded layers of mean GPU load / sum of max.
};
ServedBalance served_balance(const ExpertLoads& pass, const Placement& placement,
                             std::int64_t num_gpus);

/// The slots `after` refills relative to `before`: in all, and the most one GPU receives
/// (over all layers; slot p on GPU p / slots_per_gpu). moestat::Error on a shape mismatch.
struct Moves {
  std::int64_t moved_experts = 0;
  std::int64_t max_moved_per_gpu = 0;
};
Moves moves_between(const Placement& before, const Placement& after, const EplbConfig& config);

/// Stalled seconds of `moves` under `cost`, as the advisor prices them: bytes x the most one
/// GPU receives / link bandwidth (GPUs receive in parallel), plus seconds per moved expert.
double move_seconds(const MoveCost& cost, const Moves& moves);

}  // namespace moestat::plan
