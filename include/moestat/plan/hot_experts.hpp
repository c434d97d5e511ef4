// Hot-expert GPU masks for CPU/GPU hybrid inference: which experts of each layer live on the
// GPU (the rest run on the CPU), under a budget of GPU experts.
//
//   const std::int64_t budget = plan::hot_expert_budget_per_layer(loads, 32);
//   ExpertMask mask = plan::choose_hot_experts(
//       loads, budget, {.strategy = plan::HotExpertStrategy::kLayerBalanced});
//   double hit = plan::hot_expert_hit_rate(loads, mask.on_gpu);
#pragma once

#include <cstdint>
#include <moestat/expert_mask.hpp>
#include <moestat/plan/loads.hpp>
#include <string_view>
#include <vector>

namespace moestat::plan {

enum class HotExpertStrategy : std::uint8_t {
  kUniform,        ///< The budget split evenly over MoE layers; lowest expert ids.
  kFrontLoading,   ///< MoE layers filled in order, each completely, until the budget is spent.
  kRandom,         ///< Per-layer counts as kUniform; experts drawn at random (seeded).
  kFrequency,      ///< KTransformers': one global top-G over all (MoE layer, expert) loads.
  kLayerBalanced,  ///< The global top-G within per-layer bounds (see HotExpertOptions).
};

/// "uniform", "front-loading", "random", "frequency", "layer-balanced".
std::string_view hot_expert_strategy_name(HotExpertStrategy strategy) noexcept;
/// The inverse; moestat::Error listing the names otherwise.
HotExpertStrategy parse_hot_expert_strategy(std::string_view name);

struct HotExpertOptions {
  HotExpertStrategy strategy = HotExpertStrategy::kLayerBalanced;
  std::uint64_t seed = 0;  ///< kRandom only.
  /// kLayerBalanced: every MoE layer gets at least floor(min_share x G / M) and at most
  /// ceil(max_share x G / M) GPU experts (G the budget, M the MoE layers), so no layer is
  /// starved while the budget still follows the load.
  double min_share = 0.5;
  double max_share = 2.0;
};

/// MoE layers of `loads`: layers with any load.
std::int64_t num_moe_layers(const ExpertLoads& loads);
/// G = per_layer x MoE layers (KTransformers' kt_num_gpu_experts x layers). per_layer must be
/// in [0, E].
std::int64_t hot_expert_budget_per_layer(const ExpertLoads& loads, std::int64_t per_layer);
/// G = round(ratio x MoE layers x E); ratio in [0, 1].
std::int64_t hot_expert_budget_ratio(const ExpertLoads& loads, double ratio);

/// Chooses `budget` GPU experts over the MoE layers of `loads` (budget in [0, M x E]).
/// Layers without load (dense layers: they have no experts to offload) are all on the GPU,
/// as KTransformers writes them. Ties in load go to the lower (layer, expert).
/// moestat::Error on bad input or options.
ExpertMask choose_hot_experts(const ExpertLoads& loads, std::int64_t budget,
                              const HotExpertOptions& options = {});

}  // namespace moestat::plan
