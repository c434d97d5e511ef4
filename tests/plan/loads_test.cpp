// Load matrices from JSON (SGLang logical_count with integers or floats, [L][E] or
// [W][L][E]; fiddler's expert_popularity), their errors, and equal-weight sums.
#include <gtest/gtest.h>

#include <moestat/plan/loads.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

TEST(Loads, ReadsTwoAndThreeDimensionalCountsIntegersOrFloats) {
  const plan::LoadWindow flat =
      plan::load_window_from_json(R"({"logical_count": [[1, 2.5], [0, 0]]})");
  EXPECT_FALSE(flat.has_window_axis);
  ASSERT_EQ(flat.passes.size(), 1U);
  EXPECT_EQ(flat.passes[0].values, (std::vector<double>{1, 2.5, 0, 0}));
  EXPECT_EQ(flat.passes[0].layer_total(0), 3.5);

  const plan::LoadWindow window = plan::load_window_from_json(
      R"({"logical_count": [[[1, 2]], [[3, 4]], [[0, 0]]], "rank": 0})");
  EXPECT_TRUE(window.has_window_axis);
  ASSERT_EQ(window.passes.size(), 3U);
  EXPECT_EQ(window.passes[1].values, (std::vector<double>{3, 4}));
  EXPECT_EQ(window.total().values, (std::vector<double>{4, 6}));
}

TEST(Loads, ReadsFiddlerExpertPopularity) {
  const plan::LoadWindow w = plan::load_window_from_json(
      R"({"total_input_tokens": 10, "expert_popularity": [[3, 1], [2, 2], [0, 4]]})");
  ASSERT_EQ(w.passes.size(), 1U);
  EXPECT_EQ(w.passes[0].num_layers, 3);
  EXPECT_EQ(w.passes[0].num_experts, 2);
  EXPECT_EQ(w.passes[0].values, (std::vector<double>{3, 1, 2, 2, 0, 4}));
}

TEST(Loads, MalformedInputNamesTheProblem) {
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"counts": []})"), "logical_count");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"logical_count": [[1, -2]]})"),
                       "is -2, expected >= 0");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"logical_count": [[1, 2], [3]]})"),
                       "ragged rows");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"logical_count": [1, 2]})"),
                       "1 levels of nesting");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"expert_popularity": [[[1]]]})"),
                       "expected [layers][experts] (2)");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json(R"({"logical_count": [["a"]]})"),
                       "logical_count");
  EXPECT_MOESTAT_ERROR(plan::load_window_from_json("not json"), "not valid JSON");
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
