// The HTML report: one self-contained page of inline SVG and CSS, no script, no network. The
// figures are render_figures' SVG documents, embedded as they are.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <moestat/report.hpp>
#include <numeric>
#include <string>
#include <string_view>

#include "chart.hpp"
#include "evaluation.hpp"
#include "figures.hpp"
#include "page.hpp"
#include "summary.hpp"
#include "ticks.hpp"

namespace moestat::report {
namespace {

using detail::Evaluation;
using detail::xml_escape;

std::int64_t layer_total(const Recording& recording, const std::vector<std::int64_t>& totals,
                         std::int64_t layer) {
  const auto row = totals.begin() + layer * recording.num_experts();
  return std::accumulate(row, row + recording.num_experts(), std::int64_t{0});
}

/// Expert ids of `layer` by descending load (ties: lower id first).
std::vector<std::int64_t> hottest(const Recording& recording,
                                  const std::vector<std::int64_t>& totals, std::int64_t layer,
                                  std::int64_t count) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(recording.num_experts()));
  std::iota(order.begin(), order.end(), 0);
  const auto* row = totals.data() + layer * recording.num_experts();
  const auto n = std::min<std::int64_t>(count, recording.num_experts());
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](std::int64_t a, std::int64_t b) { return row[a] > row[b]; });
  order.resize(std::size_t(n));
  return order;
}

void write_metadata(std::string& out, const Recording& recording,
                    const std::vector<std::int64_t>& totals, const Options& options) {
  std::int64_t total = 0, loaded_layers = 0;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const std::int64_t sum = layer_total(recording, totals, layer);
    total += sum;
    loaded_layers += sum > 0 ? 1 : 0;
  }
  const std::int64_t passes = recording.num_passes();
  std::vector<std::pair<std::string, std::string>> rows = {
      {"file", recording.source},
      {"kind", recording.kind},
      {"layers", fmt::format("{} ({} with expert load, {} dense)", recording.num_layers(),
                             loaded_layers, recording.num_layers() - loaded_layers)},
      {"logical experts", fmt::format("{}", recording.num_experts())},
      {"token assignments", fmt::format("{} ({})", detail::short_number(double(total)), total)},
      {"passes drawn one by one",
       passes > 0 ? fmt::format("{} (the recording keeps each pass's loads)", passes)
                  : "none: the recording keeps one total, not each pass's loads"},
      {"GPUs", options.num_nodes > 1
                   ? fmt::format("{} in {} nodes of {}", options.num_gpus, options.num_nodes,
                                 options.num_gpus / options.num_nodes)
                   : fmt::format("{}", options.num_gpus)}};
  rows.insert(rows.end(), recording.metadata.begin(), recording.metadata.end());
  out += "<h2>Recording</h2>\n<table class=\"meta\">\n";
  for (const auto& [key, value] : rows) {
    fmt::format_to(std::back_inserter(out), "<tr><th>{}</th><td>{}</td></tr>\n", xml_escape(key),
                   xml_escape(value));
  }
  out += "</table>\n";
}

/// What a figure shows, and how to read it, under it.
std::string caption_of(std::string_view name, const Recording& recording, const Options& options) {
  if (name == "heatmap") {
    return "Token assignments routed to each expert of each layer over the whole recording, on "
           "a log colour scale (the colour bar's ticks are assignments). A red outline marks "
           "each layer's hottest expert; its tooltip gives the load.";
  }
  const std::string nodes =
      options.num_nodes > 1 ? " Shaded and unshaded stripes are the GPUs of one node." : "";
  if (name == "gpu-load") {
    return "Each GPU's token assignments summed over all layers, relative to an even share (1 "
           "= every GPU the same). An expert's load is split evenly over its replicas." +
           nodes;
  }
  if (name == "gpu-peak-load") {
    return "The most a GPU carries in any one layer, relative to that layer's mean GPU load: "
           "the busiest GPU of a layer sets the pace of the layer." +
           nodes;
  }
  if (name == "layer-balancedness") {
    return "Per layer, mean GPU load / max GPU load (1 = a perfect split). Dense layers carry "
           "no expert load and are not drawn.";
  }
  std::string out =
      "Each pass alone. A pass has few tokens (a decode pass routes a few dozen over all the "
      "experts), so its per-GPU loads are lumpy and its balancedness sits well below that of "
      "many passes together: compare the placements with each other, pass by pass.";
  if (options.held_out_from) {
    out += fmt::format(
        " Placements were planned on passes 0-{} (left of the red line) and are judged on the "
        "shaded passes {}-{}.",
        *options.held_out_from - 1, *options.held_out_from, recording.num_passes() - 1);
  }
  return out;
}

void write_hottest_table(std::string& out, const Recording& recording,
                         const std::vector<std::int64_t>& totals, const Options& options) {
  fmt::format_to(std::back_inserter(out),
                 "<h2>Hottest experts per layer</h2>\n<table class=\"hot\">\n<tr><th>layer</th>"
                 "<th>assignments</th><th>max / mean</th><th>top {} experts (share, x mean)</th>"
                 "</tr>\n",
                 options.top_experts);
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const std::int64_t total = layer_total(recording, totals, layer);
    if (total == 0) continue;
    const double mean = double(total) / double(recording.num_experts());
    std::string experts;
    const std::vector<std::int64_t> top = hottest(recording, totals, layer, options.top_experts);
    for (std::int64_t expert : top) {
      const auto load = double(totals[std::size_t(layer * recording.num_experts() + expert)]);
      fmt::format_to(std::back_inserter(experts), "{}{} ({:.1f}%, {:.1f}x)",
                     experts.empty() ? "" : ", ", expert, 100.0 * load / double(total),
                     load / mean);
    }
    const auto max = double(totals[std::size_t(layer * recording.num_experts() + top[0])]);
    fmt::format_to(std::back_inserter(out),
                   "<tr><td>{}</td><td>{}</td><td>{:.2f}</td><td>{}</td></tr>\n", layer, total,
                   max / mean, experts);
  }
  out += "</table>\n";
}

}  // namespace

std::string render_html(const Recording& recording, const Options& options) {
  recording.validate();
  const std::vector<Evaluation> evaluations = detail::evaluate(recording, options);
  const std::vector<std::int64_t> totals = recording.counts.totals();  // [L, E]
  const std::vector<Figure> figures = detail::figures_of(recording, options, evaluations);
  std::string out;
  out.reserve(figures.front().svg.size() + 131072);
  detail::open_page(out, "moestat report: " + recording.source);
  detail::write_summary(out, recording, options, evaluations);
  write_metadata(out, recording, totals, options);
  for (const Figure& figure : figures) {
    fmt::format_to(std::back_inserter(out), "<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n",
                   figure.svg, xml_escape(caption_of(figure.name, recording, options)));
  }
  write_hottest_table(out, recording, totals, options);
  out +=
      "<p class=\"note\">Balancedness: mean over layers with load of (mean GPU load / max "
      "GPU load); 1.0 is a perfect split. The busiest GPU of a layer sets its pace, so 1 / "
      "balancedness is about how much longer an expert-parallel layer takes than with a "
      "perfect split.</p>\n</body>\n</html>\n";
  return out;
}

}  // namespace moestat::report
