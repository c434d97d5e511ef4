// The rebalance simulator on hand-made phases whose right answer is known: a stationary
// balanced phase (never moving is best), a lasting change with cheap moves (rebalancing soon
// after it wins), phases alternating quickly with expensive moves (chasing them loses); the
// sampler's draws, the windows policies see, determinism for a seed, and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <moestat/plan/metrics.hpp>
#include <moestat/plan/replay.hpp>
#include <moestat/plan/traffic_scenarios.hpp>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

// Two layers (layer 0 dense), 8 experts in 8 slots on 4 GPUs: under the trivial placement
// GPU g holds experts 2g and 2g + 1.
constexpr std::int64_t kExperts = 8;
const plan::EplbConfig kConfig{.num_replicas = 8, .num_groups = 1, .num_nodes = 1, .num_gpus = 4};

/// Layer 1 has `hot` experts at 0.2 each, the others 0.05 each; layer 0 is dense.
plan::ExpertLoads hot_experts(std::initializer_list<int> hot) {
  plan::ExpertLoads loads{2, kExperts, std::vector<double>(2 * kExperts, 0.0)};
  for (std::int64_t e = 0; e < kExperts; ++e) loads.values[std::size_t(kExperts + e)] = 0.05;
  for (int e : hot) loads.values[std::size_t(kExperts + e)] = 0.2;
  return loads;
}

// One hot expert on every GPU of the trivial placement: perfectly balanced there.
const plan::ExpertLoads kSpread = hot_experts({0, 2, 4, 6});
// The hot experts on GPUs 0 and 1 of the trivial placement: balancedness 0.625 there.
const plan::ExpertLoads kPiled = hot_experts({0, 1, 2, 3});

plan::TrafficPhase phase(const char* name, const plan::ExpertLoads& loads, std::int64_t passes) {
  return plan::make_phase(
      name, loads, {.num_passes = passes, .tokens_per_pass = 8192, .top_k = 2, .jitter = 0.05});
}

Placement trivial() { return Placement::trivial(2, kConfig.num_replicas, kExperts); }

plan::ReplayOptions options_with_move_cost(double seconds_per_expert) {
  return {.config = kConfig,
          .cost = {.seconds_per_balanced_pass = 0.01,
                   .move_cost = {.seconds_per_expert = seconds_per_expert}},
          .seed = 7,
          .block_passes = 10};
}

/// never, three DeepSeek-planned rules, few-copies every 100, and the advisor (pricing moves
/// at `seconds_per_expert`, as the replay does).
std::vector<std::unique_ptr<plan::RebalancePolicy>> policies_under_test(double seconds_per_expert) {
  std::vector<std::unique_ptr<plan::RebalancePolicy>> p;
  p.push_back(plan::never_policy());
  p.push_back(plan::interval_policy({.every = 100, .window = 100}));
  p.push_back(plan::interval_policy({.every = 2500, .window = 500}));
  p.push_back(plan::threshold_policy({.every = 100, .window = 100}, 0.9));
  p.push_back(plan::interval_policy(
      {.every = 100, .window = 100, .replanner = plan::Replanner::kFewCopies}));
  plan::AdvisorOptions advisor;
  advisor.seconds_per_balanced_pass = 0.01;
  advisor.horizon_passes = 1000;
  advisor.move_cost.seconds_per_expert = seconds_per_expert;
  advisor.num_bootstrap = 100;
  advisor.seed = 1;
  advisor.require_confident_gain = true;
  p.push_back(plan::advisor_policy({.every = 100, .window = 500}, advisor));
  return p;
}

/// Records what the replay shows a policy.
class Recorder final : public plan::RebalancePolicy {
 public:
  std::string name() const override { return "recorder"; }
  std::int64_t check_every() const override { return 100; }
  std::int64_t window_passes() const override { return 150; }
  std::optional<Placement> decide(const plan::RebalanceView& view) override {
    passes.push_back(view.pass);
    windows.push_back(view.window);
    window_balancedness.push_back(view.window_balancedness);
    return std::nullopt;
  }
  std::vector<std::int64_t> passes;
  std::vector<CountWindow> windows;
  std::vector<double> window_balancedness;
};

TEST(Replay, ServedBalancednessIsTheMetricsBalancedness) {
  const Placement placement(2, 8, kExperts, {0, 1, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 3, 2, 1, 0});
  for (const plan::ExpertLoads& loads : {kSpread, kPiled}) {
    const plan::BalanceReport report = plan::evaluate_placement(loads, placement, 4);
    EXPECT_DOUBLE_EQ(plan::served_balance(loads, placement, 4).balancedness, report.balancedness);
    EXPECT_DOUBLE_EQ(plan::served_balance(loads, placement, 4).sum_ratio,
                     report.balancedness_sum_ratio);
  }
  // With replicas: 12 slots, expert 1 twice, expert 0 three times.
  const Placement replicated(2, 12, kExperts, {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3,  // layer 0
                                               0, 1, 0, 2, 3, 1, 4, 5, 0, 6, 7, 3});
  EXPECT_DOUBLE_EQ(plan::served_balance(kPiled, replicated, 4).balancedness,
                   plan::evaluate_placement(kPiled, replicated, 4).balancedness);
  EXPECT_DOUBLE_EQ(plan::served_balance(kPiled, trivial(), 4).balancedness, 0.625);
}

TEST(Replay, MovesCountChangedSlotsAndWhatOneGpuReceives) {
  // Two layers of 4 slots on 2 GPUs (slots 0-1 on GPU 0).
  const plan::EplbConfig config{.num_replicas = 4, .num_groups = 1, .num_nodes = 1, .num_gpus = 2};
  const Placement a(2, 4, 4, {0, 1, 2, 3, 0, 1, 2, 3});
  const Placement b(2, 4, 4, {1, 0, 2, 3, 0, 2, 1, 3});  // GPU 0 gets 3, GPU 1 gets 1
  EXPECT_EQ(plan::moves_between(a, a, config).moved_experts, 0);
  const plan::Moves m = plan::moves_between(a, b, config);
  EXPECT_EQ(m.moved_experts, 4);
  EXPECT_EQ(m.max_moved_per_gpu, 3);
  // GPUs receive in parallel: the bytes of the busiest one, plus a stall per expert.
  EXPECT_DOUBLE_EQ(
      plan::move_seconds(
          {.bytes_per_expert = 10.0, .link_bytes_per_second = 5.0, .seconds_per_expert = 0.5}, m),
      3 * 10.0 / 5.0 + 4 * 0.5);
  EXPECT_MOESTAT_ERROR(
      plan::moves_between(a, Placement(2, 5, 4, {0, 1, 2, 3, 0, 0, 1, 2, 3, 0}), config),
      "different shapes");
}

TEST(Traffic, PassesFollowThePhaseAndItsOrder) {
  const plan::TrafficScenario s{
      .name = "two", .phases = {phase("spread", kSpread, 300), phase("piled", kPiled, 200)}};
  plan::TrafficSampler sampler(s, 3);
  plan::ExpertLoads pass;
  std::vector<double> mean_spread(kExperts, 0.0), mean_piled(kExperts, 0.0);
  while (sampler.next(pass)) {
    for (std::int64_t e = 0; e < kExperts; ++e) {
      EXPECT_EQ(pass.at(0, e), 0.0) << "a dense layer stays empty";
      EXPECT_EQ(pass.at(1, e), std::round(pass.at(1, e))) << "whole counts";
      (sampler.phase_index() == 0 ? mean_spread : mean_piled)[std::size_t(e)] += pass.at(1, e);
    }
    EXPECT_EQ(sampler.phase_index(), sampler.passes_drawn() <= 300 ? 0 : 1);
  }
  EXPECT_EQ(sampler.passes_drawn(), 500);
  EXPECT_FALSE(sampler.next(pass)) << "the scenario is over";
  // The mean count is n p (n = 8192 tokens x top-2), within a percent over the phase.
  const double n = 8192.0 * 2.0;
  for (std::int64_t e = 0; e < kExperts; ++e) {
    EXPECT_NEAR(mean_spread[std::size_t(e)] / 300.0, n * kSpread.at(1, e), 0.01 * n * 0.2) << e;
    EXPECT_NEAR(mean_piled[std::size_t(e)] / 200.0, n * kPiled.at(1, e), 0.01 * n * 0.2) << e;
  }
}

TEST(Traffic, TheSameSeedDrawsTheSamePasses) {
  const plan::TrafficScenario s{.name = "one", .phases = {phase("spread", kSpread, 20)}};
  plan::TrafficSampler a(s, 5), b(s, 5), c(s, 6);
  plan::ExpertLoads pa, pb, pc;
  bool all_equal_to_c = true;
  while (a.next(pa)) {
    ASSERT_TRUE(b.next(pb));
    ASSERT_TRUE(c.next(pc));
    EXPECT_EQ(pa.values, pb.values);
    all_equal_to_c = all_equal_to_c && pa.values == pc.values;
  }
  EXPECT_FALSE(all_equal_to_c) << "another seed draws other passes";
}

TEST(Replay, AStationaryBalancedPhaseIsBestLeftAlone) {
  const plan::TrafficScenario s{.name = "steady", .phases = {phase("spread", kSpread, 3000)}};
  const auto policies = policies_under_test(0.001);
  const auto r = plan::replay(s, trivial(), policies, options_with_move_cost(0.001));
  ASSERT_EQ(r.size(), policies.size());
  EXPECT_EQ(r[0].moved_experts, 0);
  EXPECT_GT(r[0].mean_balancedness, 0.95);
  for (std::size_t i = 1; i < r.size(); ++i) {
    EXPECT_LE(r[0].lost_seconds(), r[i].lost_seconds()) << r[i].policy;
  }
  EXPECT_EQ(r[3].moved_experts, 0) << "served balancedness stays above the threshold";
}

TEST(Replay, TheAdvisorLeavesAStationaryBalancedPhaseAlone) {
  const plan::TrafficScenario s{.name = "steady", .phases = {phase("spread", kSpread, 3000)}};
  const auto policies = policies_under_test(0.001);
  const auto r = plan::replay(s, trivial(), policies, options_with_move_cost(0.001));
  EXPECT_EQ(r[5].moved_experts, 0) << "the advisor sees nothing worth a move";
}

TEST(Replay, ALastingChangeWithCheapMovesIsBestFollowedSoon) {
  const plan::TrafficScenario s{
      .name = "shift", .phases = {phase("spread", kSpread, 500), phase("piled", kPiled, 4500)}};
  const auto policies = policies_under_test(0.0001);
  const auto r = plan::replay(s, trivial(), policies, options_with_move_cost(0.0001));
  const plan::PolicyReplay &never = r[0], &often = r[1], &late = r[2], &threshold = r[3];
  EXPECT_NEAR(never.mean_balancedness, (500 * 0.98 + 4500 * 0.625) / 5000, 0.02);
  EXPECT_LT(often.lost_seconds(), late.lost_seconds());
  EXPECT_LT(late.lost_seconds(), never.lost_seconds());
  EXPECT_GT(often.mean_balancedness, 0.9);
  // The threshold rule moves only once the piled phase shows: at the first check whose
  // window is all of it.
  ASSERT_FALSE(threshold.rebalances.empty());
  EXPECT_EQ(threshold.rebalances.front().pass, 600);
  EXPECT_LE(threshold.moved_experts, often.moved_experts);
  EXPECT_LT(threshold.lost_seconds(), never.lost_seconds());
  // The advisor moves once the change shows in the half of its window it judges on, and
  // not before.
  const plan::PolicyReplay& advisor = r[5];
  ASSERT_FALSE(advisor.rebalances.empty());
  EXPECT_GT(advisor.rebalances.front().pass, 500);
  EXPECT_LE(advisor.rebalances.front().pass, 800);
  EXPECT_LT(advisor.lost_seconds(), never.lost_seconds());
  EXPECT_LT(advisor.lost_seconds(), late.lost_seconds());
  // The accounting adds up.
  std::int64_t moved = 0;
  for (const plan::RebalanceEvent& e : often.rebalances) moved += e.moved_experts;
  EXPECT_EQ(moved, often.moved_experts);
  EXPECT_NEAR(often.move_seconds, double(moved) * 0.0001, 1e-12);
  EXPECT_EQ(often.block_balancedness.size(), 500u);
}

TEST(Replay, QuicklyAlternatingPhasesWithExpensiveMovesAreBestNotChased) {
  plan::TrafficScenario s{.name = "alternate"};
  for (int i = 0; i < 20; ++i) {
    s.phases.push_back(i % 2 == 0 ? phase("spread", kSpread, 200) : phase("piled", kPiled, 200));
  }
  const auto policies = policies_under_test(1.0);
  const auto r = plan::replay(s, trivial(), policies, options_with_move_cost(1.0));
  // Reinstalling a plan of the last phase at every change costs more than the imbalance.
  for (std::size_t i : {1, 2, 3}) {
    EXPECT_GT(r[i].moved_experts, 0) << r[i].policy;
    EXPECT_LT(r[0].lost_seconds(), r[i].lost_seconds()) << r[i].policy;
  }
  // One placement balances both phases (GPUs {0, 5}, {2, 7}, {1, 4}, {3, 6}): the right
  // answer is to move to such a placement once and stay. Few-copies replanning does.
  const Placement both(2, 8, kExperts, {0, 1, 2, 3, 4, 5, 6, 7, 0, 5, 2, 7, 1, 4, 3, 6});
  EXPECT_DOUBLE_EQ(plan::served_balance(kSpread, both, 4).balancedness, 1.0);
  EXPECT_DOUBLE_EQ(plan::served_balance(kPiled, both, 4).balancedness, 1.0);
  const plan::PolicyReplay& few = r[4];
  EXPECT_LE(few.rebalances.size(), 2u) << few.policy;
  EXPECT_LT(few.lost_seconds(), r[0].lost_seconds());
}

TEST(Replay, PoliciesSeeTheirWindowOfTheDrawnPasses) {
  const plan::TrafficScenario s{
      .name = "two", .phases = {phase("spread", kSpread, 300), phase("piled", kPiled, 320)}};
  std::vector<std::unique_ptr<plan::RebalancePolicy>> policies;
  policies.push_back(std::make_unique<Recorder>());
  policies.push_back(plan::never_policy());
  plan::ReplayOptions options = options_with_move_cost(0.0);
  options.block_passes = 50;
  const auto r = plan::replay(s, trivial(), policies, options);
  const auto& recorder = static_cast<const Recorder&>(*policies[0]);
  EXPECT_EQ(recorder.passes, (std::vector<std::int64_t>{100, 200, 300, 400, 500, 600}));

  // The same passes, drawn again, summed into blocks of 50.
  plan::TrafficSampler sampler(s, 7);
  plan::ExpertLoads pass;
  std::vector<std::vector<std::int64_t>> blocks;
  std::vector<double> block_b;
  while (sampler.next(pass)) {
    const std::int64_t i = sampler.passes_drawn() - 1;
    if (i % 50 == 0) {
      blocks.emplace_back(2 * kExperts, 0);
      block_b.push_back(0.0);
    }
    for (std::size_t j = 0; j < pass.values.size(); ++j) {
      blocks.back()[j] += std::int64_t(pass.values[j]);
    }
    block_b.back() += plan::served_balance(pass, trivial(), 4).balancedness / 50.0;
  }
  for (std::size_t k = 0; k < recorder.passes.size(); ++k) {
    const CountWindow& w = recorder.windows[k];
    const std::int64_t end_block = recorder.passes[k] / 50;
    const std::int64_t rows = std::min<std::int64_t>(3, end_block);
    ASSERT_EQ(w.window_size, rows);
    std::vector<std::int64_t> expected;
    double mean = 0.0;
    for (std::int64_t b = end_block - rows; b < end_block; ++b) {
      expected.insert(expected.end(), blocks[std::size_t(b)].begin(), blocks[std::size_t(b)].end());
      mean += block_b[std::size_t(b)] / double(rows);
    }
    EXPECT_EQ(w.counts, expected) << "window at pass " << recorder.passes[k];
    EXPECT_NEAR(recorder.window_balancedness[k], mean, 1e-12);
  }
  // 620 passes: the last block holds 20.
  ASSERT_EQ(r[1].block_balancedness.size(), 13u);
  EXPECT_NEAR(r[1].block_balancedness.back(), block_b.back() * 50.0 / 20.0, 1e-12);
}

TEST(Replay, AComparisonShowsEachRolesPolicyWithTheFewestLostSeconds) {
  const std::vector<std::string> roles = {"threshold", "advisor",   "threshold",
                                          "never",     "threshold", "interval"};
  const std::vector<double> lost = {5.0, 4.0, 3.0, 9.0, 3.0, 6.0};
  using Rows = std::vector<std::pair<std::size_t, std::size_t>>;
  // In kComparisonRows' order; the defaults were not replayed; the first of two equal
  // thresholds.
  EXPECT_EQ(plan::comparison_rows(roles, lost), (Rows{{0, 3}, {3, 5}, {4, 2}, {5, 1}}));
  EXPECT_EQ(plan::kComparisonRows[4].label, "best threshold");
  EXPECT_TRUE(plan::comparison_rows({}, {}).empty());
  EXPECT_MOESTAT_ERROR(plan::comparison_rows(roles, std::vector<double>{1.0}),
                       "6 roles for 1 policies");
}

TEST(Replay, IsDeterministicForASeed) {
  const plan::TrafficScenario s{
      .name = "shift", .phases = {phase("spread", kSpread, 300), phase("piled", kPiled, 700)}};
  const auto p1 = policies_under_test(0.001);
  const auto p2 = policies_under_test(0.001);
  auto options = options_with_move_cost(0.001);
  const auto a = plan::replay(s, trivial(), p1, options);
  const auto b = plan::replay(s, trivial(), p2, options);
  options.seed = 8;
  const auto c = plan::replay(s, trivial(), p2, options);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].block_balancedness, b[i].block_balancedness) << a[i].policy;
    EXPECT_EQ(a[i].moved_experts, b[i].moved_experts) << a[i].policy;
    EXPECT_NE(a[i].block_balancedness, c[i].block_balancedness) << a[i].policy;
  }
}

TEST(Replay, RefusesBadInputs) {
  const plan::TrafficScenario ok{.name = "ok", .phases = {phase("spread", kSpread, 100)}};
  const auto policies = policies_under_test(0.001);
  const auto options = options_with_move_cost(0.001);
  EXPECT_MOESTAT_ERROR(
      plan::replay(plan::TrafficScenario{.name = "empty"}, trivial(), policies, options),
      "scenario 'empty' has no phase");
  plan::ExpertLoads wider{2, 9, std::vector<double>(18, 1.0)};
  const plan::TrafficScenario mixed{
      .name = "mixed", .phases = {phase("spread", kSpread, 100), phase("wide", wider, 100)}};
  EXPECT_MOESTAT_ERROR(plan::replay(mixed, trivial(), policies, options), "phase 'wide' is [2, 9]");
  EXPECT_MOESTAT_ERROR(plan::replay(ok, Placement::trivial(3, 8, kExperts), policies, options),
                       "initial placement");
  auto bad_block = options;
  bad_block.block_passes = 30;
  EXPECT_MOESTAT_ERROR(plan::replay(ok, trivial(), policies, bad_block),
                       "must be positive multiples of the 30 passes of a block");
  auto bad_cost = options;
  bad_cost.cost.seconds_per_balanced_pass = 0.0;
  EXPECT_MOESTAT_ERROR(plan::replay(ok, trivial(), policies, bad_cost), "time of a balanced pass");
  bad_cost = options;
  bad_cost.cost.move_cost = {.bytes_per_expert = 1e6, .link_bytes_per_second = 0.0};
  EXPECT_MOESTAT_ERROR(plan::replay(ok, trivial(), policies, bad_cost), "positive link bandwidth");
  EXPECT_MOESTAT_ERROR(plan::interval_policy({.every = 0, .window = 100}), "at least one pass");
  EXPECT_MOESTAT_ERROR(plan::threshold_policy({}, 1.5), "threshold must be in [0, 1]");
  EXPECT_MOESTAT_ERROR(plan::threshold_policy({}, std::nan("")), "threshold must be in [0, 1]");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_MOESTAT_ERROR(plan::make_phase("x", kSpread, {.jitter = nan}), "phase 'x': jitter");
  EXPECT_MOESTAT_ERROR(plan::make_phase("x", kSpread, {.tokens_per_pass = 0}),
                       "phase 'x': passes, tokens per pass and top-k must be at least 1");
  EXPECT_MOESTAT_ERROR(plan::make_phase("x", kSpread, {.top_k = 9}), "top-k 9 exceeds the 8");
  const std::vector<plan::NamedLoads> one{{"only.json", kSpread}};
  EXPECT_MOESTAT_ERROR(plan::workload_scenarios(one, {}), "at least two workloads, got 1");
}

TEST(Scenarios, FromWorkloads) {
  const std::vector<plan::NamedLoads> w{{"a", kSpread}, {"b", kPiled}, {"c", kSpread}};
  plan::ScenarioOptions options;
  options.num_passes = 1201;
  options.alternate_every = 500;
  const auto s = plan::workload_scenarios(w, options);
  ASSERT_EQ(s.size(), 5u);
  for (const auto& scenario : s) {
    EXPECT_EQ(scenario.traffic.num_passes(), 1201) << scenario.traffic.name;
  }
  EXPECT_EQ(s[0].start, plan::StartPlacement::kTrivial);
  EXPECT_EQ(s[1].traffic.phases[1].name, "b");  // workloads[3 / 2]
  EXPECT_EQ(s[1].traffic.phases[1].shape.num_passes, 601);
  ASSERT_EQ(s[2].traffic.phases.size(), 3u);  // 500, 500, 201
  EXPECT_EQ(s[2].traffic.phases[2].shape.num_passes, 201);
  EXPECT_EQ(s[2].traffic.phases[2].name, "a");
  ASSERT_EQ(s[3].traffic.phases.size(), 3u);  // 400, 400, 401
  EXPECT_EQ(s[3].traffic.phases[2].shape.num_passes, 401);
  EXPECT_EQ(s[4].traffic.phases[0].shape.tokens_per_pass, 1024);
  EXPECT_TRUE(plan::initial_placement(s[0], kConfig).same_maps(trivial()));
  // The others start planned for their first phase.
  EXPECT_NEAR(plan::served_balance(kSpread, plan::initial_placement(s[1], kConfig), 4).balancedness,
              1.0, 1e-12);
}

}  // namespace
}  // namespace moestat
