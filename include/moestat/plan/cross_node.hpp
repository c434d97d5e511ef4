// The optional relaxation of the hierarchical rule: a bounded number of replicas per layer
// may sit on a node other than their group's, and the traffic that costs is reported.
//
//   plan::CrossNodeResult r = plan::relax_across_nodes(plan, {&loads, 1}, config, 4);
//   // r.placement: at most 4 replicas per layer off their group's node;
//   // r.cross_node_share: the share of assignments those replicas serve.
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/loads.hpp>
#include <span>
#include <vector>

namespace moestat::plan {

struct CrossNodeResult {
  Placement placement;
  /// [L] replicas off their group's home node.
  std::vector<std::int64_t> cross_node_replicas;
  /// Share of all assignments (on the equal-weight sum of the scenarios) served by those
  /// replicas: tokens whose expert is reached on another node than the group's.
  double cross_node_share = 0.0;
};

/// The home node of a group is the node holding most of its experts' replicas (the lower
/// node among equals). Share of the assignments of `loads` served by replicas elsewhere;
/// an expert's load is split evenly over its replicas. 0 for a global `config`.
double cross_node_share(const ExpertLoads& loads, const Placement& placement,
                        const EplbConfig& config);

/// From a hierarchical `plan` (every group on one node), greedy moves that each re-point
/// one slot (of the heaviest GPU or of the 4 lightest) from an expert with spare replicas to
/// one of the 8 experts with the heaviest load per replica, on any node (both chosen on the
/// equal-weight sum of `scenarios`), while that lowers the sum over scenarios (each
/// normalised per layer) of their heaviest GPU, plan_moestat's expected objective, and
/// leaves at most `max_replicas_per_layer` replicas per layer off their group's home node.
/// A global `config`, or a bound of 0, returns `plan` unchanged. moestat::Error on
/// mismatched shapes.
CrossNodeResult relax_across_nodes(const Placement& plan, std::span<const ExpertLoads> scenarios,
                                   const EplbConfig& config, std::int64_t max_replicas_per_layer);

}  // namespace moestat::plan
