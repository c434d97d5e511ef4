// The rebalance advisor on hand-made windows whose answer is known: balanced traffic keeps
// its placement, a skew that cheap moves fix is rebalanced, the same skew with costly moves
// is not, traffic that has already moved on is not chased, a new regime is planned for
// alone and traffic that returns for all of its regimes, a regime too new to judge waits,
// a lift below the floor is left; the advice is a function of the seed; bad inputs are named.
#include <gtest/gtest.h>

#include <moestat/plan/advisor.hpp>
#include <moestat/plan/metrics.hpp>
#include <set>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

constexpr std::int64_t kLayers = 2, kExperts = 8, kPasses = 10;
/// 16 slots on 4 GPUs: the trivial placement puts experts 0-3 on GPUs 0 and 2, 4-7 on 1 and 3.
const plan::EplbConfig kConfig{.num_replicas = 16, .num_groups = 1, .num_nodes = 1, .num_gpus = 4};

/// One pass per entry of `hot_per_pass`: its `hot` experts get 1000 tokens, the others 10;
/// every count varies by up to +-5% from pass to pass (a fixed pattern), so resamples differ.
CountWindow window_of(const std::vector<std::set<std::int32_t>>& hot_per_pass) {
  CountWindow window{.window_size = std::int64_t(hot_per_pass.size()),
                     .num_layers = kLayers,
                     .num_experts = kExperts,
                     .has_window_axis = true};
  for (std::int64_t w = 0; w < window.window_size; ++w) {
    const std::set<std::int32_t>& hot = hot_per_pass[std::size_t(w)];
    for (std::int64_t l = 0; l < kLayers; ++l) {
      for (std::int32_t e = 0; e < kExperts; ++e) {
        const std::int64_t base = hot.contains(e) ? 1000 : 10;
        const std::int64_t wobble = (w * 7 + l * 3 + e * 5) % 11 - 5;  // -5..5 percent
        window.counts.push_back(base + base * wobble / 100);
      }
    }
  }
  return window;
}

/// kPasses passes: the first half hot on `hot_first_half`, the second on `hot_second_half`.
CountWindow window_with_hot(const std::set<std::int32_t>& hot_first_half,
                            const std::set<std::int32_t>& hot_second_half) {
  std::vector<std::set<std::int32_t>> hot(kPasses / 2, hot_first_half);
  hot.resize(kPasses, hot_second_half);
  return window_of(hot);
}

CountWindow uniform_window() {
  return window_with_hot({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7});
}
CountWindow skewed_window() { return window_with_hot({0, 1}, {0, 1}); }

Placement trivial() { return Placement::trivial(kLayers, kConfig.num_replicas, kExperts); }

/// 10 ms of MoE per balanced pass over 1000 passes; 1 ms per moved expert.
plan::AdvisorOptions cheap_moves() {
  plan::AdvisorOptions options;
  options.seconds_per_balanced_pass = 0.01;
  options.horizon_passes = 1000;
  options.move_cost.seconds_per_expert = 0.001;
  options.num_bootstrap = 200;
  options.seed = 7;
  return options;
}

TEST(Advisor, KeepsThePlacementOfBalancedTraffic) {
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), uniform_window(), kConfig, cheap_moves());
  EXPECT_FALSE(advice.rebalance) << advice.reason;
  EXPECT_TRUE(advice.placement.same_maps(trivial()));
  EXPECT_TRUE(advice.moves.empty());
  EXPECT_GT(advice.balancedness_now.value, 0.9);
  EXPECT_EQ(advice.reason.rfind("keep the placement", 0), 0u) << advice.reason;
}

TEST(Advisor, RebalancesASkewThatCheapMovesFix) {
  const Placement current = trivial();
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(current, skewed_window(), kConfig, cheap_moves());
  ASSERT_TRUE(advice.rebalance) << advice.reason;
  EXPECT_EQ(advice.reason.rfind("rebalance:", 0), 0u) << advice.reason;
  // Experts 0 and 1 share GPUs 0 and 2 with two cold experts: about half of the mean.
  EXPECT_LT(advice.balancedness_now.value, 0.6);
  const plan::RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  EXPECT_GT(best.balancedness_after.value, 0.8);
  EXPECT_LE(best.balancedness_after.low, best.balancedness_after.value);
  EXPECT_GE(best.balancedness_after.high, best.balancedness_after.value);
  EXPECT_GT(best.net_gain_seconds.low, 0.0);
  EXPECT_TRUE(advice.placement.same_maps(best.placement));
  // The moves are exactly the slots that differ, and the cost is theirs.
  std::int64_t differing = 0;
  for (std::int64_t l = 0; l < kLayers; ++l) {
    for (std::int64_t p = 0; p < kConfig.num_replicas; ++p) {
      differing += current.logical_of(l, p) != advice.placement.logical_of(l, p) ? 1 : 0;
    }
  }
  ASSERT_EQ(std::int64_t(advice.moves.size()), differing);
  EXPECT_EQ(best.moved_experts, differing);
  EXPECT_DOUBLE_EQ(best.move_seconds, 0.001 * double(differing));
  for (const plan::SlotMove& move : advice.moves) {
    EXPECT_EQ(move.from, current.logical_of(move.layer, move.slot));
    EXPECT_EQ(move.to, advice.placement.logical_of(move.layer, move.slot));
  }
}

TEST(Advisor, KeepsTheSameSkewWhenMovesCostMoreThanTheyGain) {
  plan::AdvisorOptions options = cheap_moves();
  options.move_cost.seconds_per_expert = 100.0;
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  EXPECT_FALSE(advice.rebalance) << advice.reason;
  EXPECT_TRUE(advice.placement.same_maps(trivial()));
  EXPECT_TRUE(advice.moves.empty());
  const plan::RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  EXPECT_GT(best.gain_seconds.value, 0.0);  // the plan helps, but not enough
  EXPECT_LT(best.net_gain_seconds.value, 0.0);
}

TEST(Advisor, PricesTransfersByTheBusiestGpu) {
  plan::AdvisorOptions options = cheap_moves();
  options.move_cost = {
      .bytes_per_expert = 2e6, .link_bytes_per_second = 1e9, .seconds_per_expert = 0.0};
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  for (const plan::RebalanceCandidate& c : advice.candidates) {
    std::vector<std::int64_t> per_gpu(std::size_t(kConfig.num_gpus), 0);
    for (std::int64_t l = 0; l < kLayers; ++l) {
      for (std::int64_t p = 0; p < kConfig.num_replicas; ++p) {
        if (trivial().logical_of(l, p) != c.placement.logical_of(l, p)) {
          ++per_gpu[std::size_t(p / kConfig.slots_per_gpu())];
        }
      }
    }
    const std::int64_t busiest = *std::max_element(per_gpu.begin(), per_gpu.end());
    EXPECT_EQ(c.max_moved_per_gpu, busiest);
    EXPECT_DOUBLE_EQ(c.move_seconds, 2e6 * double(busiest) / 1e9);
  }
}

TEST(Advisor, DoesNotChaseASkewThatHasPassed) {
  // The window's older half was hot on experts 0 and 1, its newer half is even. Over the
  // whole window a plan for the skew looks like a gain; judged on the newer passes, which
  // the trivial placement already balances, a plan made on the older ones is a loss.
  const CountWindow window = window_with_hot({0, 1}, {0, 1, 2, 3, 4, 5, 6, 7});
  const plan::ExpertLoads whole = plan::loads_of(window);
  const Placement in_sample = plan::plan_moestat({&whole, 1}, kConfig);
  ASSERT_GT(plan::evaluate_placement(whole, in_sample, kConfig.num_gpus).balancedness,
            plan::evaluate_placement(whole, trivial(), kConfig.num_gpus).balancedness + 0.1);

  // The window as one regime, to test the split in time.
  plan::AdvisorOptions one_regime = cheap_moves();
  one_regime.follow_regimes = false;
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), window, kConfig, one_regime);
  EXPECT_FALSE(advice.rebalance) << advice.reason;
  EXPECT_EQ(advice.num_planning_passes, kPasses / 2);
  EXPECT_EQ(advice.num_evaluation_passes, kPasses / 2);
  EXPECT_GT(advice.balancedness_now.value, 0.9);
  for (const plan::RebalanceCandidate& c : advice.candidates) {
    if (c.moved_experts > 0) {
      EXPECT_LT(c.gain_seconds.value, 0.0) << c.target_balancedness;
    }
  }
}

TEST(Advisor, PlansForTheRegimeRunningNow) {
  // Even traffic, then skewed from pass 6: the advice is for the skew alone, planned on its
  // older passes (6-8) and judged on its newer ones (9-11).
  std::vector<std::set<std::int32_t>> hot(6, {0, 1, 2, 3, 4, 5, 6, 7});
  hot.resize(12, {0, 1});
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), window_of(hot), kConfig, cheap_moves());
  EXPECT_EQ(advice.traffic_first_pass, 6);
  EXPECT_EQ(advice.traffic_regimes, 1);
  EXPECT_FALSE(advice.traffic_recurs);
  EXPECT_EQ(advice.num_planning_passes, 3);
  EXPECT_EQ(advice.num_evaluation_passes, 3);
  ASSERT_TRUE(advice.rebalance) << advice.reason;
  EXPECT_LT(advice.balancedness_now.value, 0.6) << "judged on the skew, not the window";
}

TEST(Advisor, PlansForEveryRegimeOfTrafficThatReturns) {
  // Skew a (experts 0, 1), skew b (2, 3), then a again: all four share GPUs 0 and 2 of the
  // trivial placement; a placement for a alone leaves b piled, and the advice is for both.
  std::vector<std::set<std::int32_t>> hot(6, {0, 1});
  hot.resize(12, {2, 3});
  hot.resize(18, {0, 1});
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), window_of(hot), kConfig, cheap_moves());
  EXPECT_TRUE(advice.traffic_recurs);
  EXPECT_EQ(advice.traffic_regimes, 2);
  EXPECT_EQ(advice.traffic_first_pass, 0);
  ASSERT_TRUE(advice.rebalance) << advice.reason;
  const plan::ExpertLoads a = plan::loads_of(window_of({{0, 1}})),
                          b = plan::loads_of(window_of({{2, 3}}));
  const Placement for_a = plan::plan_moestat({&a, 1}, kConfig);
  const auto served = [&](const Placement& p, const plan::ExpertLoads& loads) {
    return plan::evaluate_placement(loads, p, kConfig.num_gpus).balancedness;
  };
  EXPECT_GT(served(advice.placement, a), served(trivial(), a) + 0.2);
  EXPECT_GT(served(advice.placement, b), served(trivial(), b) + 0.2);
  EXPECT_GT(std::min(served(advice.placement, a), served(advice.placement, b)),
            std::min(served(for_a, a), served(for_a, b)) + 0.1);
}

TEST(Advisor, WaitsForEnoughPassesOfANewRegime) {
  std::vector<std::set<std::int32_t>> hot(8, {0, 1, 2, 3, 4, 5, 6, 7});
  hot.resize(11, {0, 1});  // three passes of a skew: one to plan on, two to judge on
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), window_of(hot), kConfig, cheap_moves());
  EXPECT_FALSE(advice.rebalance);
  EXPECT_TRUE(advice.candidates.empty());
  EXPECT_EQ(advice.best, -1);
  EXPECT_EQ(advice.traffic_first_pass, 8);
  EXPECT_EQ(advice.reason.rfind("keep the placement for now: the traffic to plan for (from pass "
                                "8) leaves 2 passes with load to judge a plan on, and 3 are needed",
                                0),
            0u)
      << advice.reason;
  plan::AdvisorOptions fewer = cheap_moves();
  fewer.min_evaluation_passes = 2;
  EXPECT_TRUE(plan::advise_rebalance(trivial(), window_of(hot), kConfig, fewer).rebalance);
}

TEST(Advisor, DoesNotActOnALiftBelowTheFloor) {
  plan::AdvisorOptions options = cheap_moves();
  options.min_balancedness_gain = 0.9;
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  EXPECT_FALSE(advice.rebalance);
  const plan::RebalanceCandidate& best = advice.candidates[std::size_t(advice.best)];
  EXPECT_GT(best.net_gain_seconds.low, 0.0) << "it would pay, by the estimate";
  EXPECT_NE(advice.reason.find("a lift below 0.9 in balancedness"), std::string::npos)
      << advice.reason;
}

TEST(Advisor, RequiringAConfidentGainNeedsTheWholeIntervalPositive) {
  plan::AdvisorOptions options = cheap_moves();
  const plan::RebalanceAdvice free_advice =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  const plan::RebalanceCandidate& best = free_advice.candidates[std::size_t(free_advice.best)];
  // A per-expert cost between the interval's ends of the gain per moved expert.
  options.move_cost.seconds_per_expert =
      (best.gain_seconds.low + best.gain_seconds.value) / 2.0 / double(best.moved_experts);
  options.require_confident_gain = true;
  ASSERT_LT(best.gain_seconds.low, best.gain_seconds.value);
  const plan::RebalanceAdvice cautious =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  const plan::RebalanceCandidate& cautious_best = cautious.candidates[std::size_t(cautious.best)];
  EXPECT_EQ(cautious.rebalance, cautious_best.net_gain_seconds.low > 0.0) << cautious.reason;
  if (cautious_best.target_balancedness == best.target_balancedness) {
    EXPECT_FALSE(cautious.rebalance) << cautious.reason;
    EXPECT_GT(cautious_best.net_gain_seconds.value, 0.0);
  }
}

void expect_same_estimate(const plan::Estimate& a, const plan::Estimate& b) {
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
}

TEST(Advisor, IsDeterministicForASeed) {
  const CountWindow window = skewed_window();
  const plan::RebalanceAdvice a = plan::advise_rebalance(trivial(), window, kConfig, cheap_moves());
  const plan::RebalanceAdvice b = plan::advise_rebalance(trivial(), window, kConfig, cheap_moves());
  EXPECT_EQ(a.rebalance, b.rebalance);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.best, b.best);
  EXPECT_TRUE(a.placement.same_maps(b.placement));
  expect_same_estimate(a.balancedness_now, b.balancedness_now);
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  for (std::size_t k = 0; k < a.candidates.size(); ++k) {
    EXPECT_TRUE(a.candidates[k].placement.same_maps(b.candidates[k].placement));
    expect_same_estimate(a.candidates[k].balancedness_after, b.candidates[k].balancedness_after);
    expect_same_estimate(a.candidates[k].net_gain_seconds, b.candidates[k].net_gain_seconds);
  }
  // Another seed draws other resamples: the point estimates stay, the intervals move.
  plan::AdvisorOptions other = cheap_moves();
  other.seed = 8;
  const plan::RebalanceAdvice c = plan::advise_rebalance(trivial(), window, kConfig, other);
  EXPECT_EQ(a.balancedness_now.value, c.balancedness_now.value);
  EXPECT_TRUE(a.balancedness_now.low != c.balancedness_now.low ||
              a.balancedness_now.high != c.balancedness_now.high);
}

TEST(Advisor, WithoutResamplesTheIntervalsAreThePointEstimates) {
  plan::AdvisorOptions options = cheap_moves();
  options.num_bootstrap = 0;
  const plan::RebalanceAdvice advice =
      plan::advise_rebalance(trivial(), skewed_window(), kConfig, options);
  expect_same_estimate(advice.balancedness_now,
                       {advice.balancedness_now.value, advice.balancedness_now.value,
                        advice.balancedness_now.value});
}

TEST(Advisor, NamesBadInput) {
  const Placement current = trivial();
  const CountWindow window = skewed_window();
  auto with = [](auto change) {
    plan::AdvisorOptions options = cheap_moves();
    change(options);
    return options;
  };
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig, with([](auto& o) {
                                                o.seconds_per_balanced_pass = 0.0;
                                              })),
                       "MoE time of a balanced pass");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig,
                                              with([](auto& o) { o.horizon_passes = -1; })),
                       "horizon");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig, with([](auto& o) {
                                                o.move_cost.bytes_per_expert = 1e6;
                                              })),
                       "needs a positive link bandwidth");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig, with([](auto& o) {
                                                o.move_cost.seconds_per_expert = -1.0;
                                              })),
                       "must be finite and >= 0");
  EXPECT_MOESTAT_ERROR(
      plan::advise_rebalance(current, window, kConfig, with([](auto& o) { o.targets = {1.5}; })),
      "target balancedness must be in (0, 1]");
  EXPECT_MOESTAT_ERROR(
      plan::advise_rebalance(current, window, kConfig, with([](auto& o) { o.confidence = 1.0; })),
      "confidence must be in (0, 1)");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig,
                                              with([](auto& o) { o.min_balancedness_gain = 1.0; })),
                       "least balancedness gain to act on must be in [0, 1)");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig,
                                              with([](auto& o) { o.min_evaluation_passes = 0; })),
                       "passes to judge on must be at least 1");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window, kConfig,
                                              with([](auto& o) { o.regimes.min_distance = -1.0; })),
                       "minimum distance");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(current, window.passes(0, 1), kConfig, cheap_moves()),
                       "at least 2 passes with load");
  EXPECT_MOESTAT_ERROR(
      plan::advise_rebalance(Placement::trivial(3, 16, kExperts), window, kConfig, cheap_moves()),
      "the placement is for 3 layers x 8 experts, the recent counts for 2 x 8");
  EXPECT_MOESTAT_ERROR(plan::advise_rebalance(Placement::trivial(kLayers, 8, kExperts), window,
                                              kConfig, cheap_moves()),
                       "the deployment has 16 slots per layer, the placement in force 8");
}

}  // namespace
}  // namespace moestat
