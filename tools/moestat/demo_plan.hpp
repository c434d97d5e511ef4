// The planning half of `moestat demo`: placements and hot-expert masks planned on the first
// part of the recorded run and judged on the part after it, which they have not seen.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/snapshot.hpp>
#include <moestat/workload.hpp>
#include <utility>

namespace moestat::cli {

struct HeldOutResults {
  HeldOutResults(Placement deepseek_plan, Placement moestat_plan)
      : deepseek(std::move(deepseek_plan)), moestat(std::move(moestat_plan)) {}

  Placement deepseek;  ///< DeepSeek's EPLB on the planning passes summed (as SGLang does).
  Placement moestat;   ///< moestat's planner with groups of the planning passes as scenarios.
  std::int64_t plan_passes = 0;  ///< Passes [0, plan_passes) planned on.
  std::int64_t eval_passes = 0;  ///< The passes after them, judged on.
  std::int64_t num_gpus = 0;
  bool hierarchical = false;
  std::int64_t num_scenarios = 0;
  /// Balancedness (mean over MoE layers of mean / max GPU load) on the held-out passes.
  double recorded_balancedness = 0.0;  ///< The placement the run was recorded under.
  double deepseek_balancedness = 0.0;
  double moestat_balancedness = 0.0;
  /// Hot-expert masks of a quarter of the experts (hot_mask_budget of them over the MoE
  /// layers), chosen on the planning passes; the share of held-out assignments they serve.
  ExpertMask frequency_mask, layer_balanced_mask;
  std::int64_t hot_mask_budget = 0;
  double frequency_hit_rate = 0.0;
  double layer_balanced_hit_rate = 0.0;
  /// Why the two hit rates tie when they do: the experts on the GPU in one mask and not the
  /// other (0: one mask), and the fewest and most experts frequency's mask gives a MoE layer
  /// against the even share G / M that layer-balanced bounds each layer around.
  std::int64_t hot_mask_differences = 0;
  std::int64_t frequency_fewest = 0, frequency_most = 0;
  double even_share = 0.0;
};

/// Plans on the first half of `snapshot`'s window (at least one pass) and evaluates on the
/// rest. The snapshot must hold a window of at least two passes.
HeldOutResults plan_and_evaluate(const Snapshot& snapshot, const workload::Preset& preset,
                                 const Placement& recorded_placement);

}  // namespace moestat::cli
