// A simulation's timelines as chart models (chart.hpp), drawn by svg_chart.cpp: per scenario,
// the balancedness each shown policy served block by block, its rebalances as dots on its
// line, the phases of the traffic as bands.
#include <fmt/format.h>

#include <filesystem>
#include <moestat/error.hpp>
#include <moestat/report/simulation.hpp>
#include <utility>

#include "chart.hpp"
#include "figures.hpp"

namespace moestat::report {
namespace {

constexpr std::string_view kEmphasisedRole = "advisor";

/// (row of plan::kComparisonRows, index into scenario.policies) of each row shown, as
/// `moestat simulate` chooses its table's rows.
std::vector<std::pair<std::size_t, std::size_t>> shown_rows(const SimulatedScenario& scenario) {
  std::vector<std::string> roles;
  std::vector<double> lost;
  for (const SimulatedPolicy& policy : scenario.policies) {
    roles.push_back(policy.role);
    lost.push_back(policy.replay.lost_seconds());
  }
  return plan::comparison_rows(roles, lost);
}

/// A workload's name without its file extension: what the phase's band is labelled.
std::string workload_label(const std::string& workload) {
  const std::string stem = std::filesystem::path(workload).stem().string();
  return stem.empty() ? workload : stem;
}

detail::Chart timeline_chart(const SimulatedScenario& scenario) {
  const auto block = double(scenario.block_passes);
  detail::Chart chart{
      .id = "simulation_" + scenario.name,
      .title = fmt::format("{}: balancedness served, per {} passes", scenario.name,
                           scenario.block_passes),
      .x_title = "pass (a dot: a rebalance, its placement serving from that pass)",
      .y_title = "balancedness (mean / max GPU load)",
      .kind = detail::ChartKind::kLines,
      .reference = 1.0,
      .reference_label = "1 = a perfect split",
      .y_min = 0.0,
      .y_max = 1.0,
      .units_per_position = block,
      // Taller than the report's other charts: the policies differ by a few hundredths.
      .plot_height = 300};
  for (std::size_t i = 0; i < scenario.phases.size(); ++i) {
    const SimulatedPhase& phase = scenario.phases[i];
    chart.bands.push_back({.from = double(phase.first_pass) / block,
                           .to = double(phase.first_pass + phase.num_passes) / block,
                           .label = workload_label(phase.workload),
                           .shaded = i % 2 == 1});
  }
  for (const auto& [row, index] : shown_rows(scenario)) {
    const SimulatedPolicy& policy = scenario.policies[index];
    // A role keeps its colour whatever else was replayed: never grey, then the palette.
    detail::Series series{.name = std::string(plan::kComparisonRows[row].label),
                          .colour = detail::colour_of(row),
                          .values = policy.replay.block_balancedness,
                          .emphasised = policy.role == kEmphasisedRole};
    for (const plan::RebalanceEvent& event : policy.replay.rebalances) {
      series.marks.push_back(
          {.at = double(event.pass) / block,
           .label =
               fmt::format("{}: rebalanced at pass {}, {} experts moved, {:.3f} s",
                           policy.replay.policy, event.pass, event.moved_experts, event.seconds)});
    }
    chart.series.push_back(std::move(series));
  }
  return chart;
}

}  // namespace

std::vector<ShownPolicy> SimulatedScenario::shown() const {
  std::vector<ShownPolicy> out;
  for (const auto& [row, index] : shown_rows(*this)) {
    out.push_back({index, std::string(plan::kComparisonRows[row].label)});
  }
  return out;
}

std::vector<Figure> render_simulation_figures(const Simulation& simulation) {
  std::vector<Figure> out;
  for (const SimulatedScenario& scenario : simulation.scenarios) {
    MOESTAT_CHECK(!scenario.shown().empty(),
                  "scenario {}: no policy has a role the report shows (never, sglang-default, "
                  "vllm-default, interval, threshold, advisor)",
                  scenario.name);
    const detail::Chart chart = timeline_chart(scenario);
    out.push_back({chart.id, chart.title, detail::svg_of(chart)});
  }
  return out;
}

}  // namespace moestat::report
