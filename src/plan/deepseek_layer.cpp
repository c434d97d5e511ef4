// DeepSeek's EPLB for one layer, step for step, in float32 (see plan_deepseek's contract).
#include "deepseek_layer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>

namespace moestat::plan::detail {
namespace {

// Heaps hold 64-bit keys that compare as the reference's (value, index) tuples do: the
// value's float bits on top (non-negative floats order as their bits), the index below. One
// integer compare per step, no indirection, and the child choice compiles to a select.

/// Restores the heap heap[0, n) below position `i` (`above(a, b)`: a belongs above b).
/// heap[n] must hold a key that no real key is below (the child choice reads it).
template <typename Above>
void sift_down(std::uint64_t* heap, std::size_t n, std::size_t i, Above above) {
  const std::uint64_t value = heap[i];
  for (std::size_t child = 2 * i + 1; child < n; child = 2 * i + 1) {
    child += std::size_t(above(heap[child + 1], heap[child]));
    if (!above(heap[child], value)) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = value;
}

std::uint64_t heap_key(float value, std::int32_t index) {
  return std::uint64_t(std::bit_cast<std::uint32_t>(value)) << 32 | std::uint32_t(index);
}

/// Orders the items of balanced_packing heaviest first, as PyTorch's sort leaves them.
///
/// NOTE: PyTorch's CPU sort is std::sort on (value, index) pairs with a value-only
/// comparison, so equal values land in the order libstdc++'s introsort leaves them. Ties
/// matter only between items of different `identity` (the output names identities, not
/// items): when there are none, a stable radix order gives the same plan; otherwise the
/// introsort itself runs. An empty `identity` makes every item distinct.
void order_heaviest_first(std::span<const float> weight, std::span<const std::int32_t> identity,
                          DeepseekScratch& s) {
  const auto items_in_index_order = [&] {
    s.sorted.resize(weight.size());
    for (std::size_t i = 0; i < weight.size(); ++i) {
      s.sorted[i] = {std::bit_cast<std::uint32_t>(weight[i]), std::int32_t(i)};
    }
  };
  items_in_index_order();
  radix_sort_descending(s.sorted, s.sort_spare);
  bool distinct_ties = false;
  for (std::size_t i = 1; i < s.sorted.size() && !distinct_ties; ++i) {
    const KeyedItem &a = s.sorted[i - 1], &b = s.sorted[i];
    distinct_ties = a.key == b.key && (identity.empty() || identity[std::size_t(a.item)] !=
                                                               identity[std::size_t(b.item)]);
  }
  if (!distinct_ties) return;
  items_in_index_order();  // the introsort's order of ties depends on where it starts
  std::sort(s.sorted.begin(), s.sorted.end(),
            [](const KeyedItem& a, const KeyedItem& b) { return a.key > b.key; });
}

/// eplb.py's balanced_packing: items heaviest first (PyTorch's sort order, ties included),
/// each into the lightest pack with room (lowest index among equals); every pack gets
/// n / num_packs items. Writes each item's pack and its rank (arrival order) in the pack.
void balanced_packing(std::span<const float> weight, std::span<const std::int32_t> identity,
                      std::int32_t num_packs, DeepseekScratch& s) {
  const auto num_items = std::int32_t(weight.size());
  const std::int32_t capacity = num_items / num_packs;
  s.pack_of.resize(weight.size());
  s.rank_in_pack.resize(weight.size());
  if (capacity == 1) {
    std::iota(s.pack_of.begin(), s.pack_of.end(), 0);
    std::fill(s.rank_in_pack.begin(), s.rank_in_pack.end(), 0);
    return;
  }
  order_heaviest_first(weight, identity, s);

  s.pack_items.assign(std::size_t(num_packs), 0);
  // Min-heap of (load, pack): the top is Python's min() over packs with room (the lowest
  // index among equal loads). A full pack's key becomes kFull and sinks; all loads start
  // at 0, so packs in index order already form the heap.
  constexpr std::uint64_t kFull = ~std::uint64_t{0};
  const auto n = std::size_t(num_packs);
  s.pack_heap.assign(n + 1, kFull);
  for (std::int32_t p = 0; p < num_packs; ++p) s.pack_heap[std::size_t(p)] = heap_key(0.0F, p);
  const auto lighter = [](std::uint64_t a, std::uint64_t b) { return a < b; };
  for (const auto& [bits, item] : s.sorted) {
    const std::uint64_t top = s.pack_heap.front();
    const auto pack = std::int32_t(std::uint32_t(top));
    s.pack_of[std::size_t(item)] = pack;
    const std::int32_t rank = s.pack_items[std::size_t(pack)]++;
    s.rank_in_pack[std::size_t(item)] = rank;
    const float load = std::bit_cast<float>(std::uint32_t(top >> 32)) + std::bit_cast<float>(bits);
    s.pack_heap.front() = rank + 1 == capacity ? kFull : heap_key(load, pack);
    sift_down(s.pack_heap.data(), n, 0, lighter);
  }
}

/// eplb.py's replicate_experts: each redundant slot goes to the expert with the largest
/// load / replicas (float32 division; lowest index among equals, as torch's max(dim)).
/// Writes phy2mlog [num_slots] and mlog_count [weight.size()].
void replicate(std::span<const float> weight, std::int32_t num_slots, DeepseekScratch& s) {
  const auto num_experts = std::int32_t(weight.size());
  s.phy2mlog.resize(std::size_t(num_slots));
  std::iota(s.phy2mlog.begin(), s.phy2mlog.begin() + num_experts, 0);
  s.mlog_count.assign(weight.size(), 1);
  if (num_slots == num_experts) return;
  // Max-heap of (load / replicas, then the lower index): the index is stored complemented.
  const auto key = [](float load, std::int32_t expert) { return heap_key(load, ~expert); };
  const auto n = weight.size();
  s.heap.assign(n + 1, 0);  // heap[n] = 0: below every real key
  for (std::int32_t e = 0; e < num_experts; ++e)
    s.heap[std::size_t(e)] = key(weight[std::size_t(e)], e);
  const auto heavier = [](std::uint64_t a, std::uint64_t b) { return a > b; };
  for (std::size_t i = n / 2; i-- > 0;) sift_down(s.heap.data(), n, i, heavier);
  for (std::int32_t slot = num_experts; slot < num_slots; ++slot) {
    const auto expert = ~std::int32_t(std::uint32_t(s.heap.front()));
    s.phy2mlog[std::size_t(slot)] = expert;
    const std::int32_t count = ++s.mlog_count[std::size_t(expert)];
    s.heap.front() = key(weight[std::size_t(expert)] / float(count), expert);
    sift_down(s.heap.data(), n, 0, heavier);
  }
}

}  // namespace

float torch_cpu_sum(std::span<const float> values) {
  // PyTorch sums a contiguous row as 8-lane vectors, four vector accumulators (one per
  // vector position mod 4) folded into the first, then the scalar tail, then the lanes.
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kIlp = 4;
  const std::size_t n = values.size();
  const auto row_sum = [&](std::size_t num_units, std::size_t unit, auto load) {
    // Sums `num_units` units (vectors or scalars) the way at::native's row_sum does.
    std::array<std::array<float, kLanes>, kIlp> acc{};
    const std::size_t groups = num_units / kIlp;
    for (std::size_t g = 0; g < groups; ++g) {
      for (std::size_t k = 0; k < kIlp; ++k) {
        for (std::size_t lane = 0; lane < unit; ++lane) acc[k][lane] += load(g * kIlp + k, lane);
      }
    }
    for (std::size_t u = groups * kIlp; u < num_units; ++u) {
      for (std::size_t lane = 0; lane < unit; ++lane) acc[0][lane] += load(u, lane);
    }
    for (std::size_t k = 1; k < kIlp; ++k) {
      for (std::size_t lane = 0; lane < unit; ++lane) acc[0][lane] += acc[k][lane];
    }
    return acc[0];
  };
  if (n >= kLanes) {
    const std::size_t num_vectors = n / kLanes;
    const auto lanes = row_sum(num_vectors, kLanes, [&](std::size_t v, std::size_t lane) {
      return values[v * kLanes + lane];
    });
    float total = 0.0F;
    for (std::size_t i = num_vectors * kLanes; i < n; ++i) total += values[i];
    for (std::size_t lane = 0; lane < kLanes; ++lane) total += lanes[lane];
    return total;
  }
  return row_sum(n, 1, [&](std::size_t i, std::size_t) { return values[i]; })[0];
}

void deepseek_plan_layer(std::span<const float> weight, const EplbConfig& config,
                         std::span<std::int32_t> phy2log, DeepseekScratch& s) {
  const auto num_experts = std::int32_t(weight.size());
  const bool hierarchical = config.hierarchical();
  const auto num_groups = std::int32_t(hierarchical ? config.num_groups : 1);
  const auto num_nodes = std::int32_t(hierarchical ? config.num_nodes : 1);
  const std::int32_t group_size = num_experts / num_groups;
  const std::int32_t groups_per_node = num_groups / num_nodes;
  const std::int32_t experts_per_node = num_experts / num_nodes;
  const auto slots_per_node = std::int32_t(config.num_replicas / num_nodes);
  const auto gpus_per_node = std::int32_t(config.num_gpus / num_nodes);
  const auto slots_per_gpu = std::int32_t(config.slots_per_gpu());

  // Step 1: groups onto nodes. mlog ("node-major logical") numbers experts node by node.
  s.mlog2log.resize(weight.size());
  if (num_groups == num_nodes) {  // one group per node: the reference keeps them in order
    std::iota(s.mlog2log.begin(), s.mlog2log.end(), 0);
  } else {
    s.group_load.resize(std::size_t(num_groups));
    for (std::int32_t g = 0; g < num_groups; ++g) {
      s.group_load[std::size_t(g)] =
          torch_cpu_sum(weight.subspan(std::size_t(g * group_size), std::size_t(group_size)));
    }
    balanced_packing(s.group_load, {}, num_nodes, s);
    for (std::int32_t g = 0; g < num_groups; ++g) {
      const std::int32_t first =
          (s.pack_of[std::size_t(g)] * groups_per_node + s.rank_in_pack[std::size_t(g)]) *
          group_size;
      for (std::int32_t k = 0; k < group_size; ++k) {
        s.mlog2log[std::size_t(first + k)] = g * group_size + k;
      }
    }
  }

  for (std::int32_t node = 0; node < num_nodes; ++node) {
    // Step 2: replicas within the node.
    s.mlog_load.resize(std::size_t(experts_per_node));
    for (std::int32_t j = 0; j < experts_per_node; ++j) {
      s.mlog_load[std::size_t(j)] =
          weight[std::size_t(s.mlog2log[std::size_t(node * experts_per_node + j)])];
    }
    replicate(s.mlog_load, slots_per_node, s);
    // Step 3: replicas onto the node's GPUs.
    s.phy_load.resize(std::size_t(slots_per_node));
    for (std::int32_t i = 0; i < slots_per_node; ++i) {
      const std::int32_t m = s.phy2mlog[std::size_t(i)];
      s.phy_load[std::size_t(i)] =
          s.mlog_load[std::size_t(m)] / float(s.mlog_count[std::size_t(m)]);
    }
    balanced_packing(s.phy_load, s.phy2mlog, gpus_per_node, s);
    for (std::int32_t i = 0; i < slots_per_node; ++i) {
      const std::int32_t slot =
          s.pack_of[std::size_t(i)] * slots_per_gpu + s.rank_in_pack[std::size_t(i)];
      const std::int32_t m = node * experts_per_node + s.phy2mlog[std::size_t(i)];
      phy2log[std::size_t(node * slots_per_node + slot)] = s.mlog2log[std::size_t(m)];
    }
  }
}

}  // namespace moestat::plan::detail
