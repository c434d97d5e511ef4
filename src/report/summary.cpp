// The report's summary: which placement balances best on the judged passes and by how much,
// the hottest layer and expert, the busiest GPU and node, the dense layers; then a table of
// every placement.
#include "summary.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>

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

/// What the headline's and the table's balancedness is, said next to it.
constexpr const char* kBalancednessDefinition =
    "Balancedness here is that of the judged passes' loads summed: the mean over layers with "
    "load of the mean GPU load / the max GPU load (1 = a perfect split).";

/// What the per-pass, load-weighted balancedness is.
constexpr const char* kServedDefinition =
    "a step waits for each pass's slowest GPU, so this is the sum over the judged passes and "
    "layers of the mean GPU load / the sum of the max GPU load: 1 = no time lost to imbalance";

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
                 "average, against {:.2f}×: {} less load on the slowest GPU of each layer. "
                 "{}</li>\n",
                 xml_escape(evaluations[best].name), top.balancedness, judged, base.balancedness,
                 base_words, signed_change(top.balancedness, base.balancedness), top.busiest_factor,
                 base.busiest_factor, percent(1 - top.busiest_factor / base.busiest_factor),
                 kBalancednessDefinition);
}

/// A placement's served balancedness on one set of passes; "-" without such passes.
std::string served_text(const std::optional<double>& value) {
  return value ? fmt::format("{:.3f}", *value) : std::string("-");
}

/// Where a placement balances worse than the baseline pass by pass (load-weighted): on all
/// the judged passes, or on the decode or the prefill ones. One line each.
void write_losses(std::string& out, const std::vector<Evaluation>& evaluations,
                  const PassSets& sets) {
  const std::size_t baseline = baseline_of(evaluations);
  const Served& base = *evaluations[baseline].served;
  const std::string decode_words =
      fmt::format("the {} decode passes (fewer than {} tokens; {} of the load)", sets.decode.size(),
                  kPrefillMinTokens, percent(sets.decode_load_share));
  const std::string prefill_words =
      fmt::format("the {} prefill passes ({} of the load)", sets.prefill.size(),
                  percent(1.0 - sets.decode_load_share));
  // The identity placement is a reference drawn beside the others, not a candidate.
  for (std::size_t i = baseline == 0 ? 1 : 2; i < evaluations.size(); ++i) {
    const Served& served = *evaluations[i].served;
    const std::array<std::tuple<std::optional<double>, std::optional<double>, std::string>, 3>
        sets_of_passes{{{served.all, base.all, "the judged passes as a whole"},
                        {served.decode, base.decode, decode_words},
                        {served.prefill, base.prefill, prefill_words}}};
    for (const auto& [value, reference, words] : sets_of_passes) {
      if (!value || !reference || *value >= *reference) continue;
      fmt::format_to(std::back_inserter(out),
                     "<li><b>{} loses to {} on {}</b>, pass by pass weighted by load: {:.3f} "
                     "against {:.3f}.</li>\n",
                     xml_escape(evaluations[i].name), xml_escape(evaluations[baseline].name), words,
                     *value, *reference);
    }
  }
}

/// The passes one by one, each counting by its load: what a run of them waits for. A
/// placement that wins the headline can lose here, on small decode passes above all; the
/// summary says so rather than let the per-pass chart seem to contradict it.
void write_served(std::string& out, const Recording& recording, const Options& options,
                  const std::vector<Evaluation>& evaluations) {
  if (!evaluations.front().served) return;
  const PassSets sets = judged_pass_sets(recording, judged_passes(recording, options));
  std::vector<std::string> all;
  for (const Evaluation& e : evaluations) {
    all.push_back(fmt::format("{} {:.3f}", xml_escape(e.name), e.served->all));
  }
  fmt::format_to(std::back_inserter(out), "<li><b>Pass by pass, weighted by load:</b> {} ({}). {}",
                 fmt::join(all, ", "), kServedDefinition,
                 sets.decode.empty() ? "" : "By pass size:");
  if (!sets.decode.empty() || !sets.prefill.empty()) {
    std::vector<std::string> split;
    for (const Evaluation& e : evaluations) {
      split.push_back(fmt::format("{} {} / {}", xml_escape(e.name), served_text(e.served->decode),
                                  served_text(e.served->prefill)));
    }
    fmt::format_to(std::back_inserter(out),
                   " decode / prefill ({} decode passes of fewer than {} tokens, with {} of the "
                   "load; {} prefill passes): {}.",
                   sets.decode.size(), kPrefillMinTokens, percent(sets.decode_load_share),
                   sets.prefill.size(), fmt::join(split, ", "));
  }
  out += "</li>\n";
  write_losses(out, evaluations, sets);
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

/// Whether the evaluations split the passes by size (the recording keeps their tokens).
bool split_by_size(const Evaluation& evaluation) {
  return evaluation.served && (evaluation.served->decode || evaluation.served->prefill);
}

/// The table's columns of served balancedness: none without passes.
std::string served_headers(const std::vector<Evaluation>& evaluations) {
  if (!evaluations.front().served) return "";
  return fmt::format("<th>pass by pass, by load</th>{}",
                     split_by_size(evaluations.front())
                         ? fmt::format("<th>decode passes (&lt; {} tokens)</th><th>prefill "
                                       "passes</th>",
                                       kPrefillMinTokens)
                         : "");
}

std::string served_cells(const Evaluation& evaluation) {
  if (!evaluation.served) return "";
  std::string out = fmt::format("<td>{:.3f}</td>", evaluation.served->all);
  if (split_by_size(evaluation)) {
    out += fmt::format("<td>{}</td><td>{}</td>", served_text(evaluation.served->decode),
                       served_text(evaluation.served->prefill));
  }
  return out;
}

void write_table(std::string& out, const Recording& recording, const Options& options,
                 const std::vector<Evaluation>& evaluations,
                 const std::vector<Standing>& standings) {
  const std::size_t baseline = baseline_of(evaluations);
  fmt::format_to(std::back_inserter(out),
                 "<h2>Placements</h2>\n<p>Judged {}.</p>\n<table class=\"placements\" "
                 "id=\"placements\">\n<tr><th>placement</th><th>balancedness</th><th>against "
                 "{}</th>{}<th>slowest GPU / mean, per layer</th><th>busiest GPU</th>{}</tr>\n",
                 judged_words(recording, judged_passes(recording, options)),
                 xml_escape(evaluations[baseline].name), served_headers(evaluations),
                 options.num_nodes > 1 ? "<th>busiest node</th>" : "");
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    const Standing& s = standings[i];
    fmt::format_to(std::back_inserter(out),
                   "<tr><td><span style=\"color:{}\">&#9632;</span> {}</td><td>{:.3f}</td>"
                   "<td>{}</td>{}<td>{:.2f}×</td><td>GPU {}: {}</td>",
                   colour_of(i), xml_escape(evaluations[i].name), s.balancedness,
                   i == baseline ? "baseline"
                                 : signed_change(s.balancedness, standings[baseline].balancedness),
                   served_cells(evaluations[i]), s.busiest_factor, s.busiest_gpu,
                   percent(s.busiest_gpu_share));
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
  write_served(out, recording, options, evaluations);
  write_hottest(out, recording);
  write_busiest(out, options, evaluations[best], standings[best]);
  write_dense(out, recording);
  out += "</ul>\n</section>\n";
  write_table(out, recording, options, evaluations, standings);
}

}  // namespace moestat::report::detail
