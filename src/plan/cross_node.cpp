// Bounded cross-node replicas for hierarchical plans, and the traffic they cost.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/plan/cross_node.hpp>
#include <numeric>

#include "layer_map.hpp"

namespace moestat::plan {
namespace {

/// Home node of each group in one layer's row: the node with most of its replicas.
std::vector<std::int64_t> home_nodes(std::span<const std::int32_t> row,
                                     const detail::Layout& layout) {
  const std::int64_t groups = layout.num_experts / layout.group_size;
  std::vector<std::int64_t> count(std::size_t(groups * layout.num_nodes), 0);
  for (std::int64_t p = 0; p < layout.num_slots; ++p) {
    ++count[std::size_t(row[std::size_t(p)] / layout.group_size * layout.num_nodes +
                        layout.node_of_slot(p))];
  }
  std::vector<std::int64_t> home(static_cast<std::size_t>(groups));
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto first = count.begin() + g * layout.num_nodes;
    home[std::size_t(g)] = std::max_element(first, first + layout.num_nodes) - first;
  }
  return home;
}

bool off_home(std::int32_t expert, std::int64_t slot, const std::vector<std::int64_t>& home,
              const detail::Layout& layout) {
  return home[std::size_t(expert / layout.group_size)] != layout.node_of_slot(slot);
}

/// One layer's map under each scenario (its loads as shares), each on its own copy of the
/// row, kept in step: a move is judged by the sum over scenarios of their heaviest GPU, as
/// plan_moestat's expected objective judges a plan.
class ScenarioMaps {
 public:
  ScenarioMaps(std::span<const std::int32_t> row, std::span<const ExpertLoads> scenarios,
               std::int64_t layer, const detail::Layout& layout) {
    for (const ExpertLoads& scenario : scenarios) {
      const double total = scenario.layer_total(layer);
      if (total <= 0.0) continue;
      rows_.emplace_back(row.begin(), row.end());
      shares_.emplace_back();
      for (const double v : scenario.row(layer)) shares_.back().push_back(v / total);
    }
    maps_.reserve(rows_.size());
    for (std::size_t i = 0; i < rows_.size(); ++i) maps_.emplace_back(rows_[i], shares_[i], layout);
  }

  double objective() const {
    double sum = 0.0;
    for (const detail::LayerMap& map : maps_) sum += map.heaviest_load();
    return sum;
  }
  double objective_after_repoint(std::int64_t slot, std::int32_t expert) {
    double sum = 0.0;
    for (detail::LayerMap& map : maps_) sum += map.max_after_repoint(slot, expert);
    return sum;
  }
  void repoint(std::int64_t slot, std::int32_t expert) {
    for (detail::LayerMap& map : maps_) map.repoint(slot, expert);
  }

 private:
  std::vector<std::vector<std::int32_t>> rows_;
  std::vector<std::vector<double>> shares_;
  std::vector<detail::LayerMap> maps_;
};

void check_shapes(const ExpertLoads& loads, const Placement& placement, const EplbConfig& config) {
  config.validate(loads.num_experts);
  MOESTAT_CHECK(placement.num_layers() == loads.num_layers &&
                    placement.num_logical_experts() == loads.num_experts &&
                    placement.num_physical_experts() == config.num_replicas,
                "cross-node: the placement is [{} layers, {} slots] of {} experts; the loads "
                "and config need [{}, {}] of {}",
                placement.num_layers(), placement.num_physical_experts(),
                placement.num_logical_experts(), loads.num_layers, config.num_replicas,
                loads.num_experts);
}

}  // namespace

double cross_node_share(const ExpertLoads& loads, const Placement& placement,
                        const EplbConfig& config) {
  loads.validate();
  check_shapes(loads, placement, config);
  const detail::Layout layout = detail::layout_of(config, loads.num_experts);
  if (!layout.hierarchical || layout.num_nodes == 1) return 0.0;
  const auto P = std::size_t(config.num_replicas);
  double crossing = 0.0, total = 0.0;
  for (std::int64_t l = 0; l < loads.num_layers; ++l) {
    const auto row = placement.physical_to_logical().subspan(std::size_t(l) * P, P);
    const auto counts = placement.replica_counts().subspan(std::size_t(l * loads.num_experts),
                                                           std::size_t(loads.num_experts));
    const std::vector<std::int64_t> home = home_nodes(row, layout);
    for (std::int64_t p = 0; p < layout.num_slots; ++p) {
      const std::int32_t e = row[std::size_t(p)];
      if (off_home(e, p, home, layout)) crossing += loads.at(l, e) / counts[std::size_t(e)];
    }
    total += loads.layer_total(l);
  }
  return total > 0.0 ? crossing / total : 0.0;
}

CrossNodeResult relax_across_nodes(const Placement& plan, std::span<const ExpertLoads> scenarios,
                                   const EplbConfig& config, std::int64_t max_replicas_per_layer) {
  MOESTAT_CHECK(!scenarios.empty(), "cross-node: need at least one load matrix");
  MOESTAT_CHECK(max_replicas_per_layer >= 0,
                "cross-node: the bound on replicas per layer must be >= 0, got {}",
                max_replicas_per_layer);
  const ExpertLoads combined = equal_weight_sum(scenarios);
  check_shapes(combined, plan, config);
  const detail::Layout layout = detail::layout_of(config, combined.num_experts);
  const auto P = std::size_t(config.num_replicas);
  std::vector<std::int32_t> map(plan.physical_to_logical().begin(),
                                plan.physical_to_logical().end());
  CrossNodeResult result{plan, std::vector<std::int64_t>(std::size_t(combined.num_layers), 0), 0.0};
  if (!layout.hierarchical || layout.num_nodes == 1 || max_replicas_per_layer == 0) {
    return result;
  }
  constexpr std::size_t kCandidates = 8;
  const auto kLightGpus = std::size_t(std::min<std::int64_t>(4, layout.num_gpus));
  std::vector<std::int64_t> gpus(static_cast<std::size_t>(layout.num_gpus)), slots;
  std::vector<std::int32_t> by_replica_weight(static_cast<std::size_t>(layout.num_experts));
  for (std::int64_t l = 0; l < combined.num_layers; ++l) {
    if (combined.layer_total(l) <= 0.0) continue;
    const auto row = std::span(map).subspan(std::size_t(l) * P, P);
    const std::vector<std::int64_t> home = home_nodes(row, layout);
    // The sum picks the candidates; the scenarios judge them.
    detail::LayerMap layer(row, combined.row(l), layout);
    ScenarioMaps judged(row, scenarios, l, layout);
    std::int64_t crossing = 0;
    for (std::int64_t p = 0; p < layout.num_slots; ++p) {
      crossing += off_home(layer.at(p), p, home, layout) ? 1 : 0;
    }
    for (std::int64_t step = 0; step < layout.num_slots; ++step) {
      const std::int64_t x = layer.heaviest_gpu();
      const double now = judged.objective();
      std::iota(by_replica_weight.begin(), by_replica_weight.end(), 0);
      std::partial_sort(by_replica_weight.begin(),
                        by_replica_weight.begin() + std::ptrdiff_t(kCandidates),
                        by_replica_weight.end(), [&](std::int32_t a, std::int32_t b) {
                          return layer.replica_weight(a) > layer.replica_weight(b);
                        });
      double best_gain = 1e-12 * now;
      std::int64_t best_slot = -1;
      std::int32_t best_expert = -1;
      // Slots of the heaviest GPU (a lighter expert there) and of the lightest GPUs (one
      // more replica of a hot expert there, which lightens all of its replicas).
      std::iota(gpus.begin(), gpus.end(), 0);
      std::partial_sort(
          gpus.begin(), gpus.begin() + std::ptrdiff_t(kLightGpus), gpus.end(),
          [&](std::int64_t a, std::int64_t b) { return layer.gpu_load(a) < layer.gpu_load(b); });
      slots.clear();
      for (std::int64_t k = 0; k < layout.slots_per_gpu; ++k) {
        slots.push_back(x * layout.slots_per_gpu + k);
        for (std::size_t g = 0; g < kLightGpus; ++g) {
          slots.push_back(gpus[g] * layout.slots_per_gpu + k);
        }
      }
      for (const std::int64_t s : slots) {
        const std::int32_t a = layer.at(s);
        if (layer.count(a) < 2) continue;
        for (std::size_t k = 0; k < kCandidates; ++k) {
          const std::int32_t b = by_replica_weight[k];
          if (b == a) continue;
          const std::int64_t after = crossing + (off_home(b, s, home, layout) ? 1 : 0) -
                                     (off_home(a, s, home, layout) ? 1 : 0);
          if (after > max_replicas_per_layer) continue;
          const double gain = now - judged.objective_after_repoint(s, b);
          if (gain > best_gain) {
            best_gain = gain;
            best_slot = s;
            best_expert = b;
          }
        }
      }
      if (best_slot < 0) break;
      crossing += (off_home(best_expert, best_slot, home, layout) ? 1 : 0) -
                  (off_home(layer.at(best_slot), best_slot, home, layout) ? 1 : 0);
      layer.repoint(best_slot, best_expert);
      judged.repoint(best_slot, best_expert);
    }
    result.cross_node_replicas[std::size_t(l)] = crossing;
  }
  result.placement = Placement(combined.num_layers, config.num_replicas, combined.num_experts,
                               std::move(map), plan.version());
  result.cross_node_share = cross_node_share(combined, result.placement, config);
  return result;
}

}  // namespace moestat::plan
