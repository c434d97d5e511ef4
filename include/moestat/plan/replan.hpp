// Movement-aware replanning: from the placement in force, reach a balancedness target with
// as few expert-weight copies as possible.
//
//   plan::ReplanResult r = plan::replan_with_few_copies(current, {&loads, 1}, config,
//                                                       {.target_balancedness = 0.95, .planner =
//                                                       {}});
//   // r.placement to apply; r.copies_per_layer[l] slots of layer l receive new weights.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/loads.hpp>
#include <span>
#include <vector>

namespace moestat::plan {

struct ReplanOptions {
  /// Per-layer balancedness (mean / max GPU load, on the equal-weight sum of the
  /// scenarios) to reach. Layers already at or above it are left untouched.
  double target_balancedness = 0.95;
  /// The planner of the fallback full plan (see replan_with_few_copies).
  MoestatPlanOptions planner;
};

struct ReplanResult {
  Placement placement;
  /// [L] slots whose logical expert changed: each receives one expert's weights.
  std::vector<std::int64_t> copies_per_layer;
  std::int64_t total_copies = 0;
  /// [L] balancedness on the equal-weight sum of the scenarios, before and after.
  std::vector<double> balancedness_before, balancedness_after;
};

/// For each layer below the target: (1) greedy moves on the current map, each the one that
/// lowers the heaviest GPU most per copy: re-pointing one slot (of the heaviest GPU or of the
/// 4 lightest) from an expert with spare replicas to another expert (1 copy), or swapping
/// two slots between the heaviest GPU and another (2 copies); until the target is met or no
/// move helps. (2) The
/// moestat plan of the layer with its GPUs (and nodes) renumbered and its slots reordered to
/// keep as many experts in place as possible. The cheaper of the two that meets the target is
/// kept; when neither does, the one with the higher balancedness. Moves keep the deployment's
/// rules (a hierarchical layer's groups stay on their nodes; a layer of `previous` that breaks
/// that rule is only replaced by (2)).
///
/// `previous`: the placement in force, [L, P] for E experts, as `scenarios` and `config`.
/// moestat::Error on mismatched shapes or an invalid config.
ReplanResult replan_with_few_copies(const Placement& previous,
                                    std::span<const ExpertLoads> scenarios,
                                    const EplbConfig& config, const ReplanOptions& options = {});

}  // namespace moestat::plan
