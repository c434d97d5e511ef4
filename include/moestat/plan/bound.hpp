// How well any placement of a deployment's shape could balance a load: an upper bound on
// balancedness, which tells what a planner leaves undone from what the shape forbids.
//
//   plan::BalanceBound bound = plan::balancedness_bound(loads, config);
//   // For every placement p that keeps config's rules:
//   //   evaluate_placement(loads, p, config.num_gpus).balancedness <= bound.balancedness
#pragma once

#include <cstdint>
#include <moestat/placement.hpp>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/loads.hpp>
#include <vector>

namespace moestat::plan {

/// The most balancedness any placement of the deployment could reach on one load.
struct BalanceBound {
  /// Mean over loaded layers of `layer_balancedness` (as BalanceReport::balancedness).
  double balancedness = 1.0;
  /// [L] per layer; 1 for layers without load.
  std::vector<double> layer_balancedness;
};

/// An upper bound on the balancedness (mean / max GPU load) of every placement of `config`'s
/// shape on `loads` ([L, E]): equal slots per GPU and, hierarchical, `num_groups /
/// num_nodes` whole groups per node (all replicas of a group's experts on that node), as
/// plan_deepseek and plan_moestat place them. The placement may be chosen knowing `loads`,
/// so the bound also caps an oracle that planned on the traffic it serves.
///
/// Per layer, the heaviest GPU of a node carries at least (a) the node's load over its GPUs
/// and (b) the heaviest load per replica, where the node's slots go to its experts so as to
/// make that as small as possible (each extra slot to the largest load / replicas, which is
/// optimal for this maximum). The bound takes the assignment of groups to nodes that makes
/// the largest of (a) and (b) over nodes smallest, found by exhaustive search with pruning
/// (105 assignments for 8 groups on 4 nodes); the global case is one node of all experts.
/// It ignores how replicas pack onto GPUs, so it can sit above what any packing reaches.
///
/// moestat::Error on invalid loads or config, on more than 64 groups, or when the groups
/// have more than 10^7 assignments to nodes (say 24 groups on 12 nodes), too many to search.
BalanceBound balancedness_bound(const ExpertLoads& loads, const EplbConfig& config);

/// The same bound with the groups' nodes fixed to where `groups_from` ([L, P] of E experts,
/// every group's replicas on one node, as plan_deepseek and plan_moestat place them) puts
/// them: what any packing of replicas onto GPUs could reach once the nodes are chosen. With
/// both bounds, the distance from a plan to the best placement splits into what its choice
/// of nodes costs and what its packing within nodes costs. moestat::Error on invalid loads
/// or config, on shapes that differ, or when a layer of `groups_from` spreads a group over
/// nodes (or on more than 64 groups).
BalanceBound balancedness_bound(const ExpertLoads& loads, const EplbConfig& config,
                                const Placement& groups_from);

}  // namespace moestat::plan
