#include <cmath>
#include <moestat/checked_math.hpp>
#include <moestat/counts.hpp>
#include <moestat/error.hpp>
#include <moestat/record_mode.hpp>

namespace moestat {
namespace {

/// "[pass][layer][expert]" (or "[layer][expert]" without a window axis) of a flat index.
std::string position(const CountWindow& window, std::size_t flat) {
  const auto index = std::int64_t(flat);
  const std::int64_t expert = index % window.num_experts;
  const std::int64_t layer = index / window.num_experts % window.num_layers;
  if (!window.has_window_axis) return fmt::format("[{}][{}]", layer, expert);
  return fmt::format("[{}][{}][{}]", index / window.pass_size(), layer, expert);
}

/// Passes [first, end) of [W, L, E] `values`, `width` = L x E entries each.
template <typename T>
std::vector<T> slice(const std::vector<T>& values, std::int64_t width, std::int64_t first,
                     std::int64_t end) {
  if (values.empty()) return {};
  return {values.begin() + first * width, values.begin() + end * width};
}

}  // namespace

std::vector<std::int64_t> CountWindow::totals() const {
  require_whole_counts();
  std::vector<std::int64_t> out(std::size_t(std::max<std::int64_t>(pass_size(), 0)), 0);
  // The grand total is checked too: counts are non-negative, so when it fits, every total
  // and every sum of totals a caller makes (a layer's, the window's) fits as well.
  std::int64_t all = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i % out.size()] += counts[i];
    all = checked_add(all, counts[i], "the sum of logical_count");
  }
  return out;
}

CountWindow CountWindow::passes(std::int64_t first, std::int64_t end) const {
  MOESTAT_CHECK(0 <= first && first <= end && end <= window_size,
                "passes [{}, {}) are not inside a window of {}", first, end, window_size);
  CountWindow out;
  out.window_size = end - first;
  out.num_layers = num_layers;
  out.num_experts = num_experts;
  out.has_window_axis = has_window_axis;
  out.counts = slice(counts, pass_size(), first, end);
  out.fractional_counts = slice(fractional_counts, pass_size(), first, end);
  out.pass_rows = pass_rows.slice(first, end);
  return out;
}

void CountWindow::validate(std::string_view name) const {
  MOESTAT_CHECK(window_size > 0 && num_layers > 0 && num_experts > 0,
                "{} must have at least one pass, layer and expert, got W={} L={} E={}", name,
                window_size, num_layers, num_experts);
  MOESTAT_CHECK(has_window_axis || window_size == 1,
                "{} without a window axis must have W = 1, got W={}", name, window_size);
  const std::int64_t expected = window_size * pass_size();
  const std::size_t entries = is_fractional() ? fractional_counts.size() : counts.size();
  MOESTAT_CHECK(std::int64_t(entries) == expected && (counts.empty() || fractional_counts.empty()),
                "{} has {} entries, expected W={} x L={} x E={} = {}", name, entries, window_size,
                num_layers, num_experts, expected);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    MOESTAT_CHECK(counts[i] >= 0, "{}{} is {}, expected a non-negative count", name,
                  position(*this, i), counts[i]);
  }
  for (std::size_t i = 0; i < fractional_counts.size(); ++i) {
    MOESTAT_CHECK(std::isfinite(fractional_counts[i]) && fractional_counts[i] >= 0.0,
                  "{}{} is {}, expected a finite value >= 0", name, position(*this, i),
                  fractional_counts[i]);
  }
  const auto per_pass = [&](std::size_t size, std::string_view field) {
    MOESTAT_CHECK(size == 0 || std::int64_t(size) == window_size,
                  "{} has {} entries, expected one per pass ({})", field, size, window_size);
  };
  per_pass(pass_rows.pass_ids.size(), "pass_ids");
  per_pass(pass_rows.placement_versions.size(), "placement_versions");
  per_pass(pass_rows.pass_num_tokens.size(), "pass_num_tokens");
}

void CountWindow::require_whole_counts(std::string_view name) const {
  for (std::size_t i = 0; i < fractional_counts.size(); ++i) {
    MOESTAT_CHECK(std::trunc(fractional_counts[i]) == fractional_counts[i],
                  "{}{} is {}: fractional loads, where whole token counts are needed", name,
                  position(*this, i), fractional_counts[i]);
  }
  // A fractional window whose entries are all whole does not arise from the readers (they
  // keep whole entries as counts); refuse it rather than guess.
  MOESTAT_CHECK(!is_fractional(), "{} holds fractional loads, where whole token counts are needed",
                name);
}

CountWindow count_window_of(const Snapshot& snapshot) {
  MOESTAT_CHECK(snapshot.window_size() > 0,
                "the snapshot holds no pass window (mode {}, {} passes kept): no logical_count "
                "to write",
                record_mode_name(snapshot.mode), snapshot.window_size());
  return {.window_size = snapshot.window_size(),
          .num_layers = snapshot.num_layers,
          .num_experts = snapshot.num_logical_experts,
          .has_window_axis = true,
          .counts = snapshot.logical_counts,
          .fractional_counts = {},
          .pass_rows = snapshot.pass_rows()};
}

}  // namespace moestat
