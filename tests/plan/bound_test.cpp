// The balancedness bound: exact on small cases worked by hand, its errors, and on the six
// real DeepSeek-V3 workloads (skipped where absent) the leave-one-out decomposition of
// docs/placement.md: reference, moestat, the bound with moestat's nodes, an oracle that
// planned on the held-out file, and the bound over all assignments. Prints the table.
#include <gtest/gtest.h>

#include <cstdio>
#include <moestat/error.hpp>
#include <moestat/plan/bound.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>

#include "plan/plan_test_support.hpp"

namespace moestat {
namespace {

// 4 groups of one expert, 2 nodes of one GPU with 2 slots each. Loads 4, 3, 2, 1: the
// pairs {0, 3} and {1, 2} weigh 5 each, the mean GPU load; pairs {0, 1} {2, 3} leave 7.
TEST(BalancednessBound, NodeLoadsByHand) {
  const plan::EplbConfig config{4, 4, 2, 2};
  const plan::ExpertLoads loads{1, 4, {4, 3, 2, 1}};
  EXPECT_DOUBLE_EQ(plan::balancedness_bound(loads, config).balancedness, 1.0);
  const Placement balanced(1, 4, 4, {0, 3, 1, 2});
  const Placement lopsided(1, 4, 4, {1, 0, 3, 2});
  EXPECT_DOUBLE_EQ(plan::balancedness_bound(loads, config, balanced).balancedness, 1.0);
  EXPECT_DOUBLE_EQ(plan::balancedness_bound(loads, config, lopsided).balancedness, 5.0 / 7.0);
  EXPECT_DOUBLE_EQ(plan::evaluate_placement(loads, lopsided, 2).balancedness, 5.0 / 7.0);
}

// One slot per GPU: expert 0 (load 7) can take at most 3 of the 4 slots, so some GPU
// carries 7 / 3 against a mean of 2. A dense layer scores 1 and stays out of the mean.
TEST(BalancednessBound, HeaviestReplicaByHand) {
  const plan::EplbConfig config{4, 1, 1, 4};
  const plan::ExpertLoads loads{2, 2, {7, 1, 0, 0}};
  const plan::BalanceBound bound = plan::balancedness_bound(loads, config);
  EXPECT_DOUBLE_EQ(bound.balancedness, 6.0 / 7.0);
  EXPECT_DOUBLE_EQ(bound.layer_balancedness[1], 1.0);
  const Placement best(2, 4, 2, {0, 0, 0, 1, 0, 1, 0, 1});
  EXPECT_DOUBLE_EQ(plan::evaluate_placement(loads, best, 4).balancedness, 6.0 / 7.0);
}

TEST(BalancednessBound, ErrorsNameTheProblem) {
  const plan::ExpertLoads loads{1, 4, {4, 3, 2, 1}};
  const plan::EplbConfig config{4, 4, 2, 2};
  // Three slots per GPU; group 0 (expert 0) on both nodes.
  const Placement spread(1, 6, 4, {0, 1, 2, 0, 3, 2});
  EXPECT_THROW(
      {
        try {
          plan::balancedness_bound(loads, plan::EplbConfig{6, 4, 2, 2}, spread);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("group 0 on nodes 0 and 1"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_THROW(plan::balancedness_bound(loads, config, Placement(1, 4, 2, {0, 1, 0, 1})), Error);
  // 30 groups on 15 nodes: 29!! = 6.2e15 assignments.
  const plan::ExpertLoads wide{1, 30, std::vector<double>(30, 1.0)};
  EXPECT_THROW(plan::balancedness_bound(wide, plan::EplbConfig{30, 30, 15, 15}), Error);
}

TEST(BalancednessBound, RealWorkloadsLeaveOneOut) {
  if (!std::filesystem::exists(test::deepseek_stats_dir())) {
    GTEST_SKIP() << "no real statistics under " << test::deepseek_stats_dir();
  }
  const plan::EplbConfig config{288, 8, 4, 32};
  std::vector<plan::ExpertLoads> files;
  for (const std::string& name : test::deepseek_stats_files()) {
    files.push_back(test::read_deepseek_moe_rows(name));
  }
  std::printf(
      "| held out | reference | moestat | bound, moestat's nodes | oracle | bound | global "
      "bound |\n");
  double sum[6] = {};
  for (std::size_t h = 0; h < files.size(); ++h) {
    std::vector<plan::ExpertLoads> train;
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (i != h) train.push_back(files[i]);
    }
    const Placement ours = plan::plan_moestat(train, config);
    const auto reference = plan::evaluate_placement(
        files[h], plan::plan_deepseek(plan::equal_weight_sum(train), config), 32);
    const auto served = plan::evaluate_placement(files[h], ours, 32);
    const auto oracle =
        plan::evaluate_placement(files[h], plan::plan_moestat({&files[h], 1}, config), 32);
    const plan::BalanceBound given_nodes = plan::balancedness_bound(files[h], config, ours);
    const plan::BalanceBound bound = plan::balancedness_bound(files[h], config);
    for (std::size_t l = 0; l < bound.layer_balancedness.size(); ++l) {
      const double b = bound.layer_balancedness[l] * (1.0 + 1e-12);
      EXPECT_LE(served.layer_balancedness[l], given_nodes.layer_balancedness[l] * (1.0 + 1e-12))
          << "held out " << h << " layer " << l;
      EXPECT_LE(given_nodes.layer_balancedness[l], b) << "held out " << h << " layer " << l;
      EXPECT_LE(oracle.layer_balancedness[l], b) << "held out " << h << " layer " << l;
      EXPECT_LE(reference.layer_balancedness[l], b) << "held out " << h << " layer " << l;
    }
    // The same slots, GPUs and traffic without the node rule.
    const plan::BalanceBound global = plan::balancedness_bound(files[h], {288, 1, 1, 32});
    EXPECT_GE(global.balancedness, bound.balancedness);
    const double row[6] = {reference.balancedness, served.balancedness, given_nodes.balancedness,
                           oracle.balancedness,    bound.balancedness,  global.balancedness};
    std::printf("| %s |", test::deepseek_stats_files()[h].c_str());
    for (int k = 0; k < 6; ++k) {
      std::printf(" %.4f |", row[k]);
      sum[k] += row[k];
    }
    std::printf("\n");
  }
  const auto n = double(files.size());
  std::printf("| **mean** |");
  for (const double total : sum) std::printf(" %.4f |", total / n);
  std::printf("\n");
  // On these files the bound is tight: the in-sample plan reaches it within rounding, so
  // the node rule, not the planner, caps what any placement could do.
  EXPECT_GT(sum[3] / n, sum[4] / n - 0.002);
}

}  // namespace
}  // namespace moestat
