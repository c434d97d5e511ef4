// Bar and line charts as standalone SVG: title, legend, axis titles, round ticks with short
// labels, shaded bands, markers, dots on lines and a dashed reference line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <moestat/error.hpp>
#include <string_view>

#include "chart.hpp"
#include "ticks.hpp"

namespace moestat::report::detail {
namespace {

// Layout in SVG user units (pixels at scale 1); the plot's height is the chart's.
constexpr double kLeft = 64, kPlotWidth = 760, kRight = 16;
constexpr double kTop = 58, kBottom = 46;
constexpr double kWidth = kLeft + kPlotWidth + kRight;
constexpr std::string_view kAxisColour = "#555555";
constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

struct Frame {
  std::size_t num_x;
  double y_low, y_high;
  double plot_height;

  double x_edge(double at) const { return kLeft + kPlotWidth * at / double(num_x); }
  double x_centre(std::size_t i) const { return x_edge(double(i) + 0.5); }
  double y(double value) const {
    return kTop + plot_height * (1 - (value - y_low) / (y_high - y_low));
  }
  double plot_bottom() const { return kTop + plot_height; }
  double height() const { return plot_bottom() + kBottom; }
};

/// One row of swatches under the title: the series, then the reference line.
void legend(std::string& out, const Chart& chart) {
  out += "<g class=\"legend\">\n";
  double x = kLeft;
  const auto entry = [&](std::string_view swatch, std::string_view label) {
    fmt::format_to(std::back_inserter(out),
                   "<g class=\"legend-entry\">{}<text x=\"{:.0f}\" y=\"42\">{}</text></g>\n",
                   swatch, x + 18, xml_escape(label));
    // Advance by the label's width, about 6.5 units a character at this size.
    x += 30 + 6.5 * double(label.size());
  };
  for (const Series& series : chart.series) {
    entry(chart.kind == ChartKind::kBars
              ? fmt::format("<rect x=\"{:.0f}\" y=\"33\" width=\"12\" height=\"11\" fill=\"{}\"/>",
                            x, series.colour)
              : fmt::format("<line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"38\" y2=\"38\" stroke=\"{}\" "
                            "stroke-width=\"{}\"/>",
                            x, x + 14, series.colour, series.emphasised ? 4 : 2.5),
          series.name);
  }
  if (chart.reference) {
    entry(fmt::format("<line x1=\"{:.0f}\" x2=\"{:.0f}\" y1=\"38\" y2=\"38\" stroke=\"#222222\" "
                      "stroke-dasharray=\"4 3\"/>",
                      x, x + 14),
          chart.reference_label);
  }
  out += "</g>\n";
}

void bands(std::string& out, const Chart& chart, const Frame& frame) {
  for (const Band& band : chart.bands) {
    const double from = frame.x_edge(band.from), to = frame.x_edge(band.to);
    out += "<g class=\"band\">";
    if (band.shaded) {
      fmt::format_to(std::back_inserter(out),
                     "<rect x=\"{:.1f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" "
                     "fill=\"#e9ecf2\"/>",
                     from, kTop, to - from, frame.plot_height);
    }
    if (band.from > 0) {
      fmt::format_to(std::back_inserter(out),
                     "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.0f}\" y2=\"{2:.0f}\" "
                     "stroke=\"#b4bac6\"/>",
                     from, kTop, frame.plot_bottom());
    }
    // A label too long for its band reads upwards inside it.
    const bool fits = to - from >= 6.0 * double(band.label.size()) + 4;
    fmt::format_to(std::back_inserter(out),
                   "<text transform=\"translate({:.1f},{:.0f}){}\" text-anchor=\"{}\" "
                   "font-size=\"10\" fill=\"{}\">{}</text></g>\n",
                   fits ? (from + to) / 2 : (from + to) / 2 + 3.5,
                   fits ? kTop + 11 : frame.plot_bottom() - 4, fits ? "" : " rotate(-90)",
                   fits ? "middle" : "start", kAxisColour, xml_escape(band.label));
  }
}

/// The x axis's ticks as (x, label): round numbers of a continuous axis where they fall,
/// or positions of a categorical one at their centres.
std::vector<std::pair<double, std::string>> x_ticks(const Chart& chart, const Frame& frame) {
  std::vector<std::pair<double, std::string>> out;
  if (chart.units_per_position) {
    const double units = *chart.units_per_position;
    const double span = double(frame.num_x) * units;
    for (double tick : linear_ticks(0.0, span, 8)) {
      if (tick <= span) out.emplace_back(frame.x_edge(tick / units), short_number(tick));
    }
    return out;
  }
  for (std::int64_t tick : index_ticks(std::int64_t(frame.num_x), 20)) {
    out.emplace_back(frame.x_centre(std::size_t(tick)), fmt::format("{}", tick));
  }
  return out;
}

void axes(std::string& out, const Chart& chart, const Frame& frame,
          const std::vector<double>& y_ticks) {
  out += "<g class=\"axes\">\n";
  for (double tick : y_ticks) {
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" "
                   "stroke=\"#e2e2e2\"/><text x=\"{3:.0f}\" y=\"{4:.1f}\" text-anchor=\"end\" "
                   "fill=\"{5}\">{6}</text>\n",
                   kLeft, kLeft + kPlotWidth, frame.y(tick), kLeft - 6, frame.y(tick) + 4,
                   kAxisColour, short_number(tick));
  }
  for (const auto& [x, label] : x_ticks(chart, frame)) {
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.0f}\" y2=\"{2:.0f}\" "
                   "stroke=\"{3}\"/><text x=\"{0:.1f}\" y=\"{4:.0f}\" text-anchor=\"middle\" "
                   "fill=\"{3}\">{5}</text>\n",
                   x, frame.plot_bottom(), frame.plot_bottom() + 4, kAxisColour,
                   frame.plot_bottom() + 16, label);
  }
  fmt::format_to(std::back_inserter(out),
                 "<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.0f}\" y2=\"{2:.0f}\" "
                 "stroke=\"{3}\"/><line x1=\"{0:.0f}\" x2=\"{0:.0f}\" y1=\"{4:.0f}\" "
                 "y2=\"{2:.0f}\" stroke=\"{3}\"/>\n"
                 "<text class=\"x-title\" x=\"{5:.0f}\" y=\"{6:.0f}\" text-anchor=\"middle\" "
                 "font-size=\"12\" fill=\"#222222\">{7}</text>\n"
                 "<text class=\"y-title\" transform=\"translate(16,{8:.0f}) rotate(-90)\" "
                 "text-anchor=\"middle\" font-size=\"12\" fill=\"#222222\">{9}</text>\n</g>\n",
                 kLeft, kLeft + kPlotWidth, frame.plot_bottom(), kAxisColour, kTop,
                 kLeft + kPlotWidth / 2, frame.height() - 10, xml_escape(chart.x_title),
                 kTop + frame.plot_height / 2, xml_escape(chart.y_title));
}

void bars(std::string& out, const Chart& chart, const Frame& frame) {
  const double slot = kPlotWidth / double(frame.num_x);
  const double bar = std::max(slot * 0.85 / double(chart.series.size()), 0.5);
  const double base = frame.y(std::max(frame.y_low, 0.0));
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const Series& series = chart.series[s];
    fmt::format_to(std::back_inserter(out), "<g class=\"series\" fill=\"{}\">\n", series.colour);
    for (std::size_t i = 0; i < series.values.size(); ++i) {
      const double value = series.values[i];
      if (!std::isfinite(value)) continue;
      const double top = std::min(frame.y(value), base);
      fmt::format_to(std::back_inserter(out),
                     "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\">"
                     "<title>{} {}, {}: {:.3f}</title></rect>\n",
                     frame.x_edge(double(i)) + slot * 0.075 + bar * double(s), top, bar,
                     std::abs(base - frame.y(value)), xml_escape(chart.x_title), i,
                     xml_escape(series.name), value);
    }
    out += "</g>\n";
  }
}

/// The line's height at x = at (as a Band's), between the values drawn at the centres on
/// either side; the nearer one alone at an end or beside a gap.
double line_value_at(const Series& series, double at) {
  const double left = std::floor(at - 0.5);
  const auto value = [&](double i) {
    return i >= 0 && i < double(series.values.size()) ? series.values[std::size_t(i)] : kNoValue;
  };
  const double before = value(left), after = value(left + 1);
  if (!std::isfinite(before)) return after;
  if (!std::isfinite(after)) return before;
  const double t = at - 0.5 - left;
  return before + (after - before) * t;
}

void marks(std::string& out, const Series& series, const Frame& frame) {
  for (const Mark& mark : series.marks) {
    const double value = line_value_at(series, mark.at);
    if (!std::isfinite(value)) continue;
    fmt::format_to(std::back_inserter(out),
                   "<circle class=\"mark\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" "
                   "stroke=\"#ffffff\" stroke-width=\"1\"><title>{}: {}</title></circle>\n",
                   frame.x_edge(mark.at), frame.y(value), series.emphasised ? 4.5 : 3,
                   series.colour, xml_escape(series.name), xml_escape(mark.label));
  }
}

void line(std::string& out, const Series& series, const Frame& frame) {
  fmt::format_to(std::back_inserter(out), "<g class=\"series{}\"><title>{}</title>\n",
                 series.emphasised ? " emphasised" : "", xml_escape(series.name));
  // One polyline per run of values between gaps; a lone value as a dot.
  std::size_t i = 0;
  while (i < series.values.size()) {
    if (!std::isfinite(series.values[i])) {
      ++i;
      continue;
    }
    std::string points;
    std::size_t run = 0;
    for (; i < series.values.size() && std::isfinite(series.values[i]); ++i, ++run) {
      fmt::format_to(std::back_inserter(points), "{:.1f},{:.1f} ", frame.x_centre(i),
                     frame.y(series.values[i]));
    }
    if (run == 1) {
      fmt::format_to(std::back_inserter(out),
                     "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2\" "
                     "fill=\"{}\"/>\n",
                     frame.x_centre(i - 1), frame.y(series.values[i - 1]), series.colour);
    } else {
      fmt::format_to(std::back_inserter(out),
                     "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
                     "points=\"{}\"/>\n",
                     series.colour, series.emphasised ? 3 : 1.6, points);
    }
  }
  marks(out, series, frame);
  out += "</g>\n";
}

/// Emphasised lines last, so that they are drawn over the others.
void lines(std::string& out, const Chart& chart, const Frame& frame) {
  for (const bool emphasised : {false, true}) {
    for (const Series& series : chart.series) {
      if (series.emphasised == emphasised) line(out, series, frame);
    }
  }
}

void overlays(std::string& out, const Chart& chart, const Frame& frame) {
  if (chart.reference) {
    fmt::format_to(std::back_inserter(out),
                   "<line class=\"reference\" x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.1f}\" "
                   "y2=\"{2:.1f}\" stroke=\"#222222\" stroke-dasharray=\"4 3\"/>\n",
                   kLeft, kLeft + kPlotWidth, frame.y(*chart.reference));
  }
  for (const Marker& marker : chart.markers) {
    const double x = frame.x_edge(marker.at);
    fmt::format_to(std::back_inserter(out),
                   "<g class=\"marker\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.0f}\" "
                   "y2=\"{2:.0f}\" stroke=\"#c0392b\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 3\"/><text x=\"{3:.1f}\" y=\"{4:.0f}\" "
                   "fill=\"#c0392b\" font-size=\"10\">{5}</text></g>\n",
                   x, kTop, frame.plot_bottom(), x + 4, kTop + 24, xml_escape(marker.label));
  }
}

}  // namespace

std::string xml_escape(std::string_view text) {
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

void open_svg(std::string& out, std::string_view id, double width, double height,
              std::string_view title, double title_x) {
  fmt::format_to(std::back_inserter(out),
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"{0}\" "
                 "width=\"{1:.0f}\" height=\"{2:.0f}\" viewBox=\"0 0 {1:.0f} {2:.0f}\" "
                 "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"11\">\n"
                 "<title>{3}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
                 "<text class=\"chart-title\" x=\"{4:.0f}\" y=\"20\" font-size=\"14\" "
                 "font-weight=\"bold\" fill=\"#222222\">{3}</text>\n",
                 xml_escape(id), width, height, xml_escape(title), title_x);
}

std::string svg_of(const Chart& chart) {
  MOESTAT_CHECK(!chart.series.empty() && !chart.series.front().values.empty(),
                "chart {} has nothing to draw", chart.id);
  const std::size_t n = chart.series.front().values.size();
  MOESTAT_CHECK(chart.plot_height > 0 && chart.units_per_position.value_or(1.0) > 0,
                "chart {}: a plot height and units per position must be positive", chart.id);
  double high = chart.reference.value_or(0.0), low = 0.0;
  for (const Series& series : chart.series) {
    MOESTAT_CHECK(series.values.size() == n, "chart {}: series {} has {} values, not {}", chart.id,
                  series.name, series.values.size(), n);
    for (double value : series.values) {
      if (std::isfinite(value)) high = std::max(high, value), low = std::min(low, value);
    }
  }
  std::vector<double> y_ticks =
      linear_ticks(chart.y_min.value_or(low), chart.y_max.value_or(high), 5);
  const Frame frame{n, y_ticks.front(), y_ticks.back(), chart.plot_height};
  std::string out;
  open_svg(out, chart.id, kWidth, frame.height(), chart.title, kLeft);
  legend(out, chart);
  bands(out, chart, frame);
  axes(out, chart, frame, y_ticks);
  if (chart.kind == ChartKind::kBars) {
    bars(out, chart, frame);
  } else {
    lines(out, chart, frame);
  }
  overlays(out, chart, frame);
  out += "</svg>\n";
  return out;
}

}  // namespace moestat::report::detail
