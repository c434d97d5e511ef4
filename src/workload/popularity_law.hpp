// Internal: a PopularityModel's random state for one MoE layer, and the popularity it gives
// at any pass and phase.
#pragma once

#include <cstdint>
#include <moestat/workload.hpp>
#include <span>
#include <vector>

namespace moestat::workload::detail {

/// The drawn state of one MoE layer: its spread, hot experts and drift anchors.
struct LayerLaw {
  double sigma = 0.0;
  std::vector<std::uint8_t> hot;  ///< [E] 1 for the layer's hot experts.
  /// [2 phases, num_anchors, E + G]: standard normal z at passes 0, D, 2D, ... (D =
  /// drift_passes); entries E.. are the groups' common parts.
  std::vector<double> anchors;
  std::int64_t num_anchors = 0;
};

/// Draws MoE layer `layer` (the `moe_index`-th of `num_moe_layers`) from `model`; anchors
/// cover passes [0, num_passes). Depends only on (seed, layer) and the arguments.
LayerLaw draw_layer_law(const ModelTopology& topology, const PopularityModel& model,
                        std::uint64_t seed, std::int64_t layer, std::int64_t moe_index,
                        std::int64_t num_moe_layers, std::int64_t num_passes,
                        std::int64_t drift_passes);

/// Writes [E] the layer's popularity (sums to 1) at `pass` in `phase`.
void layer_popularity(const LayerLaw& law, const ModelTopology& topology,
                      const PopularityModel& model, std::int64_t drift_passes, std::int64_t pass,
                      Phase phase, std::span<double> out);

}  // namespace moestat::workload::detail
