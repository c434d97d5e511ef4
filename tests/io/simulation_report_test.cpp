// The report of a rebalance simulation: the rows shown, each scenario's timeline (titles, axis
// titles, a legend naming every shown policy, a dot per rebalance, phase boundaries at their
// passes), the HTML page, and simulation files refused by the field that is wrong. The
// simulation is written here by hand, in the shape `moestat simulate --json` writes.
#include <gtest/gtest.h>

#include <fstream>
#include <moestat/report/simulation.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/svg_elements.hpp"
#include "io/test_support.hpp"

namespace moestat {
namespace {

using test::occurrences;
using test::text_of;

using nlohmann::json;

/// A policy's replay as the simulator writes it: a flat timeline at `level`, a rebalance
/// (of 10 experts, 0.1 s) at each of `passes`.
json policy(const std::string& role, const std::string& name, double lost_seconds,
            std::vector<int> passes, std::size_t num_blocks, double level = 0.7) {
  json rebalances = json::array();
  for (int pass : passes) {
    rebalances.push_back(
        {{"pass", pass}, {"moved_experts", 10}, {"max_moved_per_gpu", 2}, {"seconds", 0.1}});
  }
  const double move_seconds = 0.1 * double(passes.size());
  return {{"policy", name},
          {"role", role},
          {"mean_balancedness", level},
          {"moved_experts", 10 * passes.size()},
          {"imbalance_seconds", lost_seconds - move_seconds},
          {"move_seconds", move_seconds},
          {"lost_seconds", lost_seconds},
          {"rebalances", rebalances},
          {"block_balancedness", std::vector<double>(num_blocks, level)}};
}

json phase(const std::string& workload, int num_passes) {
  return {{"workload", workload},
          {"num_passes", num_passes},
          {"tokens_per_pass", 8192},
          {"jitter", 0.05}};
}

/// shift: 1000 passes in blocks of 50, a.json then b.json from pass 500; six rebalances
/// among the shown policies, one more in the interval policy the table does not show.
json shift_scenario() {
  return {{"name", "shift"},
          {"description", "a.json, then b.json from pass 500"},
          {"num_passes", 1000},
          {"block_passes", 50},
          {"phases", {phase("a.json", 500), phase("b.json", 500)}},
          {"policies",
           {policy("never", "never", 9.0, {}, 20, 0.6),
            policy("sglang-default", "every 1000 (window 1000)", 8.0, {500}, 20),
            policy("vllm-default", "every 3000 (window 1000)", 9.0, {}, 20, 0.6),
            policy("interval", "every 250 (window 250)", 8.5, {250}, 20),
            policy("interval", "every 500 (window 500)", 7.0, {500, 750}, 20, 0.75),
            policy("threshold", "below 0.70, checked every 250", 7.5, {600}, 20),
            policy("advisor", "advisor every 250", 6.0, {550, 800}, 20, 0.8)}}};
}

/// alternate: 1000 passes in blocks of 100, four phases of 250; the advisor only.
json alternate_scenario() {
  return {
      {"name", "alternate"},
      {"description", "a.json and b.json in turn every 250 passes"},
      {"num_passes", 1000},
      {"block_passes", 100},
      {"phases",
       {phase("a.json", 250), phase("b.json", 250), phase("a.json", 250), phase("b.json", 250)}},
      {"policies", {policy("advisor", "advisor every 200", 5.0, {300}, 10)}}};
}

json simulation_document() {
  return {{"seed", 1},
          {"deployment", {{"num_replicas", 16}, {"num_gpus", 4}}},
          {"scenarios", {shift_scenario(), alternate_scenario()}}};
}

report::Simulation simulation() {
  return report::parse_simulation(simulation_document().dump(), "sim.json");
}

/// The x of the x axis's tick labelled `label`; NaN when there is none.
double x_tick(const std::string& svg, const std::string& label) {
  const std::size_t at = svg.find("text-anchor=\"middle\" fill=\"#555555\">" + label + "</text>");
  if (at == std::string::npos) return std::nan("");
  const std::size_t x = svg.rfind("<text x=\"", at) + 9;
  return std::stod(svg.substr(x));
}

/// The x of every phase boundary: the left edge each band after the first draws.
std::vector<double> boundaries(const std::string& svg) {
  std::vector<double> out;
  for (std::size_t at = svg.find("<g class=\"band\">"); at != std::string::npos;
       at = svg.find("<g class=\"band\">", at + 1)) {
    const std::size_t end = svg.find("</g>", at);
    const std::size_t line = svg.find("<line x1=\"", at);
    if (line < end) out.push_back(std::stod(svg.substr(line + 10)));
  }
  return out;
}

TEST(SimulationReport, ShowsTheTablesRowsWithTheBestOfEachGrid) {
  const report::Simulation s = simulation();
  ASSERT_EQ(s.scenarios.size(), 2u);
  std::vector<std::string> labels, policies;
  for (const report::ShownPolicy& row : s.scenarios[0].shown()) {
    labels.push_back(row.label);
    policies.push_back(s.scenarios[0].policies[row.index].replay.policy);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"never", "SGLang default", "vLLM default",
                                              "best interval", "best threshold", "advisor"}));
  EXPECT_EQ(policies[3], "every 500 (window 500)") << "the interval with the fewest lost s";
  EXPECT_EQ(s.scenarios[0].phases[1].first_pass, 500);
  EXPECT_DOUBLE_EQ(s.scenarios[0].policies[6].replay.lost_seconds(), 6.0);
  ASSERT_EQ(s.scenarios[1].shown().size(), 1u);
  EXPECT_EQ(s.scenarios[1].shown()[0].label, "advisor");
}

TEST(SimulationReport, TimelineHasTitlesLegendRebalancesAndPhases) {
  const std::vector<report::Figure> figures = report::render_simulation_figures(simulation());
  ASSERT_EQ(figures.size(), 2u);
  EXPECT_EQ(figures[0].name, "simulation_shift");
  EXPECT_EQ(figures[1].name, "simulation_alternate");
  const std::string& svg = figures[0].svg;
  EXPECT_EQ(text_of(svg, "chart-title"), figures[0].title);
  EXPECT_EQ(figures[0].title, "shift: balancedness served, per 50 passes");
  EXPECT_TRUE(text_of(svg, "x-title").starts_with("pass")) << text_of(svg, "x-title");
  EXPECT_EQ(text_of(svg, "y-title"), "balancedness (mean / max GPU load)");
  for (const char* label :
       {"never", "SGLang default", "vLLM default", "best interval", "best threshold", "advisor"}) {
    EXPECT_NE(svg.find(std::string(">") + label + "</text></g>"), std::string::npos) << label;
  }
  // A dot per rebalance of a shown policy (not the unshown interval's at pass 250); the
  // advisor's larger, and its line drawn last, over the others.
  EXPECT_EQ(occurrences(svg, "class=\"mark\""), 6u);
  EXPECT_EQ(occurrences(svg, "r=\"4.5\""), 2u);
  EXPECT_EQ(svg.find("pass 250"), std::string::npos);
  EXPECT_NE(svg.find("advisor every 250: rebalanced at pass 800, 10 experts moved"),
            std::string::npos);
  EXPECT_GT(svg.rfind("class=\"series emphasised\""), svg.rfind("<g class=\"series\""));
  // The phases as bands named by their workload, the boundary at pass 500 of 1000.
  EXPECT_EQ(occurrences(svg, "<g class=\"band\">"), 2u);
  EXPECT_NE(svg.find(">b</text>"), std::string::npos);
  const double x0 = x_tick(svg, "0"), x1000 = x_tick(svg, "1k");
  ASSERT_TRUE(std::isfinite(x0) && std::isfinite(x1000)) << svg;
  ASSERT_EQ(boundaries(svg).size(), 1u);
  EXPECT_NEAR(boundaries(svg)[0], x0 + (x1000 - x0) * 0.5, 0.1);
  // alternate: boundaries at passes 250, 500 and 750; its one rebalance.
  const std::string& alternate = figures[1].svg;
  const double a0 = x_tick(alternate, "0"), a1000 = x_tick(alternate, "1k");
  const std::vector<double> at = boundaries(alternate);
  ASSERT_EQ(at.size(), 3u);
  for (std::size_t i = 0; i < at.size(); ++i) {
    EXPECT_NEAR(at[i], a0 + (a1000 - a0) * 0.25 * double(i + 1), 0.1) << i;
  }
  EXPECT_EQ(occurrences(alternate, "class=\"mark\""), 1u);
}

TEST(SimulationReport, PageHoldsEveryTimelineAndTable) {
  const report::Simulation s = simulation();
  const std::string html = report::render_simulation_html(s);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("<h1>moestat simulation: sim.json</h1>"), std::string::npos);
  for (const report::Figure& figure : report::render_simulation_figures(s)) {
    EXPECT_NE(html.find(figure.svg), std::string::npos) << figure.name;
  }
  EXPECT_EQ(occurrences(html, "<table class=\"policies\">"), 2u);
  EXPECT_NE(html.find("<td>best interval</td><td>every 500 (window 500)</td><td>0.7500</td>"
                      "<td>2</td><td>20</td><td>6.80</td><td>0.20</td><td>7.00</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<b>6.00</b>"), std::string::npos) << "the fewest lost seconds";
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(SimulationReport, ReadsAnObjectOfDocumentsInItsOrder) {
  json alternate = simulation_document();
  alternate["scenarios"] = {alternate_scenario()};
  json shift = simulation_document();
  shift["scenarios"] = {shift_scenario()};
  // Keys out of alphabetical order: the file's order is kept.
  const nlohmann::ordered_json merged = {{"shift", shift}, {"alternate", alternate}};
  const report::Simulation s = report::parse_simulation(merged.dump(), "merged.json");
  ASSERT_EQ(s.scenarios.size(), 2u);
  EXPECT_EQ(s.scenarios[0].name, "shift");
  EXPECT_EQ(s.scenarios[1].name, "alternate");
}

TEST(SimulationReport, RefusesBadSimulationsNamingTheField) {
  const auto refuses = [](const json& document, std::initializer_list<std::string_view> needles) {
    test::expect_error([&] { report::parse_simulation(document.dump(), "x"); }, needles);
  };
  test::expect_error([] { report::parse_simulation("{\"scenarios\": [", "x"); },
                     {"not valid JSON"});
  refuses(json::array(), {"not a simulation", "got an array"});
  refuses({{"logical_count", {{1, 2}}}}, {"not a simulation", "\"logical_count\""});
  refuses({{"scenarios", json::array()}}, {"holds no scenario"});

  json doc = simulation_document();
  doc["scenarios"][0]["policies"][2].erase("block_balancedness");
  refuses(doc, {"scenarios[0].policies[2].block_balancedness is missing"});

  doc = simulation_document();
  doc["scenarios"][0]["policies"][1]["block_balancedness"].erase(0);
  refuses(doc, {"scenarios[0].policies[1].block_balancedness holds 19 values",
                "1000 passes in blocks of 50 make 20"});

  doc = simulation_document();
  doc["scenarios"][0]["policies"][0]["block_balancedness"][3] = 1.5;
  refuses(doc, {"scenarios[0].policies[0].block_balancedness[3]", "from 0 to 1", "1.5"});

  doc = simulation_document();
  doc["scenarios"][1]["policies"][0]["rebalances"][0]["pass"] = 1000;
  refuses(doc, {"scenarios[1].policies[0].rebalances[0].pass", "from 0 to 999"});

  doc = simulation_document();
  doc["scenarios"][0]["policies"][6]["rebalances"][1]["pass"] = 500;
  refuses(doc, {"scenarios[0].policies[6].rebalances[1].pass", "from 551"});

  doc = simulation_document();
  doc["scenarios"][0]["phases"][1]["num_passes"] = 400;
  refuses(doc, {"scenarios[0].phases last 900 passes, but the scenario has 1000"});
  doc["scenarios"][0]["phases"][1]["num_passes"] = 600;
  refuses(doc, {"scenarios[0].phases[1]: the phases up to this one last more than the "
                "scenario's 1000 passes"});

  doc = simulation_document();
  doc["scenarios"][0]["policies"][0]["role"] = 3;
  refuses(doc, {"scenarios[0].policies[0].role: expected a string, got 3"});

  doc = simulation_document();
  doc["scenarios"][1]["name"] = "../shift";
  refuses(doc, {"scenarios[1].name", "is not a scenario name"});

  doc = simulation_document();
  doc["scenarios"][1]["name"] = "shift";
  refuses(doc, {"\"shift\" appears twice"});

  doc = simulation_document();  // simulation_<name>.svg must fit a file name's 255 bytes
  doc["scenarios"][1]["name"] = std::string(100, 'a');
  EXPECT_EQ(report::parse_simulation(doc.dump(), "sim.json").scenarios[1].name.size(), 100U);
  doc["scenarios"][1]["name"] = std::string(101, 'a');
  refuses(doc, {"scenarios[1].name: 101 characters (\"aaaaaaaaaaaaaaaaaaaa...\"), expected at "
                "most 100"});

  doc = simulation_document();
  doc["scenarios"][0]["block_passes"] = 0;
  refuses(doc, {"scenarios[0].block_passes: expected an integer from 1 to 1000, got 0"});
}

TEST(SimulationReport, LoadNamesTheFile) {
  test::ScratchDir dir;
  const std::filesystem::path path = dir.path() / "sim.json";
  std::ofstream(path) << "{\"scenarios\": 1}";
  test::expect_error([&] { report::load_simulation(path); },
                     {path.string(), "scenarios: expected an array"});
  test::expect_error([&] { report::load_simulation(dir.path() / "none.json"); }, {"none.json"});
  std::ofstream(path, std::ios::trunc) << simulation_document().dump();
  EXPECT_EQ(report::load_simulation(path).source, path.string());
}

}  // namespace
}  // namespace moestat
