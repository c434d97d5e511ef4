// The layers x experts heatmap as standalone SVG: a cell per (layer, expert) on a log colour
// scale, each loaded layer's hottest expert outlined, dense layers named, and a colour bar
// with round ticks.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <moestat/error.hpp>

#include "chart.hpp"
#include "colour.hpp"
#include "ticks.hpp"

namespace moestat::report::detail {
namespace {

constexpr double kLeft = 70, kTop = 58, kBottom = 44, kBarGap = 18, kBarWidth = 14;
constexpr double kRight = 96;  // the colour bar, its tick labels and its title
constexpr int kBarSteps = 64;
// The colour bar's title needs this much height even over a few layers.
constexpr double kMinBarHeight = 200;

struct Layout {
  double cell_w, cell_h, plot_w, plot_h, width, height;
};

Layout layout_of(const Heatmap& heatmap) {
  Layout out{};
  out.cell_w = std::clamp(std::floor(1024.0 / double(heatmap.num_experts)), 2.0, 48.0);
  out.cell_h = std::clamp(std::floor(640.0 / double(heatmap.num_layers)), 4.0, 24.0);
  out.plot_w = out.cell_w * double(heatmap.num_experts);
  out.plot_h = out.cell_h * double(heatmap.num_layers);
  // Wide enough for the legend over a few experts.
  out.width = std::max(kLeft + out.plot_w + kBarGap + kBarWidth + kRight, 540.0);
  out.height = kTop + std::max(out.plot_h, kMinBarHeight) + kBottom;
  return out;
}

void cells(std::string& out, const Heatmap& heatmap, const Layout& at,
           const LogColourScale& scale) {
  out += "<g class=\"cells\">\n";
  for (std::int64_t layer = 0; layer < heatmap.num_layers; ++layer) {
    fmt::format_to(std::back_inserter(out), "<g transform=\"translate({:.0f},{:.0f})\">", kLeft,
                   kTop + double(layer) * at.cell_h);
    const std::int64_t* row = heatmap.loads.data() + layer * heatmap.num_experts;
    for (std::int64_t expert = 0; expert < heatmap.num_experts; ++expert) {
      fmt::format_to(std::back_inserter(out),
                     "<rect class=\"cell\" x=\"{:.0f}\" width=\"{:.0f}\" height=\"{:.0f}\" "
                     "fill=\"{}\"/>",
                     double(expert) * at.cell_w, at.cell_w, at.cell_h, hex(scale(row[expert])));
    }
    out += "</g>\n";
  }
  out += "</g>\n";
}

/// Each loaded layer's hottest expert outlined; each layer without load named.
void annotations(std::string& out, const Heatmap& heatmap, const Layout& at) {
  out += "<g class=\"hot\">\n";
  for (std::int64_t layer = 0; layer < heatmap.num_layers; ++layer) {
    const std::int64_t* row = heatmap.loads.data() + layer * heatmap.num_experts;
    const std::int64_t* hottest = std::max_element(row, row + heatmap.num_experts);
    const double y = kTop + double(layer) * at.cell_h;
    if (*hottest <= 0) {
      fmt::format_to(std::back_inserter(out),
                     "<text class=\"dense\" x=\"{:.0f}\" y=\"{:.1f}\" font-size=\"{:.0f}\" "
                     "fill=\"#555555\">layer {}: dense (no expert load)</text>\n",
                     kLeft + 4, y + at.cell_h - std::max(1.0, at.cell_h / 6),
                     std::min(at.cell_h - 1, 11.0), layer);
      continue;
    }
    const std::int64_t expert = hottest - row;
    std::int64_t total = 0;
    for (std::int64_t e = 0; e < heatmap.num_experts; ++e) total += row[e];
    fmt::format_to(std::back_inserter(out),
                   "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                   "fill=\"none\" stroke=\"#e4002b\" stroke-width=\"1.5\"><title>layer {} expert "
                   "{}: {} ({:.1f}x the mean)</title></rect>\n",
                   kLeft + double(expert) * at.cell_w - 0.75, y - 0.75, at.cell_w + 1.5,
                   at.cell_h + 1.5, layer, expert, *hottest,
                   double(*hottest) * double(heatmap.num_experts) / double(total));
  }
  out += "</g>\n";
}

void axes(std::string& out, const Heatmap& heatmap, const Layout& at) {
  out += "<g class=\"axes\" fill=\"#555555\">\n";
  // Labels at least 16 units apart down, 40 across.
  for (std::int64_t tick : index_ticks(heatmap.num_layers, int(std::max(1.0, at.plot_h / 16)))) {
    fmt::format_to(std::back_inserter(out),
                   "<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 5,
                   kTop + (double(tick) + 0.5) * at.cell_h + 4, tick);
  }
  for (std::int64_t tick : index_ticks(heatmap.num_experts, int(std::max(1.0, at.plot_w / 40)))) {
    fmt::format_to(std::back_inserter(out),
                   "<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                   kLeft + (double(tick) + 0.5) * at.cell_w, kTop + at.plot_h + 14, tick);
  }
  fmt::format_to(std::back_inserter(out),
                 "<text class=\"x-title\" x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\" "
                 "font-size=\"12\" fill=\"#222222\">expert (logical id)</text>\n"
                 "<text class=\"y-title\" transform=\"translate(16,{:.0f}) rotate(-90)\" "
                 "text-anchor=\"middle\" font-size=\"12\" fill=\"#222222\">layer</text>\n</g>\n",
                 kLeft + at.plot_w / 2, kTop + at.plot_h + 34, kTop + at.plot_h / 2);
}

/// A vertical colour bar right of the cells: bright (most load) at the top, ticks at round
/// numbers of the log scale.
void colour_bar(std::string& out, const Layout& at, const LogColourScale& scale) {
  const double x = kLeft + at.plot_w + kBarGap;
  const double height = std::max(at.plot_h, kMinBarHeight);
  out += "<g class=\"colour-bar\">\n";
  const double step = height / kBarSteps;
  for (int i = 0; i < kBarSteps; ++i) {
    fmt::format_to(std::back_inserter(out),
                   "<rect x=\"{:.0f}\" y=\"{:.2f}\" width=\"{:.0f}\" height=\"{:.2f}\" "
                   "fill=\"{}\"/>",
                   x, kTop + step * double(i), kBarWidth, step + 0.3,
                   hex(viridis(1.0 - (double(i) + 0.5) / kBarSteps)));
  }
  out += "\n";
  const double low = double(std::max<std::int64_t>(scale.min_positive(), 1));
  const double high = double(std::max<std::int64_t>(scale.max(), 1));
  // A tick every 28 units at most: round numbers between the ends, not just the ends.
  for (double tick : log_ticks(low, high, int(height / 28))) {
    const double t = high == low ? 1.0 : std::log(tick / low) / std::log(high / low);
    const double y = kTop + height * (1 - t);
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" "
                   "stroke=\"#222222\"/><text x=\"{3:.0f}\" y=\"{4:.1f}\" fill=\"#555555\">{5}"
                   "</text>\n",
                   x + kBarWidth, x + kBarWidth + 4, y, x + kBarWidth + 6, y + 4,
                   short_number(tick));
  }
  fmt::format_to(std::back_inserter(out),
                 "<text class=\"colour-bar-title\" transform=\"translate({:.0f},{:.0f}) "
                 "rotate(90)\" text-anchor=\"middle\" font-size=\"12\" fill=\"#222222\">token "
                 "assignments (log scale)</text>\n</g>\n",
                 x + kBarWidth + 58, kTop + height / 2);
}

void legend(std::string& out) {
  out +=
      "<g class=\"legend\">\n<g class=\"legend-entry\"><rect x=\"70\" y=\"33\" width=\"12\" "
      "height=\"11\" fill=\"#e8e8e8\" stroke=\"#999999\"/><text x=\"88\" y=\"42\">no load "
      "(dense layer or idle expert)</text></g>\n<g class=\"legend-entry\"><rect x=\"300\" "
      "y=\"33\" width=\"12\" height=\"11\" fill=\"none\" stroke=\"#e4002b\" "
      "stroke-width=\"1.5\"/><text x=\"318\" y=\"42\">hottest expert of its layer</text></g>\n"
      "</g>\n";
}

}  // namespace

std::string svg_of(const Heatmap& heatmap) {
  MOESTAT_CHECK(heatmap.num_layers > 0 && heatmap.num_experts > 0 &&
                    heatmap.loads.size() == std::size_t(heatmap.num_layers * heatmap.num_experts),
                "heatmap {} needs [{}][{}] loads, has {}", heatmap.id, heatmap.num_layers,
                heatmap.num_experts, heatmap.loads.size());
  const Layout at = layout_of(heatmap);
  const LogColourScale scale(heatmap.loads);
  std::string out;
  out.reserve(heatmap.loads.size() * 72 + 8192);
  open_svg(out, heatmap.id, at.width, at.height, heatmap.title, kLeft);
  legend(out);
  cells(out, heatmap, at, scale);
  annotations(out, heatmap, at);
  axes(out, heatmap, at);
  colour_bar(out, at, scale);
  out += "</svg>\n";
  return out;
}

}  // namespace moestat::report::detail
