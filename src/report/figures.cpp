// The report's figures as chart models (chart.hpp), drawn to SVG by svg_chart.cpp and
// svg_heatmap.cpp: what each axis measures, in which unit, and what is shaded or marked.
#include "figures.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "chart.hpp"

namespace moestat::report::detail {
namespace {

constexpr double kGap = std::numeric_limits<double>::quiet_NaN();

/// Per GPU, the most it carries in any layer relative to that layer's mean GPU load.
std::vector<double> peak_gpu_loads(const Evaluation& evaluation, std::int64_t num_gpus) {
  std::vector<double> out(static_cast<std::size_t>(num_gpus), 0.0);
  const std::size_t num_layers = evaluation.gpu_loads.size() / std::size_t(num_gpus);
  for (std::size_t layer = 0; layer < num_layers; ++layer) {
    const double* row = evaluation.gpu_loads.data() + layer * std::size_t(num_gpus);
    const double mean = std::accumulate(row, row + num_gpus, 0.0) / double(num_gpus);
    if (mean <= 0) continue;
    for (std::int64_t gpu = 0; gpu < num_gpus; ++gpu) {
      out[std::size_t(gpu)] = std::max(out[std::size_t(gpu)], row[gpu] / mean);
    }
  }
  return out;
}

/// -1 (no load) becomes a gap.
std::vector<double> with_gaps(std::vector<double> values) {
  for (double& value : values) value = value < 0 ? kGap : value;
  return values;
}

/// Every node's GPUs as a band, every other one shaded, so node boundaries show.
std::vector<Band> node_bands(const Options& options) {
  std::vector<Band> out;
  if (options.num_nodes <= 1) return out;
  const std::int64_t per_node = options.num_gpus / options.num_nodes;
  for (std::int64_t node = 0; node < options.num_nodes; ++node) {
    out.push_back({.from = double(node * per_node),
                   .to = double((node + 1) * per_node),
                   .label = fmt::format("node {}", node),
                   .shaded = node % 2 == 1});
  }
  return out;
}

Chart gpu_chart(const Options& options, const std::vector<Evaluation>& evaluations,
                const JudgedPasses& judged, bool peak) {
  Chart chart{
      .id = peak ? "gpu-peak-load" : "gpu-load",
      .title = peak ? fmt::format("Peak load per GPU: its most loaded layer{}", judged_text(judged))
                    : fmt::format("Load per GPU over all layers{}", judged_text(judged)),
      .x_title = options.num_nodes > 1 ? fmt::format("GPU ({} nodes of {})", options.num_nodes,
                                                     options.num_gpus / options.num_nodes)
                                       : "GPU",
      .y_title = peak ? "layer load / layer's mean GPU load (×)" : "load / even share (×)",
      .kind = ChartKind::kBars,
      .bands = node_bands(options),
      .reference = 1.0,
      .reference_label = peak ? "1 = the layer's mean" : "1 = an even share"};
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    std::vector<double> values = peak ? peak_gpu_loads(evaluations[i], options.num_gpus)
                                      : gpu_shares(evaluations[i], options.num_gpus);
    if (!peak) {
      for (double& value : values) value *= double(options.num_gpus);
    }
    chart.series.push_back({evaluations[i].name, colour_of(i), std::move(values)});
  }
  return chart;
}

Chart layer_chart(const Recording& recording, const std::vector<Evaluation>& evaluations,
                  const JudgedPasses& judged) {
  Chart chart{.id = "layer-balancedness",
              .title = fmt::format("Balancedness per layer{}", judged_text(judged)),
              .x_title = "layer",
              .y_title = "balancedness (mean / max GPU load)",
              .kind = ChartKind::kLines,
              .reference = 1.0,
              .reference_label = "1 = a perfect split",
              .y_min = 0.0,
              .y_max = 1.0};
  for (const auto& [first, end] : dense_layer_runs(recording)) {
    chart.bands.push_back({.from = double(first),
                           .to = double(end),
                           .label = end - first > 1 ? "dense layers" : "dense"});
  }
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    chart.series.push_back(
        {evaluations[i].name, colour_of(i), with_gaps(evaluations[i].layer_balancedness)});
  }
  return chart;
}

Chart pass_chart(const Recording& recording, const std::vector<Evaluation>& evaluations,
                 const JudgedPasses& judged) {
  Chart chart{.id = "pass-balancedness",
              // Every pass is drawn alike: a decode pass of a few tokens weighs as much as a
              // prefill of thousands here, unlike the summary's load-weighted figures.
              .title =
                  "Balancedness of each pass, each drawn alike whatever its tokens (the "
                  "summary weighs passes by load)",
              .x_title = "pass (position in the recording's window)",
              .y_title = "balancedness (mean / max GPU load)",
              .kind = ChartKind::kLines,
              .reference = 1.0,
              .reference_label = "1 = a perfect split",
              .y_min = 0.0,
              .y_max = 1.0};
  if (judged.held_out) {
    chart.bands.push_back({.from = double(judged.begin),
                           .to = double(recording.num_passes()),
                           .label = "held out: placements judged here"});
    chart.markers.push_back({.at = double(judged.begin), .label = "planning ends"});
  }
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    chart.series.push_back(
        {evaluations[i].name, colour_of(i), with_gaps(evaluations[i].pass_balancedness)});
  }
  return chart;
}

Figure figure_of(const Chart& chart) { return {chart.id, chart.title, svg_of(chart)}; }

}  // namespace

std::string colour_of(std::size_t evaluation_index) {
  // Okabe and Ito's colour-blind-safe palette, after the identity placement's grey.
  constexpr std::array<const char*, 6> kPalette{"#e69f00", "#0072b2", "#009e73",
                                                "#cc79a7", "#d55e00", "#56b4e9"};
  return evaluation_index == 0 ? "#8c96a3" : kPalette[(evaluation_index - 1) % kPalette.size()];
}

std::string judged_text(const JudgedPasses& judged) {
  return judged.held_out ? fmt::format(", held-out passes {}-{}", judged.begin, judged.end - 1)
                         : "";
}

std::vector<double> gpu_shares(const Evaluation& evaluation, std::int64_t num_gpus) {
  std::vector<double> out(static_cast<std::size_t>(num_gpus), 0.0);
  for (std::size_t i = 0; i < evaluation.gpu_loads.size(); ++i) {
    out[i % std::size_t(num_gpus)] += evaluation.gpu_loads[i];
  }
  const double total = std::accumulate(out.begin(), out.end(), 0.0);
  for (double& value : out) value = total > 0 ? value / total : 0.0;
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> dense_layer_runs(const Recording& recording) {
  const std::vector<std::int64_t> totals = recording.counts.totals();
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t layer = 0; layer < recording.num_layers(); ++layer) {
    const auto row = totals.begin() + layer * recording.num_experts();
    if (std::any_of(row, row + recording.num_experts(), [](std::int64_t v) { return v > 0; })) {
      continue;
    }
    if (!out.empty() && out.back().second == layer) {
      out.back().second = layer + 1;
    } else {
      out.emplace_back(layer, layer + 1);
    }
  }
  return out;
}

Figure heatmap_figure(const Recording& recording) {
  const Heatmap heatmap{
      .id = "heatmap",
      .title = recording.num_passes() > 0
                   ? fmt::format("Token assignments per layer and expert, all {} passes",
                                 recording.num_passes())
                   : "Token assignments per layer and expert",
      .num_layers = recording.num_layers(),
      .num_experts = recording.num_experts(),
      .loads = recording.counts.totals()};
  return {heatmap.id, heatmap.title, svg_of(heatmap)};
}

std::vector<Figure> figures_of(const Recording& recording, const Options& options,
                               const std::vector<Evaluation>& evaluations) {
  const JudgedPasses judged = judged_passes(recording, options);
  std::vector<Figure> out{heatmap_figure(recording),
                          figure_of(gpu_chart(options, evaluations, judged, false)),
                          figure_of(gpu_chart(options, evaluations, judged, true)),
                          figure_of(layer_chart(recording, evaluations, judged))};
  if (recording.num_passes() > 1) {
    out.push_back(figure_of(pass_chart(recording, evaluations, judged)));
  }
  return out;
}

}  // namespace moestat::report::detail

namespace moestat::report {

std::vector<Figure> render_figures(const Recording& recording, const Options& options) {
  recording.validate();
  return detail::figures_of(recording, options, detail::evaluate(recording, options));
}

}  // namespace moestat::report
