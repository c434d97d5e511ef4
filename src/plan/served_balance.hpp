// The advisor's estimates: a placement's loads per pass (the sum over layers of the mean and
// of the max GPU load, so that any resample of the passes is scored by two sums), and the
// paired bootstrap over passes that turns them into intervals.
#pragma once

#include <cstdint>
#include <moestat/counts.hpp>
#include <moestat/placement.hpp>
#include <moestat/plan/advisor.hpp>
#include <span>
#include <vector>

namespace moestat::plan::detail {

/// One placement on passes p_0..p_{n-1}: `mean_load[i]` and `max_load[i]` are sums over the
/// layers of pass p_i of the mean and of the max GPU load. A pass's MoE time is proportional
/// to its max_load, and its work to its mean_load.
struct PassLoads {
  std::vector<double> mean_load, max_load;
};

/// `passes`: indices into `window` (each with load). `placement` matches the window's shape.
PassLoads pass_loads(const CountWindow& window, std::span<const std::int64_t> passes,
                     const Placement& placement, std::int64_t num_gpus);

/// Served balancedness of `loads` with pass i counted `multiplicity[i]` times (every pass once
/// when empty): sum of mean loads / sum of max loads.
double served_balancedness(const PassLoads& loads, std::span<const std::int32_t> multiplicity = {});

/// Served balancedness now and after each candidate, and each candidate's gain in seconds
/// (`seconds_per_unit` x (1 / now - 1 / after)), on the passes as given (the values) and on
/// `num_bootstrap` resamples of them drawn from `seed` (the intervals: the central
/// `confidence` share of the resampled values). Paired: one resample scores every placement.
struct PairedEstimates {
  Estimate now;
  std::vector<Estimate> after, gain;
};
PairedEstimates paired_bootstrap(const PassLoads& now, std::span<const PassLoads> after,
                                 double seconds_per_unit, std::int64_t num_bootstrap,
                                 double confidence, std::uint64_t seed);

}  // namespace moestat::plan::detail
