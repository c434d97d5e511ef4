// Expert-parallel load balancing: which logical expert each physical slot holds.
//
//   plan::EplbConfig config{.num_replicas = 288, .num_groups = 8, .num_nodes = 4,
//                           .num_gpus = 32};
//   Placement reference = plan::plan_deepseek(loads, config);   // eplb.py, exactly
//   Placement better = plan::plan_moestat({&loads, 1}, config); // never worse in-sample
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/loads.hpp>
#include <span>

namespace moestat::plan {

/// The shape of an expert-parallel deployment, as DeepSeek's `rebalance_experts` takes it.
/// Physical slot p of a layer lives on GPU `p / (num_replicas / num_gpus)`, and GPU r on node
/// `r / (num_gpus / num_nodes)`. Logical experts form `num_groups` groups of consecutive ids.
/// The most physical slots per layer moestat plans for: 4096, 14 times DeepSeek-V3's 288
/// (and far beyond any expert-parallel deployment). The planners' time grows faster than
/// linearly with P (about 5 s at the bound for 256 experts on the development machine).
inline constexpr std::int64_t kMaxReplicas = 4096;

struct EplbConfig {
  std::int64_t num_replicas = 0;  ///< P, physical slots per layer; a multiple of num_gpus.
  std::int64_t num_groups = 1;    ///< Expert groups; must divide E.
  std::int64_t num_nodes = 1;     ///< Nodes; must divide num_gpus.
  std::int64_t num_gpus = 1;      ///< R, GPUs (expert-parallel ranks).

  /// Hierarchical when groups divide evenly over nodes (each group's experts then stay on
  /// one node), else global (one group, one node), as eplb.py decides.
  bool hierarchical() const noexcept { return num_groups % num_nodes == 0; }
  /// Slots per GPU.
  std::int64_t slots_per_gpu() const noexcept { return num_replicas / num_gpus; }

  /// moestat::Error naming the first broken rule for `num_experts` logical experts:
  /// positive sizes, E <= P <= kMaxReplicas, P % R == 0, R % N == 0, and in the hierarchical case
  /// E % G == 0 (and P >= E holds per node).
  void validate(std::int64_t num_experts) const;
};

/// DeepSeek's EPLB (`eplb.py`, rebalance_experts), reproduced exactly: loads are rounded to
/// float32 and every sum, division and comparison is done in float32 in the reference's
/// order. Per layer (hierarchical; the global policy is the same with one group and one
/// node): (1) groups are packed onto nodes, heaviest first, each into the lightest node that
/// still has room; (2) within a node, each redundant slot goes to the expert with the largest
/// load / replicas; (3) replicas (each load / replicas) are packed onto the node's GPUs the
/// same way as (1).
///
/// Tie-break (where values are equal): sorting "heaviest first" uses libstdc++'s
/// std::sort (introsort) on (value, index) pairs in index order with a value-only
/// comparison, as PyTorch's CPU sort does; "lightest pack" and "largest load / replicas"
/// take the lowest index among equals, as Python's `min` and torch's `max(dim)` do. An
/// all-zero (dense) row gets a valid map: every redundant slot goes to expert 0.
///
/// Returns a placement of all `loads.num_layers` rows. moestat::Error on invalid loads or
/// config.
Placement plan_deepseek(const ExpertLoads& loads, const EplbConfig& config);

/// How the moestat planner weighs several scenarios of future traffic.
enum class ScenarioObjective : std::uint8_t {
  kExpected,   ///< Minimise the mean over scenarios of max GPU load / mean GPU load.
  kWorstCase,  ///< Minimise the largest such ratio over scenarios.
};

struct MoestatPlanOptions {
  ScenarioObjective objective = ScenarioObjective::kExpected;
  /// Improving swaps per packing search at most (one search per node and layer, one more
  /// for the groups of a hierarchical layer): a bound on time that keeps plans
  /// deterministic. 0 picks 128 for one scenario and 64 for several (a swap is checked
  /// against every scenario, so it costs more).
  std::int64_t max_moves_per_layer = 0;
};

/// moestat's planner: same output form and constraints as plan_deepseek (equal slots per
/// GPU; hierarchical: every replica of a group's experts on the group's node).
///
/// `scenarios`: one or more [L, E] load matrices of one shape, each a possible future
/// traffic (several recordings, or the passes of one window); each is normalised per layer,
/// so scenarios weigh equally whatever their token counts. With one scenario the plan's
/// balancedness on it is at least plan_deepseek's on every layer (the reference's plan is a
/// starting point the search only improves on). With several, the plan minimises
/// `options.objective` over them. See docs/placement.md.
Placement plan_moestat(std::span<const ExpertLoads> scenarios, const EplbConfig& config,
                       const MoestatPlanOptions& options = {});

}  // namespace moestat::plan
