// Per-layer, per-expert loads: what the planners and the metrics read.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace moestat::plan {

/// Loads of every logical expert of every layer, `[num_layers, num_experts]` row-major:
/// token assignments counted by a recorder, or any non-negative weight (decayed loads,
/// normalised shares). A layer whose row is all zero is a dense layer (or one nothing was
/// routed through); planners still place its experts, metrics skip it.
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

/// Loads read from one file: one matrix per recorded pass (or one, for an [L, E] file).
struct LoadWindow {
  std::vector<ExpertLoads> passes;  ///< W >= 1 matrices of one shape.
  bool has_window_axis = false;     ///< The file held [W][L][E] rather than [L][E].

  /// [L, E] summed over the passes.
  ExpertLoads total() const;
};

/// The window of the [W, L, E] row-major `values` (W = values.size() / (L * E)): one load
/// matrix per pass. Counts of any arithmetic type (int64 from recorders and files, doubles
/// from JSON statistics).
template <typename T>
LoadWindow split_window(std::int64_t num_layers, std::int64_t num_experts,
                        std::span<const T> values, bool has_window_axis) {
  LoadWindow window;
  window.has_window_axis = has_window_axis;
  const auto size = static_cast<std::size_t>(num_layers * num_experts);
  for (std::size_t first = 0; first + size <= values.size() && size > 0; first += size) {
    window.passes.push_back({num_layers, num_experts,
                             std::vector<double>(values.begin() + std::ptrdiff_t(first),
                                                 values.begin() + std::ptrdiff_t(first + size))});
  }
  return window;
}

/// Parses `{"logical_count": [L][E] or [W][L][E]}` (SGLang; integers or floats, as SGLang's
/// published statistics hold) or `{"expert_popularity": [L][E]}` (fiddler's Mixtral
/// statistics). moestat::Error naming the problem (missing key, ragged rows, negative or
/// non-numeric entry) otherwise.
LoadWindow load_window_from_json(std::string_view text);

/// The window's non-empty passes merged into at most `max_groups` scenarios of consecutive
/// passes, each holding about an equal share of the window's assignments (a pass larger
/// than a share stays whole), so a window of a few large and many small passes becomes a
/// few robust load matrices for plan_moestat. A window with at most one loaded pass gives
/// its total.
std::vector<ExpertLoads> window_scenarios(const LoadWindow& window, std::int64_t max_groups);

/// Each matrix scaled so that every loaded layer sums to 1, then summed: the equal-weight
/// sum of scenarios whose token totals differ.
ExpertLoads equal_weight_sum(std::span<const ExpertLoads> scenarios);

/// `loads` with each loaded layer scaled to sum to 1 (empty layers stay zero).
ExpertLoads normalised_per_layer(const ExpertLoads& loads);

}  // namespace moestat::plan
