#include "gpu_load.hpp"

#include <algorithm>

namespace moestat::report::detail {

std::vector<double> gpu_loads(std::span<const std::int64_t> loads, const Placement& placement,
                              std::int64_t num_gpus) {
  const std::int64_t num_layers = placement.num_layers();
  const std::int64_t num_experts = placement.num_logical_experts();
  const std::int64_t num_slots = placement.num_physical_experts();
  const std::int64_t slots_per_gpu = num_slots / num_gpus;
  std::vector<double> out(std::size_t(num_layers * num_gpus), 0.0);
  const auto replicas = placement.replica_counts();
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    for (std::int64_t slot = 0; slot < num_slots; ++slot) {
      const std::int64_t expert = placement.logical_of(layer, slot);
      const auto at = std::size_t(layer * num_experts + expert);
      out[std::size_t(layer * num_gpus + slot / slots_per_gpu)] +=
          double(loads[at]) / double(replicas[at]);
    }
  }
  return out;
}

std::vector<double> layer_balancedness(std::span<const double> gpu_loads, std::int64_t num_layers,
                                       std::int64_t num_gpus) {
  std::vector<double> out(static_cast<std::size_t>(num_layers), -1.0);
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    const auto row = gpu_loads.subspan(std::size_t(layer * num_gpus), std::size_t(num_gpus));
    double total = 0.0;
    for (double load : row) total += load;
    if (total <= 0.0) continue;
    out[std::size_t(layer)] = total / double(num_gpus) / *std::max_element(row.begin(), row.end());
  }
  return out;
}

double balancedness(std::span<const double> layer_balancedness) {
  double sum = 0.0;
  std::int64_t count = 0;
  for (double value : layer_balancedness) {
    if (value < 0.0) continue;
    sum += value;
    ++count;
  }
  return count == 0 ? 1.0 : sum / double(count);
}

Placement identity_placement(std::int64_t num_layers, std::int64_t num_experts) {
  return Placement::trivial(num_layers, num_experts, num_experts);
}

}  // namespace moestat::report::detail
