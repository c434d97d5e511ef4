// Per-layer, per-expert loads: what the planners and the metrics read.
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <span>
#include <string_view>
#include <vector>

namespace moestat::plan {

/// Loads of every logical expert of every layer, `[num_layers, num_experts]` row-major:
/// token assignments counted by a recorder (loads_of a CountWindow), or any non-negative
/// weight (decayed loads, normalised shares). A layer whose row is all zero is a dense layer (or
/// one nothing was routed through); planners still place its experts, metrics skip it.
struct ExpertLoads {
  std::int64_t num_layers = 0;
  std::int64_t num_experts = 0;
  std::vector<double> values;  ///< [L, E] row-major, finite and >= 0.

  std::span<const double> row(std::int64_t layer) const {
    return {values.data() + layer * num_experts, static_cast<std::size_t>(num_experts)};
  }
  double at(std::int64_t layer, std::int64_t expert) const {
    return values[static_cast<std::size_t>(layer * num_experts + expert)];
  }
  double layer_total(std::int64_t layer) const;

  /// moestat::Error unless L, E >= 1, values has L * E entries, each finite and >= 0.
  void validate() const;
};

/// Passes [first, end) of a count window summed into loads: the one conversion from the
/// count model to what the planners take. Whole counts become doubles (exact up to 2^53 per
/// entry, far beyond any recording); a fractional window's loads are taken as they are.
ExpertLoads loads_of(const CountWindow& window, std::int64_t first, std::int64_t end);
/// The whole window summed.
ExpertLoads loads_of(const CountWindow& window);

/// Indices of the window's passes that carry any load, oldest first.
std::vector<std::int64_t> loaded_passes(const CountWindow& window);

/// The window's non-empty passes merged into at most `max_groups` scenarios of consecutive
/// passes, each holding about an equal share of the window's assignments (a pass larger
/// than a share stays whole), so a window of a few large and many small passes becomes a
/// few robust load matrices for plan_moestat. A window with at most one loaded pass gives
/// its total.
std::vector<ExpertLoads> window_scenarios(const CountWindow& window, std::int64_t max_groups);

/// Each matrix scaled so that every loaded layer sums to 1, then summed: the equal-weight
/// sum of scenarios whose token totals differ.
ExpertLoads equal_weight_sum(std::span<const ExpertLoads> scenarios);

/// `loads` with each loaded layer scaled to sum to 1 (empty layers stay zero).
ExpertLoads normalised_per_layer(const ExpertLoads& loads);

}  // namespace moestat::plan
