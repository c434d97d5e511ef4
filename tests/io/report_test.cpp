// The report library: loading recordings, per-GPU loads and balancedness against hand
// computations (on all passes and on held-out ones), the summary's claims, every figure's
// titles, legend and ticks, the heatmap PNG against a reference image, and the Prometheus
// text checked line by line against the exposition format.
//
// The reference image tests/io/fixtures/report_heatmap.png is the heatmap of
// small_recording() drawn by this code; after an intended change to the heatmap, rewrite it
// with `MOESTAT_UPDATE_REFERENCE_IMAGES=1 build/tests/io/report_test
// --gtest_filter='*Reference*'` and look at it before committing it.
#include <cairo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <moestat/io/files.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/report.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "io/svg_elements.hpp"
#include "io/test_support.hpp"
#include "report/ticks.hpp"

namespace moestat {
namespace {

using test::charts_in;
using test::occurrences;
using test::text_of;

using report::Options;
using report::Recording;

/// 3 layers x 4 experts, layer 0 dense (no load); two passes.
Recording small_recording() {
  Recording r;
  r.source = "small <test>.json";
  r.kind = "test";
  // pass 0 and pass 1, [L, E] each
  r.counts = {.window_size = 2,
              .num_layers = 3,
              .num_experts = 4,
              .has_window_axis = true,
              .counts = {0, 0, 0, 0, 6, 1, 1, 0, 1, 1, 1, 1,  //
                         0, 0, 0, 0, 2, 0, 1, 1, 3, 1, 1, 1}};
  r.metadata = {{"top_k", "2"}};
  return r;
}

/// Prometheus samples by "name{labels}".
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

bool is_metric_name(std::string_view name) {
  const auto first = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; };
  const auto rest = [&](char c) { return first(c) || std::isdigit(static_cast<unsigned char>(c)); };
  return !name.empty() && (first(name[0]) || name[0] == ':') &&
         std::all_of(name.begin(), name.end(), [&](char c) { return rest(c) || c == ':'; });
}

/// The metric name of a valid exposition sample `name{label="value",...} number`, or none.
/// (Plain parsing: std::regex trips GCC 12's warnings under the sanitizers.)
std::optional<std::string> sample_name(std::string_view line) {
  const std::size_t space = line.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view head = line.substr(0, space);
  const std::string value(line.substr(space + 1));
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size()) return std::nullopt;
  const std::size_t brace = head.find('{');
  const std::string name(head.substr(0, brace));
  if (!is_metric_name(name)) return std::nullopt;
  if (brace == std::string_view::npos) return name;
  if (!head.ends_with('}')) return std::nullopt;
  std::string_view labels = head.substr(brace + 1, head.size() - brace - 2);
  while (true) {
    const std::size_t eq = labels.find("=\"");
    if (eq == std::string_view::npos || !is_metric_name(labels.substr(0, eq)) ||
        labels.substr(0, eq).find(':') != std::string_view::npos) {
      return std::nullopt;
    }
    const std::size_t close = labels.find('"', eq + 2);
    if (close == std::string_view::npos) return std::nullopt;
    if (labels.substr(eq + 2, close - eq - 2).find('\\') != std::string_view::npos) {
      return std::nullopt;  // no escapes are ever needed for moestat's label values
    }
    labels = labels.substr(close + 1);
    if (labels.empty()) return name;
    if (labels[0] != ',') return std::nullopt;
    labels = labels.substr(1);
  }
}

TEST(Report, BalancednessByHand) {
  const Recording r = small_recording();
  // Layer 1 totals {8, 1, 2, 1}, layer 2 {4, 2, 2, 2}. Identity on 2 GPUs: experts {0, 1}
  // on GPU 0 and {2, 3} on GPU 1: layer 1 loads 9 / 3 -> 6 / 9; layer 2 6 / 4 -> 5 / 6.
  const auto metrics = samples(report::prometheus_text(r, {.num_gpus = 2}));
  EXPECT_DOUBLE_EQ(metrics.at("moestat_layer_balancedness{layer=\"1\",placement=\"identity\"}"),
                   6.0 / 9.0);
  EXPECT_DOUBLE_EQ(metrics.at("moestat_layer_balancedness{layer=\"2\",placement=\"identity\"}"),
                   5.0 / 6.0);
  EXPECT_DOUBLE_EQ(metrics.at("moestat_balancedness{placement=\"identity\"}"),
                   (6.0 / 9.0 + 5.0 / 6.0) / 2);  // the dense layer does not count
  EXPECT_FALSE(metrics.contains("moestat_layer_balancedness{layer=\"0\",placement=\"identity\"}"));

  // A placement of 6 slots on 2 GPUs: expert 0 twice (one replica per GPU), slots
  // [0, 1, 2 | 0, 3, 2]: expert 2 also twice. Layer 1: GPU 0 = 4 + 1 + 1 = 6, GPU 1 =
  // 4 + 1 + 1 = 6 -> 1.0.
  const std::vector<std::int32_t> row = {0, 1, 2, 0, 3, 2};
  std::vector<std::int32_t> map;
  for (int layer = 0; layer < 3; ++layer) map.insert(map.end(), row.begin(), row.end());
  const Options planned{.num_gpus = 2, .placements = {{"planned", Placement(3, 6, 4, map)}}};
  const auto with_plan = samples(report::prometheus_text(r, planned));
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_layer_balancedness{layer=\"1\",placement=\"planned\"}"),
                   1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_gpu_load{layer=\"2\",gpu=\"0\",placement=\"planned\"}"),
                   2.0 + 2.0 + 1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_gpu_load{layer=\"2\",gpu=\"1\",placement=\"planned\"}"),
                   2.0 + 2.0 + 1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_recorded_passes"), 2.0);
}

TEST(Report, PrometheusEscapesPlacementNamesAsTheLiveMetricsDo) {
  const Recording r = small_recording();
  const std::string name = "a\"b\\c\nd";
  const std::string text = report::prometheus_text(
      r, {.num_gpus = 2, .placements = {{name, Placement::trivial(3, 4, 4)}}});
  EXPECT_NE(text.find("moestat_balancedness{placement=\"a\\\"b\\\\c\\nd\"} "), std::string::npos)
      << text;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {  // no line broken inside a label
    EXPECT_TRUE(line.starts_with("# ") || line.starts_with("moestat_")) << line;
  }
}

TEST(Report, PrometheusTextIsValidExposition) {
  const Recording r = small_recording();
  const std::string text = report::prometheus_text(r, {.num_gpus = 2});
  std::set<std::string> helped, typed, sampled;
  std::string current;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ")) {
      const std::string rest = line.substr(7);
      current = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(is_metric_name(current)) << line;
      EXPECT_GT(rest.size(), current.size() + 1) << "empty HELP: " << line;
      EXPECT_TRUE(helped.insert(current).second) << "second HELP for " << current;
      EXPECT_FALSE(sampled.contains(current)) << current << " samples before its HELP";
    } else if (line.starts_with("# TYPE ")) {
      EXPECT_EQ(line, "# TYPE " + current + " gauge") << "TYPE not right after its HELP";
      typed.insert(current);
    } else {
      const std::optional<std::string> name = sample_name(line);
      ASSERT_TRUE(name) << "not a valid sample: " << line;
      EXPECT_EQ(*name, current) << "sample outside its family: " << line;
      EXPECT_TRUE(typed.contains(current));
      sampled.insert(*name);
    }
  }
  EXPECT_EQ(sampled, (std::set<std::string>{"moestat_expert_load", "moestat_gpu_load",
                                            "moestat_layer_balancedness", "moestat_balancedness",
                                            "moestat_recorded_passes"}));
  // Every expert of every loaded layer, with its total.
  const auto metrics = samples(text);
  for (int layer = 1; layer < 3; ++layer) {
    for (int expert = 0; expert < 4; ++expert) {
      EXPECT_EQ(metrics.at(fmt::format("moestat_expert_load{{layer=\"{}\",expert=\"{}\"}}", layer,
                                       expert)),
                double(r.counts.totals()[std::size_t(layer * 4 + expert)]));
    }
  }
  EXPECT_EQ(occurrences(text, "moestat_expert_load{"), 8u);
}

TEST(Report, HtmlIsSelfContainedWithOneCellPerLayerAndExpert) {
  const Recording r = small_recording();
  const std::string html = report::render_html(r, {.num_gpus = 2});
  EXPECT_EQ(occurrences(html, "<rect class=\"cell\""), 12u);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("small &lt;test&gt;.json"), std::string::npos) << "source escaped";
  EXPECT_NE(html.find("id=\"pass-balancedness\""), std::string::npos);
  EXPECT_NE(html.find("id=\"gpu-load\""), std::string::npos);
  EXPECT_NE(html.find("<th>top_k</th><td>2</td>"), std::string::npos);
  EXPECT_NE(html.find("<section id=\"summary\">"), std::string::npos);
  // Nothing fetched from anywhere: no script, no external resource.
  for (const char* needle : {"<script", "src=", "href=", "@import", "url("}) {
    EXPECT_EQ(html.find(needle), std::string::npos) << needle;
  }
  // Without passes there is no chart over time.
  Recording totals_only = r;
  totals_only.counts = {.window_size = 1,
                        .num_layers = 3,
                        .num_experts = 4,
                        .has_window_axis = false,
                        .counts = r.counts.totals()};
  EXPECT_EQ(report::render_html(totals_only, {.num_gpus = 2}).find("pass-balancedness"),
            std::string::npos);
}

TEST(Report, RejectsOptionsThatDoNotFit) {
  const Recording r = small_recording();
  test::expect_error([&] { report::render_html(r, {.num_gpus = 3}); },
                     {"GPU count (3)", "divide", "4 experts"});
  test::expect_error([&] { report::render_html(r, {.num_gpus = 4, .num_nodes = 3}); },
                     {"node count (3)", "divide the GPU count (4)"});
  const Options wrong_shape{.num_gpus = 2, .placements = {{"old", Placement::trivial(2, 4, 4)}}};
  test::expect_error([&] { report::render_html(r, wrong_shape); },
                     {"placement old has 2 layers x 4 experts", "recording 3 x 4"});
  const Options odd_slots{.num_gpus = 2, .placements = {{"odd", Placement::trivial(3, 5, 4)}}};
  test::expect_error([&] { report::prometheus_text(r, odd_slots); }, {"odd's 5 physical slots"});
  const Options twice{
      .num_gpus = 2,
      .placements = {{"a", Placement::trivial(3, 4, 4)}, {"a", Placement::trivial(3, 4, 4)}}};
  test::expect_error([&] { report::render_html(r, twice); }, {"two placements are named a"});
  const Options reserved{.num_gpus = 2, .placements = {{"identity", Placement::trivial(3, 4, 4)}}};
  test::expect_error([&] { report::render_html(r, reserved); }, {"reference placement's name"});
  const Options unnamed{.num_gpus = 2, .placements = {{"", Placement::trivial(3, 4, 4)}}};
  test::expect_error([&] { report::prometheus_text(r, unnamed); }, {"must be non-empty"});
  // The split must leave passes on both sides.
  for (std::int64_t from : {0, 2}) {
    test::expect_error([&] { report::render_html(r, {.num_gpus = 2, .held_out_from = from}); },
                       {fmt::format("first held-out pass ({})", from), "keeps 2 passes"});
  }
}

TEST(Report, JudgesPlacementsOnTheHeldOutPassesOnly) {
  const Recording r = small_recording();
  // Pass 1 alone: layer 1 {2, 0, 1, 1} -> GPUs 2 / 2 -> 1.0; layer 2 {3, 1, 1, 1} -> 4 / 2
  // -> 3 / 4. All passes (BalancednessByHand): 6 / 9 and 5 / 6.
  const Placement identity_again = Placement::trivial(3, 4, 4);
  const auto held_out = report::balancedness(
      r, {.num_gpus = 2, .placements = {{"again", identity_again}}, .held_out_from = 1});
  ASSERT_EQ(held_out.size(), 2u);
  EXPECT_EQ(held_out[0].name, "identity");
  EXPECT_EQ(held_out[1].name, "again");
  EXPECT_DOUBLE_EQ(held_out[0].balancedness, (1.0 + 3.0 / 4.0) / 2);
  EXPECT_DOUBLE_EQ(held_out[1].balancedness, held_out[0].balancedness);
  const auto all = report::balancedness(r, {.num_gpus = 2});
  EXPECT_DOUBLE_EQ(all[0].balancedness, (6.0 / 9.0 + 5.0 / 6.0) / 2);
  // Prometheus describes the whole recording either way.
  EXPECT_EQ(report::prometheus_text(r, {.num_gpus = 2, .held_out_from = 1}),
            report::prometheus_text(r, {.num_gpus = 2}));
}

/// A placement of `r`'s 4 experts on 2 GPUs that balances layers 1 and 2 perfectly over all
/// passes (BalancednessByHand's), and one that piles the hot experts together.
Placement balanced_placement() {
  const std::vector<std::int32_t> row = {0, 1, 2, 0, 3, 2};
  std::vector<std::int32_t> map;
  for (int layer = 0; layer < 3; ++layer) map.insert(map.end(), row.begin(), row.end());
  return Placement(3, 6, 4, map);
}
Placement piled_placement() {
  const std::vector<std::int32_t> row = {0, 2, 1, 3};  // experts 0 and 2 on GPU 0
  std::vector<std::int32_t> map;
  for (int layer = 0; layer < 3; ++layer) map.insert(map.end(), row.begin(), row.end());
  return Placement(3, 4, 4, map);
}

TEST(Report, SummaryNamesTheBestPlacementItsGainAndTheHotSpots) {
  const Recording r = small_recording();
  const Options options{
      .num_gpus = 2,
      .num_nodes = 2,
      .placements = {{"piled", piled_placement()}, {"spread <new>", balanced_placement()}}};
  // piled: layer 1 {8+2 | 1+1} -> 6 / 10; layer 2 {4+2 | 2+2} -> 5 / 6.
  const double piled = (6.0 / 10.0 + 5.0 / 6.0) / 2;
  const auto figures = report::balancedness(r, options);
  ASSERT_EQ(figures.size(), 3u);
  EXPECT_DOUBLE_EQ(figures[1].balancedness, piled);
  EXPECT_DOUBLE_EQ(figures[2].balancedness, 1.0);
  const std::string html = report::render_html(r, options);
  const std::string summary =
      html.substr(html.find("<section id=\"summary\">"),
                  html.find("</section>") - html.find("<section id=\"summary\">"));
  // Best: the spread placement, against the first one given.
  EXPECT_NE(summary.find("<b>Best placement: spread &lt;new&gt;</b>, balancedness 1.000"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find(
                fmt::format("against {:.3f} for <b>piled</b> (the first placement given)", piled)),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find(fmt::format("{:+.3f} ({:+.1f}%)", 1.0 - piled, 100 * (1 / piled - 1))),
            std::string::npos)
      << summary;
  // Layer 1's expert 0 holds 8 of 12 assignments: 2.7x the mean of 4 experts; layer 2's
  // hottest holds 4 of 10 (1.6x).
  EXPECT_NE(summary.find("<b>Hottest expert: layer 1, expert 0</b>, with 66.7% of the layer's "
                         "token assignments, 2.7× the mean"),
            std::string::npos)
      << summary;
  // Under the spread placement both GPUs carry 11 of 22: GPU 0 first of the tie; a node per
  // GPU here.
  EXPECT_NE(summary.find("<b>Busiest GPU under spread &lt;new&gt;: GPU 0</b>, with 50.0%"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("<b>busiest node: node 0</b> (GPU 0), with 50.0%"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("Layer 0 has no expert load (dense)"), std::string::npos) << summary;
  // The placements table names each one, with its change against the baseline.
  EXPECT_NE(html.find("<td>baseline</td>"), std::string::npos);
  // A single placement is measured against the identity placement.
  const std::string single =
      report::render_html(r, {.num_gpus = 2, .placements = {{"spread", balanced_placement()}}});
  EXPECT_NE(single.find("for <b>identity</b> (the identity placement)"), std::string::npos);
}

TEST(Report, TicksAreRoundAndLabelsShort) {
  using report::detail::short_number;
  EXPECT_EQ(short_number(1213621), "1.2M");
  EXPECT_EQ(short_number(5913692), "5.9M");
  EXPECT_EQ(short_number(12621), "13k");
  EXPECT_EQ(short_number(999), "999");
  EXPECT_EQ(short_number(1000), "1k");
  EXPECT_EQ(short_number(250000), "250k");
  EXPECT_EQ(short_number(0.75), "0.75");
  EXPECT_EQ(short_number(1.5), "1.5");
  EXPECT_EQ(short_number(0), "0");
  EXPECT_EQ(report::detail::linear_ticks(0, 1, 5),
            (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(report::detail::linear_ticks(0, 1.37, 5), (std::vector<double>{0, 0.5, 1, 1.5}));
  EXPECT_EQ(report::detail::index_ticks(61, 20).size(), 13u);  // every 5 layers
  EXPECT_EQ(report::detail::index_ticks(3, 8), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(report::detail::index_ticks(256, 25).back(), 240);  // every 20 experts
  // The issue's colour bar: 12621 to 5913692, now with round ticks between.
  EXPECT_EQ(report::detail::log_ticks(12621, 5913692, 8),
            (std::vector<double>{2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6}));
  EXPECT_EQ(report::detail::log_ticks(1, 8, 8), (std::vector<double>{1, 2, 5}));
  EXPECT_EQ(report::detail::log_ticks(3, 4, 8), (std::vector<double>{3, 4}));
}

TEST(Report, EveryFigureHasTitlesUnitsTicksAndALegend) {
  const Recording r = small_recording();
  const Options options{.num_gpus = 2,
                        .num_nodes = 2,
                        .placements = {{"spread", balanced_placement()}},
                        .held_out_from = 1};
  const std::vector<report::Figure> figures = report::render_figures(r, options);
  std::vector<std::string> names;
  for (const report::Figure& figure : figures) names.push_back(figure.name);
  EXPECT_EQ(names, (std::vector<std::string>{"heatmap", "gpu-load", "gpu-peak-load",
                                             "layer-balancedness", "pass-balancedness"}));
  for (const report::Figure& figure : figures) {
    SCOPED_TRACE(figure.name);
    ASSERT_EQ(charts_in(figure.svg).size(), 1u);
    EXPECT_TRUE(figure.svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    EXPECT_EQ(text_of(figure.svg, "chart-title"), figure.title);
    EXPECT_NE(text_of(figure.svg, "x-title"), "");
    EXPECT_NE(text_of(figure.svg, "y-title"), "");
    EXPECT_GE(occurrences(figure.svg, "class=\"legend-entry\""), 2u);
  }
  const auto svg_of = [&](const std::string& name) {
    return std::find_if(figures.begin(), figures.end(),
                        [&](const report::Figure& f) { return f.name == name; })
        ->svg;
  };
  // The heatmap: a cell per layer and expert, the dense layer named, a colour bar from 1 to
  // 8 assignments with a round tick between.
  const std::string heatmap = svg_of("heatmap");
  EXPECT_EQ(occurrences(heatmap, "<rect class=\"cell\""), 12u);
  EXPECT_NE(heatmap.find("layer 0: dense (no expert load)"), std::string::npos);
  const std::string bar = heatmap.substr(heatmap.find("class=\"colour-bar\""));
  for (const char* tick : {">1</text>", ">2</text>", ">5</text>"}) {
    EXPECT_NE(bar.find(tick), std::string::npos) << tick;
  }
  EXPECT_EQ(text_of(heatmap, "colour-bar-title"), "token assignments (log scale)");
  // Per-GPU charts: a band per node; legends name every placement.
  const std::string gpu = svg_of("gpu-load");
  EXPECT_EQ(occurrences(gpu, "class=\"band\""), 2u);
  EXPECT_NE(gpu.find(">node 1</text>"), std::string::npos);
  EXPECT_NE(gpu.find(">spread</text>"), std::string::npos);
  EXPECT_NE(gpu.find(">identity</text>"), std::string::npos);
  EXPECT_NE(text_of(gpu, "chart-title").find("held-out passes 1-1"), std::string::npos);
  // The split between planning and held-out passes, and the dense layer, are marked.
  EXPECT_EQ(occurrences(svg_of("pass-balancedness"), "class=\"marker\""), 1u);
  EXPECT_NE(svg_of("layer-balancedness").find(">dense</text>"), std::string::npos);
  // The page embeds the very same documents.
  const std::string html = report::render_html(r, options);
  for (const report::Figure& figure : figures) {
    EXPECT_NE(html.find(figure.svg), std::string::npos) << figure.name;
  }
}

/// A PNG decoded by Cairo into 0xRRGGBB pixels; empty when it does not decode.
struct Image {
  int width = 0, height = 0;
  std::vector<std::uint32_t> pixels;
};

Image decode_png(const std::vector<std::uint8_t>& png) {
  struct Reader {
    const std::vector<std::uint8_t>* bytes;
    std::size_t at = 0;
  } reader{&png};
  const auto read = [](void* closure, unsigned char* data, unsigned int length) {
    auto* r = static_cast<Reader*>(closure);
    if (r->at + length > r->bytes->size()) return CAIRO_STATUS_READ_ERROR;
    std::copy_n(r->bytes->data() + r->at, length, data);
    r->at += length;
    return CAIRO_STATUS_SUCCESS;
  };
  cairo_surface_t* surface = cairo_image_surface_create_from_png_stream(read, &reader);
  Image out;
  if (cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS) {
    out.width = cairo_image_surface_get_width(surface);
    out.height = cairo_image_surface_get_height(surface);
    const int stride = cairo_image_surface_get_stride(surface);
    const unsigned char* data = cairo_image_surface_get_data(surface);
    for (int y = 0; y < out.height; ++y) {
      const auto* row = reinterpret_cast<const std::uint32_t*>(data + y * stride);
      for (int x = 0; x < out.width; ++x) out.pixels.push_back(row[x] & 0xffffffu);
    }
  }
  cairo_surface_destroy(surface);
  return out;
}

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Report, HeatmapPngMatchesTheReferenceImage) {
  const std::vector<std::uint8_t> png = report::render_heatmap_png(small_recording());
  const auto reference_path = std::filesystem::path(MOESTAT_FIXTURE_DIR) / "report_heatmap.png";
  if (std::getenv("MOESTAT_UPDATE_REFERENCE_IMAGES") != nullptr) {
    io::write_file_atomically(
        reference_path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
    GTEST_SKIP() << "wrote " << reference_path;
  }
  const Image image = decode_png(png);
  ASSERT_GT(image.width, 0) << "the PNG does not decode";
  // Cells hold their colour exactly: the largest load (8, layer 1 expert 0) viridis' yellow
  // end, the smallest (1, layer 1 expert 1) its purple start, the dense layer grey. A cell is
  // 48 x 24 units, the grid's corner at (70, 58).
  const auto at = [&](int x, int y) { return image.pixels[std::size_t(y * image.width + x)]; };
  EXPECT_EQ(at(70 + 24, 58 + 24 + 12), 0xfde725u);
  EXPECT_EQ(at(70 + 48 + 24, 58 + 24 + 12), 0x440154u);
  EXPECT_EQ(at(70 + 3 * 48 + 24, 58 + 2), 0xe8e8e8u);

  const Image reference = decode_png(read_bytes(reference_path));
  ASSERT_GT(reference.width, 0) << reference_path << " is missing or not a PNG";
  ASSERT_EQ(image.width, reference.width);
  ASSERT_EQ(image.height, reference.height);
  // Text is anti-aliased by whatever FreeType and fonts the machine has: a few pixels of
  // glyph edges may differ; any change of the drawing moves far more.
  constexpr int kChannelTolerance = 24;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < image.pixels.size(); ++i) {
    for (int shift : {0, 8, 16}) {
      const int a = int(image.pixels[i] >> shift & 0xff),
                b = int(reference.pixels[i] >> shift & 0xff);
      if (std::abs(a - b) > kChannelTolerance) {
        ++differing;
        break;
      }
    }
  }
  EXPECT_LE(double(differing), 0.01 * double(image.pixels.size()))
      << differing << " of " << image.pixels.size() << " pixels differ from " << reference_path;
}

TEST(Report, SvgToPngRefusesWhatIsNotSvg) {
  test::expect_error([] { report::svg_to_png("<html>not an svg"); }, {"the SVG does not parse"});
  test::expect_error([] { report::svg_to_png("<svg/>", 100); }, {"scale must be 0.25 to 8"});
}

TEST(Report, LoadsRecordingsAndNamesTheFileOnErrors) {
  test::ScratchDir dir;
  const auto counts = dir.path() / "counts.json";
  io::write_file_atomically(counts, R"({"logical_count": [[[1, 2], [0, 0]], [[3.0, 0], [1, 1]]]})");
  const Recording r = report::load_recording(counts);
  EXPECT_EQ(r.source, counts.string());
  EXPECT_EQ(r.num_layers(), 2);
  EXPECT_EQ(r.num_experts(), 2);
  EXPECT_EQ(r.num_passes(), 2);
  EXPECT_EQ(r.counts.totals(), (std::vector<std::int64_t>{4, 2, 1, 1}));

  const auto placement = dir.path() / "placement.json";
  io::write_file_atomically(placement, R"({"physical_to_logical_map": [[0, 1]]})");
  test::expect_error([&] { report::load_recording(placement); },
                     {placement.string(), "is a placement", "not a recording"});
  test::expect_error([&] { report::load_recording(dir.path() / "absent.json"); }, {"absent.json"});
}

TEST(Report, LoadsSnapshotsOfEveryMode) {
  test::ScratchDir dir;
  const ModelTopology topology = ModelTopology::uniform(2, 4, 2);
  const std::vector<std::int32_t> ids = {0, 1, 2, 1, 1, 0};  // layer 1: {2, 3, 1, 0} a pass
  for (RecordMode mode :
       {RecordMode::kStat, RecordMode::kPerPass, RecordMode::kPerToken, RecordMode::kDecayed}) {
    const std::string name(record_mode_name(mode));
    SCOPED_TRACE(name);
    record::CpuRecorder recorder(topology, {.mode = mode, .decay = 0.5});
    recorder.start();
    for (std::int64_t pass = 0; pass < 2; ++pass) {
      recorder.begin_pass(pass);
      recorder.record_topk(1, TensorView::contiguous(ids.data(), DType::kInt32, {3, 2}));
      recorder.end_pass();
    }
    const auto path = dir.path() / (name + ".json");
    io::write_file_atomically(path, io::snapshot_to_json(recorder.snapshot()));
    const Recording r = report::load_recording(path);
    EXPECT_EQ(r.kind, "moestat snapshot (" + name + ")");
    // Decayed: 0.5 * first pass + second = 1.5 x a pass, rounded half away from zero.
    const std::vector<std::int64_t> layer1 = mode == RecordMode::kDecayed
                                                 ? std::vector<std::int64_t>{3, 5, 2, 0}
                                                 : std::vector<std::int64_t>{4, 6, 2, 0};
    const std::vector<std::int64_t> totals = r.counts.totals();
    EXPECT_EQ(std::vector<std::int64_t>(totals.begin() + 4, totals.end()), layer1);
    EXPECT_EQ(r.num_passes(), mode == RecordMode::kStat || mode == RecordMode::kPerPass ? 2 : 0);
    EXPECT_EQ(occurrences(report::render_html(r, {.num_gpus = 2}), "<rect class=\"cell\""), 8u);
  }
}

TEST(Report, ReadsSglangsPublishedCounts) {
  const auto path = std::filesystem::path(MOESTAT_SHARED_DIR) / "data" /
                    "deepseek-v3-sglang-stats" / "prefill_in512.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  const Recording r = report::load_recording(path);
  EXPECT_EQ(r.num_layers(), 61);
  EXPECT_EQ(r.num_experts(), 256);
  const auto metrics = samples(report::prometheus_text(r, {.num_gpus = 32}));
  const double balancedness = metrics.at("moestat_balancedness{placement=\"identity\"}");
  EXPECT_GT(balancedness, 0.2);
  EXPECT_LT(balancedness, 0.9);
}

}  // namespace
}  // namespace moestat
