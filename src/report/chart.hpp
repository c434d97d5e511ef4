// Internal: the report's charts as data (axes, series and their marks, legend, shaded bands,
// markers), drawn as standalone SVG by svg_chart.cpp and svg_heatmap.cpp. The HTML page
// embeds the same SVG that `--svg` writes and `--png` rasterises, so the three never
// disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::report::detail {

/// A dot on a line at x = at (as Band's), labelled in its tooltip: an event of the series
/// (a policy's rebalance).
struct Mark {
  double at = 0;
  std::string label;
};

/// One named line or set of bars. values[i] is drawn at x = i; NaN leaves a gap.
struct Series {
  std::string name;
  std::string colour;  ///< "#rrggbb"
  std::vector<double> values;
  std::vector<Mark> marks = {};  ///< Lines only.
  bool emphasised = false;       ///< A line drawn thicker, over the others.
};

/// An x range [from, to) shaded behind the data, labelled at its top (a node's GPUs, dense
/// layers, the held-out passes).
struct Band {
  double from = 0, to = 0;
  std::string label;
  bool shaded = true;  ///< Unshaded bands only show their label and left edge.
};

/// A vertical line before x = at, labelled (where planning ends and the held-out passes
/// begin).
struct Marker {
  double at = 0;
  std::string label;
};

enum class ChartKind { kBars, kLines };

/// A chart over the integer x positions 0..n-1 of its series.
struct Chart {
  std::string id;  ///< Names the figure: the svg element's id and `--svg`'s file name.
  std::string title;
  std::string x_title, y_title;  ///< With their units: "GPU", "load / even share (x)".
  ChartKind kind = ChartKind::kLines;
  std::vector<Series> series = {};  ///< Equal lengths; at least one.
  std::vector<Band> bands = {};
  std::vector<Marker> markers = {};
  /// A dashed horizontal line and its legend entry ("1.0 = an even split").
  std::optional<double> reference = std::nullopt;
  std::string reference_label = {};
  /// The y range; by default 0 to a round number above the largest value.
  std::optional<double> y_min = std::nullopt, y_max = std::nullopt;
  /// Set: the x axis is continuous, position i spanning [i, i + 1) times this many axis
  /// units (a block of 50 passes), ticked at round numbers of those units at their place.
  /// Unset: positions are categories (GPUs, layers), ticked at their centres.
  std::optional<double> units_per_position = std::nullopt;
  double plot_height = 200;  ///< SVG units; the rest of the layout is fixed.
};

/// The layers x experts heatmap: cells on a log colour scale with its colour bar.
struct Heatmap {
  std::string id;
  std::string title;
  std::int64_t num_layers = 0, num_experts = 0;
  std::vector<std::int64_t> loads;  ///< [L, E] token assignments.
};

/// Standalone SVG documents (an XML prologue-free `<svg>` with its own fonts and a white
/// background), to embed in HTML or write as files.
std::string svg_of(const Chart& chart);
std::string svg_of(const Heatmap& heatmap);

/// Text safe in XML content and attribute values.
std::string xml_escape(std::string_view text);

/// Opens a figure's `<svg>`: its size, fonts, white background, and its title (a `<title>`
/// and a bold line at (`title_x`, 20)), so every figure stands alone alike.
void open_svg(std::string& out, std::string_view id, double width, double height,
              std::string_view title, double title_x);

}  // namespace moestat::report::detail
