// The rebalance advisor: does moving expert weights now pay for itself? From the placement in
// force and a recent window of counts, it predicts the balancedness of the coming traffic with
// and without replanning (with a bootstrap interval over passes), prices the moves in seconds
// and answers rebalance now or not, with the plan and the slots that change.
//
//   plan::AdvisorOptions options;
//   options.seconds_per_balanced_pass = 0.012;  // MoE time of a perfectly balanced pass
//   options.horizon_passes = 2000;              // passes until the next decision
//   options.move_cost = {.bytes_per_expert = 44e6, .link_bytes_per_second = 50e9,
//                        .seconds_per_expert = 0.0};
//   plan::RebalanceAdvice advice = plan::advise_rebalance(current, window, config, options);
//   if (advice.rebalance) apply(advice.placement);  // advice.moves: the slots to refill
//
// The model (docs/placement.md, "Rebalance advisor"): a pass's MoE time is the sum over layers
// of its busiest GPU's load, so for a fixed amount of work it scales with 1 / served
// balancedness, where served balancedness is (sum over passes and layers of the mean GPU load)
// / (sum over passes and layers of the max GPU load). A pass at served balancedness b takes
// seconds_per_balanced_pass / b. A plan that lifts b from b_now to b_after saves
// horizon_passes x seconds_per_balanced_pass x (1 / b_now - 1 / b_after) and costs the stall
// of copying its moved experts' weights once.
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/regimes.hpp>
#include <string>
#include <vector>

namespace moestat::plan {

/// What copying expert weights costs, in seconds of stalled serving. Both terms may be given;
/// they add. At least one must be positive unless moves are meant to be free.
struct MoveCost {
  /// Bytes of one expert's weights in one layer (all of its matrices, as stored).
  double bytes_per_expert = 0.0;
  /// Bytes per second each GPU receives over its link. GPUs receive in parallel, so the
  /// transfer takes bytes_per_expert x (the most slots one GPU refills) / this. Required
  /// (positive) when bytes_per_expert is positive.
  double link_bytes_per_second = 0.0;
  /// A fixed stall per moved expert (per refilled slot), for engines that copy one expert at
  /// a time or whose measured cost is known per expert: seconds_per_expert x slots refilled.
  double seconds_per_expert = 0.0;
};

struct AdvisorOptions {
  /// MoE seconds of one pass at balancedness 1 (every GPU as loaded as the mean): the unit
  /// that turns balancedness into time. Positive.
  double seconds_per_balanced_pass = 0.0;
  /// Passes the new plan is expected to serve before the next decision. Positive.
  std::int64_t horizon_passes = 0;
  MoveCost move_cost;
  /// Candidate plans: one movement-aware replan (replan_with_few_copies) per target
  /// balancedness, each in (0, 1]; a low target moves few experts, 1 is a full rebalance.
  std::vector<double> targets = {0.85, 0.9, 0.95, 1.0};
  /// Bootstrap resamples of the evaluation passes, in [0, 100000]; 0 gives point estimates
  /// only (intervals of zero width).
  std::int64_t num_bootstrap = 1000;
  /// Two-sided coverage of the intervals, in (0, 1).
  double confidence = 0.9;
  /// Seeds the bootstrap; the advice is a function of (inputs, options) alone.
  std::uint64_t seed = 0;
  /// Rebalance only when the lower end of the net gain's interval is positive, rather than
  /// its point estimate.
  bool require_confident_gain = false;
  /// Rebalance only when the best candidate lifts the predicted served balancedness by at
  /// least this much: plans fitted to a window's noise show gains of a few tenths of a point
  /// out of sample by chance, below what the estimate can resolve. In [0, 1).
  double min_balancedness_gain = 0.005;
  /// Judge only on at least this many passes (with load) of the traffic planned for; with
  /// fewer, a bootstrap has no spread to go on, and the advice is to wait. At least 1.
  std::int64_t min_evaluation_passes = 3;
  /// Plan for the traffic's regimes (find_regimes) rather than the whole window: the regime
  /// running now, or, when it ran before in the window (traffic that returns), every regime
  /// of the cycle since its first run. False: the window is one regime.
  bool follow_regimes = true;
  RegimeOptions regimes;
  /// The window's passes are merged into at most this many scenarios for the planner
  /// (window_scenarios); 1 plans on the window's sum.
  std::int64_t max_scenarios = 4;
  /// Planner settings of the replans' full plans.
  MoestatPlanOptions planner;
};

/// A point estimate with its bootstrap percentile interval [low, high].
struct Estimate {
  double value = 0.0;
  double low = 0.0;
  double high = 0.0;
};

/// One physical slot whose logical expert changes: it receives `to`'s weights.
struct SlotMove {
  std::int64_t layer = 0;
  std::int64_t slot = 0;
  std::int32_t from = 0;  ///< Logical expert in the slot now.
  std::int32_t to = 0;    ///< Logical expert the plan puts there.
};

/// One candidate plan and what it is predicted to bring.
struct RebalanceCandidate {
  double target_balancedness = 1.0;  ///< The replan's target (AdvisorOptions::targets).
  /// Planned on the whole window from the placement in force.
  Placement placement;
  std::int64_t moved_experts = 0;  ///< Slots refilled, over all layers.
  /// The most slots one GPU refills (what bounds the transfer when GPUs copy in parallel).
  std::int64_t max_moved_per_gpu = 0;
  Estimate balancedness_after;  ///< Served balancedness of the coming traffic with the plan.
  Estimate gain_seconds;        ///< MoE time saved over the horizon, before the move's cost.
  double move_seconds = 0.0;    ///< The stall of the moves (MoveCost).
  Estimate net_gain_seconds;    ///< gain_seconds - move_seconds.
};

struct RebalanceAdvice {
  /// Rebalance now: the best candidate's net gain (or its interval's lower end, under
  /// require_confident_gain) is positive and it lifts served balancedness by at least
  /// AdvisorOptions::min_balancedness_gain.
  bool rebalance = false;
  /// The decision in one sentence, with the numbers behind it.
  std::string reason;
  /// Served balancedness of the coming traffic if nothing moves.
  Estimate balancedness_now;
  /// Every candidate, in the order of AdvisorOptions::targets.
  std::vector<RebalanceCandidate> candidates;
  /// Index into candidates of the one with the highest net gain (first among equals); -1
  /// only when there is no candidate (no targets).
  std::int64_t best = -1;
  /// The placement to run: the best candidate's when rebalancing, else the one in force.
  Placement placement;
  /// The slots `placement` refills relative to the one in force (empty when not
  /// rebalancing), by layer then slot.
  std::vector<SlotMove> moves;
  /// Passes the plans for the estimates were made on, and passes they were judged on
  /// (the most recent of each regime planned for), out of the window's passes with load.
  std::int64_t num_planning_passes = 0;
  std::int64_t num_evaluation_passes = 0;
  /// The traffic planned for: window passes from `traffic_first_pass` on, made of
  /// `traffic_regimes` regimes (1 unless the current regime returned), and whether it did.
  std::int64_t traffic_first_pass = 0;
  std::int64_t traffic_regimes = 1;
  bool traffic_recurs = false;
};

/// Advises whether to rebalance now.
///
/// `current`: the placement in force, [L, P] for E logical experts. `recent`: the latest W
/// passes of counts [W, L, E] (whole or fractional); it needs at least 2 passes with load,
/// since the estimate plans on the older part and judges on the newer. `config`: the
/// deployment (P = config.num_replicas = current's slots). The traffic to plan for is the
/// current regime's passes, or those of every regime of the cycle when the current one
/// returned (AdvisorOptions::follow_regimes); the whole window without it. The estimates
/// avoid in-sample optimism: each candidate's recipe is planned on the older half of each
/// regime's loaded passes and judged, with the placement in force, on the newer halves; the
/// bootstrap resamples those newer passes (paired: one resample scores every placement).
/// The plans returned are then made on all of the traffic's passes. When the traffic planned
/// for has too few passes to judge on (min_evaluation_passes; a regime that has just begun),
/// the advice is to keep the placement and wait, without candidates. Deterministic for
/// given inputs and options.seed.
/// moestat::Error naming the problem on mismatched shapes, an invalid config or options.
RebalanceAdvice advise_rebalance(const Placement& current, const CountWindow& recent,
                                 const EplbConfig& config, const AdvisorOptions& options);

}  // namespace moestat::plan
