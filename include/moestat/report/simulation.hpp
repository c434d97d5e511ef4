// Reports of a rebalance simulation (`moestat simulate --json`): per scenario, a timeline of
// the balancedness each policy served, block by block, with its rebalances and the
// scenario's phases marked, and the table of lost seconds, balancedness and moves.
//
// Example: the timelines of a simulation as SVG files and an HTML page (`moestat report
// --simulation` does this from the command line):
//
//   namespace report = moestat::report;
//   const report::Simulation simulation = report::load_simulation("simulation.json");
//   for (const report::Figure& figure : report::render_simulation_figures(simulation)) {
//     save(svg_dir / (figure.name + ".svg"), figure.svg);  // simulation_shift.svg, ...
//   }
//   const std::string page = report::render_simulation_html(simulation);
#pragma once

#include <cstdint>
#include <filesystem>
#include <moestat/plan/replay.hpp>
#include <moestat/report.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::report {

/// A phase of a scenario's traffic: one workload for passes [first_pass, first_pass +
/// num_passes).
struct SimulatedPhase {
  std::string workload;
  std::int64_t first_pass = 0;
  std::int64_t num_passes = 0;
};

/// One policy's replay and its role: "never", "sglang-default", "vllm-default", "interval"
/// (the tuned grid), "threshold" (the tuned grid) or "advisor".
struct SimulatedPolicy {
  std::string role;
  plan::PolicyReplay replay;
};

/// A row of the comparison: policies[index], shown as `label`.
struct ShownPolicy {
  std::size_t index = 0;
  std::string label;  ///< "never", "SGLang default", ..., "best interval", "advisor"
};

struct SimulatedScenario {
  std::string name;  ///< 1 to 100 letters, digits, '-' and '_': it names a file.
  std::string description;
  std::int64_t num_passes = 0;
  std::int64_t block_passes = 0;          ///< Passes per point of a timeline.
  std::vector<SimulatedPhase> phases;     ///< In order, covering every pass.
  std::vector<SimulatedPolicy> policies;  ///< As replayed, at least one.

  /// The rows `moestat simulate`'s table shows, in its order: never, the SGLang and vLLM
  /// defaults, the policy of each tuned grid (interval, threshold) with the fewest lost
  /// seconds, the advisor; roles the simulation did not replay are left out.
  std::vector<ShownPolicy> shown() const;
};

struct Simulation {
  std::string source;                        ///< Where it came from (a path), shown in the report.
  std::vector<SimulatedScenario> scenarios;  ///< Names unique.
};

/// Reads a simulation from JSON text: the document `moestat simulate --json` writes (an
/// object with a "scenarios" array), or an object whose every value is such a document
/// (runs of one scenario each, kept together), whose scenarios are taken in order.
/// moestat::Error naming the field (`scenarios[1].policies[3].rebalances[0].pass`) when
/// the text is not JSON, a field is missing or of the wrong type, or the values disagree
/// (phases that do not add up to the passes, a timeline of the wrong length, a rebalance
/// outside the scenario).
Simulation parse_simulation(std::string_view json, std::string source);

/// parse_simulation of a file; errors start with its path.
Simulation load_simulation(const std::filesystem::path& path);

/// One timeline per scenario, in order, named "simulation_<scenario>": x the pass, y the
/// balancedness each shown policy served per block of passes; a dot where a policy
/// rebalanced (the advisor's line and dots drawn thicker, over the others); the phases as
/// bands named by their workload.
std::vector<Figure> render_simulation_figures(const Simulation& simulation);

/// A self-contained HTML page: per scenario its description, its timeline (as
/// render_simulation_figures draws it) and the table of the shown policies: mean
/// balancedness, rebalances, experts moved, seconds lost to imbalance and to moves.
std::string render_simulation_html(const Simulation& simulation);

}  // namespace moestat::report
