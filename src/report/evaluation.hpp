// Internal: what the reports say about a placement: per-GPU loads and balancedness overall,
// per layer and per pass.
#pragma once

#include <cstdint>
#include <moestat/report.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::report::detail {

/// The name the identity placement is shown with.
inline constexpr std::string_view kIdentityName = "identity";

struct Evaluation {
  std::string name;                        ///< "identity" or the placement's name.
  std::vector<double> gpu_loads;           ///< [L, G] over the judged passes.
  std::vector<double> layer_balancedness;  ///< [L] over the judged passes; -1 without load.
  double balancedness = 1.0;               ///< Mean over layers with load.
  std::vector<double> pass_balancedness;   ///< [W], every pass; -1 for passes without load.
};

/// The passes placements are judged on: [options.held_out_from, W) when set, else all.
struct JudgedPasses {
  std::int64_t begin = 0, end = 0;
  bool held_out = false;
};
JudgedPasses judged_passes(const Recording& recording, const Options& options);

/// The identity placement first, then options.placements in order.
std::vector<Evaluation> evaluate(const Recording& recording, const Options& options);

}  // namespace moestat::report::detail
