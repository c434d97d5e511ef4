// `moestat advise` end to end: the decision and the placement it writes equal the library's
// for the same inputs, costly moves keep the placement in force, bad input exits 1 or 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <moestat/io/counts_json.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/plan/advisor.hpp>
#include <nlohmann/json.hpp>

#include "cli/cli_run.hpp"

namespace moestat {
namespace {

using test::CliRun;
using test::contains;
using test::quoted;
using test::run_cli;
using test::ScratchDir;
using Json = nlohmann::json;

constexpr std::int64_t kLayers = 2, kExperts = 8, kSlots = 16, kGpus = 4;
const plan::EplbConfig kConfig{
    .num_replicas = kSlots, .num_groups = 1, .num_nodes = 1, .num_gpus = kGpus};

/// `passes` passes in which experts 0 and 1 take most tokens, with a small pass-to-pass wobble.
CountWindow skewed_window(std::int64_t passes) {
  CountWindow window{.window_size = passes,
                     .num_layers = kLayers,
                     .num_experts = kExperts,
                     .has_window_axis = true};
  for (std::int64_t w = 0; w < passes; ++w) {
    for (std::int64_t l = 0; l < kLayers; ++l) {
      for (std::int64_t e = 0; e < kExperts; ++e) {
        window.counts.push_back((e < 2 ? 1000 : 10) + (w * 3 + l + e) % 7);
      }
    }
  }
  return window;
}

struct Files {
  ScratchDir dir;
  std::filesystem::path stats = dir.path() / "recent.json";
  std::filesystem::path placement = dir.path() / "placement.json";
  std::filesystem::path out = dir.path() / "next.json";

  explicit Files(const CountWindow& window) {
    io::write_file_atomically(stats, io::logical_counts_to_json(window));
    io::write_file_atomically(placement,
                              io::placement_to_json(Placement::trivial(kLayers, kSlots, kExperts)));
  }
  std::string args(const std::string& extra) const {
    return fmt::format(
        "advise --stats {} --placement {} --gpus {} --pass-seconds 0.01 --horizon 1000 "
        "--bootstrap 100 --seed 3 {}",
        quoted(stats), quoted(placement), kGpus, extra);
  }
  Placement written() const { return io::placement_from_json(test::read_whole_file(out), 8); }
};

plan::AdvisorOptions options_with_stall(double seconds_per_expert) {
  plan::AdvisorOptions options;
  options.seconds_per_balanced_pass = 0.01;
  options.horizon_passes = 1000;
  options.move_cost.seconds_per_expert = seconds_per_expert;
  options.num_bootstrap = 100;
  options.seed = 3;
  return options;
}

TEST(CliAdvise, WritesTheLibrarysPlanWhenMovesAreCheap) {
  const CountWindow window = skewed_window(8);
  const Files files(window);
  const CliRun run = run_cli(
      files.args(fmt::format("--stall-per-expert 0.001 --json --out {}", quoted(files.out))));
  ASSERT_EQ(run.code, 0) << run.err;
  const plan::RebalanceAdvice expected = plan::advise_rebalance(
      Placement::trivial(kLayers, kSlots, kExperts), window, kConfig, options_with_stall(0.001));
  ASSERT_TRUE(expected.rebalance) << expected.reason;
  const Json printed = Json::parse(run.out);
  EXPECT_EQ(printed["rebalance"], true);
  EXPECT_EQ(printed["reason"], expected.reason);
  EXPECT_EQ(printed["moves"].size(), expected.moves.size());
  EXPECT_EQ(printed["balancedness_now"]["low"].get<double>(), expected.balancedness_now.low);
  EXPECT_TRUE(files.written().same_maps(expected.placement));
}

TEST(CliAdvise, KeepsThePlacementInForceWhenMovesCostTooMuch) {
  const Files files(skewed_window(8));
  const CliRun run = run_cli(files.args(
      fmt::format("--expert-bytes 1e12 --link-bandwidth 1 --out {}", quoted(files.out))));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "decision:     keep the placement")) << run.out;
  EXPECT_TRUE(contains(run.out, "the placement in force, unchanged")) << run.out;
  EXPECT_TRUE(files.written().same_maps(Placement::trivial(kLayers, kSlots, kExperts)));
}

// Issue 42, item 5: four identical candidate rows when every target gave the same plan.
TEST(CliAdvise, TargetsWithTheSamePlanShareOneRow) {
  CountWindow even = skewed_window(8);
  std::fill(even.counts.begin(), even.counts.end(), 100);  // balanced as it is: nothing to move
  const Files files(even);
  const plan::RebalanceAdvice expected = plan::advise_rebalance(
      Placement::trivial(kLayers, kSlots, kExperts), even, kConfig, options_with_stall(0.0));
  ASSERT_GT(expected.candidates.size(), 1u);
  for (const plan::RebalanceCandidate& c : expected.candidates) {
    ASSERT_TRUE(c.placement.same_maps(expected.candidates.front().placement));
  }
  const CliRun run = run_cli(files.args(""));
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string first = fmt::format("{:g}", expected.candidates.front().target_balancedness);
  const std::string last = fmt::format("{:g}", expected.candidates.back().target_balancedness);
  EXPECT_TRUE(contains(run.out, "* " + first + "-" + last + " ")) << run.out;
  // Candidate rows are the only indented lines: one for all the targets.
  std::int64_t rows = 0;
  for (std::size_t at = 0; (at = run.out.find("\n  ", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 1) << run.out;
}

TEST(CliAdvise, PassesTheRegimeOptionsToTheLibrary) {
  // Even traffic for 4 passes, then the skew: the library's advice with each option.
  CountWindow window = skewed_window(10);
  std::fill(window.counts.begin(), window.counts.begin() + 4 * kLayers * kExperts, 100);
  const Files files(window);
  const auto printed = [&](const std::string& extra) {
    const CliRun run = run_cli(files.args("--json " + extra));
    EXPECT_EQ(run.code, 0) << run.err;
    return Json::parse(run.out);
  };
  plan::AdvisorOptions options = options_with_stall(0.0);
  const auto expected = [&] {
    return plan::advise_rebalance(Placement::trivial(kLayers, kSlots, kExperts), window, kConfig,
                                  options);
  };
  Json json = printed("");
  EXPECT_EQ(json["traffic_first_pass"], 4);
  EXPECT_EQ(json["reason"], expected().reason);
  options.follow_regimes = false;
  json = printed("--whole-window");
  EXPECT_EQ(json["traffic_first_pass"], 0);
  EXPECT_EQ(json["num_planning_passes"], 5);
  EXPECT_EQ(json["reason"], expected().reason);
  options.follow_regimes = true;
  options.min_evaluation_passes = 4;
  options.min_balancedness_gain = 0.2;
  json = printed("--min-judged-passes 4 --min-gain 0.2");
  EXPECT_EQ(json["reason"], expected().reason);
  EXPECT_EQ(json["rebalance"], false);
  const CliRun text = run_cli(files.args(""));
  EXPECT_TRUE(contains(text.out, "traffic:      the traffic changed at pass 4")) << text.out;
}

TEST(CliAdvise, NamesBadInput) {
  const Files one_pass(skewed_window(1));
  CliRun run = run_cli(one_pass.args(""));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "at least 2 passes with load")) << run.err;

  const Files files(skewed_window(8));
  run = run_cli(files.args("--expert-bytes 1e6"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "--expert-bytes needs --link-bandwidth")) << run.err;
  run = run_cli(files.args("--targets 0.9,1.5"));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "target balancedness must be in (0, 1], got 1.5")) << run.err;
  run = run_cli(
      fmt::format("advise --stats {} --placement {} --gpus 5 --pass-seconds 0.01 --horizon 10",
                  quoted(files.stats), quoted(files.placement)));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "16 replicas do not divide evenly over 5 GPUs")) << run.err;
  run = run_cli(fmt::format("advise --stats {} --placement {} --gpus 4 --horizon 10",
                            quoted(files.stats), quoted(files.placement)));
  EXPECT_EQ(run.code, 2);
  EXPECT_TRUE(contains(run.err, "--pass-seconds is required")) << run.err;
  run = run_cli(files.args(fmt::format("--out {}", quoted(files.stats))));
  EXPECT_EQ(run.code, 1);
  EXPECT_FALSE(std::filesystem::exists(files.out));
}

}  // namespace
}  // namespace moestat
