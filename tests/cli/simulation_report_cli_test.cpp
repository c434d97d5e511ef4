// `moestat report --simulation` end to end: what `moestat simulate --json` writes drawn as a
// page and SVG timelines showing the rows the simulator printed, and the command lines and
// files it refuses.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_run.hpp"
#include "cli/simulation_workloads.hpp"

namespace moestat::test {
namespace {

constexpr std::array<const char*, 6> kRows{"never",         "SGLang default", "vLLM default",
                                           "best interval", "best threshold", "advisor"};

/// The rows of `moestat simulate`'s printed tables as the page's table writes them:
/// "<td>LABEL</td><td>POLICY</td><td>BALANCEDNESS</td>".
std::vector<std::string> printed_rows(const std::string& out) {
  std::vector<std::string> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    for (const char* label : kRows) {
      const std::string prefix = fmt::format("  {:<16} ", label);
      if (!line.starts_with(prefix)) continue;
      // "  LABEL  POLICY  BALANCED MOVED MOVES LOST": the policy is what the numbers follow.
      std::vector<std::string> numbers;
      std::string rest = line.substr(prefix.size());
      for (int i = 0; i < 4; ++i) {
        rest = rest.substr(0, rest.find_last_not_of(' ') + 1);
        numbers.push_back(rest.substr(rest.rfind(' ') + 1));
        rest = rest.substr(0, rest.rfind(' '));
      }
      rest = rest.substr(0, rest.find_last_not_of(' ') + 1);
      rows.push_back(fmt::format("<td>{}</td><td>{}</td><td>{}</td>", label, rest, numbers[3]));
    }
  }
  return rows;
}

/// A simulation of the shift and alternate scenarios on a tiny deployment, as
/// `moestat simulate --json` writes it; `table` gets what it prints.
std::filesystem::path simulate(const ScratchDir& dir, std::string* table = nullptr) {
  std::filesystem::create_directory(dir.path() / "data");
  write_workload(dir.path() / "data" / "a.json", {0, 2, 4, 6});
  write_workload(dir.path() / "data" / "b.json", {0, 1, 2, 3});
  const auto json = dir.path() / "sim.json";
  const CliRun run = run_cli(
      fmt::format("simulate --data {} --replicas 8 --groups 1 --nodes 1 --gpus 4 --passes 1000 "
                  "--scenario shift --scenario alternate --json {}",
                  quoted(dir.path() / "data"), quoted(json)));
  EXPECT_EQ(run.code, 0) << run.err;
  if (table != nullptr) *table = run.out;
  return json;
}

TEST(SimulationReportCli, DrawsTheSimulatorsTimelinesAsAPageAndSvg) {
  ScratchDir dir;
  std::string table;
  const auto json = simulate(dir, &table);
  const auto page = dir.path() / "sim.html";
  const auto figures = dir.path() / "figures";
  const CliRun run = run_cli(fmt::format("report --simulation {} --html {} --svg {}", quoted(json),
                                         quoted(page), quoted(figures)));
  ASSERT_EQ(run.code, 0) << run.err;
  const std::string shift = read_whole_file(figures / "simulation_shift.svg");
  const std::string alternate = read_whole_file(figures / "simulation_alternate.svg");
  EXPECT_TRUE(contains(shift, ">shift: balancedness served, per 10 passes</text>")) << shift;
  EXPECT_TRUE(contains(alternate, ">alternate: balancedness served, per 10 passes</text>"));
  // The legend names every row of the simulator's table, and the page's tables show the
  // rows it printed: the same policy chosen for each, the same balancedness.
  const std::string html = read_whole_file(page);
  for (const char* row : kRows) {
    EXPECT_TRUE(contains(shift, std::string(">") + row + "</text></g>")) << row;
  }
  const std::vector<std::string> rows = printed_rows(table);
  EXPECT_EQ(rows.size(), 2 * kRows.size()) << table;
  for (const std::string& row : rows) EXPECT_TRUE(contains(html, "<tr>" + row)) << row;
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

// A 5000-character scenario name (its timeline's file name too long for the file system)
// wrote the page, then failed on the figure: it is refused before anything is written.
TEST(SimulationReportCli, ALongScenarioNameWritesNothing) {
  ScratchDir dir;
  const auto json = simulate(dir);
  nlohmann::json doc = nlohmann::json::parse(read_whole_file(json));
  doc["scenarios"][0]["name"] = std::string(5000, 'a');
  std::ofstream(json, std::ios::trunc) << doc.dump();
  const auto page = dir.path() / "page.html";
  const auto figures = dir.path() / "figures";
  const CliRun run = run_cli(fmt::format("report --simulation {} --html {} --svg {}", quoted(json),
                                         quoted(page), quoted(figures)));
  EXPECT_EQ(run.code, 1);
  EXPECT_TRUE(contains(run.err, "scenarios[0].name: 5000 characters")) << run.err;
  EXPECT_TRUE(contains(run.err, "expected at most 100")) << run.err;
  EXPECT_FALSE(std::filesystem::exists(page));
  EXPECT_FALSE(std::filesystem::exists(figures));
}

}  // namespace
}  // namespace moestat::test
