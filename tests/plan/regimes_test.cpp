// Regimes of a count window on hand-made traffic: the distance of two mixes, phases cut where
// the mix changes and named when they return, one deviating pass taken for noise, a change
// hidden by noisy passes found in chunks, empty passes, and bad options.
#include <gtest/gtest.h>

#include <moestat/plan/regimes.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

constexpr std::int64_t kLayers = 2, kExperts = 4;

/// Layer 0 dense (empty); layer 1 puts 700 of 1000 assignments on `hot` and 100 on each
/// other expert, with a wobble of a few counts from pass to pass.
std::vector<std::int64_t> pass_hot_on(std::int32_t hot, std::int64_t wobble_seed) {
  std::vector<std::int64_t> pass(std::size_t(kLayers * kExperts), 0);
  for (std::int32_t e = 0; e < kExperts; ++e) {
    const std::int64_t wobble = (wobble_seed * 7 + e * 3) % 5 - 2;  // -2..2
    pass[std::size_t(kExperts + e)] = (e == hot ? 700 : 100) + wobble;
  }
  return pass;
}

/// One pass per entry of `hot` (-1: an empty pass).
CountWindow window_of(const std::vector<std::int32_t>& hot) {
  CountWindow window{.window_size = std::int64_t(hot.size()),
                     .num_layers = kLayers,
                     .num_experts = kExperts,
                     .has_window_axis = true};
  for (std::size_t w = 0; w < hot.size(); ++w) {
    const std::vector<std::int64_t> pass = hot[w] < 0
                                               ? std::vector<std::int64_t>(kLayers * kExperts, 0)
                                               : pass_hot_on(hot[w], std::int64_t(w));
    window.counts.insert(window.counts.end(), pass.begin(), pass.end());
  }
  return window;
}

std::vector<std::int32_t> repeated(std::int32_t hot, int times) {
  return std::vector<std::int32_t>(std::size_t(times), hot);
}

std::vector<std::int32_t> operator+(std::vector<std::int32_t> a,
                                    const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Regimes, MixDistanceIsTheShareOfAssignmentsThatMove) {
  const plan::ExpertLoads a{1, 2, {3.0, 1.0}}, b{1, 2, {1.0, 3.0}}, c{1, 2, {6.0, 2.0}};
  EXPECT_DOUBLE_EQ(plan::mix_distance(a, c), 0.0) << "the same shares at another scale";
  EXPECT_DOUBLE_EQ(plan::mix_distance(a, b), 0.5);
  EXPECT_DOUBLE_EQ(plan::mix_distance({1, 2, {1.0, 0.0}}, {1, 2, {0.0, 1.0}}), 1.0);
  // Only layers loaded in both count.
  const plan::ExpertLoads two_layers{2, 2, {3.0, 1.0, 0.0, 0.0}}, other{2, 2, {1.0, 3.0, 5.0, 5.0}};
  EXPECT_DOUBLE_EQ(plan::mix_distance(two_layers, other), 0.5);
  EXPECT_MOESTAT_ERROR(plan::mix_distance(a, two_layers), "different shapes");
}

TEST(Regimes, PhasesAreCutWhereTheMixChangesAndNamedWhenTheyReturn) {
  const plan::Regimes r =
      plan::find_regimes(window_of(repeated(0, 6) + repeated(1, 5) + repeated(0, 4)));
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_EQ(r.segments[0].first, 0);
  EXPECT_EQ(r.segments[0].end, 6);
  EXPECT_EQ(r.segments[1].first, 6);
  EXPECT_EQ(r.segments[1].end, 11);
  EXPECT_EQ(r.segments[2].first, 11);
  EXPECT_EQ(r.segments[2].end, 15);
  EXPECT_EQ(r.segments[0].regime, 0);
  EXPECT_EQ(r.segments[1].regime, 1);
  EXPECT_EQ(r.segments[2].regime, 0) << "the first phase returned";
  EXPECT_TRUE(r.current_recurs());
  EXPECT_EQ(r.cycle_start(), 0u);
  EXPECT_EQ(r.segments[1].passes, (std::vector<std::int64_t>{6, 7, 8, 9, 10}));
  EXPECT_GE(r.threshold, 0.05);
}

TEST(Regimes, ANewPhaseDoesNotRecur) {
  const plan::Regimes r = plan::find_regimes(window_of(repeated(0, 6) + repeated(1, 3)));
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_FALSE(r.current_recurs());
  EXPECT_EQ(r.cycle_start(), 1u);
}

TEST(Regimes, OneDeviatingPassIsNoise) {
  // One pass in the middle, and the newest pass, deviate: neither starts a segment.
  const plan::Regimes r = plan::find_regimes(
      window_of(repeated(0, 5) + repeated(2, 1) + repeated(0, 5) + repeated(3, 1)));
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_EQ(r.segments[0].passes.size(), 12u);
  EXPECT_FALSE(r.current_recurs());
}

TEST(Regimes, EmptyPassesBelongToTheSegmentTheyFallIn) {
  const plan::Regimes r = plan::find_regimes(
      window_of(repeated(-1, 2) + repeated(0, 4) + repeated(-1, 1) + repeated(1, 4)));
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_EQ(r.segments[0].first, 0);
  EXPECT_EQ(r.segments[0].end, 7);
  EXPECT_EQ(r.segments[0].passes, (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(r.segments[1].passes, (std::vector<std::int64_t>{7, 8, 9, 10}));
  EXPECT_TRUE(plan::find_regimes(window_of(repeated(-1, 3))).segments.empty());
}

TEST(Regimes, TheFloorKeepsSmallDriftOneRegime) {
  // Each pass differs from the last by a few counts (distance about 0.005): below the floor.
  const plan::Regimes r = plan::find_regimes(window_of(repeated(0, 10)));
  ASSERT_EQ(r.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(r.threshold, 0.05);
  // With no floor and a tight multiple, the wobble itself is cut into segments.
  const plan::Regimes tight =
      plan::find_regimes(window_of(repeated(0, 10)), {.noise_multiple = 0.01, .min_distance = 0.0});
  EXPECT_GT(tight.segments.size(), 1u);
}

TEST(Regimes, ChangesHiddenByNoisyPassesShowInChunks) {
  // Each pass is hot on one expert of a pair, in turn: consecutive passes differ by 0.6, as
  // much as the two phases do, so pass by pass no change stands out; pairs of passes are
  // steady and show the change from experts {0, 1} to {2, 3} at pass 16.
  std::vector<std::int32_t> hot;
  for (int w = 0; w < 16; ++w) hot.push_back(w % 2);
  for (int w = 0; w < 16; ++w) hot.push_back(2 + w % 2);
  const plan::Regimes r = plan::find_regimes(window_of(hot));
  ASSERT_EQ(r.segments.size(), 2u);
  EXPECT_EQ(r.segments[1].first, 16);
  EXPECT_EQ(r.segments[1].regime, 1);
  EXPECT_LT(r.threshold, 0.3) << "the threshold of the scale that cut";
}

TEST(Regimes, NamesBadOptions) {
  const CountWindow w = window_of(repeated(0, 3));
  EXPECT_MOESTAT_ERROR(plan::find_regimes(w, {.noise_multiple = 0.0}), "noise multiple");
  EXPECT_MOESTAT_ERROR(plan::find_regimes(w, {.min_distance = 1.5}), "minimum distance");
  CountWindow broken = w;
  broken.counts.pop_back();
  EXPECT_MOESTAT_ERROR(plan::find_regimes(broken), "entries");
}

}  // namespace
}  // namespace moestat
