// The rebalance advisor: candidate replans priced in seconds, judged out of sample.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/advisor.hpp>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/replan.hpp>

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
  MOESTAT_CHECK(options.max_scenarios >= 1,
                "advisor: scenarios per plan must be at least 1, got {}", options.max_scenarios);
}

/// Passes of `window` that carry any load, oldest first.
std::vector<std::int64_t> loaded_passes(const CountWindow& window) {
  std::vector<std::int64_t> out;
  for (std::int64_t pass = 0; pass < window.window_size; ++pass) {
    const ExpertLoads loads = loads_of(window, pass, pass + 1);
    if (std::any_of(loads.values.begin(), loads.values.end(), [](double v) { return v > 0.0; })) {
      out.push_back(pass);
    }
  }
  return out;
}

Placement replan(const Placement& current, const CountWindow& window, const EplbConfig& config,
                 double target, const AdvisorOptions& options) {
  const std::vector<ExpertLoads> scenarios = window_scenarios(window, options.max_scenarios);
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

std::string reason_for(const RebalanceAdvice& advice, const AdvisorOptions& options) {
  if (advice.best < 0) return "keep the placement: no candidate plans were asked for";
  const RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  if (best.moved_experts == 0) {
    return fmt::format(
        "keep the placement: no candidate plan moves an expert (served balancedness {:.4f})",
        advice.balancedness_now.value);
  }
  const std::string plan = fmt::format(
      "the plan for target {:g} refills {} slots ({:.4g} s of moves) and is expected to save "
      "{:.4g} s over {} passes (served balancedness {:.4f} -> {:.4f})",
      best.target_balancedness, best.moved_experts, best.move_seconds, best.gain_seconds.value,
      options.horizon_passes, advice.balancedness_now.value, best.balancedness_after.value);
  const std::string net = fmt::format("net {:.4g} s ({:g}% interval {:.4g} to {:.4g} s)",
                                      best.net_gain_seconds.value, 100.0 * options.confidence,
                                      best.net_gain_seconds.low, best.net_gain_seconds.high);
  if (advice.rebalance) return fmt::format("rebalance: {}, {}", plan, net);
  if (best.net_gain_seconds.value > 0.0) {
    return fmt::format("keep the placement: {}, {}, which is not confidently positive", plan, net);
  }
  return fmt::format("keep the placement: the best candidate, {}, does not pay for its moves: {}",
                     plan, net);
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

  // Older half to plan on (with any empty passes between), newer half to judge on.
  const std::size_t split = loaded.size() / 2;
  const CountWindow planning = recent.passes(0, loaded[split]);
  const std::span<const std::int64_t> judged = std::span(loaded).subspan(split);
  const detail::PassLoads now = detail::pass_loads(recent, judged, current, config.num_gpus);
  std::vector<detail::PassLoads> after;
  for (const double target : options.targets) {
    after.push_back(detail::pass_loads(
        recent, judged, replan(current, planning, config, target, options), config.num_gpus));
  }
  const detail::PairedEstimates estimates = detail::paired_bootstrap(
      now, after, double(options.horizon_passes) * options.seconds_per_balanced_pass,
      options.num_bootstrap, options.confidence, options.seed);

  RebalanceAdvice advice{.rebalance = false,
                         .reason = {},
                         .balancedness_now = estimates.now,
                         .candidates = {},
                         .best = -1,
                         .placement = current,
                         .moves = {},
                         .num_planning_passes = std::int64_t(split),
                         .num_evaluation_passes = std::int64_t(judged.size())};
  std::vector<std::vector<SlotMove>> moves;
  for (std::size_t k = 0; k < options.targets.size(); ++k) {
    Placement placement = replan(current, recent, config, options.targets[k], options);
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
    advice.rebalance = best.moved_experts > 0 && decisive > 0.0;
    if (advice.rebalance) {
      advice.placement = best.placement;
      advice.moves = std::move(moves[std::size_t(advice.best)]);
    }
  }
  advice.reason = reason_for(advice, options);
  return advice;
}

}  // namespace moestat::plan
