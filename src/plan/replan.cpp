// Movement-aware replanning: greedy moves on the map in force, or the moestat plan renumbered
// to keep experts in place; whichever meets the target with fewer copies.
#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/plan/metrics.hpp>
#include <moestat/plan/replan.hpp>
#include <numeric>
#include <optional>

#include "layer_map.hpp"

namespace moestat::plan {
namespace {

using detail::LayerMap;
using detail::Layout;
using detail::layout_of;

/// The node holding each group in `row`, or nullopt when some group spans two nodes.
std::optional<std::vector<std::int64_t>> nodes_of_groups(std::span<const std::int32_t> row,
                                                         const Layout& layout) {
  std::vector<std::int64_t> node(std::size_t(layout.num_experts / layout.group_size), -1);
  for (std::int64_t p = 0; p < layout.num_slots; ++p) {
    std::int64_t& n = node[std::size_t(row[std::size_t(p)] / layout.group_size)];
    if (n >= 0 && n != layout.node_of_slot(p)) return std::nullopt;
    n = layout.node_of_slot(p);
  }
  return node;
}

/// Greedy moves on `row` until `target`; the best drop of the heaviest GPU per copy each time.
void greedy_moves(std::span<std::int32_t> row, std::span<const double> weight, const Layout& layout,
                  double target) {
  std::optional<std::vector<std::int64_t>> group_node(std::vector<std::int64_t>{});
  if (layout.hierarchical) {
    group_node = nodes_of_groups(row, layout);
    if (!group_node) return;  // the map in force breaks the rule: only a full plan can help
  }
  LayerMap map(row, weight, layout);
  constexpr std::size_t kRepointCandidates = 8;
  const auto light_gpus = std::size_t(std::min<std::int64_t>(4, layout.num_gpus));
  std::vector<std::int32_t> by_replica_weight(static_cast<std::size_t>(layout.num_experts));
  std::vector<std::int64_t> gpus(static_cast<std::size_t>(layout.num_gpus)), slots;
  for (std::int64_t step = 0; step < 2 * layout.num_slots; ++step) {
    if (map.balancedness() >= target) return;
    const std::int64_t x = map.heaviest_gpu();
    const double max_now = map.heaviest_load();
    // Experts that gain most from one more replica: the heaviest per replica first.
    std::iota(by_replica_weight.begin(), by_replica_weight.end(), 0);
    std::sort(by_replica_weight.begin(), by_replica_weight.end(),
              [&](std::int32_t a, std::int32_t b) {
                return map.replica_weight(a) > map.replica_weight(b);
              });
    double best_gain = 1e-12 * max_now;
    std::int64_t best_s = -1, best_t = -1;
    std::int32_t best_expert = -1;
    // Re-points: slots of the heaviest GPU (a lighter expert there) and of the lightest GPUs
    // (one more replica of a hot expert there, which lightens all of its replicas).
    std::iota(gpus.begin(), gpus.end(), 0);
    std::partial_sort(
        gpus.begin(), gpus.begin() + std::ptrdiff_t(light_gpus), gpus.end(),
        [&](std::int64_t a, std::int64_t b) { return map.gpu_load(a) < map.gpu_load(b); });
    slots.clear();
    for (std::int64_t k = 0; k < layout.slots_per_gpu; ++k) {
      slots.push_back(x * layout.slots_per_gpu + k);
      for (std::size_t g = 0; g < light_gpus; ++g) {
        if (gpus[g] != x) slots.push_back(gpus[g] * layout.slots_per_gpu + k);
      }
    }
    for (const std::int64_t s : slots) {
      const std::int32_t a = map.at(s);
      if (map.count(a) < 2) continue;
      std::size_t tried = 0;
      for (const std::int32_t b : by_replica_weight) {
        if (tried == kRepointCandidates) break;
        if (b == a) continue;
        if (layout.hierarchical &&
            (*group_node)[std::size_t(b / layout.group_size)] != layout.node_of_slot(s)) {
          continue;
        }
        ++tried;
        const double gain = max_now - map.max_after_repoint(s, b);
        if (gain > best_gain) {
          best_gain = gain;
          best_s = s;
          best_expert = b;
          best_t = -1;
        }
      }
    }
    // Swaps: a slot of the heaviest GPU with a slot elsewhere on its node.
    for (std::int64_t s = x * layout.slots_per_gpu; s < (x + 1) * layout.slots_per_gpu; ++s) {
      const std::int32_t a = map.at(s);
      for (std::int64_t t = 0; t < layout.num_slots; ++t) {
        if (t / layout.slots_per_gpu == x || map.at(t) == a) continue;
        if (layout.node_of_slot(t) != layout.node_of_slot(s)) continue;
        const double gain = (max_now - map.max_after_swap(s, t)) / 2.0;  // two copies
        if (gain > best_gain) {
          best_gain = gain;
          best_s = s;
          best_t = t;
          best_expert = -1;
        }
      }
    }
    if (best_s < 0) return;
    if (best_t >= 0) {
      map.swap(best_s, best_t);
    } else {
      map.repoint(best_s, best_expert);
    }
  }
}

/// Multiset overlap of the experts in two slot ranges.
std::int64_t overlap(std::span<const std::int32_t> a, std::span<const std::int32_t> b) {
  std::vector<std::int32_t> x(a.begin(), a.end()), y(b.begin(), b.end());
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  std::vector<std::int32_t> both;
  std::set_intersection(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(both));
  return std::int64_t(both.size());
}

/// Greedy matching of `n` new blocks to `n` old blocks of `size` slots by overlap; returns
/// old block of each new block.
std::vector<std::int64_t> match_blocks(std::span<const std::int32_t> fresh,
                                       std::span<const std::int32_t> old, std::int64_t n,
                                       std::int64_t size) {
  std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> pairs;  // -overlap, new, old
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      pairs.emplace_back(-overlap(fresh.subspan(std::size_t(i * size), std::size_t(size)),
                                  old.subspan(std::size_t(j * size), std::size_t(size))),
                         i, j);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  std::vector<std::int64_t> match(std::size_t(n), -1);
  std::vector<bool> taken(std::size_t(n), false);
  for (const auto& [neg, i, j] : pairs) {
    if (match[std::size_t(i)] >= 0 || taken[std::size_t(j)]) continue;
    match[std::size_t(i)] = j;
    taken[std::size_t(j)] = true;
  }
  return match;
}

/// `fresh` renumbered onto `old`'s layout: nodes, then GPUs within nodes, matched by overlap;
/// within a GPU, experts already in a slot stay in it.
std::vector<std::int32_t> aligned(std::span<const std::int32_t> fresh,
                                  std::span<const std::int32_t> old, const Layout& layout) {
  const std::int64_t node_size = layout.gpus_per_node * layout.slots_per_gpu;
  std::vector<std::int32_t> by_node(fresh.size());
  const auto node_match = match_blocks(fresh, old, layout.num_nodes, node_size);
  for (std::int64_t n = 0; n < layout.num_nodes; ++n) {
    std::copy_n(fresh.begin() + n * node_size, node_size,
                by_node.begin() + node_match[std::size_t(n)] * node_size);
  }
  std::vector<std::int32_t> out(fresh.size());
  for (std::int64_t n = 0; n < layout.num_nodes; ++n) {
    const auto fresh_node = std::span<const std::int32_t>(by_node).subspan(
        std::size_t(n * node_size), std::size_t(node_size));
    const auto old_node = old.subspan(std::size_t(n * node_size), std::size_t(node_size));
    const auto gpu_match =
        match_blocks(fresh_node, old_node, layout.gpus_per_node, layout.slots_per_gpu);
    for (std::int64_t g = 0; g < layout.gpus_per_node; ++g) {
      const std::int64_t target = n * node_size + gpu_match[std::size_t(g)] * layout.slots_per_gpu;
      std::vector<std::int32_t> left(fresh_node.begin() + g * layout.slots_per_gpu,
                                     fresh_node.begin() + (g + 1) * layout.slots_per_gpu);
      std::vector<bool> filled(std::size_t(layout.slots_per_gpu), false);
      for (std::int64_t k = 0; k < layout.slots_per_gpu; ++k) {
        const auto it = std::find(left.begin(), left.end(), old[std::size_t(target + k)]);
        if (it == left.end()) continue;
        out[std::size_t(target + k)] = *it;
        filled[std::size_t(k)] = true;
        left.erase(it);
      }
      auto next = left.begin();
      for (std::int64_t k = 0; k < layout.slots_per_gpu; ++k) {
        if (!filled[std::size_t(k)]) out[std::size_t(target + k)] = *next++;
      }
    }
  }
  return out;
}

std::int64_t copies(std::span<const std::int32_t> a, std::span<const std::int32_t> b) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i] ? 1 : 0;
  return n;
}

double balancedness_of(std::span<const std::int32_t> row, std::span<const double> weight,
                       const Layout& layout) {
  std::vector<std::int32_t> copy(row.begin(), row.end());
  return LayerMap(copy, weight, layout).balancedness();
}

}  // namespace

ReplanResult replan_with_few_copies(const Placement& previous,
                                    std::span<const ExpertLoads> scenarios,
                                    const EplbConfig& config, const ReplanOptions& options) {
  MOESTAT_CHECK(!scenarios.empty(), "replan: need at least one load matrix");
  // Written so that NaN fails it: every comparison with NaN is false.
  MOESTAT_CHECK(options.target_balancedness >= 0.0 && options.target_balancedness <= 1.0,
                "replan: target balancedness {} is outside [0, 1]", options.target_balancedness);
  const ExpertLoads combined = equal_weight_sum(scenarios);
  combined.validate();
  config.validate(combined.num_experts);
  MOESTAT_CHECK(previous.num_layers() == combined.num_layers &&
                    previous.num_logical_experts() == combined.num_experts &&
                    previous.num_physical_experts() == config.num_replicas,
                "replan: the previous placement is [{} layers, {} slots] of {} experts; the "
                "loads and config need [{}, {}] of {}",
                previous.num_layers(), previous.num_physical_experts(),
                previous.num_logical_experts(), combined.num_layers, config.num_replicas,
                combined.num_experts);
  const Layout layout = layout_of(config, combined.num_experts);
  const auto P = std::size_t(config.num_replicas);
  std::vector<std::int32_t> map(previous.physical_to_logical().begin(),
                                previous.physical_to_logical().end());
  std::optional<Placement> full;  // the fallback plan, made once when first needed
  ReplanResult result{previous, {}, 0, {}, {}};
  for (std::int64_t l = 0; l < combined.num_layers; ++l) {
    const auto old = previous.physical_to_logical().subspan(std::size_t(l) * P, P);
    const auto row = std::span(map).subspan(std::size_t(l) * P, P);
    const std::span<const double> weight = combined.row(l);
    const double before = balancedness_of(old, weight, layout);
    result.balancedness_before.push_back(before);
    if (before < options.target_balancedness && combined.layer_total(l) > 0.0) {
      greedy_moves(row, weight, layout, options.target_balancedness);
      if (!full) full = plan_moestat(scenarios, config, options.planner);
      const std::vector<std::int32_t> fresh =
          aligned(full->physical_to_logical().subspan(std::size_t(l) * P, P), old, layout);
      const double greedy_balance = balancedness_of(row, weight, layout);
      const double fresh_balance = balancedness_of(fresh, weight, layout);
      const bool greedy_ok = greedy_balance >= options.target_balancedness;
      const bool fresh_ok = fresh_balance >= options.target_balancedness;
      const bool take_fresh = fresh_ok ? !greedy_ok || copies(fresh, old) < copies(row, old)
                                       : !greedy_ok && fresh_balance > greedy_balance;
      if (take_fresh) std::copy(fresh.begin(), fresh.end(), row.begin());
    }
    result.balancedness_after.push_back(balancedness_of(row, weight, layout));
    result.copies_per_layer.push_back(copies(row, old));
    result.total_copies += result.copies_per_layer.back();
  }
  result.placement = Placement(combined.num_layers, config.num_replicas, combined.num_experts,
                               std::move(map), previous.version() + 1);
  return result;
}

}  // namespace moestat::plan
