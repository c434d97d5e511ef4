// The report's summary: which placement balances best on the judged passes and by how much,
// the hottest layer and expert, the busiest GPU and node, the dense layers; then a table of
// every placement.
#include "summary.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "chart.hpp"
#include "figures.hpp"

namespace moestat::report::detail {
namespace {

/// What the summary says of one placement.
struct Standing {
  double balancedness = 1.0;
  /// Mean over layers with load of max / mean GPU load: how much more than its share the GPU
  /// a layer waits for carries.
  double busiest_factor = 1.0;
  std::int64_t busiest_gpu = 0, busiest_node = 0;
  double busiest_gpu_share = 0.0, busiest_node_share = 0.0;
};

Standing standing_of(const Evaluation& evaluation, const Options& options) {
  Standing out{.balancedness = evaluation.balancedness};
  double sum = 0.0;
  std::int64_t loaded = 0;
  for (double layer : evaluation.layer_balancedness) {
    if (layer <= 0) continue;
    sum += 1.0 / layer;
    ++loaded;
  }
  out.busiest_factor = loaded > 0 ? sum / double(loaded) : 1.0;
  const std::vector<double> shares = gpu_shares(evaluation, options.num_gpus);
  const auto busiest = std::max_element(shares.begin(), shares.end());
  out.busiest_gpu = busiest - shares.begin();
  out.busiest_gpu_share = *busiest;
  const std::int64_t per_node = options.num_gpus / options.num_nodes;
  for (std::int64_t node = 0; node < options.num_nodes; ++node) {
    const double share = std::accumulate(shares.begin() + node * per_node,
                                         shares.begin() + (node + 1) * per_node, 0.0);
    if (share > out.busiest_node_share) out.busiest_node = node, out.busiest_node_share = share;
  }
  return out;
}

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

std::string signed_change(double value, double baseline) {
  return fmt::format("{:+.3f} ({:+.1f}%)", value - baseline,
                     baseline > 0 ? 100.0 * (value / baseline - 1) : 0.0);
}

/// "passes 32-63, which no placement was planned on" or "all passes".
std::string judged_words(const Recording& recording, const JudgedPasses& judged) {
  if (judged.held_out) {
    return fmt::format(
        "on passes {}-{}, held out from planning (traffic the placements have "
        "not seen)",
        judged.begin, judged.end - 1);
  }
  return recording.num_passes() > 0
             ? fmt::format("over all {} passes, in-sample (no planning passes were set apart)",
                           recording.num_passes())
             : "over the whole recording";
}

/// The placement the others are measured against: the first one given (the one in use, by
/// convention) when there are two or more to compare, else the identity placement.
std::size_t baseline_of(const std::vector<Evaluation>& evaluations) {
  return evaluations.size() > 2 ? 1 : 0;
}

/// The placement with the highest balancedness; the earliest of a tie.
std::size_t best_of(const std::vector<Standing>& standings) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < standings.size(); ++i) {
    if (standings[i].balancedness > standings[best].balancedness) best = i;
  }
  return best;
}

void write_best(std::string& out, const Recording& recording, const Options& options,
                const std::vector<Evaluation>& evaluations,
                const std::vector<Standing>& standings) {
  const std::string judged = judged_words(recording, judged_passes(recording, options));
  if (evaluations.size() == 1) {
    fmt::format_to(std::back_inserter(out),
                   "<li>Only the identity placement (expert e on GPU e / (E / GPUs)) is drawn: "
                   "balancedness {:.3f} {}. Give placements to see which balances better.</li>\n",
                   standings[0].balancedness, judged);
    return;
  }
  const std::size_t baseline = baseline_of(evaluations), best = best_of(standings);
  const Standing& base = standings[baseline];
  const std::string base_words =
      fmt::format("<b>{}</b> ({})", xml_escape(evaluations[baseline].name),
                  baseline == 0 ? "the identity placement" : "the first placement given");
  if (best == baseline) {
    fmt::format_to(std::back_inserter(out),
                   "<li><b>Best placement: {}</b>, the baseline itself: balancedness {:.3f} {}; "
                   "no other placement does better.</li>\n",
                   xml_escape(evaluations[best].name), base.balancedness, judged);
    return;
  }
  const Standing& top = standings[best];
  fmt::format_to(std::back_inserter(out),
                 "<li><b>Best placement: {}</b>, balancedness {:.3f} {}, against {:.3f} for {}: "
                 "{}. The GPU a layer waits for carries {:.2f}× the layer's mean GPU load on "
                 "average, against {:.2f}×: {} less load on the slowest GPU of each layer.</li>\n",
                 xml_escape(evaluations[best].name), top.balancedness, judged, base.balancedness,
                 base_words, signed_change(top.balancedness, base.balancedness), top.busiest_factor,
                 base.busiest_factor, percent(1 - top.busiest_factor / base.busiest_factor));
}

void write_hottest(std::string& out, const Recording& recording) {
  const std::vector<std::int64_t> totals = recording.counts.totals();
  const std::int64_t num_experts = recording.num_experts();
  std::int64_t hot_layer = -1, hot_expert = 0, loaded = 0;
  double hot_factor = 0.0, hot_share = 0.0;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const auto row = totals.begin() + layer * num_experts;
    const std::int64_t total = std::accumulate(row, row + num_experts, std::int64_t{0});
    if (total <= 0) continue;
    ++loaded;
    const auto hottest = std::max_element(row, row + num_experts);
    const double factor = double(*hottest) * double(num_experts) / double(total);
    if (factor > hot_factor) {
      hot_layer = layer, hot_expert = hottest - row, hot_factor = factor;
      hot_share = double(*hottest) / double(total);
    }
  }
  if (hot_layer < 0) {
    out += "<li>No layer has expert load.</li>\n";
    return;
  }
  fmt::format_to(std::back_inserter(out),
                 "<li><b>Hottest expert: layer {}, expert {}</b>, with {} of the layer's token "
                 "assignments, {:.1f}× the mean of its {} experts; layer {} is the most skewed of "
                 "the {} layers with load (all passes).</li>\n",
                 hot_layer, hot_expert, percent(hot_share), hot_factor, num_experts, hot_layer,
                 loaded);
}

void write_busiest(std::string& out, const Options& options, const Evaluation& evaluation,
                   const Standing& standing) {
  fmt::format_to(std::back_inserter(out),
                 "<li><b>Busiest GPU under {}: GPU {}</b>, with {} of the load over all layers "
                 "(an even share is {})",
                 xml_escape(evaluation.name), standing.busiest_gpu,
                 percent(standing.busiest_gpu_share), percent(1.0 / double(options.num_gpus)));
  if (options.num_nodes > 1) {
    const std::int64_t per_node = options.num_gpus / options.num_nodes;
    const std::int64_t first = standing.busiest_node * per_node;
    fmt::format_to(std::back_inserter(out),
                   "; <b>busiest node: node {}</b> ({}), with {} (an even share is {})",
                   standing.busiest_node,
                   per_node == 1 ? fmt::format("GPU {}", first)
                                 : fmt::format("GPUs {}-{}", first, first + per_node - 1),
                   percent(standing.busiest_node_share), percent(1.0 / double(options.num_nodes)));
  }
  out += ".</li>\n";
}

void write_dense(std::string& out, const Recording& recording) {
  const auto runs = dense_layer_runs(recording);
  if (runs.empty()) return;
  std::string layers;
  std::int64_t count = 0;
  for (const auto& [first, end] : runs) {
    layers += layers.empty() ? "" : ", ";
    layers += end - first == 1 ? fmt::format("{}", first) : fmt::format("{}-{}", first, end - 1);
    count += end - first;
  }
  fmt::format_to(std::back_inserter(out),
                 "<li>{} {} {} no expert load (dense): grey in the heatmap, left out of every "
                 "balancedness.</li>\n",
                 count == 1 ? "Layer" : "Layers", layers, count == 1 ? "has" : "have");
}

void write_table(std::string& out, const Recording& recording, const Options& options,
                 const std::vector<Evaluation>& evaluations,
                 const std::vector<Standing>& standings) {
  const std::size_t baseline = baseline_of(evaluations);
  fmt::format_to(std::back_inserter(out),
                 "<h2>Placements</h2>\n<p>Judged {}.</p>\n<table class=\"placements\" "
                 "id=\"placements\">\n<tr><th>placement</th><th>balancedness</th><th>against "
                 "{}</th><th>slowest GPU / mean, per layer</th><th>busiest GPU</th>{}</tr>\n",
                 judged_words(recording, judged_passes(recording, options)),
                 xml_escape(evaluations[baseline].name),
                 options.num_nodes > 1 ? "<th>busiest node</th>" : "");
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    const Standing& s = standings[i];
    fmt::format_to(std::back_inserter(out),
                   "<tr><td><span style=\"color:{}\">&#9632;</span> {}</td><td>{:.3f}</td>"
                   "<td>{}</td><td>{:.2f}×</td><td>GPU {}: {}</td>",
                   colour_of(i), xml_escape(evaluations[i].name), s.balancedness,
                   i == baseline ? "baseline"
                                 : signed_change(s.balancedness, standings[baseline].balancedness),
                   s.busiest_factor, s.busiest_gpu, percent(s.busiest_gpu_share));
    if (options.num_nodes > 1) {
      fmt::format_to(std::back_inserter(out), "<td>node {}: {}</td>", s.busiest_node,
                     percent(s.busiest_node_share));
    }
    out += "</tr>\n";
  }
  out += "</table>\n";
}

}  // namespace

void write_summary(std::string& out, const Recording& recording, const Options& options,
                   const std::vector<Evaluation>& evaluations) {
  std::vector<Standing> standings;
  for (const Evaluation& evaluation : evaluations) {
    standings.push_back(standing_of(evaluation, options));
  }
  const std::size_t best = best_of(standings);
  out += "<section id=\"summary\">\n<h2>What this says</h2>\n<ul>\n";
  write_best(out, recording, options, evaluations, standings);
  write_hottest(out, recording);
  write_busiest(out, options, evaluations[best], standings[best]);
  write_dense(out, recording);
  out += "</ul>\n</section>\n";
  write_table(out, recording, options, evaluations, standings);
}

}  // namespace moestat::report::detail
