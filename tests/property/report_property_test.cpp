// Property tests: the per-GPU loads and balancedness the reports and `moestat eval` show
// (include/moestat/plan/metrics.hpp), for random loads and random placements with replicas,
// against a naive reference and the rules every placement obeys.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>
#include <vector>

namespace moestat {
namespace {

// ---- Naive reference ----

/// Per (layer, GPU): for every slot on the GPU, its expert's load / the expert's replicas,
/// replicas counted by scanning the layer's slots.
std::vector<double> reference_gpu_loads(const std::vector<std::int64_t>& loads,
                                        const std::vector<std::int32_t>& map,
                                        std::int64_t num_layers, std::int64_t num_slots,
                                        std::int64_t num_experts, std::int64_t num_gpus) {
  std::vector<double> out(std::size_t(num_layers * num_gpus), 0.0);
  for (std::int64_t l = 0; l < num_layers; ++l) {
    for (std::int64_t p = 0; p < num_slots; ++p) {
      const std::int32_t e = map[std::size_t(l * num_slots + p)];
      const auto replicas =
          std::count(map.begin() + l * num_slots, map.begin() + (l + 1) * num_slots, e);
      const std::int64_t gpu = p * num_gpus / num_slots;
      out[std::size_t(l * num_gpus + gpu)] +=
          double(loads[std::size_t(l * num_experts + e)]) / double(replicas);
    }
  }
  return out;
}

RC_GTEST_PROP(ReportProperty, GpuLoadsMatchReferenceAndConserveLoad, ()) {
  const auto num_layers = *rc::gen::inRange<std::int64_t>(1, 5);
  const auto num_gpus = *rc::gen::inRange<std::int64_t>(1, 5);
  const auto num_experts = num_gpus * *rc::gen::inRange<std::int64_t>(1, 5);
  const auto num_slots = num_experts + num_gpus * *rc::gen::inRange<std::int64_t>(0, 3);
  std::vector<std::int32_t> map;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    // Every expert once, the extra slots random replicas, then shuffled by a random order.
    std::vector<std::int32_t> row(static_cast<std::size_t>(num_slots));
    for (std::int64_t p = 0; p < num_slots; ++p) {
      row[std::size_t(p)] = p < num_experts
                                ? std::int32_t(p)
                                : *rc::gen::inRange<std::int32_t>(0, std::int32_t(num_experts));
    }
    const auto keys = *rc::gen::container<std::vector<int>>(row.size(), rc::gen::arbitrary<int>());
    std::vector<std::size_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
    for (std::size_t i : order) map.push_back(row[i]);
  }
  const auto loads = *rc::gen::container<std::vector<std::int64_t>>(
      std::size_t(num_layers * num_experts), rc::gen::inRange<std::int64_t>(0, 1000));
  const Placement placement(num_layers, num_slots, num_experts, map);

  const plan::ExpertLoads expert_loads{num_layers, num_experts,
                                       std::vector<double>(loads.begin(), loads.end())};
  const std::vector<double> got = plan::gpu_loads(expert_loads, placement, num_gpus);
  const std::vector<double> expected =
      reference_gpu_loads(loads, map, num_layers, num_slots, num_experts, num_gpus);
  RC_ASSERT(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) RC_ASSERT(std::abs(got[i] - expected[i]) < 1e-9);

  const plan::BalanceReport report = plan::evaluate_placement(expert_loads, placement, num_gpus);
  const std::vector<double>& per_layer = report.layer_balancedness;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    const auto first = got.begin() + l * num_gpus;
    const double total = std::accumulate(first, first + num_gpus, 0.0);
    const auto layer_loads = std::accumulate(
        loads.begin() + l * num_experts, loads.begin() + (l + 1) * num_experts, std::int64_t{0});
    RC_ASSERT(std::abs(total - double(layer_loads)) < 1e-6);  // replicas split, never lose load
    const double b = per_layer[std::size_t(l)];
    if (layer_loads == 0) {
      RC_ASSERT(b == 1.0);  // left out of the means
    } else {
      RC_ASSERT(b >= 1.0 / double(num_gpus) - 1e-12);
      RC_ASSERT(b <= 1.0 + 1e-12);
    }
  }
  const double overall = report.balancedness;
  RC_ASSERT(overall > 0.0);
  RC_ASSERT(overall <= 1.0 + 1e-12);
}

}  // namespace
}  // namespace moestat
