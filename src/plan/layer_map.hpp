// One layer's placement row with its replica counts and GPU loads, kept current under
// single-slot moves: shared by movement-aware replanning and the cross-node relaxation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <moestat/plan/eplb.hpp>
#include <moestat/plan/metrics.hpp>
#include <span>
#include <vector>

namespace moestat::plan::detail {

/// The deployment as one layer sees it.
struct Layout {
  std::int64_t num_experts, num_slots, num_gpus, slots_per_gpu, num_nodes, gpus_per_node,
      group_size;
  bool hierarchical;
  std::int64_t node_of_slot(std::int64_t slot) const {
    return slot / slots_per_gpu / gpus_per_node;
  }
};

inline Layout layout_of(const EplbConfig& config, std::int64_t num_experts) {
  const bool hierarchical = config.hierarchical();
  const std::int64_t nodes = hierarchical ? config.num_nodes : 1;
  return {num_experts,
          config.num_replicas,
          config.num_gpus,
          config.slots_per_gpu(),
          nodes,
          config.num_gpus / nodes,
          hierarchical ? num_experts / config.num_groups : num_experts,
          hierarchical};
}

/// One layer's map with its replica counts and GPU loads, kept current under moves.
class LayerMap {
 public:
  LayerMap(std::span<std::int32_t> row, std::span<const double> weight, const Layout& layout)
      : row_(row), weight_(weight), layout_(layout) {
    count_.assign(std::size_t(layout.num_experts), 0);
    for (const std::int32_t e : row_) ++count_[std::size_t(e)];
    recompute_loads();
  }

  double balancedness() const { return layer_balancedness(load_); }
  std::int64_t heaviest_gpu() const {
    return std::max_element(load_.begin(), load_.end()) - load_.begin();
  }
  double heaviest_load() const { return *std::max_element(load_.begin(), load_.end()); }
  double gpu_load(std::int64_t gpu) const { return load_[std::size_t(gpu)]; }
  double replica_weight(std::int32_t expert, std::int32_t extra = 0) const {
    return weight_[std::size_t(expert)] / double(count_[std::size_t(expert)] + extra);
  }

  /// Max GPU load if `slot` held `expert` instead (one copy).
  double max_after_repoint(std::int64_t slot, std::int32_t expert) {
    const std::int32_t old = row_[std::size_t(slot)];
    scratch_ = load_;
    for (std::int64_t p = 0; p < layout_.num_slots; ++p) {
      const std::int32_t e = row_[std::size_t(p)];
      double& g = scratch_[std::size_t(p / layout_.slots_per_gpu)];
      if (p == slot) {
        g += replica_weight(expert, 1) - replica_weight(old);
      } else if (e == old) {
        g += replica_weight(old, -1) - replica_weight(old);
      } else if (e == expert) {
        g += replica_weight(expert, 1) - replica_weight(expert);
      }
    }
    return *std::max_element(scratch_.begin(), scratch_.end());
  }
  void repoint(std::int64_t slot, std::int32_t expert) {
    --count_[std::size_t(row_[std::size_t(slot)])];
    ++count_[std::size_t(expert)];
    row_[std::size_t(slot)] = expert;
    recompute_loads();
  }

  /// Max GPU load if slots `s` and `t` traded experts (two copies).
  double max_after_swap(std::int64_t s, std::int64_t t) {
    const double d = replica_weight(row_[std::size_t(s)]) - replica_weight(row_[std::size_t(t)]);
    scratch_ = load_;
    scratch_[std::size_t(s / layout_.slots_per_gpu)] -= d;
    scratch_[std::size_t(t / layout_.slots_per_gpu)] += d;
    return *std::max_element(scratch_.begin(), scratch_.end());
  }
  void swap(std::int64_t s, std::int64_t t) {
    std::swap(row_[std::size_t(s)], row_[std::size_t(t)]);
    recompute_loads();
  }

  std::int32_t at(std::int64_t slot) const { return row_[std::size_t(slot)]; }
  std::int32_t count(std::int32_t expert) const { return count_[std::size_t(expert)]; }

 private:
  void recompute_loads() {
    load_.assign(std::size_t(layout_.num_gpus), 0.0);
    for (std::int64_t p = 0; p < layout_.num_slots; ++p) {
      load_[std::size_t(p / layout_.slots_per_gpu)] += replica_weight(row_[std::size_t(p)]);
    }
  }

  std::span<std::int32_t> row_;
  std::span<const double> weight_;
  const Layout& layout_;
  std::vector<std::int32_t> count_;
  std::vector<double> load_, scratch_;
};

}  // namespace moestat::plan::detail
