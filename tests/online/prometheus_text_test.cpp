// online::prometheus_text: a valid exposition (format 0.0.4: one HELP and one TYPE before each
// family's samples, legal names, counters ending in _total, escaped label values) carrying
// the values it was given; write_prometheus_file writes the same text.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <moestat/io/files.hpp>
#include <moestat/io/prometheus_escape.hpp>
#include <moestat/online/prometheus.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "unit/expect_error.hpp"

namespace moestat {
namespace {

using online::MetricValues;

/// Two layers (0 dense), two GPUs, hand-made values.
MetricValues sample_values() {
  MetricValues values;
  values.num_layers = 2;
  values.num_gpus = 2;
  values.layer_names = {"dense", "moe \"1\"\\x\n"};
  values.moe_layers = {false, true};
  values.passes_recorded = 9;
  values.passes_observed = 7;
  values.passes_unobserved = 2;
  values.passes_dropped = 1;
  values.dropped_ids = 3;
  values.last_pass_id = 41;
  values.last_pass_balancedness = 0.625;
  values.last_pass_gpu_loads = {0, 0, 5, 11};
  values.gpu_assignments_total = {0, 0, 50, 110};
  values.balancedness_means = {{10, 7, 0.75}, {100, 7, 0.75}, {1000, 7, 0.75}};
  values.uncovered_passes = {0, 4};
  values.hottest_experts = {{1, 3, 60}, {1, 0, 20}};
  return values;
}

struct Family {
  std::string type;
  int help_lines = 0, type_lines = 0;
};

/// Parses the exposition strictly; returns each sample (name{labels} -> value text).
std::map<std::string, std::string> parse(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)+\})? (\S+))");
  std::map<std::string, Family> families;
  std::map<std::string, std::string> samples;
  std::istringstream lines(text);
  std::string line;
  std::smatch match;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, match, help)) {
      ++families[match[1]].help_lines;
    } else if (std::regex_match(line, match, type)) {
      ++families[match[1]].type_lines;
      families[match[1]].type = match[2];
    } else if (std::regex_match(line, match, sample)) {
      const std::string name = match[1];
      EXPECT_EQ(families[name].type_lines, 1) << "sample before its TYPE: " << line;
      const std::size_t space = line.rfind(' ');
      samples[line.substr(0, space)] = line.substr(space + 1);
    } else {
      ADD_FAILURE() << "not a line of the exposition format: " << line;
    }
  }
  for (const auto& [name, family] : families) {
    EXPECT_TRUE(name.starts_with("moestat_")) << name;
    EXPECT_EQ(family.help_lines, 1) << name;
    EXPECT_EQ(family.type_lines, 1) << name;
    EXPECT_EQ(family.type == "counter", name.ends_with("_total")) << name;
  }
  return samples;
}

// The text format's rules: a label value escapes backslash, double quote and line feed, a
// HELP text backslash and line feed; nothing else (tabs and UTF-8 pass as they are).
TEST(PrometheusEscape, FollowsTheTextFormatsRules) {
  EXPECT_EQ(io::prometheus_label_value("a\\b\"c\nd\te \xc3\xa9"), "a\\\\b\\\"c\\nd\te \xc3\xa9");
  EXPECT_EQ(io::prometheus_help_text("a\\b\"c\nd\te"), "a\\\\b\"c\\nd\te");
  EXPECT_EQ(io::prometheus_label_value(""), "");
}

TEST(PrometheusText, IsAValidExpositionOfTheValues) {
  const std::string text = online::prometheus_text(sample_values());
  ASSERT_TRUE(text.ends_with("\n"));
  const std::map<std::string, std::string> samples = parse(text);
  const std::string layer = R"(layer="moe \"1\"\\x\n")";
  const std::map<std::string, std::string> expected = {
      {"moestat_passes_recorded_total", "9"},
      {"moestat_passes_observed_total", "7"},
      {"moestat_passes_unobserved_total", "2"},
      {"moestat_passes_dropped_total", "1"},
      {"moestat_dropped_ids_total", "3"},
      {"moestat_last_pass_id", "41"},
      {"moestat_pass_balancedness_ratio", "0.625"},
      {R"(moestat_balancedness_mean_ratio{passes="10"})", "0.75"},
      {R"(moestat_balancedness_mean_ratio{passes="100"})", "0.75"},
      {R"(moestat_balancedness_mean_ratio{passes="1000"})", "0.75"},
      {R"(moestat_balancedness_mean_passes{passes="10"})", "7"},
      {R"(moestat_balancedness_mean_passes{passes="100"})", "7"},
      {R"(moestat_balancedness_mean_passes{passes="1000"})", "7"},
      {"moestat_pass_gpu_load_assignments{" + layer + R"(,gpu="0"})", "5"},
      {"moestat_pass_gpu_load_assignments{" + layer + R"(,gpu="1"})", "11"},
      {"moestat_gpu_assignments_total{" + layer + R"(,gpu="0"})", "50"},
      {"moestat_gpu_assignments_total{" + layer + R"(,gpu="1"})", "110"},
      {"moestat_layer_uncovered_passes_total{" + layer + "}", "4"},
      {"moestat_hot_expert_assignments{" + layer + R"(,expert="3"})", "60"},
      {"moestat_hot_expert_assignments{" + layer + R"(,expert="0"})", "20"},
  };
  // Dense layers have no GPU loads or coverage samples.
  EXPECT_EQ(samples, expected);
}

TEST(PrometheusText, FileHoldsTheSameTextAndBadPathsAreNamed) {
  const std::filesystem::path directory =
      std::filesystem::path(::testing::TempDir()) / "moestat_prometheus_text_test";
  std::filesystem::create_directories(directory);
  const std::filesystem::path path = directory / "moestat.prom";
  online::write_prometheus_file(path, sample_values());
  EXPECT_EQ(io::read_text_file(path), online::prometheus_text(sample_values()));
  EXPECT_MOESTAT_ERROR(
      online::write_prometheus_file(directory / "missing" / "m.prom", sample_values()), "missing");
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace moestat
