// Hot-expert strategies on small hand-made loads, the rules of each strategy on random
// loads, and hit rates on the real DeepSeek-V3 statistics (skipped where absent).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdio>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/metrics.hpp>
#include <numeric>

#include "plan/plan_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using plan::HotExpertStrategy;

// Layer 0 dense; layers 1-3 hold E = 4 experts.
const plan::ExpertLoads kLoads{4, 4, {0, 0, 0, 0, 9, 1, 1, 1, 8, 7, 6, 5, 1, 1, 2, 0}};

std::vector<std::uint8_t> mask_of(HotExpertStrategy strategy, std::int64_t budget,
                                  std::uint64_t seed = 0) {
  return plan::choose_hot_experts(kLoads, budget, {.strategy = strategy, .seed = seed}).on_gpu;
}

TEST(HotExperts, BudgetsCountMoeLayersOnly) {
  EXPECT_EQ(plan::num_moe_layers(kLoads), 3);
  EXPECT_EQ(plan::hot_expert_budget_per_layer(kLoads, 2), 6);
  EXPECT_EQ(plan::hot_expert_budget_ratio(kLoads, 0.5), 6);
  EXPECT_MOESTAT_ERROR(plan::hot_expert_budget_per_layer(kLoads, 5), "outside [0, 4]");
  EXPECT_MOESTAT_ERROR(plan::hot_expert_budget_ratio(kLoads, 1.5), "outside [0, 1]");
  EXPECT_MOESTAT_ERROR(plan::choose_hot_experts(kLoads, 13), "outside [0, 12]");
}

TEST(HotExperts, StrategiesByHand) {
  // Dense layer 0 is all on the GPU whatever the strategy.
  EXPECT_EQ(mask_of(HotExpertStrategy::kUniform, 4),
            (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(mask_of(HotExpertStrategy::kFrontLoading, 6),
            (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  // Global top-4 by load: 9, 8, 7, 6; the last layer gets nothing.
  EXPECT_EQ(mask_of(HotExpertStrategy::kFrequency, 4),
            (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0}));
  // Layer-balanced with min_share 0.75: share 4/3, so every layer gets at least
  // floor(0.75 x 4/3) = 1 expert (its heaviest: 9, 8, 2), the rest follows the load: 7.
  const auto balanced = plan::choose_hot_experts(
      kLoads, 4, {.strategy = HotExpertStrategy::kLayerBalanced, .min_share = 0.75});
  EXPECT_EQ(balanced.on_gpu,
            (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(balanced.gpu_experts_per_layer(), (std::vector<std::int64_t>{4, 1, 2, 1}));
}

TEST(HotExperts, RandomIsSeededAndKeepsUniformCounts) {
  const auto a =
      plan::choose_hot_experts(kLoads, 5, {.strategy = HotExpertStrategy::kRandom, .seed = 7});
  const auto b =
      plan::choose_hot_experts(kLoads, 5, {.strategy = HotExpertStrategy::kRandom, .seed = 7});
  EXPECT_EQ(a.on_gpu, b.on_gpu);
  EXPECT_EQ(a.gpu_experts_per_layer(), (std::vector<std::int64_t>{4, 2, 2, 1}));
  bool some_seed_differs = false;
  for (std::uint64_t seed = 8; seed < 20; ++seed) {
    some_seed_differs |= mask_of(HotExpertStrategy::kRandom, 5, seed) != a.on_gpu;
  }
  EXPECT_TRUE(some_seed_differs);
}

TEST(HotExperts, StrategyNamesRoundTrip) {
  for (const auto s :
       {HotExpertStrategy::kUniform, HotExpertStrategy::kFrontLoading, HotExpertStrategy::kRandom,
        HotExpertStrategy::kFrequency, HotExpertStrategy::kLayerBalanced}) {
    EXPECT_EQ(plan::parse_hot_expert_strategy(plan::hot_expert_strategy_name(s)), s);
  }
  EXPECT_MOESTAT_ERROR(plan::parse_hot_expert_strategy("hottest"), "expected one of uniform");
}

RC_GTEST_PROP(HotExpertsProperty, EveryStrategySpendsTheBudgetWithinItsRules, ()) {
  const auto L = *rc::gen::inRange<std::int64_t>(1, 6);
  const auto E = *rc::gen::inRange<std::int64_t>(1, 12);
  plan::ExpertLoads loads{L, E, {}};
  for (std::int64_t i = 0; i < L * E; ++i) {
    loads.values.push_back(double(*rc::gen::inRange<std::int64_t>(0, 20)));
  }
  const std::int64_t M = plan::num_moe_layers(loads);
  const auto budget = *rc::gen::inRange<std::int64_t>(0, M * E + 1);
  const double frequency_hit = plan::hot_expert_hit_rate(
      loads,
      plan::choose_hot_experts(loads, budget, {.strategy = HotExpertStrategy::kFrequency}).on_gpu);
  for (const auto strategy :
       {HotExpertStrategy::kUniform, HotExpertStrategy::kFrontLoading, HotExpertStrategy::kRandom,
        HotExpertStrategy::kFrequency, HotExpertStrategy::kLayerBalanced}) {
    const ExpertMask mask = plan::choose_hot_experts(loads, budget, {.strategy = strategy});
    std::int64_t on_moe = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      const auto row = std::span(mask.on_gpu).subspan(std::size_t(l * E), std::size_t(E));
      const auto count = std::int64_t(std::count(row.begin(), row.end(), 1));
      RC_ASSERT(count == mask.gpu_experts_per_layer()[std::size_t(l)]);
      if (loads.layer_total(l) > 0.0) {
        on_moe += count;
      } else {
        RC_ASSERT(count == E);
      }
    }
    RC_ASSERT(on_moe == budget);
    // The global top-G serves the most assignments of any mask of G experts.
    RC_ASSERT(plan::hot_expert_hit_rate(loads, mask.on_gpu) <= frequency_hit + 1e-12);
  }
}

TEST(HotExperts, RealWorkloadsLayerBalancedIsCloseToFrequencyWithoutStarvingLayers) {
  if (!std::filesystem::exists(test::deepseek_stats_dir())) {
    GTEST_SKIP() << "no real statistics under " << test::deepseek_stats_dir();
  }
  for (const std::string& name : test::deepseek_stats_files()) {
    const plan::ExpertLoads loads = test::read_deepseek_stats(name);
    for (const std::int64_t per_layer : {16, 64}) {
      const std::int64_t budget = plan::hot_expert_budget_per_layer(loads, per_layer);
      std::printf("%-28s %3lld/layer:", name.c_str(), static_cast<long long>(per_layer));
      double frequency = 0.0, balanced = 0.0, uniform = 0.0, frequency_min = 1.0,
             balanced_min = 1.0;
      for (const auto strategy : {HotExpertStrategy::kUniform, HotExpertStrategy::kFrequency,
                                  HotExpertStrategy::kLayerBalanced}) {
        const auto mask = plan::choose_hot_experts(loads, budget, {.strategy = strategy});
        const double hit = plan::hot_expert_hit_rate(loads, mask.on_gpu);
        const auto layers = plan::hot_expert_layer_hit_rates(loads, mask.on_gpu);
        double worst = 1.0;
        for (std::int64_t l = 3; l < loads.num_layers; ++l)
          worst = std::min(worst, layers[std::size_t(l)]);
        std::printf("  %s %.4f (worst layer %.4f)",
                    std::string(plan::hot_expert_strategy_name(strategy)).c_str(), hit, worst);
        if (strategy == HotExpertStrategy::kUniform) uniform = hit;
        if (strategy == HotExpertStrategy::kFrequency) frequency = hit, frequency_min = worst;
        if (strategy == HotExpertStrategy::kLayerBalanced) balanced = hit, balanced_min = worst;
      }
      std::printf("\n");
      EXPECT_GT(balanced, uniform);
      EXPECT_GE(balanced, 0.97 * frequency);
      EXPECT_GE(balanced_min, frequency_min);
    }
  }
}

}  // namespace
}  // namespace moestat
