#include <algorithm>
#include <cmath>
#include <moestat/error.hpp>
#include <moestat/plan/loads.hpp>
#include <numeric>

namespace moestat::plan {

double ExpertLoads::layer_total(std::int64_t layer) const {
  const std::span<const double> r = row(layer);
  return std::accumulate(r.begin(), r.end(), 0.0);
}

void ExpertLoads::validate() const {
  MOESTAT_CHECK(num_layers > 0 && num_experts > 0,
                "loads must have at least one layer and one expert, got L={} E={}", num_layers,
                num_experts);
  MOESTAT_CHECK(std::int64_t(values.size()) == num_layers * num_experts,
                "loads have {} entries, expected L={} x E={}", values.size(), num_layers,
                num_experts);
  for (std::size_t i = 0; i < values.size(); ++i) {
    MOESTAT_CHECK(std::isfinite(values[i]) && values[i] >= 0.0,
                  "load of layer {} expert {} is {}, expected a finite value >= 0",
                  std::int64_t(i) / num_experts, std::int64_t(i) % num_experts, values[i]);
  }
}

ExpertLoads loads_of(const CountWindow& window, std::int64_t first, std::int64_t end) {
  MOESTAT_CHECK(0 <= first && first < end && end <= window.window_size,
                "passes [{}, {}) are not a non-empty part of a window of {}", first, end,
                window.window_size);
  const auto size = std::size_t(window.pass_size());
  ExpertLoads out{window.num_layers, window.num_experts, std::vector<double>(size, 0.0)};
  const auto add = [&](const auto& values) {
    for (auto pass = std::size_t(first); pass < std::size_t(end); ++pass) {
      for (std::size_t i = 0; i < size; ++i) out.values[i] += double(values[pass * size + i]);
    }
  };
  if (window.is_fractional()) {
    add(window.fractional_counts);
  } else {
    add(window.counts);
  }
  return out;
}

ExpertLoads loads_of(const CountWindow& window) { return loads_of(window, 0, window.window_size); }

ExpertLoads normalised_per_layer(const ExpertLoads& loads) {
  ExpertLoads out = loads;
  for (std::int64_t layer = 0; layer < loads.num_layers; ++layer) {
    const double total = loads.layer_total(layer);
    if (total <= 0.0) continue;
    double* row = out.values.data() + layer * loads.num_experts;
    for (std::int64_t expert = 0; expert < loads.num_experts; ++expert) row[expert] /= total;
  }
  return out;
}

ExpertLoads equal_weight_sum(std::span<const ExpertLoads> scenarios) {
  MOESTAT_CHECK(!scenarios.empty(), "an equal-weight sum needs at least one load matrix");
  ExpertLoads out;
  out.num_layers = scenarios.front().num_layers;
  out.num_experts = scenarios.front().num_experts;
  out.values.assign(scenarios.front().values.size(), 0.0);
  for (const ExpertLoads& scenario : scenarios) {
    MOESTAT_CHECK(scenario.num_layers == out.num_layers && scenario.num_experts == out.num_experts,
                  "load matrices differ in shape: [{}, {}] and [{}, {}]", out.num_layers,
                  out.num_experts, scenario.num_layers, scenario.num_experts);
    const ExpertLoads shares = normalised_per_layer(scenario);
    for (std::size_t i = 0; i < out.values.size(); ++i) out.values[i] += shares.values[i];
  }
  return out;
}

std::vector<std::int64_t> loaded_passes(const CountWindow& window) {
  std::vector<std::int64_t> out;
  for (std::int64_t pass = 0; pass < window.window_size; ++pass) {
    const ExpertLoads loads = loads_of(window, pass, pass + 1);
    if (std::any_of(loads.values.begin(), loads.values.end(), [](double v) { return v > 0.0; })) {
      out.push_back(pass);
    }
  }
  return out;
}

std::vector<ExpertLoads> window_scenarios(const CountWindow& window, std::int64_t max_groups) {
  std::vector<ExpertLoads> loaded;
  std::vector<double> mass;
  for (std::int64_t pass = 0; pass < window.window_size; ++pass) {
    ExpertLoads loads = loads_of(window, pass, pass + 1);
    const double total = std::accumulate(loads.values.begin(), loads.values.end(), 0.0);
    if (total > 0.0) {
      loaded.push_back(std::move(loads));
      mass.push_back(total);
    }
  }
  if (loaded.size() <= 1) return {loads_of(window)};
  // Groups of consecutive passes holding about equal shares of the window's assignments:
  // a window mixes a few large prefill passes with many small decode passes, and a group of
  // small passes alone is mostly sampling noise, which a planner would fit.
  const auto groups = static_cast<std::int64_t>(std::min(loaded.size(), std::size_t(max_groups)));
  const double window_mass = std::accumulate(mass.begin(), mass.end(), 0.0);
  std::vector<ExpertLoads> out;
  std::int64_t current_group = -1;
  double before = 0.0;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    // The group of the pass's middle assignment.
    const auto group =
        std::min(groups - 1,
                 static_cast<std::int64_t>((before + mass[i] / 2) / window_mass * double(groups)));
    before += mass[i];
    if (group != current_group) {
      out.push_back(std::move(loaded[i]));
      current_group = group;
      continue;
    }
    std::vector<double>& sum = out.back().values;
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += loaded[i].values[k];
  }
  return out;
}

}  // namespace moestat::plan
