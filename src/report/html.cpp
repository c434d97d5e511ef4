// The HTML report: one self-contained page of inline SVG and CSS, no script, no network.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <moestat/report.hpp>
#include <numeric>
#include <span>
#include <string>
#include <string_view>

#include "colour.hpp"
#include "evaluation.hpp"

namespace moestat::report {
namespace {

using detail::Evaluation;

constexpr std::string_view kIdentityColour = "#7f8c9d";
constexpr std::string_view kPlannedColour = "#e67e22";

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string_view colour_of(const Evaluation& evaluation) {
  return evaluation.name == "identity" ? kIdentityColour : kPlannedColour;
}

std::string label_of(const Evaluation& evaluation) {
  return evaluation.name == "identity" ? "identity (expert e on GPU e / (E / GPUs))"
                                       : "the given placement";
}

std::int64_t layer_total(const Recording& recording, std::span<const std::int64_t> totals,
                         std::int64_t layer) {
  const auto* row = totals.data() + layer * recording.num_experts();
  return std::accumulate(row, row + recording.num_experts(), std::int64_t{0});
}

/// Expert ids of `layer` by descending load (ties: lower id first).
std::vector<std::int64_t> hottest(const Recording& recording, std::span<const std::int64_t> totals,
                                  std::int64_t layer, std::int64_t count) {
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
                    std::span<const std::int64_t> totals, const Options& options,
                    const std::vector<Evaluation>& evaluations) {
  std::int64_t total = 0, loaded_layers = 0;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const std::int64_t sum = layer_total(recording, totals, layer);
    total += sum;
    loaded_layers += sum > 0 ? 1 : 0;
  }
  std::vector<std::pair<std::string, std::string>> rows = {
      {"file", recording.source},
      {"kind", recording.kind},
      {"layers", fmt::format("{} ({} with load)", recording.num_layers(), loaded_layers)},
      {"logical experts", fmt::format("{}", recording.num_experts())},
      {"token assignments", fmt::format("{}", total)},
      {"passes with per-pass loads", fmt::format("{}", recording.num_passes())},
      {"GPUs", fmt::format("{}", options.num_gpus)}};
  rows.insert(rows.end(), recording.metadata.begin(), recording.metadata.end());
  for (const Evaluation& evaluation : evaluations) {
    rows.emplace_back(fmt::format("balancedness, {}", label_of(evaluation)),
                      fmt::format("{:.3f}", evaluation.balancedness));
  }
  out += "<h2>Recording</h2>\n<table class=\"meta\">\n";
  for (const auto& [key, value] : rows) {
    fmt::format_to(std::back_inserter(out), "<tr><th>{}</th><td>{}</td></tr>\n", escape(key),
                   escape(value));
  }
  out += "</table>\n";
}

void write_heatmap(std::string& out, const Recording& recording,
                   std::span<const std::int64_t> totals) {
  const std::int64_t num_layers = recording.num_layers(), num_experts = recording.num_experts();
  const std::int64_t cell_w = std::clamp<std::int64_t>(1024 / num_experts, 2, 48);
  const std::int64_t cell_h = std::clamp<std::int64_t>(640 / num_layers, 4, 24);
  const std::int64_t left = 56, top = 28;
  const std::int64_t width = left + cell_w * num_experts + 8;
  const std::int64_t height = top + cell_h * num_layers + 8;
  const detail::LogColourScale scale(totals);
  out += "<h2>Load per layer and expert</h2>\n";
  fmt::format_to(std::back_inserter(out),
                 "<p>Token assignments, log colour scale from {} (dark) to {} (bright); grey: "
                 "none. A red outline marks each layer's hottest expert.</p>\n",
                 scale.min_positive(), scale.max());
  fmt::format_to(std::back_inserter(out),
                 "<svg id=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
                 "height=\"{}\" viewBox=\"0 0 {} {}\">\n<style>.cell{{width:{}px;height:{}px}}"
                 "</style>\n",
                 width, height, width, height, cell_w, cell_h);
  // Axis labels: every few layers and experts.
  const std::int64_t layer_step = std::max<std::int64_t>(1, 12 / cell_h + 1);
  for (std::int64_t layer = 0; layer < num_layers; layer += layer_step) {
    fmt::format_to(std::back_inserter(out),
                   "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"end\">{}</text>\n",
                   left - 4, top + layer * cell_h + cell_h / 2 + 4, layer);
  }
  const std::int64_t expert_step = std::max<std::int64_t>(1, 32 / cell_w);
  for (std::int64_t expert = 0; expert < num_experts; expert += expert_step) {
    fmt::format_to(std::back_inserter(out), "<text x=\"{}\" y=\"{}\" class=\"axis\">{}</text>\n",
                   left + expert * cell_w, top - 8, expert);
  }
  out += "<g class=\"cells\">\n";
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    fmt::format_to(std::back_inserter(out), "<g transform=\"translate({},{})\">", left,
                   top + layer * cell_h);
    for (std::int64_t expert = 0; expert < num_experts; ++expert) {
      const std::int64_t load = totals[std::size_t(layer * num_experts + expert)];
      fmt::format_to(std::back_inserter(out), "<rect class=\"cell\" x=\"{}\" fill=\"{}\"/>",
                     expert * cell_w, detail::hex(scale(load)));
    }
    out += "</g>\n";
  }
  out += "</g>\n<g class=\"hot\">\n";
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    const std::int64_t total = layer_total(recording, totals, layer);
    if (total == 0) continue;
    const std::int64_t expert = hottest(recording, totals, layer, 1)[0];
    const std::int64_t load = totals[std::size_t(layer * num_experts + expert)];
    fmt::format_to(std::back_inserter(out),
                   "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                   "stroke=\"#e4002b\" stroke-width=\"1.5\"><title>layer {} expert {}: {} "
                   "({:.1f}x the mean)</title></rect>\n",
                   left + expert * cell_w - 1, top + layer * cell_h - 1, cell_w + 2, cell_h + 2,
                   layer, expert, load, double(load) * double(num_experts) / double(total));
  }
  out += "</g>\n</svg>\n";
  // Legend: the colour scale.
  out +=
      "<div><svg class=\"legend\" width=\"320\" height=\"34\" "
      "xmlns=\"http://www.w3.org/2000/svg\">";
  for (int i = 0; i < 64; ++i) {
    fmt::format_to(std::back_inserter(out),
                   "<rect x=\"{}\" y=\"0\" width=\"5\" height=\"14\" fill=\"{}\"/>", i * 5,
                   detail::hex(detail::viridis(i / 63.0)));
  }
  fmt::format_to(std::back_inserter(out),
                 "<text x=\"0\" y=\"28\" class=\"axis\">{}</text><text x=\"320\" y=\"28\" "
                 "class=\"axis\" text-anchor=\"end\">{}</text></svg></div>\n",
                 scale.min_positive(), scale.max());
}

/// Per GPU: its load summed over layers relative to an even split, or (peak) the most it
/// carries in any layer relative to that layer's mean GPU load.
std::vector<double> relative_gpu_loads(const Recording& recording, std::int64_t gpus,
                                       const Evaluation& evaluation, bool peak) {
  std::vector<double> out(static_cast<std::size_t>(gpus), 0.0);
  double total = 0.0;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const double* row = evaluation.gpu_loads.data() + layer * gpus;
    const double mean = std::accumulate(row, row + gpus, 0.0) / double(gpus);
    total += mean;
    for (std::int64_t gpu = 0; gpu < gpus; ++gpu) {
      auto& value = out[std::size_t(gpu)];
      value = peak ? (mean > 0 ? std::max(value, row[gpu] / mean) : value) : value + row[gpu];
    }
  }
  if (!peak) {
    for (double& value : out) value = total > 0 ? value / total : 0.0;
  }
  return out;
}

void write_gpu_bars(std::string& out, const Recording& recording, const Options& options,
                    const std::vector<Evaluation>& evaluations, bool peak) {
  const std::int64_t gpus = options.num_gpus;
  std::vector<std::vector<double>> relative;
  double top = 1.0;
  for (const Evaluation& evaluation : evaluations) {
    relative.push_back(relative_gpu_loads(recording, gpus, evaluation, peak));
    top = std::max(top, *std::max_element(relative.back().begin(), relative.back().end()));
  }
  const double group_w = std::max(18.0, 720.0 / double(gpus));
  const double bar_w = (group_w - 4) / double(evaluations.size());
  const double plot_h = 180, left = 48, top_margin = 10;
  const double width = left + group_w * double(gpus) + 10;
  out += peak ? "<h2>Peak load per GPU</h2>\n<p>The most a GPU carries in any layer, relative "
                "to that layer's mean GPU load (1.0 = the dashed line; the busiest GPU sets the "
                "pace of a layer)."
              : "<h2>Load per GPU</h2>\n<p>Token assignments per GPU summed over layers, "
                "relative to an even split (1.0 = the dashed line).";
  for (const Evaluation& evaluation : evaluations) {
    fmt::format_to(std::back_inserter(out), " <span style=\"color:{}\">&#9632;</span> {}",
                   colour_of(evaluation), escape(label_of(evaluation)));
  }
  fmt::format_to(std::back_inserter(out),
                 "</p>\n<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" "
                 "height=\"{:.0f}\">\n",
                 peak ? "gpu-peak-load" : "gpu-load", width, plot_h + top_margin + 24);
  const auto y_of = [&](double value) { return top_margin + plot_h * (1 - value / top); };
  for (std::size_t s = 0; s < evaluations.size(); ++s) {
    for (std::int64_t gpu = 0; gpu < gpus; ++gpu) {
      const double value = relative[s][std::size_t(gpu)];
      fmt::format_to(std::back_inserter(out),
                     "<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                     "height=\"{:.1f}\" fill=\"{}\"><title>GPU {}, {}: {:.3f}</title></rect>\n",
                     left + group_w * double(gpu) + bar_w * double(s), y_of(value),
                     std::max(bar_w - 1, 1.0), plot_h + top_margin - y_of(value),
                     colour_of(evaluations[s]), gpu, evaluations[s].name, value);
    }
  }
  fmt::format_to(std::back_inserter(out),
                 "<line x1=\"{0}\" x2=\"{1:.0f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\" "
                 "stroke-dasharray=\"4 3\"/>\n<text x=\"{3}\" y=\"{4:.1f}\" class=\"axis\" "
                 "text-anchor=\"end\">1.0</text>\n<text x=\"{3}\" y=\"{5:.1f}\" class=\"axis\" "
                 "text-anchor=\"end\">{6:.2f}</text>\n",
                 left, width - 10, y_of(1.0), left - 4, y_of(1.0) + 4, y_of(top) + 8, top);
  const std::int64_t label_step = std::max<std::int64_t>(1, gpus / 16);
  for (std::int64_t gpu = 0; gpu < gpus; gpu += label_step) {
    fmt::format_to(
        std::back_inserter(out),
        "<text x=\"{:.1f}\" y=\"{:.0f}\" class=\"axis\" text-anchor=\"middle\">{}</text>\n",
        left + group_w * (double(gpu) + 0.5), plot_h + top_margin + 16, gpu);
  }
  out += "</svg>\n";
}

/// A line chart of values in [0, 1] over an index; negative values are gaps.
void write_line_chart(std::string& out, std::string_view id, std::string_view title,
                      std::string_view x_label, const std::vector<Evaluation>& evaluations,
                      std::vector<double> Evaluation::*series) {
  const std::size_t n = (evaluations.front().*series).size();
  const double plot_w = 720, plot_h = 160, left = 48, top = 10;
  out += fmt::format("<h2>{}</h2>\n<p>", title);
  for (const Evaluation& evaluation : evaluations) {
    fmt::format_to(std::back_inserter(out), "<span style=\"color:{}\">&#9632;</span> {} ",
                   colour_of(evaluation), escape(label_of(evaluation)));
  }
  fmt::format_to(std::back_inserter(out),
                 "</p>\n<svg id=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" "
                 "height=\"{:.0f}\">\n",
                 id, left + plot_w + 10, top + plot_h + 32);
  const auto x_of = [&](std::size_t i) {
    return left + (n <= 1 ? plot_w / 2 : plot_w * double(i) / double(n - 1));
  };
  const auto y_of = [&](double v) { return top + plot_h * (1 - v); };
  for (double v : {0.0, 0.5, 1.0}) {
    fmt::format_to(
        std::back_inserter(out),
        "<line x1=\"{0}\" x2=\"{1:.0f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" class=\"axis\" text-anchor=\"end\">{5:.1f}</text>\n",
        left, left + plot_w, y_of(v), left - 4, y_of(v) + 4, v);
  }
  for (const Evaluation& evaluation : evaluations) {
    const std::vector<double>& values = evaluation.*series;
    std::string points;
    for (std::size_t i = 0; i < n; ++i) {
      if (values[i] < 0) continue;
      fmt::format_to(std::back_inserter(points), "{:.1f},{:.1f} ", x_of(i), y_of(values[i]));
    }
    fmt::format_to(std::back_inserter(out),
                   "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                   colour_of(evaluation), points);
  }
  fmt::format_to(std::back_inserter(out),
                 "<text x=\"{:.0f}\" y=\"{:.0f}\" class=\"axis\" text-anchor=\"middle\">{} (0 to "
                 "{})</text>\n</svg>\n",
                 left + plot_w / 2, top + plot_h + 24, x_label, n == 0 ? 0 : n - 1);
}

void write_hottest_table(std::string& out, const Recording& recording,
                         std::span<const std::int64_t> totals, const Options& options) {
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

constexpr std::string_view kStyle = R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table { border-collapse: collapse; } th, td { padding: 2px 10px; text-align: left; }
table.meta th { color: #555; font-weight: normal; }
table.hot td:nth-child(-n+3) { text-align: right; font-variant-numeric: tabular-nums; }
table.hot tr:nth-child(even) { background: #f4f4f4; }
.axis { font-size: 10px; fill: #555; }
</style>
)";

}  // namespace

std::string render_html(const Recording& recording, const Options& options) {
  recording.validate();
  const std::vector<Evaluation> evaluations = detail::evaluate(recording, options);
  const std::vector<std::int64_t> totals = recording.counts.totals();  // [L, E]
  std::string out;
  out.reserve(std::size_t(recording.num_layers() * recording.num_experts()) * 48 + 65536);
  fmt::format_to(std::back_inserter(out),
                 "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                 "<title>moestat report: {}</title>\n{}</head>\n<body>\n<h1>moestat report: "
                 "{}</h1>\n",
                 escape(recording.source), kStyle, escape(recording.source));
  write_metadata(out, recording, totals, options, evaluations);
  write_heatmap(out, recording, totals);
  write_gpu_bars(out, recording, options, evaluations, false);
  write_gpu_bars(out, recording, options, evaluations, true);
  write_line_chart(out, "layer-balancedness", "Balancedness per layer", "layer", evaluations,
                   &Evaluation::layer_balancedness);
  if (recording.num_passes() > 1) {
    write_line_chart(out, "pass-balancedness", "Balancedness over time", "pass in the window",
                     evaluations, &Evaluation::pass_balancedness);
  }
  write_hottest_table(out, recording, totals, options);
  out +=
      "<p class=\"axis\">Balancedness: mean over layers with load of (mean GPU load / max "
      "GPU load); 1.0 is a perfect split.</p>\n</body>\n</html>\n";
  return out;
}

}  // namespace moestat::report
