// The rebalance advisor: candidate replans priced in seconds, judged out of sample.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/regimes.hpp>
#include <moestat/plan/replan.hpp>
#include <span>

#include "served_balance.hpp"

namespace moestat::plan {
namespace {

/// Bounds the bootstrap's time (resamples x passes x candidates) far above any useful count.
constexpr std::int64_t kMaxBootstrap = 100000;

bool finite_non_negative(double x) { return std::isfinite(x) && x >= 0.0; }

void validate_options(const AdvisorOptions& options) {
  MOESTAT_CHECK(
      std::isfinite(options.seconds_per_balanced_pass) && options.seconds_per_balanced_pass > 0.0,
      "advisor: the MoE time of a balanced pass must be a positive number of seconds, "
      "got {}",
      options.seconds_per_balanced_pass);
  MOESTAT_CHECK(options.horizon_passes > 0,
                "advisor: the horizon must be a positive number of passes, got {}",
                options.horizon_passes);
  const MoveCost& cost = options.move_cost;
  MOESTAT_CHECK(finite_non_negative(cost.bytes_per_expert) &&
                    finite_non_negative(cost.link_bytes_per_second) &&
                    finite_non_negative(cost.seconds_per_expert),
                "advisor: the move cost's bytes per expert ({}), link bandwidth ({} B/s) and "
                "seconds per expert ({}) must be finite and >= 0",
                cost.bytes_per_expert, cost.link_bytes_per_second, cost.seconds_per_expert);
  MOESTAT_CHECK(cost.bytes_per_expert == 0.0 || cost.link_bytes_per_second > 0.0,
                "advisor: moving {} bytes per expert needs a positive link bandwidth",
                cost.bytes_per_expert);
  for (const double target : options.targets) {
    MOESTAT_CHECK(target > 0.0 && target <= 1.0,
                  "advisor: a candidate's target balancedness must be in (0, 1], got {}", target);
  }
  MOESTAT_CHECK(options.num_bootstrap >= 0 && options.num_bootstrap <= kMaxBootstrap,
                "advisor: bootstrap resamples must be in [0, {}], got {}", kMaxBootstrap,
                options.num_bootstrap);
  MOESTAT_CHECK(options.confidence > 0.0 && options.confidence < 1.0,
                "advisor: the interval's confidence must be in (0, 1), got {}", options.confidence);
  MOESTAT_CHECK(options.min_balancedness_gain >= 0.0 && options.min_balancedness_gain < 1.0,
                "advisor: the least balancedness gain to act on must be in [0, 1), got {}",
                options.min_balancedness_gain);
  MOESTAT_CHECK(options.min_evaluation_passes >= 1,
                "advisor: the passes to judge on must be at least 1, got {}",
                options.min_evaluation_passes);
  MOESTAT_CHECK(options.max_scenarios >= 1,
                "advisor: scenarios per plan must be at least 1, got {}", options.max_scenarios);
}

/// `passes` of `window`, in the order given, as a window of their own.
CountWindow selected(const CountWindow& window, std::span<const std::int64_t> passes) {
  CountWindow out{.window_size = 0,
                  .num_layers = window.num_layers,
                  .num_experts = window.num_experts,
                  .has_window_axis = true};
  const auto append = [](auto& to, const auto& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  for (const std::int64_t pass : passes) {
    const CountWindow one = window.passes(pass, pass + 1);
    ++out.window_size;
    append(out.counts, one.counts);
    append(out.fractional_counts, one.fractional_counts);
    out.pass_rows.append(one.pass_rows);
  }
  return out;
}

/// The traffic to plan for: loaded passes of the window, one group per regime, oldest first
/// in each.
struct Traffic {
  std::vector<std::vector<std::int64_t>> regimes;
  std::int64_t first_pass = 0;
  bool recurs = false;
};

Traffic traffic_to_plan_for(const CountWindow& window, const std::vector<std::int64_t>& loaded,
                            const AdvisorOptions& options) {
  if (!options.follow_regimes) return {.regimes = {loaded}, .first_pass = 0, .recurs = false};
  const Regimes found = find_regimes(window, options.regimes);
  const std::size_t start = found.cycle_start();
  Traffic out{
      .regimes = {}, .first_pass = found.segments[start].first, .recurs = found.current_recurs()};
  std::vector<std::int64_t> numbers;  // of out.regimes' regimes, in order of appearance
  for (std::size_t k = start; k < found.segments.size(); ++k) {
    const RegimeSegment& segment = found.segments[k];
    const auto index =
        std::size_t(std::find(numbers.begin(), numbers.end(), segment.regime) - numbers.begin());
    if (index == numbers.size()) {
      numbers.push_back(segment.regime);
      out.regimes.emplace_back();
    }
    out.regimes[index].insert(out.regimes[index].end(), segment.passes.begin(),
                              segment.passes.end());
  }
  return out;
}

/// The planner's scenarios for passes grouped by regime: one regime's passes merged as
/// window_scenarios does; several regimes one scenario each, so that each weighs the same.
std::vector<ExpertLoads> scenarios_of(const CountWindow& window,
                                      const std::vector<std::vector<std::int64_t>>& regimes,
                                      std::int64_t max_scenarios) {
  if (regimes.size() == 1) return window_scenarios(selected(window, regimes[0]), max_scenarios);
  std::vector<ExpertLoads> out;
  for (const std::vector<std::int64_t>& passes : regimes) {
    out.push_back(loads_of(selected(window, passes)));
  }
  return out;
}

Placement replan(const Placement& current, std::span<const ExpertLoads> scenarios,
                 const EplbConfig& config, double target, const AdvisorOptions& options) {
  return replan_with_few_copies(current, scenarios, config,
                                {.target_balancedness = target, .planner = options.planner})
      .placement;
}

std::vector<SlotMove> moves_between(const Placement& from, const Placement& to) {
  std::vector<SlotMove> out;
  for (std::int64_t layer = 0; layer < from.num_layers(); ++layer) {
    for (std::int64_t slot = 0; slot < from.num_physical_experts(); ++slot) {
      const std::int32_t before = from.logical_of(layer, slot), after = to.logical_of(layer, slot);
      if (before != after) out.push_back({layer, slot, before, after});
    }
  }
  return out;
}

/// The most slots one GPU refills over all layers.
std::int64_t max_moved_per_gpu(const std::vector<SlotMove>& moves, const EplbConfig& config) {
  std::vector<std::int64_t> per_gpu(std::size_t(config.num_gpus), 0);
  for (const SlotMove& move : moves) ++per_gpu[std::size_t(move.slot / config.slots_per_gpu())];
  return *std::max_element(per_gpu.begin(), per_gpu.end());
}

double move_seconds(const MoveCost& cost, std::int64_t moved, std::int64_t max_per_gpu) {
  const double transfer =
      cost.bytes_per_expert > 0.0
          ? cost.bytes_per_expert * double(max_per_gpu) / cost.link_bytes_per_second
          : 0.0;
  return transfer + cost.seconds_per_expert * double(moved);
}

/// The best candidate lifts served balancedness by at least the floor the advisor acts on.
bool lifts_enough(const RebalanceAdvice& advice, const AdvisorOptions& options) {
  const RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  return best.balancedness_after.value - advice.balancedness_now.value >=
         options.min_balancedness_gain;
}

std::string reason_for(const RebalanceAdvice& advice, const AdvisorOptions& options) {
  if (advice.best < 0) return "keep the placement: no candidate plans were asked for";
  const RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  if (best.moved_experts == 0) {
    return fmt::format(
        "keep the placement: no candidate plan moves an expert (served balancedness {:.4f})",
        advice.balancedness_now.value);
  }
  const double gain = best.gain_seconds.value;
  const std::string plan = fmt::format(
      "the plan for target {:g} refills {} slots ({:.4g} s of moves) and is expected to {} "
      "{:.4g} s of MoE time over {} passes (served balancedness {:.4f} -> {:.4f})",
      best.target_balancedness, best.moved_experts, best.move_seconds,
      gain >= 0.0 ? "save" : "lose", std::abs(gain), options.horizon_passes,
      advice.balancedness_now.value, best.balancedness_after.value);
  const std::string net = fmt::format("net {:.4g} s ({:g}% interval {:.4g} to {:.4g} s)",
                                      best.net_gain_seconds.value, 100.0 * options.confidence,
                                      best.net_gain_seconds.low, best.net_gain_seconds.high);
  if (advice.rebalance) return fmt::format("rebalance: {}, {}", plan, net);
  if (best.net_gain_seconds.value > 0.0 && !lifts_enough(advice, options)) {
    return fmt::format(
        "keep the placement: {}, {}; a lift below {:g} in balancedness is within what a plan "
        "fitted to noise shows",
        plan, net, options.min_balancedness_gain);
  }
  if (best.net_gain_seconds.value > 0.0) {
    return fmt::format("keep the placement: {}, {}, which is not confidently positive", plan, net);
  }
  return fmt::format("keep the placement: {}, which does not pay for its moves: {}", plan, net);
}

}  // namespace

RebalanceAdvice advise_rebalance(const Placement& current, const CountWindow& recent,
                                 const EplbConfig& config, const AdvisorOptions& options) {
  validate_options(options);
  recent.validate("recent counts");
  MOESTAT_CHECK(current.num_layers() == recent.num_layers &&
                    current.num_logical_experts() == recent.num_experts,
                "advisor: the placement is for {} layers x {} experts, the recent counts for "
                "{} x {}",
                current.num_layers(), current.num_logical_experts(), recent.num_layers,
                recent.num_experts);
  config.validate(recent.num_experts);
  MOESTAT_CHECK(config.num_replicas == current.num_physical_experts(),
                "advisor: the deployment has {} slots per layer, the placement in force {}",
                config.num_replicas, current.num_physical_experts());
  const std::vector<std::int64_t> loaded = loaded_passes(recent);
  MOESTAT_CHECK(loaded.size() >= 2,
                "advisor: the recent counts need at least 2 passes with load (plans are made on "
                "the older passes and judged on the newer), got {}",
                loaded.size());

  // Each regime's older half to plan on, the newer halves to judge on.
  const Traffic traffic = traffic_to_plan_for(recent, loaded, options);
  std::vector<std::vector<std::int64_t>> planning;
  std::vector<std::int64_t> judged;
  std::int64_t num_planning = 0;
  for (const std::vector<std::int64_t>& passes : traffic.regimes) {
    const auto split = std::ptrdiff_t(passes.size() / 2);
    if (split > 0) planning.emplace_back(passes.begin(), passes.begin() + split);
    judged.insert(judged.end(), passes.begin() + split, passes.end());
    num_planning += split;
  }
  std::sort(judged.begin(), judged.end());
  RebalanceAdvice advice{.rebalance = false,
                         .reason = {},
                         .balancedness_now = {},
                         .candidates = {},
                         .best = -1,
                         .placement = current,
                         .moves = {},
                         .num_planning_passes = num_planning,
                         .num_evaluation_passes = std::int64_t(judged.size()),
                         .traffic_first_pass = traffic.first_pass,
                         .traffic_regimes = std::int64_t(traffic.regimes.size()),
                         .traffic_recurs = traffic.recurs};
  if (planning.empty() || std::int64_t(judged.size()) < options.min_evaluation_passes) {
    advice.reason = fmt::format(
        "keep the placement for now: the traffic to plan for (from pass {}) leaves {} passes "
        "with load to judge a plan on, and {} are needed",
        traffic.first_pass, planning.empty() ? 0 : judged.size(), options.min_evaluation_passes);
    return advice;
  }

  const detail::PassLoads now = detail::pass_loads(recent, judged, current, config.num_gpus);
  const std::vector<ExpertLoads> planning_scenarios =
      scenarios_of(recent, planning, options.max_scenarios);
  std::vector<detail::PassLoads> after;
  for (const double target : options.targets) {
    after.push_back(detail::pass_loads(recent, judged,
                                       replan(current, planning_scenarios, config, target, options),
                                       config.num_gpus));
  }
  const detail::PairedEstimates estimates = detail::paired_bootstrap(
      now, after, double(options.horizon_passes) * options.seconds_per_balanced_pass,
      options.num_bootstrap, options.confidence, options.seed);
  advice.balancedness_now = estimates.now;

  const std::vector<ExpertLoads> all_scenarios =
      scenarios_of(recent, traffic.regimes, options.max_scenarios);
  std::vector<std::vector<SlotMove>> moves;
  for (std::size_t k = 0; k < options.targets.size(); ++k) {
    Placement placement = replan(current, all_scenarios, config, options.targets[k], options);
    moves.push_back(moves_between(current, placement));
    const std::int64_t max_per_gpu = max_moved_per_gpu(moves.back(), config);
    const double cost =
        move_seconds(options.move_cost, std::int64_t(moves.back().size()), max_per_gpu);
    const Estimate& gain = estimates.gain[k];
    advice.candidates.push_back(
        {.target_balancedness = options.targets[k],
         .placement = std::move(placement),
         .moved_experts = std::int64_t(moves.back().size()),
         .max_moved_per_gpu = max_per_gpu,
         .balancedness_after = estimates.after[k],
         .gain_seconds = gain,
         .move_seconds = cost,
         .net_gain_seconds = {gain.value - cost, gain.low - cost, gain.high - cost}});
    if (advice.best < 0 || advice.candidates.back().net_gain_seconds.value >
                               advice.candidates[std::size_t(advice.best)].net_gain_seconds.value) {
      advice.best = std::int64_t(k);
    }
  }
  if (advice.best >= 0) {
    const RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
    const double decisive =
        options.require_confident_gain ? best.net_gain_seconds.low : best.net_gain_seconds.value;
    advice.rebalance = best.moved_experts > 0 && decisive > 0.0 && lifts_enough(advice, options);
    if (advice.rebalance) {
      advice.placement = best.placement;
      advice.moves = std::move(moves[std::size_t(advice.best)]);
    }
  }
  advice.reason = reason_for(advice, options);
  return advice;
}

}  // namespace moestat::plan
