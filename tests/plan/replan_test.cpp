// Movement-aware replanning: untouched layers cost nothing, targets are met with few copies,
// and the deployment's rules hold; on the real workloads, the copies it takes to move from
// one workload's plan to another's (skipped where the data is absent).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <moestat/plan/metrics.hpp>
#include <moestat/plan/replan.hpp>
#include <numeric>

#include "plan/plan_test_support.hpp"
#include "unit/expect_error.hpp"

namespace moestat {
namespace {

/// Zipf-like loads, a different hot set per layer, deterministic.
plan::ExpertLoads skewed_loads(std::int64_t L, std::int64_t E, std::uint64_t seed) {
  plan::ExpertLoads loads{L, E, {}};
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::int64_t e = 0; e < E; ++e) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto rank = double((state >> 33) % std::uint64_t(E)) + 1.0;
      loads.values.push_back(1000.0 / rank);
    }
  }
  return loads;
}

std::int64_t changed_slots(const Placement& a, const Placement& b, std::int64_t layer) {
  std::int64_t n = 0;
  for (std::int64_t p = 0; p < a.num_physical_experts(); ++p) {
    n += a.logical_of(layer, p) != b.logical_of(layer, p) ? 1 : 0;
  }
  return n;
}

TEST(Replan, RefusesATargetThatIsNotInTheUnitInterval) {
  // Issue 14: a NaN target compared false with every balancedness, so nothing moved.
  const plan::EplbConfig config{40, 1, 1, 8};
  const plan::ExpertLoads loads = skewed_loads(3, 32, 1);
  const Placement good = plan::plan_moestat({&loads, 1}, config);
  for (double target : {std::nan(""), -0.5, 1.5, std::numeric_limits<double>::infinity()}) {
    EXPECT_MOESTAT_ERROR(
        plan::replan_with_few_copies(good, {&loads, 1}, config,
                                     {.target_balancedness = target, .planner = {}}),
        "is outside [0, 1]");
  }
}

TEST(Replan, LayersAtTheTargetAreLeftAlone) {
  const plan::EplbConfig config{40, 1, 1, 8};
  const plan::ExpertLoads loads = skewed_loads(3, 32, 1);
  const Placement good = plan::plan_moestat({&loads, 1}, config);
  const plan::ReplanResult r = plan::replan_with_few_copies(
      good, {&loads, 1}, config, {.target_balancedness = 0.5, .planner = {}});
  EXPECT_TRUE(r.placement.same_maps(good));
  EXPECT_EQ(r.total_copies, 0);
  EXPECT_EQ(r.copies_per_layer, (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(r.balancedness_before, r.balancedness_after);
}

TEST(Replan, ReachesTheTargetWithFewerCopiesThanReplanningFromScratch) {
  for (const plan::EplbConfig config :
       {plan::EplbConfig{40, 1, 1, 8}, plan::EplbConfig{48, 4, 2, 8}}) {
    const plan::ExpertLoads old_loads = skewed_loads(4, 32, 2);
    const plan::ExpertLoads new_loads = skewed_loads(4, 32, 3);
    const Placement current = plan::plan_moestat({&old_loads, 1}, config);
    const Placement scratch = plan::plan_moestat({&new_loads, 1}, config);
    const auto scratch_balance =
        plan::evaluate_placement(new_loads, scratch, config.num_gpus).layer_balancedness;
    const double target = 0.9;
    const plan::ReplanResult r = plan::replan_with_few_copies(
        current, {&new_loads, 1}, config, {.target_balancedness = target, .planner = {}});
    const auto after = plan::evaluate_placement(new_loads, r.placement, config.num_gpus);
    std::int64_t scratch_copies = 0;
    for (std::int64_t l = 0; l < 4; ++l) {
      EXPECT_EQ(r.copies_per_layer[std::size_t(l)], changed_slots(current, r.placement, l));
      EXPECT_NEAR(r.balancedness_after[std::size_t(l)], after.layer_balancedness[std::size_t(l)],
                  1e-12);
      // The target is met wherever a plan from scratch meets it.
      if (scratch_balance[std::size_t(l)] >= target) {
        EXPECT_GE(after.layer_balancedness[std::size_t(l)], target) << "layer " << l;
      }
      scratch_copies += changed_slots(current, scratch, l);
    }
    EXPECT_LT(r.total_copies, scratch_copies);
    if (config.num_nodes > 1) {  // groups stay whole on one node
      for (std::int64_t l = 0; l < 4; ++l) {
        std::vector<std::int64_t> node(4, -1);
        for (std::int64_t p = 0; p < 48; ++p) {
          std::int64_t& n = node[std::size_t(r.placement.logical_of(l, p) / 8)];
          if (n < 0) n = p / 24;
          EXPECT_EQ(n, p / 24);
        }
      }
    }
  }
}

TEST(Replan, ShapeMismatchIsAnError) {
  const plan::ExpertLoads loads = skewed_loads(2, 8, 1);
  EXPECT_MOESTAT_ERROR(plan::replan_with_few_copies(Placement::trivial(3, 8, 8), {&loads, 1},
                                                    plan::EplbConfig{8, 1, 1, 2}),
                       "the previous placement is [3 layers, 8 slots]");
}

TEST(Replan, RealWorkloadsCopiesToServeTheNextWorkload) {
  if (!std::filesystem::exists(test::deepseek_stats_dir())) {
    GTEST_SKIP() << "no real statistics under " << test::deepseek_stats_dir();
  }
  const auto files = test::deepseek_stats_files();
  const plan::EplbConfig config{288, 1, 1, 32};
  for (std::size_t i = 0; i + 1 < files.size(); ++i) {
    const plan::ExpertLoads from = test::read_deepseek_moe_rows(files[i]);
    const plan::ExpertLoads to = test::read_deepseek_moe_rows(files[i + 1]);
    const Placement current = plan::plan_moestat({&from, 1}, config);
    const Placement scratch = plan::plan_moestat({&to, 1}, config);
    std::int64_t scratch_copies = 0;
    for (std::int64_t l = 0; l < to.num_layers; ++l)
      scratch_copies += changed_slots(current, scratch, l);
    const auto r = plan::replan_with_few_copies(current, {&to, 1}, config,
                                                {.target_balancedness = 0.95, .planner = {}});
    const double before =
        std::accumulate(r.balancedness_before.begin(), r.balancedness_before.end(), 0.0) /
        double(to.num_layers);
    const double after =
        std::accumulate(r.balancedness_after.begin(), r.balancedness_after.end(), 0.0) /
        double(to.num_layers);
    std::printf(
        "%s -> %s: balancedness %.4f -> %.4f with %lld copies (%.1f per layer); from scratch "
        "%lld\n",
        files[i].c_str(), files[i + 1].c_str(), before, after,
        static_cast<long long>(r.total_copies), double(r.total_copies) / double(to.num_layers),
        static_cast<long long>(scratch_copies));
    EXPECT_LT(r.total_copies, scratch_copies);
    for (const double b : r.balancedness_after) EXPECT_GE(b, 0.95);
  }
}

}  // namespace
}  // namespace moestat
