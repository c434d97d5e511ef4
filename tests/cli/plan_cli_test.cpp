// `moestat plan`, `eval` and `hot-experts` end to end: the files they write are re-read and
// compared with the library's results for the same inputs; exit codes 0 / 1 / 2.
#include <gtest/gtest.h>

#include <moestat/io/counts_json.hpp>
#include <moestat/io/files.hpp>
#include <moestat/io/placement_json.hpp>
#include <moestat/io/statistics.hpp>
#include <moestat/plan/cross_node.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/hot_experts.hpp>
#include <moestat/plan/metrics.hpp>
#include <nlohmann/json.hpp>
#include <span>

#include "cli/cli_run.hpp"

namespace moestat {
namespace {

using test::CliRun;
using test::quoted;
using test::run_cli;
using test::ScratchDir;
using Json = nlohmann::json;

/// 4 layers (layer 0 dense), 8 experts in 4 groups of 2; skewed, a different hot set per
/// layer and per `seed`.
plan::ExpertLoads small_loads(int seed) {
  plan::ExpertLoads loads{4, 8, std::vector<double>(32, 0.0)};
  for (int l = 1; l < 4; ++l) {
    for (int e = 0; e < 8; ++e) {
      loads.values[std::size_t(l * 8 + e)] =
          double(1 + ((e * 5 + l * 3 + seed * 7) % 8) * ((e + seed) % 3 + 1) * 10);
    }
  }
  return loads;
}

std::filesystem::path write_loads(const ScratchDir& dir, const std::string& name,
                                  const plan::ExpertLoads& loads) {
  Json rows = Json::array();
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    std::vector<std::int64_t> row;
    for (const double v : loads.row(l)) row.push_back(std::int64_t(v));
    rows.push_back(row);
  }
  const auto path = dir.path() / name;
  io::write_file_atomically(path, Json{{"logical_count", rows}}.dump());
  return path;
}

Placement read_placement(const std::filesystem::path& path) {
  const Json doc = Json::parse(test::read_whole_file(path));
  EXPECT_EQ(doc.size(), 1U) << "only physical_to_logical_map may be written";
  return io::placement_from_json(doc.dump(), 8);
}

constexpr const char* kShape = "--replicas 12 --groups 4 --nodes 2 --gpus 4";
const plan::EplbConfig kConfig{12, 4, 2, 4};

TEST(CliPlan, DeepseekWritesTheLibrarysPlanForEveryRowDenseOnesIncluded) {
  ScratchDir dir;
  const plan::ExpertLoads loads = small_loads(1);
  const auto stats = write_loads(dir, "a.json", loads);
  const CliRun run = run_cli(fmt::format("plan --stats {} --algorithm deepseek {} --out {}",
                                         quoted(stats), kShape, quoted(dir.path() / "p.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  const Placement written = read_placement(dir.path() / "p.json");
  EXPECT_EQ(written.num_layers(), 4);
  EXPECT_TRUE(written.same_maps(plan::plan_deepseek(loads, kConfig)));
  EXPECT_NE(run.out.find("algorithm:   deepseek"), std::string::npos) << run.out;
}

TEST(CliPlan, PlansOnFractionalLoadsUnderEitherKey) {
  // SGLang's published statistics and fiddler's expert_popularity are JSON numbers, which
  // need not be whole: the planners take them as they are.
  ScratchDir dir;
  plan::ExpertLoads loads = small_loads(1);
  for (double& value : loads.values) value = value / 4 + 0.125;
  Json rows = Json::array();
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    const std::span<const double> row = loads.row(l);
    rows.push_back(std::vector<double>(row.begin(), row.end()));
  }
  for (const char* key : {"logical_count", "expert_popularity"}) {
    SCOPED_TRACE(key);
    const auto stats = dir.path() / (std::string(key) + ".json");
    io::write_file_atomically(stats, Json{{key, rows}}.dump());
    const auto out = dir.path() / (std::string(key) + "-placement.json");
    const CliRun run = run_cli(fmt::format("plan --stats {} --algorithm deepseek {} --out {}",
                                           quoted(stats), kShape, quoted(out)));
    ASSERT_EQ(run.code, 0) << run.err;
    EXPECT_TRUE(read_placement(out).same_maps(plan::plan_deepseek(loads, kConfig)));
  }
}

TEST(CliPlan, MoestatTakesEveryFileAsAScenario) {
  ScratchDir dir;
  const std::vector<plan::ExpertLoads> loads{small_loads(1), small_loads(2)};
  const auto a = write_loads(dir, "a.json", loads[0]);
  const auto b = write_loads(dir, "b.json", loads[1]);
  const CliRun run =
      run_cli(fmt::format("plan --stats {} --stats {} --algorithm moestat {} --out {}", quoted(a),
                          quoted(b), kShape, quoted(dir.path() / "p.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(read_placement(dir.path() / "p.json").same_maps(plan::plan_moestat(loads, kConfig)));
  EXPECT_NE(run.out.find("planned on 2 scenarios"), std::string::npos) << run.out;
}

TEST(CliPlan, OneWindowFileGivesItsPassesAsScenarios) {
  ScratchDir dir;
  // [W=3][L][E]: three passes, the middle one empty (an unused ring row).
  const std::vector<plan::ExpertLoads> passes{small_loads(1), small_loads(2)};
  Json window = Json::array();
  for (const plan::ExpertLoads* pass :
       {&passes[0], static_cast<const plan::ExpertLoads*>(nullptr), &passes[1]}) {
    Json rows = Json::array();
    for (std::int64_t l = 0; l < 4; ++l) {
      std::vector<std::int64_t> row(8, 0);
      for (std::int64_t e = 0; pass != nullptr && e < 8; ++e)
        row[std::size_t(e)] = std::int64_t(pass->at(l, e));
      rows.push_back(row);
    }
    window.push_back(rows);
  }
  io::write_file_atomically(dir.path() / "w.json", Json{{"logical_count", window}}.dump());
  const CliRun run =
      run_cli(fmt::format("plan --stats {} {} --out {}", quoted(dir.path() / "w.json"), kShape,
                          quoted(dir.path() / "p.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("planned on 2 scenarios"), std::string::npos) << run.out;
  EXPECT_TRUE(read_placement(dir.path() / "p.json").same_maps(plan::plan_moestat(passes, kConfig)));
  // The reference plans on the window summed, as SGLang does.
  ASSERT_EQ(
      run_cli(fmt::format("plan --stats {} --algorithm deepseek {} --out {}",
                          quoted(dir.path() / "w.json"), kShape, quoted(dir.path() / "d.json")))
          .code,
      0);
  plan::ExpertLoads sum = passes[0];
  for (std::size_t i = 0; i < sum.values.size(); ++i) sum.values[i] += passes[1].values[i];
  EXPECT_TRUE(read_placement(dir.path() / "d.json").same_maps(plan::plan_deepseek(sum, kConfig)));
}

// Issue 42, item 4: `plan` said moestat wins on every scenario, `eval` on the same file that
// EPLB balances better: they reported different objectives, each unnamed. Both now name
// theirs, and print the other's too, with the same values.
TEST(CliEval, PrintsTheSummedWindowAndPlansExpectedOverScenarios) {
  ScratchDir dir;
  CountWindow window{.window_size = 6, .num_layers = 4, .num_experts = 8, .has_window_axis = true};
  for (int pass = 0; pass < 6; ++pass) {
    const plan::ExpertLoads loads = small_loads(pass);
    for (const double v : loads.values) window.counts.push_back(std::int64_t(v));
  }
  const auto stats = dir.path() / "w.json";
  io::write_file_atomically(stats, io::logical_counts_to_json(window));
  const auto placement_path = dir.path() / "p.json";
  const CliRun plan_run = run_cli(
      fmt::format("plan --stats {} {} --out {}", quoted(stats), kShape, quoted(placement_path)));
  ASSERT_EQ(plan_run.code, 0) << plan_run.err;
  const Placement placement = read_placement(placement_path);

  double expected = 0.0;
  const std::vector<plan::ExpertLoads> scenarios = plan::window_scenarios(window, 4);
  for (const plan::ExpertLoads& s : scenarios) {
    expected += plan::evaluate_placement(s, placement, 4).balancedness;
  }
  expected /= double(scenarios.size());
  const double summed = plan::evaluate_placement(plan::loads_of(window), placement, 4).balancedness;
  const std::vector<std::int64_t> passes{0, 1, 2, 3, 4, 5};
  const double served = plan::served_balancedness(window, passes, placement, 4);

  const CliRun json = run_cli(fmt::format("eval --stats {} --placement {} --gpus 4 --json",
                                          quoted(stats), quoted(placement_path)));
  ASSERT_EQ(json.code, 0) << json.err;
  const Json out = Json::parse(json.out);
  EXPECT_DOUBLE_EQ(out["balancedness"].get<double>(), summed);
  EXPECT_DOUBLE_EQ(out["expected_balancedness"].get<double>(), expected);
  EXPECT_EQ(out["scenario_balancedness"].size(), scenarios.size());
  EXPECT_DOUBLE_EQ(out["served_balancedness"].get<double>(), served);

  const CliRun text = run_cli(fmt::format("eval --stats {} --placement {} --gpus 4", quoted(stats),
                                          quoted(placement_path)));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(
      test::contains(text.out, fmt::format("balancedness: {:.4f} (of the window summed", summed)))
      << text.out;
  EXPECT_TRUE(test::contains(text.out, fmt::format("expected:     {:.4f} (mean of the "
                                                   "balancedness of {} scenarios",
                                                   expected, scenarios.size())))
      << text.out;
  // plan prints the same two numbers for the placement it wrote, each named.
  EXPECT_TRUE(
      test::contains(plan_run.out, fmt::format("  {:.4f} (deepseek on the sum: ", expected)))
      << plan_run.out;
  EXPECT_TRUE(test::contains(plan_run.out, "expected: the mean over the"));
  EXPECT_TRUE(test::contains(plan_run.out, fmt::format("  {:.4f} (deepseek on the sum: ", summed)))
      << plan_run.out;
  EXPECT_TRUE(test::contains(plan_run.out, "the loads summed"));
}

// Issue 42, item 5: another model's placement was "256 logical experts ... do not fit in 144
// physical slots"; it is said to be of another shape, both shapes named.
TEST(CliPlanCommands, APlacementOfAnotherModelIsSaidToBeOfAnotherShape) {
  ScratchDir dir;
  const auto stats = write_loads(dir, "a.json", small_loads(1));  // 4 layers x 8 experts
  const auto other = dir.path() / "other.json";
  io::write_file_atomically(other, io::placement_to_json(Placement::trivial(4, 6, 4)));
  const std::string shapes = fmt::format(
      "{}: shapes differ: the placement has 4 layers x 6 slots for 4 experts (ids 0 to 3); {} "
      "has 4 layers x 8 experts",
      other.string(), stats.string());
  for (const std::string& args :
       {fmt::format("eval --stats {} --placement {} --gpus 2", quoted(stats), quoted(other)),
        fmt::format("plan --stats {} --previous {} {} --out {}", quoted(stats), quoted(other),
                    kShape, quoted(dir.path() / "p.json")),
        fmt::format("advise --stats {} --placement {} --gpus 2 --pass-seconds 0.01 --horizon 10",
                    quoted(stats), quoted(other))}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 1) << run.out << run.err;
    EXPECT_TRUE(test::contains(run.err, shapes)) << run.err;
    EXPECT_FALSE(test::contains(run.err, "do not fit")) << run.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "p.json"));
}

TEST(CliPlan, CrossNodeReplicasAreBoundedAndReported) {
  ScratchDir dir;
  const plan::ExpertLoads loads = small_loads(5);
  const auto a = write_loads(dir, "a.json", loads);
  const CliRun run = run_cli(fmt::format("plan --stats {} {} --cross-node-replicas 1 --out {}",
                                         quoted(a), kShape, quoted(dir.path() / "p.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("cross-node:"), std::string::npos) << run.out;
  const plan::CrossNodeResult want =
      plan::relax_across_nodes(plan::plan_moestat({&loads, 1}, kConfig), {&loads, 1}, kConfig, 1);
  EXPECT_TRUE(read_placement(dir.path() / "p.json").same_maps(want.placement));
}

TEST(CliPlan, PreviousPlacementReportsCopiesPerLayer) {
  ScratchDir dir;
  const auto a = write_loads(dir, "a.json", small_loads(1));
  const auto b = write_loads(dir, "b.json", small_loads(2));
  ASSERT_EQ(run_cli(fmt::format("plan --stats {} {} --out {}", quoted(a), kShape,
                                quoted(dir.path() / "p.json")))
                .code,
            0);
  const CliRun run =
      run_cli(fmt::format("plan --stats {} {} --previous {} --target 0.9 --out {}", quoted(b),
                          kShape, quoted(dir.path() / "p.json"), quoted(dir.path() / "q.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("copies:"), std::string::npos) << run.out;
  EXPECT_EQ(read_placement(dir.path() / "q.json").num_layers(), 4);
}

TEST(CliPlan, DeepseekSaysItPlansOnTheSum) {
  // Issue 17: deepseek said "planned on 2 scenarios" although it plans on their sum.
  ScratchDir dir;
  const auto a = write_loads(dir, "a.json", small_loads(1));
  const auto b = write_loads(dir, "b.json", small_loads(2));
  const CliRun two =
      run_cli(fmt::format("plan --stats {} --stats {} --algorithm deepseek {} --out {}", quoted(a),
                          quoted(b), kShape, quoted(dir.path() / "p.json")));
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_NE(two.out.find("algorithm:   deepseek, planned on the equal-weight sum of 2 files\n"),
            std::string::npos)
      << two.out;
  EXPECT_EQ(two.out.find("scenario"), std::string::npos) << two.out;
  const CliRun one = run_cli(fmt::format("plan --stats {} --algorithm deepseek {} --out {}",
                                         quoted(a), kShape, quoted(dir.path() / "q.json")));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("algorithm:   deepseek, planned on the file's loads\n"), std::string::npos)
      << one.out;
}

TEST(CliPlan, PreviousSaysWhetherItReachedTheTarget) {
  // Issue 17: --target 0.95 stopped at 0.78 without a word.
  ScratchDir dir;
  const auto a = write_loads(dir, "a.json", small_loads(1));
  const auto b = write_loads(dir, "b.json", small_loads(2));
  ASSERT_EQ(run_cli(fmt::format("plan --stats {} {} --out {}", quoted(a), kShape,
                                quoted(dir.path() / "p.json")))
                .code,
            0);
  const auto replan = [&](const std::string& target) {
    return run_cli(fmt::format("plan --stats {} {} --previous {} --target {} --out {}", quoted(b),
                               kShape, quoted(dir.path() / "p.json"), target,
                               quoted(dir.path() / "q.json")));
  };
  // Perfect balance is out of reach for these skewed loads on 12 slots.
  const CliRun missed = replan("1");
  ASSERT_EQ(missed.code, 0) << missed.err;
  EXPECT_NE(missed.out.find("target:      per-layer balancedness 1 missed on "), std::string::npos)
      << missed.out;
  EXPECT_NE(missed.err.find("moestat plan: warning: --target 1 missed on "), std::string::npos)
      << missed.err;
  const CliRun reached = replan("0.1");
  ASSERT_EQ(reached.code, 0) << reached.err;
  EXPECT_NE(
      reached.out.find("target:      per-layer balancedness 0.1 reached on 3 of 3 MoE layers"),
      std::string::npos)
      << reached.out;
  EXPECT_TRUE(reached.err.empty()) << reached.err;
}

TEST(CliEval, JsonHasTheLibrarysMetrics) {
  ScratchDir dir;
  const plan::ExpertLoads loads = small_loads(3);
  const auto stats = write_loads(dir, "a.json", loads);
  const Placement placement = plan::plan_deepseek(loads, kConfig);
  io::write_file_atomically(dir.path() / "p.json", io::placement_to_json(placement));
  const CliRun run = run_cli(fmt::format("eval --stats {} --placement {} --gpus 4 --json",
                                         quoted(stats), quoted(dir.path() / "p.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  const Json out = Json::parse(run.out);
  const plan::BalanceReport r = plan::evaluate_placement(loads, placement, 4);
  EXPECT_DOUBLE_EQ(out["balancedness"].get<double>(), r.balancedness);
  EXPECT_DOUBLE_EQ(out["balancedness_sum_ratio"].get<double>(), r.balancedness_sum_ratio);
  EXPECT_DOUBLE_EQ(out["imbalance"].get<double>(), r.imbalance);
  EXPECT_EQ(out["num_loaded_layers"].get<std::int64_t>(), 3);
}

TEST(CliPlan, TorchFilesInAndOut) {
  // SGLang's own formats end to end: a stat dump in, an --init-expert-location .pt out,
  // a KTransformers-style bool mask out.
  ScratchDir dir;
  const plan::ExpertLoads loads = small_loads(3);
  const auto stats = write_loads(dir, "a.json", loads);
  ASSERT_EQ(run_cli(fmt::format("convert {} {}", quoted(stats), quoted(dir.path() / "a.pt"))).code,
            0);
  const CliRun run =
      run_cli(fmt::format("plan --stats {} --algorithm deepseek {} --out {}",
                          quoted(dir.path() / "a.pt"), kShape, quoted(dir.path() / "p.pt")));
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(
      io::read_placement(dir.path() / "p.pt").same_maps(plan::plan_deepseek(loads, kConfig)));
  const CliRun mask =
      run_cli(fmt::format("hot-experts --stats {} --strategy frequency --per-layer 3 --out {}",
                          quoted(dir.path() / "a.pt"), quoted(dir.path() / "m.pt")));
  ASSERT_EQ(mask.code, 0) << mask.err;
  EXPECT_EQ(
      io::read_expert_mask(dir.path() / "m.pt").on_gpu,
      plan::choose_hot_experts(loads, 9, {.strategy = plan::HotExpertStrategy::kFrequency}).on_gpu);
}

TEST(CliHotExperts, MaskFileAndHitRateMatchTheLibrary) {
  ScratchDir dir;
  const plan::ExpertLoads loads = small_loads(4);
  const auto stats = write_loads(dir, "a.json", loads);
  const CliRun run = run_cli(
      fmt::format("hot-experts --stats {} --strategy frequency --per-layer 3 --out {} --json",
                  quoted(stats), quoted(dir.path() / "m.json")));
  ASSERT_EQ(run.code, 0) << run.err;
  const ExpertMask mask =
      plan::choose_hot_experts(loads, 9, {.strategy = plan::HotExpertStrategy::kFrequency});
  const Json file = Json::parse(test::read_whole_file(dir.path() / "m.json"));
  std::vector<std::uint8_t> written;
  for (const Json& row : file["gpu_experts_masks"]) {
    for (const Json& v : row) written.push_back(v.get<bool>() ? 1 : 0);
  }
  EXPECT_EQ(written, mask.on_gpu);
  const Json out = Json::parse(run.out);
  EXPECT_EQ(out["budget"].get<std::int64_t>(), 9);
  EXPECT_DOUBLE_EQ(out["hit_rate"].get<double>(), plan::hot_expert_hit_rate(loads, mask.on_gpu));
}

TEST(CliPlanCommands, HelpHasAnExample) {
  for (const char* name : {"plan", "eval", "hot-experts"}) {
    SCOPED_TRACE(name);
    const CliRun run = run_cli(std::string(name) + " --help");
    EXPECT_EQ(run.code, 0);
    EXPECT_NE(run.out.find("Example:\n  moestat " + std::string(name) + " "), std::string::npos)
        << run.out;
  }
}

TEST(CliPlanCommands, UsageErrorsExitTwo) {
  ScratchDir dir;
  const auto stats = write_loads(dir, "a.json", small_loads(1));
  const std::string out = "--out " + quoted(dir.path() / "x.json");
  for (const std::string& args :
       {"plan --stats " + quoted(stats) + " --gpus 4 " + out,
        "plan --stats " + quoted(stats) + " --algorithm best " + kShape + " " + out,
        "eval --stats " + quoted(stats) + " --gpus 4",
        "hot-experts --stats " + quoted(stats) + " --strategy frequency " + out,
        "hot-experts --stats " + quoted(stats) +
            " --strategy frequency --per-layer 1 --ratio 0.5 " + out,
        "hot-experts --stats " + quoted(stats) + " --strategy hottest --per-layer 1 " + out}) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 2) << run.out << run.err;
  }
  // Fractions that are not numbers in [0, 1] (issue 14: --target nan passed the range check
  // and wrote the previous placement unchanged).
  for (const std::string value : {"nan", "NaN", "inf", "-inf", "1.5"}) {
    for (const std::string& args :
         {"plan --stats " + quoted(stats) + " --previous " + quoted(stats) + " --target " + value +
              " " + kShape + " " + out,
          "hot-experts --stats " + quoted(stats) + " --strategy frequency --ratio " + value + " " +
              out}) {
      SCOPED_TRACE(args);
      const CliRun run = run_cli(args);
      EXPECT_EQ(run.code, 2) << run.out << run.err;
      EXPECT_NE(run.err.find("Value " + value), std::string::npos) << run.err;
    }
  }
  // Refused before the files are read (issue 14: this ran past 120 s).
  const CliRun replicas =
      run_cli("plan --stats " + quoted(stats) + " --replicas 20000000 --gpus 4 " + out);
  EXPECT_EQ(replicas.code, 2);
  EXPECT_NE(replicas.err.find("--replicas: Value 20000000 not in range 1 to 4096"),
            std::string::npos)
      << replicas.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.json"});
}

TEST(CliPlanCommands, RuntimeErrorsExitOneNamingTheProblemAndWriteNothing) {
  ScratchDir dir;
  const auto stats = write_loads(dir, "a.json", small_loads(1));
  const std::string out = "--out " + quoted(dir.path() / "x.json");
  const std::vector<std::pair<std::string, std::string>> cases{
      {"plan --stats " + quoted(dir.path() / "w.pt") + " " + kShape + " " + out, "w.pt"},
      {"plan --stats " + quoted(dir.path() / "none.json") + " " + kShape + " " + out, "none.json"},
      {"plan --stats " + quoted(stats) + " --replicas 10 --gpus 4 " + out,
       "do not divide evenly over 4 GPUs"},
      {"plan --stats " + quoted(stats) + " --replicas 4 --gpus 4 " + out,
       "cannot hold 8 logical experts"},
      {"plan --stats " + quoted(stats) + " --algorithm deepseek --previous " + quoted(stats) + " " +
           kShape + " " + out,
       "--previous needs --algorithm moestat"},
      {"hot-experts --stats " + quoted(stats) + " --strategy uniform --per-layer 9 " + out,
       "outside [0, 8]"}};
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const CliRun run = run_cli(args);
    EXPECT_EQ(run.code, 1) << run.out << run.err;
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.json"});
}

}  // namespace
}  // namespace moestat
