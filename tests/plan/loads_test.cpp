// Load matrices from count windows (whole counts or fractional loads, a window's passes or
// all of them), and equal-weight sums.
#include <gtest/gtest.h>

#include <moestat/plan/loads.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

TEST(Loads, LoadsOfSumsTheWindowOfWholeOrFractionalCounts) {
  const CountWindow flat{.window_size = 1,
                         .num_layers = 2,
                         .num_experts = 2,
                         .has_window_axis = false,
                         .counts = {},
                         .fractional_counts = {1, 2.5, 0, 0}};
  const plan::ExpertLoads flat_loads = plan::loads_of(flat);
  EXPECT_EQ(flat_loads.num_layers, 2);
  EXPECT_EQ(flat_loads.num_experts, 2);
  EXPECT_EQ(flat_loads.values, (std::vector<double>{1, 2.5, 0, 0}));
  EXPECT_EQ(flat_loads.layer_total(0), 3.5);

  const CountWindow window{.window_size = 3,
                           .num_layers = 1,
                           .num_experts = 2,
                           .has_window_axis = true,
                           .counts = {1, 2, 3, 4, 0, 0}};
  EXPECT_EQ(plan::loads_of(window, 1, 2).values, (std::vector<double>{3, 4}));
  EXPECT_EQ(plan::loads_of(window, 0, 2).values, (std::vector<double>{4, 6}));
  EXPECT_EQ(plan::loads_of(window).values, (std::vector<double>{4, 6}));
}

TEST(Loads, LoadsOfRefusesPassesOutsideTheWindow) {
  const CountWindow window{.window_size = 2,
                           .num_layers = 1,
                           .num_experts = 1,
                           .has_window_axis = true,
                           .counts = {1, 2}};
  EXPECT_MOESTAT_ERROR(plan::loads_of(window, 1, 3), "passes [1, 3)");
  EXPECT_MOESTAT_ERROR(plan::loads_of(window, 1, 1), "passes [1, 1)");
  EXPECT_MOESTAT_ERROR(plan::loads_of(window, -1, 1), "passes [-1, 1)");
}

TEST(Loads, WindowScenariosGroupPassesOfAboutEqualMass) {
  // Passes of 10, 0 (skipped), 10, 1 and 9 assignments; each loaded pass goes to the group
  // its middle assignment falls in: the first 10 of 30, then the rest.
  const CountWindow window{.window_size = 5,
                           .num_layers = 1,
                           .num_experts = 2,
                           .has_window_axis = true,
                           .counts = {4, 6, 0, 0, 10, 0, 1, 0, 0, 9}};
  const std::vector<plan::ExpertLoads> two = plan::window_scenarios(window, 2);
  ASSERT_EQ(two.size(), 2U);
  EXPECT_EQ(two[0].values, (std::vector<double>{4, 6}));
  EXPECT_EQ(two[1].values, (std::vector<double>{11, 9}));
  // One loaded pass: its total.
  const std::vector<plan::ExpertLoads> one = plan::window_scenarios(window.passes(0, 2), 4);
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].values, (std::vector<double>{4, 6}));
}

TEST(Loads, EqualWeightSumNormalisesEachLayerOfEachMatrix) {
  const plan::ExpertLoads a{2, 2, {1, 3, 0, 0}};
  const plan::ExpertLoads b{2, 2, {10, 10, 5, 15}};
  const std::vector<plan::ExpertLoads> both{a, b};
  EXPECT_EQ(plan::equal_weight_sum(both).values, (std::vector<double>{0.75, 1.25, 0.25, 0.75}));
  const std::vector<plan::ExpertLoads> mismatched{a, plan::ExpertLoads{1, 2, {1, 1}}};
  EXPECT_MOESTAT_ERROR(plan::equal_weight_sum(mismatched), "differ in shape");
}

}  // namespace
}  // namespace moestat
