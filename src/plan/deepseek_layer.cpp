// DeepSeek's EPLB for one layer, step for step, in float32 (see plan_deepseek's contract).
#include "deepseek_layer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>

namespace moestat::plan::detail {
namespace {

/// Restores a binary heap (`before(a, b)`: a belongs above b) below position `i` after the
/// key of heap[i] moved away from the top. One sift-down instead of a pop and a push.
template <typename T, typename Before>
void sift_down(std::vector<T>& heap, std::size_t i, Before before) {
  const std::size_t n = heap.size();
  const T value = heap[i];
  for (std::size_t child = 2 * i + 1; child < n; child = 2 * i + 1) {
    if (child + 1 < n && before(heap[child + 1], heap[child])) ++child;
    if (!before(heap[child], value)) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = value;
}

/// eplb.py's balanced_packing: items heaviest first (PyTorch's sort order, ties included),
/// each into the lightest pack with room (lowest index among equals); every pack gets
/// n / num_packs items. Writes each item's pack and its rank (arrival order) in the pack.
void balanced_packing(std::span<const float> weight, std::int32_t num_packs, DeepseekScratch& s) {
  const auto num_items = std::int32_t(weight.size());
  const std::int32_t capacity = num_items / num_packs;
  s.pack_of.resize(weight.size());
  s.rank_in_pack.resize(weight.size());
  if (capacity == 1) {
    std::iota(s.pack_of.begin(), s.pack_of.end(), 0);
    std::fill(s.rank_in_pack.begin(), s.rank_in_pack.end(), 0);
    return;
  }
  // NOTE: std::sort on (value, index) pairs with a value-only comparison is what PyTorch's
  // CPU sort runs; equal values then land in the order libstdc++'s introsort leaves them.
  // The values are non-negative floats (never -0, never NaN), whose bit patterns order as
  // unsigned integers exactly as the floats do: every comparison, hence the permutation,
  // is the same, without the floating-point compares.
  s.sorted.resize(weight.size());
  for (std::int32_t i = 0; i < num_items; ++i) {
    s.sorted[std::size_t(i)] = {std::bit_cast<std::uint32_t>(weight[std::size_t(i)]), i};
  }
  std::sort(s.sorted.begin(), s.sorted.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });

  s.pack_items.assign(std::size_t(num_packs), 0);
  // Min-heap of (load, pack index), compared as pairs: the top is Python's min() over packs
  // with room (the lowest index among equal loads). All loads start at 0, so packs in index
  // order already form the heap.
  s.pack_heap.resize(std::size_t(num_packs));
  for (std::int32_t p = 0; p < num_packs; ++p) s.pack_heap[std::size_t(p)] = {0.0F, p};
  const auto lighter = [](const auto& a, const auto& b) { return a < b; };
  for (const auto& [bits, item] : s.sorted) {
    auto& [pack_load, pack] = s.pack_heap.front();
    s.pack_of[std::size_t(item)] = pack;
    s.rank_in_pack[std::size_t(item)] = s.pack_items[std::size_t(pack)]++;
    pack_load += std::bit_cast<float>(bits);
    if (s.pack_items[std::size_t(pack)] == capacity) {  // full: leaves the heap
      s.pack_heap.front() = s.pack_heap.back();
      s.pack_heap.pop_back();
      if (s.pack_heap.empty()) break;
    }
    sift_down(s.pack_heap, 0, lighter);
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
  s.phy_load.assign(weight.begin(), weight.end());  // load / replicas, per expert
  s.heap.resize(weight.size());
  std::iota(s.heap.begin(), s.heap.end(), 0);
  // Max-heap on (load / replicas, then the lower index).
  const auto heavier = [&](std::int32_t a, std::int32_t b) {
    const float va = s.phy_load[std::size_t(a)], vb = s.phy_load[std::size_t(b)];
    return va != vb ? va > vb : a < b;
  };
  for (std::size_t i = s.heap.size() / 2; i-- > 0;) sift_down(s.heap, i, heavier);
  for (std::int32_t slot = num_experts; slot < num_slots; ++slot) {
    const std::int32_t expert = s.heap.front();
    s.phy2mlog[std::size_t(slot)] = expert;
    const std::int32_t count = ++s.mlog_count[std::size_t(expert)];
    s.phy_load[std::size_t(expert)] = weight[std::size_t(expert)] / float(count);
    sift_down(s.heap, 0, heavier);
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
  s.log2mlog.resize(weight.size());
  s.mlog2log.resize(weight.size());
  if (num_nodes == 1) {
    std::iota(s.mlog2log.begin(), s.mlog2log.end(), 0);
  } else {
    s.group_load.resize(std::size_t(num_groups));
    for (std::int32_t g = 0; g < num_groups; ++g) {
      s.group_load[std::size_t(g)] =
          torch_cpu_sum(weight.subspan(std::size_t(g * group_size), std::size_t(group_size)));
    }
    balanced_packing(s.group_load, num_nodes, s);
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
    balanced_packing(s.phy_load, gpus_per_node, s);
    for (std::int32_t i = 0; i < slots_per_node; ++i) {
      const std::int32_t slot =
          s.pack_of[std::size_t(i)] * slots_per_gpu + s.rank_in_pack[std::size_t(i)];
      const std::int32_t m = node * experts_per_node + s.phy2mlog[std::size_t(i)];
      phy2log[std::size_t(node * slots_per_node + slot)] = s.mlog2log[std::size_t(m)];
    }
  }
}

}  // namespace moestat::plan::detail
