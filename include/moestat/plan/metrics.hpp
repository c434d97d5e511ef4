// How well a placement balances a load: the metrics SGLang, vLLM and TensorRT-LLM report,
// the Gini of expert loads, and the hit rate of a hot-expert mask.
//
//   plan::BalanceReport report = plan::evaluate_placement(loads, placement, /*num_gpus=*/32);
//   fmt::print("{:.3f}\n", report.balancedness);
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <moestat/plan/loads.hpp>
#include <span>
#include <vector>

namespace moestat::plan {

/// Per-layer GPU loads under `placement`: `[L, num_gpus]` row-major. An expert's load is
/// split evenly over its replicas; physical slot p lives on GPU `p / (P / num_gpus)`.
/// moestat::Error when the shapes differ or P is not a multiple of num_gpus.
std::vector<double> gpu_loads(const ExpertLoads& loads, const Placement& placement,
                              std::int64_t num_gpus);

/// One layer's GPU loads `[num_gpus]`: mean / max (1 for an empty layer).
double layer_balancedness(std::span<const double> gpu_loads_of_layer);

/// vLLM's balancedness of GPU loads `[L, num_gpus]` (or of one pass of them): the sum over
/// layers of the mean GPU load over the sum over layers of the max GPU load; 0 without load,
/// as vLLM logs it. moestat::Error unless the loads fill rows of num_gpus >= 1.
double balancedness_sum_ratio(std::span<const double> gpu_loads, std::int64_t num_gpus);

/// The balance of one placement under one load. Layers without load (dense layers) are
/// left out of every mean, unlike SGLang's metric, which scores them 1.
struct BalanceReport {
  std::int64_t num_loaded_layers = 0;
  /// Mean over loaded layers of mean GPU load / max GPU load (SGLang's, without the 1e-5).
  double balancedness = 1.0;
  /// balancedness_sum_ratio of the GPU loads (vLLM's), 1 without a loaded layer.
  double balancedness_sum_ratio = 1.0;
  /// Mean over loaded layers of (max - mean) / mean GPU load (TensorRT-LLM's imbalance).
  double imbalance = 0.0;
  /// The loaded layer with the lowest balancedness, and that value.
  std::int64_t worst_layer = -1;
  double worst_balancedness = 1.0;
  /// [L] per layer mean / max; 1 for layers without load.
  std::vector<double> layer_balancedness;
};

BalanceReport evaluate_placement(const ExpertLoads& loads, const Placement& placement,
                                 std::int64_t num_gpus);

/// Gini coefficient of `values` (0 = all equal, towards 1 = one holds everything); 0 when
/// all are zero. Sorted-rank formula: sum_i (2i - n - 1) x_(i) / (n sum x), i from 1.
double gini(std::span<const double> values);

/// Mean over loaded layers of the Gini of the layer's expert loads.
double mean_expert_gini(const ExpertLoads& loads);

/// Share of all assignments served by experts that `mask` ([L, E], nonzero = on the GPU)
/// marks, over loaded layers; 0 when there is no load. moestat::Error on a shape mismatch.
double hot_expert_hit_rate(const ExpertLoads& loads, std::span<const std::uint8_t> mask);

/// The same per layer: [L], 0 for layers without load.
std::vector<double> hot_expert_layer_hit_rates(const ExpertLoads& loads,
                                               std::span<const std::uint8_t> mask);

/// Served balancedness of some passes of a window under a placement: the sum over those
/// passes and their layers of the mean GPU load over the sum of the max GPU load. Each pass
/// waits for its busiest GPU, so this is work over the time spent: every pass counts by its
/// load (its tokens), where a balancedness of the summed window lets the passes' imbalances
/// cancel. The advisor's measure. `passes` are indices into `window`; 1 when they hold no load.
double served_balancedness(const CountWindow& window, std::span<const std::int64_t> passes,
                           const Placement& placement, std::int64_t num_gpus);

}  // namespace moestat::plan
