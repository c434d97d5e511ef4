// A simulation's HTML page: per scenario, its timeline and the table of the policies it shows,
// with the same head and style as the recording's page.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <moestat/report/simulation.hpp>
#include <string>

#include "chart.hpp"
#include "page.hpp"

namespace moestat::report {
namespace {

using detail::xml_escape;

constexpr std::string_view kCaption =
    "Each line is the balancedness a policy's placement served (mean / max GPU load, mean "
    "over the block's passes), every policy serving the same drawn passes. A dot marks a "
    "rebalance: its placement serves from that pass on (hover for the experts moved and the "
    "seconds). The bands are the traffic's phases, named by their workload. The advisor is "
    "drawn thicker, over the others.";

void write_table(std::string& out, const SimulatedScenario& scenario) {
  const std::vector<ShownPolicy> rows = scenario.shown();
  const auto fewest_lost =
      std::min_element(rows.begin(), rows.end(), [&](const ShownPolicy& a, const ShownPolicy& b) {
        return scenario.policies[a.index].replay.lost_seconds() <
               scenario.policies[b.index].replay.lost_seconds();
      });
  out +=
      "<table class=\"policies\">\n<tr><th></th><th>policy</th><th>balancedness</th>"
      "<th>rebalances</th><th>experts moved</th><th>lost to imbalance (s)</th>"
      "<th>lost to moves (s)</th><th>lost (s)</th></tr>\n";
  for (auto row = rows.begin(); row != rows.end(); ++row) {
    const plan::PolicyReplay& r = scenario.policies[row->index].replay;
    fmt::format_to(std::back_inserter(out),
                   "<tr><td>{}</td><td>{}</td><td>{:.4f}</td><td>{}</td><td>{}</td>"
                   "<td>{:.2f}</td><td>{:.2f}</td><td>{}{:.2f}{}</td></tr>\n",
                   xml_escape(row->label), xml_escape(r.policy), r.mean_balancedness,
                   r.rebalances.size(), r.moved_experts, r.imbalance_seconds, r.move_seconds,
                   row == fewest_lost ? "<b>" : "", r.lost_seconds(),
                   row == fewest_lost ? "</b>" : "");
  }
  out += "</table>\n";
}

}  // namespace

std::string render_simulation_html(const Simulation& simulation) {
  const std::vector<Figure> figures = render_simulation_figures(simulation);
  std::string out;
  detail::open_page(out, "moestat simulation: " + simulation.source);
  out +=
      "<p>Rebalancing policies replayed on the same traffic: how balanced each kept the "
      "expert-parallel GPUs, how many experts it moved, and the seconds it lost to imbalance "
      "and to moving experts (lower is better; the fewest in bold). 'best' rows are the tuned "
      "grid's policy with the fewest lost seconds in that scenario, chosen after the "
      "fact.</p>\n";
  for (std::size_t i = 0; i < simulation.scenarios.size(); ++i) {
    const SimulatedScenario& scenario = simulation.scenarios[i];
    fmt::format_to(std::back_inserter(out),
                   "<h2>{}</h2>\n<p>{} ({} passes)</p>\n<figure>\n{}<figcaption>{}</figcaption>\n"
                   "</figure>\n",
                   xml_escape(scenario.name), xml_escape(scenario.description), scenario.num_passes,
                   figures[i].svg, kCaption);
    write_table(out, scenario);
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace moestat::report
