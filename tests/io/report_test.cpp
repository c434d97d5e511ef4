// The report library: loading recordings, per-GPU loads and balancedness against hand
// computations, the HTML page's structure, the heatmap PNG decoded back, and the Prometheus
// text checked line by line against the exposition format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <moestat/io/files.hpp>
#include <moestat/io/snapshot_json.hpp>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/report.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "io/test_support.hpp"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include <stb_image.h>

namespace moestat {
namespace {

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

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
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
  const Options planned{.num_gpus = 2, .placement = Placement(3, 6, 4, map)};
  const auto with_plan = samples(report::prometheus_text(r, planned));
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_layer_balancedness{layer=\"1\",placement=\"planned\"}"),
                   1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_gpu_load{layer=\"2\",gpu=\"0\",placement=\"planned\"}"),
                   2.0 + 2.0 + 1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_gpu_load{layer=\"2\",gpu=\"1\",placement=\"planned\"}"),
                   2.0 + 2.0 + 1.0);
  EXPECT_DOUBLE_EQ(with_plan.at("moestat_recorded_passes"), 2.0);
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
  EXPECT_EQ(count(text, "moestat_expert_load{"), 8u);
}

TEST(Report, HtmlIsSelfContainedWithOneCellPerLayerAndExpert) {
  const Recording r = small_recording();
  const std::string html = report::render_html(r, {.num_gpus = 2});
  EXPECT_EQ(count(html, "<rect class=\"cell\""), 12u);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("small &lt;test&gt;.json"), std::string::npos) << "source escaped";
  EXPECT_NE(html.find("id=\"pass-balancedness\""), std::string::npos);
  EXPECT_NE(html.find("id=\"gpu-load\""), std::string::npos);
  EXPECT_NE(html.find("<th>top_k</th><td>2</td>"), std::string::npos);
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

TEST(Report, HeatmapPngDecodesToTheLogScale) {
  const Recording r = small_recording();
  const std::vector<std::uint8_t> png = report::render_heatmap_png(r, 3, 2);
  int width = 0, height = 0, channels = 0;
  stbi_uc* pixels =
      stbi_load_from_memory(png.data(), int(png.size()), &width, &height, &channels, 3);
  ASSERT_NE(pixels, nullptr);
  EXPECT_EQ(width, 4 * 3);
  EXPECT_EQ(height, 3 * 2);
  const auto at = [&](int x, int y) {
    const stbi_uc* p = pixels + (y * width + x) * 3;
    return std::array<int, 3>{p[0], p[1], p[2]};
  };
  // Dense layer 0: the grey of "no load"; the largest load (8, layer 1 expert 0) brightest
  // (viridis' yellow end); the smallest (1) darkest (its purple start).
  EXPECT_EQ(at(0, 0), (std::array<int, 3>{232, 232, 232}));
  EXPECT_EQ(at(1, 2), (std::array<int, 3>{253, 231, 37}));
  EXPECT_EQ(at(3, 2), (std::array<int, 3>{68, 1, 84}));
  EXPECT_EQ(at(5, 3), at(3, 2)) << "cells fill their pixels";
  stbi_image_free(pixels);
}

TEST(Report, RejectsOptionsThatDoNotFit) {
  const Recording r = small_recording();
  test::expect_error([&] { report::render_html(r, {.num_gpus = 3}); },
                     {"GPU count (3)", "divide", "4 experts"});
  const Options wrong_shape{.num_gpus = 2, .placement = Placement::trivial(2, 4, 4)};
  test::expect_error([&] { report::render_html(r, wrong_shape); },
                     {"placement has 2 layers x 4 experts", "recording 3 x 4"});
  const Options odd_slots{.num_gpus = 2, .placement = Placement::trivial(3, 5, 4)};
  test::expect_error([&] { report::prometheus_text(r, odd_slots); }, {"5 physical slots"});
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
    EXPECT_EQ(count(report::render_html(r, {.num_gpus = 2}), "<rect class=\"cell\""), 8u);
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
