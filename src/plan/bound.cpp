// The balancedness bound: per layer, the lightest the heaviest GPU could be, from each
// node's load and its heaviest replica, over the assignments of groups to nodes (or the one
// a placement chose).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <moestat/error.hpp>
#include <moestat/plan/bound.hpp>
#include <numeric>
#include <queue>
#include <unordered_map>

namespace moestat::plan {
namespace {

constexpr double kMaxAssignments = 1e7;

/// Assignments of `groups` groups onto `nodes` interchangeable nodes of equal size:
/// groups! / ((groups / nodes)!^nodes nodes!).
double assignment_count(std::int64_t groups, std::int64_t nodes) {
  const auto per_node = double(groups / nodes);
  return std::exp(std::lgamma(double(groups) + 1) - double(nodes) * std::lgamma(per_node + 1) -
                  std::lgamma(double(nodes) + 1));
}

/// The smallest possible heaviest load per replica when `slots` replicas go to `loads`
/// (each at least one): each extra slot to the largest load / replicas.
double least_heaviest_replica(std::span<const double> loads, std::int64_t slots) {
  using Entry = std::pair<double, std::size_t>;  // (load / replicas, index)
  std::priority_queue<Entry> heap;
  std::vector<std::int64_t> replicas(loads.size(), 1);
  for (std::size_t i = 0; i < loads.size(); ++i) heap.emplace(loads[i], i);
  for (auto extra = std::int64_t(loads.size()); extra < slots; ++extra) {
    const std::size_t i = heap.top().second;
    heap.pop();
    heap.emplace(loads[i] / double(++replicas[i]), i);
  }
  return heap.top().first;
}

/// One layer: node floors of sets of groups (bit g of a mask = group g), and the search
/// over assignments of groups to nodes.
class LayerBound {
 public:
  LayerBound(std::span<const double> loads, const EplbConfig& config, bool hierarchical)
      : loads_(loads),
        num_groups_(hierarchical ? config.num_groups : 1),
        num_nodes_(hierarchical ? config.num_nodes : 1),
        group_size_(std::int64_t(loads.size()) / num_groups_),
        slots_per_node_(config.num_replicas / num_nodes_),
        gpus_per_node_(config.num_gpus / num_nodes_) {}

  /// The least possible heaviest GPU load over all assignments of groups to nodes.
  double least_heaviest_gpu() {
    best_ = std::numeric_limits<double>::infinity();
    search(0, 0.0);
    return best_;
  }

  /// The least possible heaviest GPU load with node n holding the groups of `nodes[n]`.
  double least_heaviest_gpu(std::span<const std::uint64_t> nodes) {
    double heaviest = 0.0;
    for (const std::uint64_t node : nodes) heaviest = std::max(heaviest, node_floor(node));
    return heaviest;
  }

 private:
  /// The heaviest GPU of a node holding the groups in `mask` carries at least this.
  double node_floor(std::uint64_t mask) {
    const auto [it, inserted] = floor_of_.try_emplace(mask, 0.0);
    if (!inserted) return it->second;
    std::vector<double> experts;
    for (std::int64_t g = 0; g < num_groups_; ++g) {
      if ((mask >> g & 1U) == 0) continue;
      const auto first = loads_.begin() + g * group_size_;
      experts.insert(experts.end(), first, first + group_size_);
    }
    const double node_load = std::accumulate(experts.begin(), experts.end(), 0.0);
    it->second = std::max(node_load / double(gpus_per_node_),
                          least_heaviest_replica(experts, slots_per_node_));
    return it->second;
  }

  /// Fills the next node with the lowest unassigned group and each choice of the others;
  /// a branch stops once its heaviest node is no better than the best complete assignment.
  void search(std::uint64_t assigned, double heaviest) {
    if (heaviest >= best_) return;
    const auto first = std::int64_t(std::countr_one(assigned));
    if (first == num_groups_) {
      best_ = heaviest;
      return;
    }
    choose(assigned, std::uint64_t{1} << first, first + 1, num_groups_ / num_nodes_ - 1, heaviest);
  }

  void choose(std::uint64_t assigned, std::uint64_t node, std::int64_t from, std::int64_t left,
              double heaviest) {
    if (left == 0) {
      search(assigned | node, std::max(heaviest, node_floor(node)));
      return;
    }
    for (std::int64_t g = from; g + left <= num_groups_; ++g) {
      if ((assigned >> g & 1U) != 0) continue;
      choose(assigned, node | std::uint64_t{1} << g, g + 1, left - 1, heaviest);
    }
  }

  std::span<const double> loads_;
  std::int64_t num_groups_, num_nodes_, group_size_, slots_per_node_, gpus_per_node_;
  std::unordered_map<std::uint64_t, double> floor_of_;
  double best_ = 0.0;
};

/// Per node, the mask of the groups one layer of `placement` puts there.
std::vector<std::uint64_t> nodes_of_layer(const Placement& placement, std::int64_t layer,
                                          const EplbConfig& config) {
  const std::int64_t group_size = placement.num_logical_experts() / config.num_groups;
  const std::int64_t slots_per_node = config.num_replicas / config.num_nodes;
  std::vector<std::int64_t> node_of_group(std::size_t(config.num_groups), -1);
  std::vector<std::uint64_t> nodes(std::size_t(config.num_nodes), 0);
  for (std::int64_t p = 0; p < config.num_replicas; ++p) {
    const std::int64_t group = placement.logical_of(layer, p) / group_size;
    const std::int64_t node = p / slots_per_node;
    std::int64_t& home = node_of_group[std::size_t(group)];
    MOESTAT_CHECK(home < 0 || home == node,
                  "bound: layer {} of the placement puts replicas of group {} on nodes {} and {}",
                  layer, group, home, node);
    home = node;
    nodes[std::size_t(node)] |= std::uint64_t{1} << group;
  }
  return nodes;
}

/// Groups are bits of a 64-bit mask; the search visits every assignment it cannot prune.
void check_groups(const EplbConfig& config, bool searched) {
  MOESTAT_CHECK(config.num_groups <= 64, "bound: {} groups; the bound handles at most 64",
                config.num_groups);
  MOESTAT_CHECK(
      !searched || assignment_count(config.num_groups, config.num_nodes) <= kMaxAssignments,
      "bound: {} groups on {} nodes have about {:.3g} assignments, more than the {:.0g} "
      "the bound searches",
      config.num_groups, config.num_nodes, assignment_count(config.num_groups, config.num_nodes),
      kMaxAssignments);
}

BalanceBound bound_layers(const ExpertLoads& loads, const EplbConfig& config,
                          const Placement* groups_from) {
  loads.validate();
  config.validate(loads.num_experts);
  const bool hierarchical = config.hierarchical() && config.num_nodes > 1;
  if (hierarchical) check_groups(config, groups_from == nullptr);
  BalanceBound bound;
  bound.layer_balancedness.assign(std::size_t(loads.num_layers), 1.0);
  double sum = 0.0;
  std::int64_t loaded = 0;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    const double total = loads.layer_total(l);
    if (total <= 0.0) continue;
    LayerBound layer(loads.row(l), config, hierarchical);
    const double heaviest = hierarchical && groups_from != nullptr
                                ? layer.least_heaviest_gpu(nodes_of_layer(*groups_from, l, config))
                                : layer.least_heaviest_gpu();
    const double b = total / double(config.num_gpus) / heaviest;
    bound.layer_balancedness[std::size_t(l)] = b;
    sum += b;
    ++loaded;
  }
  if (loaded > 0) bound.balancedness = sum / double(loaded);
  return bound;
}

}  // namespace

BalanceBound balancedness_bound(const ExpertLoads& loads, const EplbConfig& config) {
  return bound_layers(loads, config, nullptr);
}

BalanceBound balancedness_bound(const ExpertLoads& loads, const EplbConfig& config,
                                const Placement& groups_from) {
  MOESTAT_CHECK(groups_from.num_layers() == loads.num_layers &&
                    groups_from.num_logical_experts() == loads.num_experts &&
                    groups_from.num_physical_experts() == config.num_replicas,
                "bound: the placement is [{} layers, {} slots] of {} experts; the loads and "
                "config need [{}, {}] of {}",
                groups_from.num_layers(), groups_from.num_physical_experts(),
                groups_from.num_logical_experts(), loads.num_layers, config.num_replicas,
                loads.num_experts);
  return bound_layers(loads, config, &groups_from);
}

}  // namespace moestat::plan
