#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>

#include "served_balance.hpp"

namespace moestat::plan {

std::vector<double> gpu_loads(const ExpertLoads& loads, const Placement& placement,
                              std::int64_t num_gpus) {
  loads.validate();
  MOESTAT_CHECK(placement.num_layers() == loads.num_layers &&
                    placement.num_logical_experts() == loads.num_experts,
                "metrics: the placement is for {} layers x {} experts, the loads for {} x {}",
                placement.num_layers(), placement.num_logical_experts(), loads.num_layers,
                loads.num_experts);
  const std::int64_t num_slots = placement.num_physical_experts();
  MOESTAT_CHECK(num_gpus > 0 && num_slots % num_gpus == 0,
                "metrics: {} physical slots do not divide evenly over {} GPUs", num_slots,
                num_gpus);
  const std::int64_t slots_per_gpu = num_slots / num_gpus;
  std::vector<double> out(std::size_t(loads.num_layers * num_gpus), 0.0);
  const std::span<const std::int32_t> counts = placement.replica_counts();
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    double* row = out.data() + layer * num_gpus;
    for (std::int64_t slot = 0; slot < num_slots; ++slot) {
      const std::int32_t expert = placement.logical_of(layer, slot);
      row[slot / slots_per_gpu] +=
          loads.at(layer, expert) / counts[std::size_t(layer * loads.num_experts + expert)];
    }
  }
  return out;
}

double layer_balancedness(std::span<const double> loads) {
  const double max = *std::max_element(loads.begin(), loads.end());
  if (max <= 0.0) return 1.0;
  return std::accumulate(loads.begin(), loads.end(), 0.0) / double(loads.size()) / max;
}

double balancedness_sum_ratio(std::span<const double> gpu_loads, std::int64_t num_gpus) {
  MOESTAT_CHECK(num_gpus > 0 && gpu_loads.size() % std::size_t(num_gpus) == 0,
                "balancedness: {} GPU loads do not fill rows of {} GPUs", gpu_loads.size(),
                num_gpus);
  double sum_means = 0.0, sum_maxes = 0.0;
  for (std::size_t first = 0; first < gpu_loads.size(); first += std::size_t(num_gpus)) {
    const std::span<const double> row = gpu_loads.subspan(first, std::size_t(num_gpus));
    sum_means += std::accumulate(row.begin(), row.end(), 0.0) / double(num_gpus);
    sum_maxes += *std::max_element(row.begin(), row.end());
  }
  return sum_maxes > 0.0 ? sum_means / sum_maxes : 0.0;
}

BalanceReport evaluate_placement(const ExpertLoads& loads, const Placement& placement,
                                 std::int64_t num_gpus) {
  const std::vector<double> per_gpu = gpu_loads(loads, placement, num_gpus);
  BalanceReport report;
  report.layer_balancedness.assign(std::size_t(loads.num_layers), 1.0);
  double sum_ratio = 0.0, sum_imbalance = 0.0;
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    const std::span<const double> row(per_gpu.data() + layer * num_gpus, std::size_t(num_gpus));
    const double max = *std::max_element(row.begin(), row.end());
    if (max <= 0.0) continue;
    const double mean = std::accumulate(row.begin(), row.end(), 0.0) / double(num_gpus);
    const double ratio = mean / max;
    report.layer_balancedness[std::size_t(layer)] = ratio;
    ++report.num_loaded_layers;
    sum_ratio += ratio;
    sum_imbalance += (max - mean) / mean;
    if (report.worst_layer < 0 || ratio < report.worst_balancedness) {
      report.worst_layer = layer;
      report.worst_balancedness = ratio;
    }
  }
  if (report.num_loaded_layers > 0) {
    const auto n = double(report.num_loaded_layers);
    report.balancedness = sum_ratio / n;
    report.balancedness_sum_ratio = balancedness_sum_ratio(per_gpu, num_gpus);
    report.imbalance = sum_imbalance / n;
  }
  return report;
}

double gini(std::span<const double> values) {
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const double total = std::accumulate(sorted.begin(), sorted.end(), 0.0);
  if (total <= 0.0) return 0.0;
  const auto n = double(sorted.size());
  double weighted = 0.0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    weighted += (2.0 * double(i + 1) - n - 1.0) * sorted[i];
  }
  return weighted / (n * total);
}

double mean_expert_gini(const ExpertLoads& loads) {
  loads.validate();
  double sum = 0.0;
  std::int64_t loaded = 0;
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    if (loads.layer_total(layer) <= 0.0) continue;
    sum += gini(loads.row(layer));
    ++loaded;
  }
  return loaded == 0 ? 0.0 : sum / double(loaded);
}

namespace {

void check_mask_shape(const ExpertLoads& loads, std::span<const std::uint8_t> mask) {
  loads.validate();
  MOESTAT_CHECK(std::int64_t(mask.size()) == loads.num_layers * loads.num_experts,
                "metrics: the mask has {} entries, the loads are {} layers x {} experts",
                mask.size(), loads.num_layers, loads.num_experts);
}

}  // namespace

std::vector<double> hot_expert_layer_hit_rates(const ExpertLoads& loads,
                                               std::span<const std::uint8_t> mask) {
  check_mask_shape(loads, mask);
  std::vector<double> out(std::size_t(loads.num_layers), 0.0);
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    const double total = loads.layer_total(layer);
    if (total <= 0.0) continue;
    double hit = 0.0;
    for (std::int64_t e = 0; e < loads.num_experts; ++e) {
      if (mask[std::size_t(layer * loads.num_experts + e)] != 0) hit += loads.at(layer, e);
    }
    out[std::size_t(layer)] = hit / total;
  }
  return out;
}

double hot_expert_hit_rate(const ExpertLoads& loads, std::span<const std::uint8_t> mask) {
  check_mask_shape(loads, mask);
  double hit = 0.0, total = 0.0;
  for (std::size_t i = 0; i < loads.values.size(); ++i) {
    total += loads.values[i];
    if (mask[i] != 0) hit += loads.values[i];
  }
  return total > 0.0 ? hit / total : 0.0;
}

double served_balancedness(const CountWindow& window, std::span<const std::int64_t> passes,
                           const Placement& placement, std::int64_t num_gpus) {
  return detail::served_balancedness(detail::pass_loads(window, passes, placement, num_gpus));
}

}  // namespace moestat::plan
