// Balance metrics, Gini and hit rates against values worked out by hand.
#include <gtest/gtest.h>

#include <moestat/plan/metrics.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

plan::ExpertLoads loads_of(std::int64_t num_layers, std::int64_t num_experts,
                           std::vector<double> values) {
  return {num_layers, num_experts, std::move(values)};
}

// Layer 0 is dense (no load). Layer 1: E = 4 loads [4, 2, 3, 1]; map [0 1 | 2 3 | 0 1] on
// 3 GPUs of 2 slots; experts 0 and 1 have two replicas each, so slots weigh
// [2 1 | 3 1 | 2 1] and GPUs [3, 4, 3]: mean 10/3, max 4. Layer 2: loads [6, 0, 0, 0]
// under the same map: slots [3 0 | 0 0 | 3 0], GPUs [3, 0, 3]: mean 2, max 3.
class MetricsTest : public ::testing::Test {
 protected:
  plan::ExpertLoads loads = loads_of(3, 4, {0, 0, 0, 0, 4, 2, 3, 1, 6, 0, 0, 0});
  Placement placement{3, 6, 4, {0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 0, 1}};
};

TEST_F(MetricsTest, GpuLoadsSplitAnExpertEvenlyOverItsReplicas) {
  const std::vector<double> gpu = plan::gpu_loads(loads, placement, 3);
  EXPECT_EQ(gpu, (std::vector<double>{0, 0, 0, 3, 4, 3, 3, 0, 3}));
}

TEST(BalancednessSumRatio, IsVllmsRatioOfSumsAndZeroWithoutLoad) {
  // Layers [1, 3] and [2, 2] on 2 GPUs: means 2 + 2 over maxes 3 + 2.
  EXPECT_DOUBLE_EQ(plan::balancedness_sum_ratio(std::vector<double>{1, 3, 2, 2}, 2), 4.0 / 5.0);
  EXPECT_EQ(plan::balancedness_sum_ratio(std::vector<double>{0, 0, 0, 0}, 2), 0.0);
  EXPECT_EQ(plan::balancedness_sum_ratio(std::vector<double>{}, 2), 0.0);
  EXPECT_MOESTAT_ERROR(plan::balancedness_sum_ratio(std::vector<double>{1, 2, 3}, 2),
                       "3 GPU loads do not fill rows of 2 GPUs");
  EXPECT_MOESTAT_ERROR(plan::balancedness_sum_ratio(std::vector<double>{1}, 0), "rows of 0 GPUs");
}

TEST_F(MetricsTest, BalanceReportSkipsLayersWithoutLoad) {
  const plan::BalanceReport r = plan::evaluate_placement(loads, placement, 3);
  EXPECT_EQ(r.num_loaded_layers, 2);
  EXPECT_DOUBLE_EQ(r.balancedness, ((10.0 / 3.0) / 4.0 + 2.0 / 3.0) / 2.0);
  EXPECT_DOUBLE_EQ(r.balancedness_sum_ratio, (10.0 / 3.0 + 2.0) / (4.0 + 3.0));
  EXPECT_DOUBLE_EQ(r.imbalance, ((4.0 - 10.0 / 3.0) / (10.0 / 3.0) + (3.0 - 2.0) / 2.0) / 2.0);
  EXPECT_EQ(r.worst_layer, 2);
  EXPECT_DOUBLE_EQ(r.worst_balancedness, 2.0 / 3.0);
  EXPECT_EQ(r.layer_balancedness, (std::vector<double>{1.0, 10.0 / 12.0, 2.0 / 3.0}));
}

TEST_F(MetricsTest, ShapeMismatchesAreErrors) {
  EXPECT_MOESTAT_ERROR(plan::gpu_loads(loads, placement, 4), "do not divide evenly over 4 GPUs");
  EXPECT_MOESTAT_ERROR(plan::gpu_loads(loads_of(1, 4, {1, 1, 1, 1}), placement, 3),
                       "the placement is for 3 layers x 4 experts, the loads for 1 x 4");
  EXPECT_MOESTAT_ERROR(plan::gpu_loads(loads_of(3, 4, std::vector<double>(12, -1.0)), placement, 3),
                       "expected a finite value >= 0");
}

TEST(Metrics, GiniOfEqualAndConcentratedLoads) {
  EXPECT_DOUBLE_EQ(plan::gini(std::vector<double>{1, 1, 1, 1}), 0.0);
  // sorted [0 0 0 4]: (2*4 - 4 - 1) * 4 / (4 * 4)
  EXPECT_DOUBLE_EQ(plan::gini(std::vector<double>{0, 4, 0, 0}), 0.75);
  // sorted [1 3]: ((2 - 3) * 1 + (4 - 3) * 3) / (2 * 4)
  EXPECT_DOUBLE_EQ(plan::gini(std::vector<double>{3, 1}), 0.25);
  EXPECT_DOUBLE_EQ(plan::gini(std::vector<double>{0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(plan::mean_expert_gini(loads_of(3, 2, {0, 0, 3, 1, 1, 1})), 0.125);
}

TEST(Metrics, HitRateCountsAssignmentsToMaskedExperts) {
  const plan::ExpertLoads loads = loads_of(2, 3, {0, 0, 0, 5, 3, 2});
  const std::vector<std::uint8_t> mask{1, 1, 1, 1, 0, 1};
  EXPECT_DOUBLE_EQ(plan::hot_expert_hit_rate(loads, mask), 7.0 / 10.0);
  EXPECT_EQ(plan::hot_expert_layer_hit_rates(loads, mask), (std::vector<double>{0.0, 0.7}));
  EXPECT_MOESTAT_ERROR(plan::hot_expert_hit_rate(loads, std::vector<std::uint8_t>(5, 1)),
                       "the mask has 5 entries");
}

TEST(Metrics, LayerBalancednessOfAnEmptyLayerIsOne) {
  EXPECT_DOUBLE_EQ(plan::layer_balancedness(std::vector<double>{0, 0}), 1.0);
  EXPECT_DOUBLE_EQ(plan::layer_balancedness(std::vector<double>{1, 3}), 2.0 / 3.0);
}

}  // namespace
}  // namespace moestat
