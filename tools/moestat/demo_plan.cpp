#include "demo_plan.hpp"

#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>

namespace moestat::cli {
namespace {

/// Fills the figures that say why the frequency and layer-balanced masks tie when they do.
void compare_hot_masks(const plan::ExpertLoads& planning, HeldOutResults& out) {
  const ExpertMask& a = out.frequency_mask;
  const ExpertMask& b = out.layer_balanced_mask;
  const std::vector<std::int64_t> a_per_layer = a.gpu_experts_per_layer();
  for (std::size_t i = 0; i < a.on_gpu.size(); ++i) {
    out.hot_mask_differences += a.on_gpu[i] && !b.on_gpu[i] ? 1 : 0;
  }
  out.frequency_fewest = planning.num_experts;
  for (std::int64_t l = 0; l < planning.num_layers; ++l) {
    if (planning.layer_total(l) <= 0.0) continue;  // a dense layer: all on the GPU, no choice
    out.frequency_fewest = std::min(out.frequency_fewest, a_per_layer[std::size_t(l)]);
    out.frequency_most = std::max(out.frequency_most, a_per_layer[std::size_t(l)]);
  }
  const std::int64_t moe_layers = plan::num_moe_layers(planning);
  out.even_share = moe_layers > 0 ? double(out.hot_mask_budget) / double(moe_layers) : 0.0;
}

}  // namespace

HeldOutResults plan_and_evaluate(const Snapshot& snapshot, const workload::Preset& preset,
                                 const Placement& recorded_placement) {
  const std::int64_t passes = snapshot.window_size();
  MOESTAT_CHECK(passes >= 2,
                "planning needs at least 2 recorded passes (one to plan on, one to "
                "judge the plans on), got {}",
                passes);
  const std::int64_t plan_passes = passes / 2;
  const plan::EplbConfig config{.num_replicas = preset.topology.num_physical_experts,
                                .num_groups = preset.expert_groups,
                                .num_nodes = preset.nodes,
                                .num_gpus = preset.topology.ep_size};
  const CountWindow window = count_window_of(snapshot);
  const CountWindow planning = window.passes(0, plan_passes);
  const plan::ExpertLoads planning_total = plan::loads_of(planning);
  const plan::ExpertLoads held_out = plan::loads_of(window, plan_passes, passes);

  // As SGLang rebalances: the reference on the window's sum; moestat with the window's
  // passes grouped into scenarios of future traffic (as `moestat plan` does).
  constexpr std::int64_t kMaxScenarios = 4;
  const std::vector<plan::ExpertLoads> scenarios = plan::window_scenarios(planning, kMaxScenarios);
  HeldOutResults out{plan::plan_deepseek(planning_total, config),
                     plan::plan_moestat(scenarios, config)};
  out.plan_passes = plan_passes;
  out.eval_passes = passes - plan_passes;
  out.num_gpus = config.num_gpus;
  out.hierarchical = config.hierarchical();
  out.num_scenarios = std::int64_t(scenarios.size());

  out.recorded_balancedness =
      plan::evaluate_placement(held_out, recorded_placement, out.num_gpus).balancedness;
  out.deepseek_balancedness =
      plan::evaluate_placement(held_out, out.deepseek, out.num_gpus).balancedness;
  out.moestat_balancedness =
      plan::evaluate_placement(held_out, out.moestat, out.num_gpus).balancedness;

  constexpr double kGpuShare = 0.25;
  const std::int64_t budget = plan::hot_expert_budget_ratio(planning_total, kGpuShare);
  out.hot_mask_budget = budget;
  out.frequency_mask = plan::choose_hot_experts(planning_total, budget,
                                                {.strategy = plan::HotExpertStrategy::kFrequency});
  out.layer_balanced_mask = plan::choose_hot_experts(
      planning_total, budget, {.strategy = plan::HotExpertStrategy::kLayerBalanced});
  out.frequency_hit_rate = plan::hot_expert_hit_rate(held_out, out.frequency_mask.on_gpu);
  out.layer_balanced_hit_rate = plan::hot_expert_hit_rate(held_out, out.layer_balanced_mask.on_gpu);
  compare_hot_masks(planning_total, out);
  return out;
}

}  // namespace moestat::cli
