// Internal: what the reports say about a placement: per-GPU loads and balancedness overall,
// per layer and per pass.
#pragma once

#include <cstdint>
#include <moestat/report.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moestat::report::detail {

/// The name the identity placement is shown with.
inline constexpr std::string_view kIdentityName = "identity";

/// Passes of fewer tokens than this count as decode passes (a few new tokens per request),
/// the others as prefill passes: a recording keeps each pass's tokens, not its phase.
inline constexpr std::int64_t kPrefillMinTokens = 512;

/// The judged passes (JudgedPasses), all and split by size; decode and prefill are empty
/// when the recording keeps no token counts per pass.
struct PassSets {
  std::vector<std::int64_t> all, decode, prefill;
  double decode_load_share = 0.0;  ///< Of the token assignments of `all`.
};

/// Served balancedness (plan::served_balancedness: per pass, each counting by its load) on
/// the judged passes, all and by size; nullopt where there are no such passes.
struct Served {
  double all = 1.0;
  std::optional<double> decode, prefill;
};

struct Evaluation {
  std::string name;                        ///< "identity" or the placement's name.
  std::vector<double> gpu_loads;           ///< [L, G] over the judged passes.
  std::vector<double> layer_balancedness;  ///< [L] over the judged passes; -1 without load.
  double balancedness = 1.0;               ///< Mean over layers with load.
  std::vector<double> pass_balancedness;   ///< [W], every pass; -1 for passes without load.
  std::optional<Served> served;            ///< nullopt when the recording keeps no passes.
};

/// The passes placements are judged on: [options.held_out_from, W) when set, else all.
struct JudgedPasses {
  std::int64_t begin = 0, end = 0;
  bool held_out = false;
};
JudgedPasses judged_passes(const Recording& recording, const Options& options);
PassSets judged_pass_sets(const Recording& recording, const JudgedPasses& judged);

/// The identity placement first, then options.placements in order.
std::vector<Evaluation> evaluate(const Recording& recording, const Options& options);

}  // namespace moestat::report::detail
