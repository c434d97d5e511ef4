// `moestat simulate` end to end on two hand-made workloads (tiny, so it runs in a moment):
// the table, the JSON timelines, the same output for a seed, and bad inputs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_run.hpp"
#include "cli/simulation_workloads.hpp"

namespace moestat::test {
namespace {

constexpr const char* kDeployment =
    "--replicas 8 --groups 1 --nodes 1 --gpus 4 --passes 1000 --scenario shift "
    "--scenario alternate";

TEST(SimulateCli, PrintsTheComparisonAndWritesTimelines) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.path() / "data");
  write_workload(dir.path() / "data" / "a.json", {0, 2, 4, 6});
  write_workload(dir.path() / "data" / "b.json", {0, 1, 2, 3});
  const auto json = dir.path() / "sim.json";
  const std::string args = fmt::format("simulate --data {} {} --seed 3 --json {}",
                                       quoted(dir.path() / "data"), kDeployment, quoted(json));
  const CliRun run = run_cli(args);
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "shift: a.json, then b.json from pass 500 (1000 passes)"))
      << run.out;
  for (const char* row :
       {"never", "SGLang default", "vLLM default", "best interval", "best threshold", "advisor"}) {
    EXPECT_TRUE(contains(run.out, std::string("  ") + row)) << row << "\n" << run.out;
  }
  EXPECT_FALSE(contains(run.out, "steady:")) << "only the scenarios asked for";

  const nlohmann::json doc = nlohmann::json::parse(read_whole_file(json));
  ASSERT_EQ(doc["scenarios"].size(), 2u);
  const nlohmann::json& shift = doc["scenarios"][0];
  EXPECT_EQ(shift["name"], "shift");
  EXPECT_EQ(shift["phases"].size(), 2u);
  for (const nlohmann::json& policy : shift["policies"]) {
    EXPECT_EQ(policy["block_balancedness"].size(), 1000u / 10u) << policy["policy"];
    double lost = policy["imbalance_seconds"].get<double>() + policy["move_seconds"].get<double>();
    EXPECT_NEAR(policy["lost_seconds"].get<double>(), lost, 1e-9);
  }
  EXPECT_EQ(shift["policies"][0]["role"], "never");
  EXPECT_EQ(shift["policies"][0]["moved_experts"], 0);

  // The same seed prints the same table; another seed draws other passes.
  EXPECT_EQ(run_cli(args).out, run.out);
  EXPECT_NE(run_cli(fmt::format("simulate --data {} {} --seed 4", quoted(dir.path() / "data"),
                                kDeployment))
                .out,
            run.out);
}

TEST(SimulateCli, RefusesBadInputs) {
  ScratchDir dir;
  const CliRun missing = run_cli(fmt::format("simulate --data {}", quoted(dir.path() / "none")));
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(contains(missing.err, "is not a directory")) << missing.err;

  write_workload(dir.path() / "a.json", {0});
  const CliRun one = run_cli(fmt::format("simulate --data {}", quoted(dir.path())));
  EXPECT_EQ(one.code, 1);
  EXPECT_TRUE(contains(one.err, "holds 1 counts files")) << one.err;

  write_workload(dir.path() / "b.json", {1});
  const CliRun unknown = run_cli(
      fmt::format("simulate --data {} --replicas 8 --groups 1 --nodes 1 --gpus 4 --scenario bogus",
                  quoted(dir.path())));
  EXPECT_EQ(unknown.code, 1);
  EXPECT_TRUE(contains(unknown.err, "no scenario is called 'bogus'")) << unknown.err;

  const CliRun uneven = run_cli(fmt::format(
      "simulate --data {} --replicas 8 --groups 1 --nodes 1 --gpus 3", quoted(dir.path())));
  EXPECT_EQ(uneven.code, 1);
  EXPECT_TRUE(contains(uneven.err, "8 replicas do not divide evenly over 3 GPUs")) << uneven.err;

  EXPECT_EQ(run_cli(fmt::format("simulate --data {} --passes 0", quoted(dir.path()))).code, 2);
}

}  // namespace
// Issue 42, item 5: `simulate --data demo-out` failed on the demo's gpu_experts_masks.pt.
TEST(SimulateCli, TakesADemosFolderSkippingWhatIsNotAWorkload) {
  test::ScratchDir dir;
  ASSERT_EQ(
      test::run_cli("demo --preset mixtral-8x7b --passes 4 --out " + test::quoted(dir.path())).code,
      0);
  const test::CliRun run = test::run_cli("simulate --data " + test::quoted(dir.path()) +
                                         " --passes 20 --scenario steady --policy never "
                                         "--replicas 8 --groups 1 --nodes 1 --gpus 2");
  ASSERT_EQ(run.code, 0) << run.err;
  for (const char* name : {"gpu_experts_masks.pt (expert_mask", "placement.json (placement",
                           "placement_moestat.pt (placement"}) {
    EXPECT_TRUE(test::contains(run.out, (dir.path() / name).string() + ": not a workload)"))
        << name << "\n"
        << run.out;
  }
  EXPECT_FALSE(test::contains(run.out, "snapshot.json (")) << run.out;
}

}  // namespace moestat::test
