// The advisor's estimates: placements scored per pass, a paired bootstrap over passes.
#include "served_balance.hpp"

#include <algorithm>
#include <cmath>
#include <moestat/plan/loads.hpp>
#include <moestat/plan/metrics.hpp>
#include <moestat/rng.hpp>
#include <numeric>

namespace moestat::plan::detail {

PassLoads pass_loads(const CountWindow& window, std::span<const std::int64_t> passes,
                     const Placement& placement, std::int64_t num_gpus) {
  PassLoads out;
  out.mean_load.reserve(passes.size());
  out.max_load.reserve(passes.size());
  for (const std::int64_t pass : passes) {
    const std::vector<double> gpu =
        gpu_loads(loads_of(window, pass, pass + 1), placement, num_gpus);
    double mean_sum = 0.0, max_sum = 0.0;
    for (std::int64_t layer = 0; layer < window.num_layers; ++layer) {
      const auto row = std::span(gpu).subspan(std::size_t(layer * num_gpus), std::size_t(num_gpus));
      mean_sum += std::accumulate(row.begin(), row.end(), 0.0) / double(num_gpus);
      max_sum += *std::max_element(row.begin(), row.end());
    }
    out.mean_load.push_back(mean_sum);
    out.max_load.push_back(max_sum);
  }
  return out;
}

double served_balancedness(const PassLoads& loads, std::span<const std::int32_t> multiplicity) {
  double mean_sum = 0.0, max_sum = 0.0;
  for (std::size_t i = 0; i < loads.mean_load.size(); ++i) {
    const double times = multiplicity.empty() ? 1.0 : double(multiplicity[i]);
    mean_sum += times * loads.mean_load[i];
    max_sum += times * loads.max_load[i];
  }
  return max_sum > 0.0 ? mean_sum / max_sum : 1.0;
}

namespace {

/// The `quantile` (in [0, 1]) of `values` (sorted here), linearly interpolated between ranks.
double quantile_of(std::vector<double>& values, double quantile) {
  std::sort(values.begin(), values.end());
  const double rank = quantile * double(values.size() - 1);
  const auto below = std::size_t(std::floor(rank));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (rank - double(below)) * (values[above] - values[below]);
}

/// `value` with the central `confidence` share of `draws` around it (zero width without draws).
Estimate estimate_of(double value, std::vector<double>& draws, double confidence) {
  if (draws.empty()) return {value, value, value};
  const double tail = (1.0 - confidence) / 2.0;
  return {value, quantile_of(draws, tail), quantile_of(draws, 1.0 - tail)};
}

double gain_of(double seconds_per_unit, double now, double after) {
  return seconds_per_unit * (1.0 / now - 1.0 / after);
}

}  // namespace

PairedEstimates paired_bootstrap(const PassLoads& now, std::span<const PassLoads> after,
                                 double seconds_per_unit, std::int64_t num_bootstrap,
                                 double confidence, std::uint64_t seed) {
  const std::size_t num_passes = now.mean_load.size();
  const std::size_t num_after = after.size();
  std::vector<double> now_draws;
  std::vector<std::vector<double>> after_draws(num_after), gain_draws(num_after);
  std::vector<std::int32_t> multiplicity(num_passes);
  Rng rng(seed);
  for (std::int64_t draw = 0; draw < num_bootstrap; ++draw) {
    std::fill(multiplicity.begin(), multiplicity.end(), 0);
    for (std::size_t i = 0; i < num_passes; ++i) ++multiplicity[rng.below(num_passes)];
    const double b_now = served_balancedness(now, multiplicity);
    now_draws.push_back(b_now);
    for (std::size_t k = 0; k < num_after; ++k) {
      const double b_after = served_balancedness(after[k], multiplicity);
      after_draws[k].push_back(b_after);
      gain_draws[k].push_back(gain_of(seconds_per_unit, b_now, b_after));
    }
  }
  const double b_now = served_balancedness(now);
  PairedEstimates out{.now = estimate_of(b_now, now_draws, confidence), .after = {}, .gain = {}};
  for (std::size_t k = 0; k < num_after; ++k) {
    const double b_after = served_balancedness(after[k]);
    out.after.push_back(estimate_of(b_after, after_draws[k], confidence));
    out.gain.push_back(
        estimate_of(gain_of(seconds_per_unit, b_now, b_after), gain_draws[k], confidence));
  }
  return out;
}

}  // namespace moestat::plan::detail
