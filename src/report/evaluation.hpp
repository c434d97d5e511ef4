// Internal: what the reports say about a placement: per-GPU loads and balancedness overall,
// per layer and per pass.
#pragma once

#include <cstdint>
#include <moestat/report.hpp>
#include <string>
#include <vector>

namespace moestat::report::detail {

struct Evaluation {
  std::string name;                        ///< "identity" or "planned".
  std::vector<double> gpu_loads;           ///< [L, G] of the recording's totals.
  std::vector<double> layer_balancedness;  ///< [L]; -1 for layers without load.
  double balancedness = 1.0;               ///< Mean over layers with load.
  std::vector<double> pass_balancedness;   ///< [W]; -1 for passes without load.
};

/// The identity placement first, then options.placement when set.
std::vector<Evaluation> evaluate(const Recording& recording, const Options& options);

}  // namespace moestat::report::detail
