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

ExpertLoads LoadWindow::total() const {
  MOESTAT_CHECK(!passes.empty(), "a load window needs at least one pass");
  ExpertLoads out = passes.front();
  for (std::size_t pass = 1; pass < passes.size(); ++pass) {
    for (std::size_t i = 0; i < out.values.size(); ++i) out.values[i] += passes[pass].values[i];
  }
  return out;
}

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

}  // namespace moestat::plan
