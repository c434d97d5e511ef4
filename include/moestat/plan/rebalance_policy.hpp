// When to rebalance an expert placement while traffic runs: the rules engines ship (never,
// every N passes, below a utilisation threshold) behind one interface the simulator replays,
// so any other rule (moestat's advisor) is one more policy.
//
//   auto sglang = plan::interval_policy({.every = 1000, .window = 1000});
//   auto tuned = plan::threshold_policy({.every = 250, .window = 250}, 0.8);
//   auto advisor = plan::advisor_policy({.every = 250, .window = 1000}, advisor_options);
#pragma once

#include <cstdint>
#include <memory>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/eplb.hpp>
#include <optional>
#include <string>

namespace moestat::plan {

/// What a policy sees when the replay asks it.
struct RebalanceView {
  std::int64_t pass = 0;       ///< Passes served so far (the next pass's index).
  const Placement& placement;  ///< The placement in force.
  /// The policy's recent window, oldest first: [W, L, E] whole counts; each row sums
  /// `block_passes` consecutive passes (the replay keeps blocks, not single passes).
  const CountWindow& window;
  std::int64_t block_passes = 1;  ///< Passes summed in each row of `window`.
  /// Mean over the window's passes of the served balancedness (mean / max GPU load, mean
  /// over loaded layers): SGLang's `average_utilization_rate_over_window`.
  double window_balancedness = 1.0;
  const EplbConfig& config;  ///< The deployment.
};

/// A rule for rebalancing. The replay calls `decide` after every `check_every()`-th pass
/// (never when it is 0), with a window of the last `window_passes()` passes (fewer early
/// on); a placement returned takes effect from the next pass, and its moved experts are
/// charged.
class RebalancePolicy {
 public:
  virtual ~RebalancePolicy() = default;
  /// Short name for tables ("every 1000", "advisor").
  virtual std::string name() const = 0;
  virtual std::int64_t check_every() const = 0;
  virtual std::int64_t window_passes() const = 0;
  /// The new placement, or nullopt to keep the one in force.
  virtual std::optional<Placement> decide(const RebalanceView& view) = 0;
};

/// How a rebalancing policy makes its new placement from the window's summed counts.
enum class Replanner : std::uint8_t {
  /// DeepSeek's EPLB on the window, installed as it comes (what SGLang and vLLM do; nearly
  /// every slot changes).
  kDeepseek,
  /// replan_with_few_copies from the placement in force, to balancedness 0.95 on the window.
  kFewCopies,
};

struct Cadence {
  std::int64_t every = 1000;   ///< Passes between decisions (> 0).
  std::int64_t window = 1000;  ///< Passes of counts planned on (> 0).
  Replanner replanner = Replanner::kDeepseek;
};

/// Never moves an expert.
std::unique_ptr<RebalancePolicy> never_policy();
/// Replans every `cadence.every` passes on the last `cadence.window` passes. SGLang:
/// every 1000 (`eplb_rebalance_num_iterations`), window the same (its recorder's buffer size
/// defaults to the interval); vLLM: every 3000 (`step_interval`), window 1000
/// (`window_size`).
std::unique_ptr<RebalancePolicy> interval_policy(const Cadence& cadence);
/// As interval_policy, but only when the window's served balancedness is at most
/// `threshold` (SGLang's `eplb_min_rebalancing_utilization_threshold`, default 1.0: always).
std::unique_ptr<RebalancePolicy> threshold_policy(const Cadence& cadence, double threshold);
/// moestat's advisor (advise_rebalance) asked every `every` passes on the last `window`
/// passes, with `options`; it rebalances when the advice says so, to the advised placement.
/// (`cadence.replanner` is not used: the advisor makes its own candidates.)
std::unique_ptr<RebalancePolicy> advisor_policy(const Cadence& cadence,
                                                const AdvisorOptions& options);

}  // namespace moestat::plan
