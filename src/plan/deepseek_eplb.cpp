#include <moestat/plan/eplb.hpp>

#include "deepseek_layer.hpp"

namespace moestat::plan {

Placement plan_deepseek(const ExpertLoads& loads, const EplbConfig& config) {
  loads.validate();
  config.validate(loads.num_experts);
  const auto num_experts = std::size_t(loads.num_experts);
  const auto num_slots = std::size_t(config.num_replicas);
  std::vector<std::int32_t> map(std::size_t(loads.num_layers) * num_slots);
  std::vector<float> weight(num_experts);
  detail::DeepseekScratch scratch;
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    // The reference rounds its input to float32 first (weight.float()).
    const std::span<const double> row = loads.row(layer);
    // + 0 turns a -0 into +0, which sorts as the reference sorts it.
    for (std::size_t e = 0; e < num_experts; ++e) weight[e] = static_cast<float>(row[e]) + 0.0F;
    detail::deepseek_plan_layer(
        weight, config, std::span(map).subspan(std::size_t(layer) * num_slots, num_slots), scratch);
  }
  return Placement(loads.num_layers, config.num_replicas, loads.num_experts, std::move(map));
}

}  // namespace moestat::plan
