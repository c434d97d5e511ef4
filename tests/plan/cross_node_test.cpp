// The cross-node relaxation: bounded, never worse, valid; the traffic share by hand; and on
// the real workloads, what a few cross-node replicas buy in-sample and out of sample
// (skipped where the data is absent).
#include <gtest/gtest.h>

#include <cstdio>
#include <moestat/plan/cross_node.hpp>
#include <moestat/plan/metrics.hpp>

#include "plan/plan_test_support.hpp"

namespace moestat {
namespace {

// 2 nodes x 1 GPU x 3 slots, 2 groups of 2 experts: group 0 (experts 0, 1) on node 0 with
// expert 0 twice; group 1 (2, 3) on node 1 with expert 3 twice.
TEST(CrossNode, ShareByHand) {
  const plan::EplbConfig config{6, 2, 2, 2};
  const Placement placement(1, 6, 4, {0, 1, 0, 2, 3, 3});
  const plan::ExpertLoads loads{1, 4, {4, 2, 1, 1}};
  EXPECT_DOUBLE_EQ(plan::cross_node_share(loads, placement, config), 0.0);
  // Expert 0's second replica on node 1 (4 / 2 of the 8 assignments) and one of expert 3's
  // on node 0 (1 / 2): group 0's home stays node 0, group 1's node 1.
  const Placement crossing(1, 6, 4, {0, 1, 3, 2, 3, 0});
  EXPECT_DOUBLE_EQ(plan::cross_node_share(loads, crossing, config), 2.5 / 8.0);
  EXPECT_DOUBLE_EQ(plan::cross_node_share(loads, crossing, plan::EplbConfig{6, 1, 1, 2}), 0.0);
}

/// Zipf-like loads with the hot experts in the first group, so one node is overloaded.
plan::ExpertLoads lopsided_loads(std::int64_t L, std::int64_t E) {
  plan::ExpertLoads loads{L, E, {}};
  for (std::int64_t l = 0; l < L; ++l) {
    for (std::int64_t e = 0; e < E; ++e) loads.values.push_back(1000.0 / double(e + 1 + l));
  }
  return loads;
}

TEST(CrossNode, BoundedNeverWorseAndValid) {
  const plan::EplbConfig config{48, 4, 2, 8};
  const plan::ExpertLoads loads = lopsided_loads(3, 32);
  const Placement plan = plan::plan_moestat({&loads, 1}, config);
  const auto before = plan::evaluate_placement(loads, plan, 8).layer_balancedness;
  EXPECT_TRUE(plan::relax_across_nodes(plan, {&loads, 1}, config, 0).placement.same_maps(plan));
  for (const std::int64_t bound : {1, 3}) {
    const plan::CrossNodeResult r = plan::relax_across_nodes(plan, {&loads, 1}, config, bound);
    const auto after = plan::evaluate_placement(loads, r.placement, 8).layer_balancedness;
    for (std::size_t l = 0; l < after.size(); ++l) {
      EXPECT_LE(r.cross_node_replicas[l], bound);
      EXPECT_GE(after[l], before[l]);
    }
    EXPECT_GT(r.cross_node_share, 0.0);
    EXPECT_GT(plan::evaluate_placement(loads, r.placement, 8).balancedness,
              plan::evaluate_placement(loads, plan, 8).balancedness);
  }
}

TEST(CrossNode, RealWorkloadsWhatAFewReplicasBuy) {
  if (!std::filesystem::exists(test::deepseek_stats_dir())) {
    GTEST_SKIP() << "no real statistics under " << test::deepseek_stats_dir();
  }
  const plan::EplbConfig config{288, 8, 4, 32};
  std::vector<plan::ExpertLoads> files;
  for (const std::string& name : test::deepseek_stats_files()) {
    files.push_back(test::read_deepseek_moe_rows(name));
  }
  for (const std::int64_t bound : {0, 2, 4, 8}) {
    double in_sample = 0.0, held_out = 0.0, share = 0.0;
    for (std::size_t h = 0; h < files.size(); ++h) {
      const Placement own = plan::plan_moestat({&files[h], 1}, config);
      in_sample +=
          plan::evaluate_placement(
              files[h], plan::relax_across_nodes(own, {&files[h], 1}, config, bound).placement, 32)
              .balancedness;
      std::vector<plan::ExpertLoads> train;
      for (std::size_t i = 0; i < files.size(); ++i) {
        if (i != h) train.push_back(files[i]);
      }
      const plan::CrossNodeResult r =
          plan::relax_across_nodes(plan::plan_moestat(train, config), train, config, bound);
      held_out += plan::evaluate_placement(files[h], r.placement, 32).balancedness;
      share += plan::cross_node_share(files[h], r.placement, config);
    }
    const auto n = double(files.size());
    std::printf(
        "%lld cross-node replicas per layer at most: in-sample %.4f, held-out %.4f, "
        "cross-node share of held-out assignments %.4f\n",
        static_cast<long long>(bound), in_sample / n, held_out / n, share / n);
  }
}

}  // namespace
}  // namespace moestat
