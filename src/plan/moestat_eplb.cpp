// The moestat planner: its own construction (groups onto nodes, replica counts, greedy
// packing, swap search under every scenario) against the reference's plan, the better of
// the two kept per layer.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/plan/eplb.hpp>
#include <numeric>

#include "deepseek_layer.hpp"
#include "swap_search.hpp"

namespace moestat::plan {
namespace {

/// The deployment shape as one layer's planning sees it (global = one group, one node).
struct Shape {
  std::int32_t num_experts, num_groups, num_nodes, slots_per_node, gpus_per_node, slots_per_gpu;
  std::int32_t group_size() const { return num_experts / num_groups; }
  std::int32_t groups_per_node() const { return num_groups / num_nodes; }
  std::int32_t experts_per_node() const { return num_experts / num_nodes; }
};

Shape shape_of(const EplbConfig& config, std::int64_t num_experts) {
  const bool hierarchical = config.hierarchical();
  Shape s{};
  s.num_experts = std::int32_t(num_experts);
  s.num_groups = std::int32_t(hierarchical ? config.num_groups : 1);
  s.num_nodes = std::int32_t(hierarchical ? config.num_nodes : 1);
  s.slots_per_node = std::int32_t(config.num_replicas / s.num_nodes);
  s.gpus_per_node = std::int32_t(config.num_gpus / s.num_nodes);
  s.slots_per_gpu = std::int32_t(config.slots_per_gpu());
  return s;
}

/// One layer under S scenarios: `loads` is scenario-major [S, E], each row summing to 1.
struct LayerScenarios {
  std::int32_t num_scenarios = 0;
  std::vector<double> loads;
  double at(std::int32_t s, std::int32_t e, std::int32_t E) const {
    return loads[std::size_t(s * E + e)];
  }
};

/// The score of a whole layer's map: per scenario the heaviest GPU, combined.
detail::PackingScore score_layer(const LayerScenarios& layer, std::span<const std::int32_t> map,
                                 const Shape& shape, std::int32_t num_gpus,
                                 ScenarioObjective objective) {
  const std::int32_t E = shape.num_experts;
  std::vector<std::int32_t> count(std::size_t(E), 0);
  for (const std::int32_t e : map) ++count[std::size_t(e)];
  std::vector<double> weights(map.size() * std::size_t(layer.num_scenarios));
  for (std::size_t slot = 0; slot < map.size(); ++slot) {
    for (std::int32_t s = 0; s < layer.num_scenarios; ++s) {
      weights[slot * std::size_t(layer.num_scenarios) + std::size_t(s)] =
          layer.at(s, map[slot], E) / count[std::size_t(map[slot])];
    }
  }
  std::vector<std::int32_t> gpu_of(map.size());
  for (std::size_t slot = 0; slot < map.size(); ++slot) {
    gpu_of[slot] = std::int32_t(slot) / shape.slots_per_gpu;
  }
  const detail::PackingProblem problem{.num_scenarios = layer.num_scenarios,
                                       .num_items = std::int32_t(map.size()),
                                       .num_bins = num_gpus,
                                       .weights = weights,
                                       .objective = objective};
  return detail::score_packing(problem, gpu_of);
}

/// Packs one node's replicas onto its GPUs (greedy start, then swap search) and writes its
/// slots. `experts` are the node's logical experts, `copies` [experts] their replica counts
/// (summing to slots_per_node).
void pack_node(const LayerScenarios& layer, const Shape& shape,
               std::span<const std::int32_t> experts, std::span<const std::int32_t> copies,
               const MoestatPlanOptions& options, std::span<std::int32_t> node_slots) {
  const std::int32_t S = layer.num_scenarios;
  std::vector<std::int32_t> replica_expert;
  std::vector<double> weights;  // [replicas, S]: the expert's share / its replica count
  for (std::size_t j = 0; j < experts.size(); ++j) {
    for (std::int32_t c = 0; c < copies[j]; ++c) {
      replica_expert.push_back(experts[j]);
      for (std::int32_t s = 0; s < S; ++s) {
        weights.push_back(layer.at(s, experts[j], shape.num_experts) / copies[j]);
      }
    }
  }
  const detail::PackingProblem problem{.num_scenarios = S,
                                       .num_items = std::int32_t(replica_expert.size()),
                                       .num_bins = shape.gpus_per_node,
                                       .weights = weights,
                                       .objective = options.objective};
  std::vector<std::int32_t> gpu_of = detail::greedy_packing(problem);
  detail::improve_by_swaps(problem, gpu_of, options.max_moves_per_layer);
  std::vector<std::int32_t> filled(std::size_t(shape.gpus_per_node), 0);
  for (std::size_t i = 0; i < replica_expert.size(); ++i) {
    const std::int32_t gpu = gpu_of[i];
    node_slots[std::size_t(gpu * shape.slots_per_gpu + filled[std::size_t(gpu)]++)] =
        replica_expert[i];
  }
}

/// Replica counts of a node's experts: each extra slot to the largest planning weight per
/// replica (the weight is the expert's heaviest share over scenarios).
std::vector<std::int32_t> replica_counts(const LayerScenarios& layer, const Shape& shape,
                                         std::span<const std::int32_t> experts) {
  std::vector<double> weight(experts.size(), 0.0);
  for (std::size_t j = 0; j < experts.size(); ++j) {
    for (std::int32_t s = 0; s < layer.num_scenarios; ++s) {
      weight[j] = std::max(weight[j], layer.at(s, experts[j], shape.num_experts));
    }
  }
  std::vector<std::int32_t> copies(experts.size(), 1);
  for (std::int32_t extra = std::int32_t(experts.size()); extra < shape.slots_per_node; ++extra) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < experts.size(); ++j) {
      if (weight[j] / copies[j] > weight[best] / copies[best]) best = j;
    }
    ++copies[best];
  }
  return copies;
}

/// Groups onto nodes: swap search from the reference's node assignment (read off `ref_map`)
/// and from a greedy one; the better. Returns the node of each group.
std::vector<std::int32_t> assign_groups(const LayerScenarios& layer, const Shape& shape,
                                        std::span<const std::int32_t> ref_map,
                                        const MoestatPlanOptions& options) {
  const std::int32_t S = layer.num_scenarios;
  std::vector<double> weights(std::size_t(shape.num_groups * S), 0.0);
  for (std::int32_t g = 0; g < shape.num_groups; ++g) {
    for (std::int32_t s = 0; s < S; ++s) {
      for (std::int32_t k = 0; k < shape.group_size(); ++k) {
        weights[std::size_t(g * S + s)] +=
            layer.at(s, g * shape.group_size() + k, shape.num_experts);
      }
    }
  }
  const detail::PackingProblem problem{.num_scenarios = S,
                                       .num_items = shape.num_groups,
                                       .num_bins = shape.num_nodes,
                                       .weights = weights,
                                       .objective = options.objective};
  std::vector<std::int32_t> from_reference(std::size_t(shape.num_groups), 0);
  for (std::int32_t slot = 0; slot < std::int32_t(ref_map.size()); ++slot) {
    from_reference[std::size_t(ref_map[std::size_t(slot)] / shape.group_size())] =
        slot / shape.slots_per_node;
  }
  std::vector<std::int32_t> greedy = detail::greedy_packing(problem);
  detail::improve_by_swaps(problem, from_reference, options.max_moves_per_layer);
  detail::improve_by_swaps(problem, greedy, options.max_moves_per_layer);
  return detail::score_packing(problem, greedy)
                 .better_than(detail::score_packing(problem, from_reference))
             ? greedy
             : from_reference;
}

/// moestat's own construction: groups onto nodes, replica counts, greedy packing, swaps.
void construct_map(const LayerScenarios& layer, const Shape& shape,
                   std::span<const std::int32_t> ref_map, const MoestatPlanOptions& options,
                   std::span<std::int32_t> map) {
  std::vector<std::int32_t> node_of_group(std::size_t(shape.num_groups), 0);
  if (shape.num_nodes > 1) node_of_group = assign_groups(layer, shape, ref_map, options);
  for (std::int32_t node = 0; node < shape.num_nodes; ++node) {
    std::vector<std::int32_t> experts;
    for (std::int32_t g = 0; g < shape.num_groups; ++g) {
      if (node_of_group[std::size_t(g)] != node) continue;
      for (std::int32_t k = 0; k < shape.group_size(); ++k) {
        experts.push_back(g * shape.group_size() + k);
      }
    }
    const std::vector<std::int32_t> copies = replica_counts(layer, shape, experts);
    pack_node(
        layer, shape, experts, copies, options,
        map.subspan(std::size_t(node * shape.slots_per_node), std::size_t(shape.slots_per_node)));
  }
}

}  // namespace

Placement plan_moestat(std::span<const ExpertLoads> scenarios, const EplbConfig& config,
                       const MoestatPlanOptions& options) {
  MOESTAT_CHECK(!scenarios.empty(), "plan: the moestat planner needs at least one load matrix");
  for (const ExpertLoads& loads : scenarios) loads.validate();
  const std::int64_t L = scenarios.front().num_layers;
  const std::int64_t E = scenarios.front().num_experts;
  for (const ExpertLoads& loads : scenarios) {
    MOESTAT_CHECK(loads.num_layers == L && loads.num_experts == E,
                  "plan: scenarios differ in shape: [{}, {}] and [{}, {}]", L, E, loads.num_layers,
                  loads.num_experts);
  }
  config.validate(E);
  MOESTAT_CHECK(options.max_moves_per_layer >= 0, "plan: max_moves_per_layer must be >= 0");
  MoestatPlanOptions resolved = options;
  if (resolved.max_moves_per_layer == 0) {
    resolved.max_moves_per_layer = scenarios.size() == 1 ? 128 : 64;
  }
  const Shape shape = shape_of(config, E);
  const auto P = std::size_t(config.num_replicas);
  std::vector<std::int32_t> map(std::size_t(L) * P);
  std::vector<double> combined(static_cast<std::size_t>(E));
  std::vector<float> reference_input(static_cast<std::size_t>(E));
  std::vector<std::int32_t> candidate(P);
  detail::DeepseekScratch scratch;
  LayerScenarios layer;
  for (std::int64_t l = 0; l < L; ++l) {
    layer.num_scenarios = 0;
    layer.loads.clear();
    std::fill(combined.begin(), combined.end(), 0.0);
    for (const ExpertLoads& loads : scenarios) {
      const double total = loads.layer_total(l);
      if (total <= 0.0) continue;
      ++layer.num_scenarios;
      for (std::int64_t e = 0; e < E; ++e) {
        const double share = loads.at(l, e) / total;
        layer.loads.push_back(share);
        // One scenario: the reference sees the raw loads, exactly as plan_deepseek does.
        combined[std::size_t(e)] += scenarios.size() == 1 ? loads.at(l, e) : share;
      }
    }
    const std::span<std::int32_t> out = std::span(map).subspan(std::size_t(l) * P, P);
    // The reference's plan on the equal-weight sum (for one scenario: on the scenario).
    std::transform(combined.begin(), combined.end(), reference_input.begin(),
                   [](double v) { return static_cast<float>(v) + 0.0F; });
    detail::deepseek_plan_layer(reference_input, config, out, scratch);
    if (layer.num_scenarios == 0) continue;  // a dense layer: any valid map will do
    construct_map(layer, shape, out, resolved, candidate);
    const auto score = [&](std::span<const std::int32_t> m) {
      return score_layer(layer, m, shape, std::int32_t(config.num_gpus), resolved.objective);
    };
    if (score(candidate).better_than(score(out)))
      std::copy(candidate.begin(), candidate.end(), out.begin());
  }
  return Placement(L, config.num_replicas, E, std::move(map));
}

}  // namespace moestat::plan
