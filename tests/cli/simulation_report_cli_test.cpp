// `moestat report --simulation` end to end: what `moestat simulate --json` writes drawn as a
// page and SVG timelines, and the command lines and files it refuses.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cli_run.hpp"

namespace moestat::test {
namespace {

/// Two layers (one dense) of 8 experts; `hot` experts get 20 times the others' load.
void write_workload(const std::filesystem::path& path, std::initializer_list<int> hot) {
  nlohmann::json counts = nlohmann::json::array();
  counts.push_back(std::vector<int>(8, 0));
  std::vector<int> row(8, 50);
  for (int e : hot) row[std::size_t(e)] = 1000;
  counts.push_back(row);
  std::ofstream(path) << nlohmann::json{{"logical_count", counts}}.dump();
}

/// A simulation of the shift and alternate scenarios on a tiny deployment, as
/// `moestat simulate --json` writes it.
std::filesystem::path simulate(const ScratchDir& dir) {
  std::filesystem::create_directory(dir.path() / "data");
  write_workload(dir.path() / "data" / "a.json", {0, 2, 4, 6});
  write_workload(dir.path() / "data" / "b.json", {0, 1, 2, 3});
  const auto json = dir.path() / "sim.json";
  const CliRun run = run_cli(
      fmt::format("simulate --data {} --replicas 8 --groups 1 --nodes 1 --gpus 4 --passes 1000 "
                  "--scenario shift --scenario alternate --json {}",
                  quoted(dir.path() / "data"), quoted(json)));
  EXPECT_EQ(run.code, 0) << run.err;
  return json;
}

TEST(SimulationReportCli, DrawsTheSimulatorsTimelinesAsAPageAndSvg) {
  ScratchDir dir;
  const auto json = simulate(dir);
  const auto page = dir.path() / "sim.html";
  const auto figures = dir.path() / "figures";
  const CliRun run = run_cli(fmt::format("report --simulation {} --html {} --svg {}", quoted(json),
                                         quoted(page), quoted(figures)));
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string shift = read_whole_file(figures / "simulation_shift.svg");
  const std::string alternate = read_whole_file(figures / "simulation_alternate.svg");
  EXPECT_TRUE(contains(shift, ">shift: balancedness served, per 50 passes</text>")) << shift;
  EXPECT_TRUE(contains(alternate, ">alternate: balancedness served, per 50 passes</text>"));
  // Every shown row of the simulator's table is in the legend and the page's table.
  const std::string html = read_whole_file(page);
  for (const char* row :
       {"never", "SGLang default", "vLLM default", "best interval", "best threshold", "advisor"}) {
    EXPECT_TRUE(contains(shift, std::string(">") + row + "</text></g>")) << row;
    EXPECT_TRUE(contains(html, std::string("<tr><td>") + row + "</td>")) << row;
  }
  EXPECT_TRUE(contains(html, shift));
  EXPECT_TRUE(contains(html, alternate));
  EXPECT_TRUE(contains(run.err, "wrote " + (figures / "simulation_shift.svg").string()));
}

TEST(SimulationReportCli, RefusesMisusedOptionsAndBadFiles) {
  ScratchDir dir;
  const auto json = dir.path() / "sim.json";
  std::ofstream(json) << "{\"scenarios\": [{\"name\": \"shift\"}]}";
  const auto page = quoted(dir.path() / "sim.html");

  const CliRun both =
      run_cli(fmt::format("report {0} --simulation {0} --html {1}", quoted(json), page));
  EXPECT_EQ(both.code, 2);
  EXPECT_TRUE(contains(both.err, "not both")) << both.err;

  const CliRun gpus =
      run_cli(fmt::format("report --simulation {} --html {} --gpus 4", quoted(json), page));
  EXPECT_EQ(gpus.code, 2);
  EXPECT_TRUE(contains(gpus.err, "--gpus is an option of a recording's report")) << gpus.err;

  const CliRun nothing = run_cli(fmt::format("report --simulation {}", quoted(json)));
  EXPECT_EQ(nothing.code, 2);
  EXPECT_TRUE(contains(nothing.err, "nothing to write: give --html OUT and/or --svg DIR"));

  const CliRun neither = run_cli(fmt::format("report --html {}", page));
  EXPECT_EQ(neither.code, 2);
  EXPECT_TRUE(contains(neither.err, "a recording FILE (or --simulation FILE) is required"));

  const CliRun bad = run_cli(fmt::format("report --simulation {} --html {}", quoted(json), page));
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(contains(bad.err, json.string() + ": scenarios[0].description is missing"))
      << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "sim.html")) << "an error writes nothing";
}

}  // namespace
}  // namespace moestat::test
