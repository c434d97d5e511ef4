#include <algorithm>
#include <moestat/error.hpp>
#include <moestat/topology.hpp>

namespace moestat {

void check_layer_slots(std::string_view what, std::int64_t num_layers, std::int64_t num_slots) {
  MOESTAT_CHECK(num_layers > 0 && num_slots > 0 && num_layers <= kMaxLayerSlots / num_slots,
                "{}: {} layers x {} physical experts is more than moestat takes ({} = 2^24 "
                "layer slots, about a thousand times DeepSeek-V3's)",
                what, num_layers, num_slots, kMaxLayerSlots);
}

ModelTopology ModelTopology::uniform(std::int64_t num_layers, std::int64_t num_experts,
                                     std::int64_t top_k) {
  ModelTopology topology;
  topology.num_layers = num_layers;
  topology.moe_layers.assign(std::size_t(std::max<std::int64_t>(num_layers, 0)), true);
  topology.num_logical_experts = num_experts;
  topology.num_physical_experts = num_experts;
  topology.top_k = top_k;
  topology.validate();
  return topology;
}

void ModelTopology::validate() const {
  MOESTAT_CHECK(num_layers > 0, "topology: num_layers must be positive, got {}", num_layers);
  MOESTAT_CHECK(std::int64_t(moe_layers.size()) == num_layers,
                "topology: moe_layers has {} entries but num_layers is {}", moe_layers.size(),
                num_layers);
  MOESTAT_CHECK(num_moe_layers() > 0, "topology: no layer is marked MoE");
  MOESTAT_CHECK(num_logical_experts > 0, "topology: num_logical_experts must be positive, got {}",
                num_logical_experts);
  MOESTAT_CHECK(num_physical_experts >= num_logical_experts,
                "topology: num_physical_experts ({}) must be at least num_logical_experts ({})",
                num_physical_experts, num_logical_experts);
  check_layer_slots("topology", num_layers, num_physical_experts);
  MOESTAT_CHECK(top_k > 0 && top_k <= num_logical_experts,
                "topology: top_k must be in [1, num_logical_experts = {}], got {}",
                num_logical_experts, top_k);
  MOESTAT_CHECK(ep_size > 0, "topology: ep_size must be positive, got {}", ep_size);
  MOESTAT_CHECK(num_physical_experts % ep_size == 0,
                "topology: num_physical_experts ({}) must be divisible by ep_size ({})",
                num_physical_experts, ep_size);
  MOESTAT_CHECK(num_nodes > 0 && ep_size % num_nodes == 0,
                "topology: num_nodes ({}) must be positive and divide ep_size ({})", num_nodes,
                ep_size);
  MOESTAT_CHECK(num_groups > 0 && num_logical_experts % num_groups == 0,
                "topology: num_groups ({}) must be positive and divide num_logical_experts ({})",
                num_groups, num_logical_experts);
  MOESTAT_CHECK(num_shared_expert_slots >= 0,
                "topology: num_shared_expert_slots must be non-negative, got {}",
                num_shared_expert_slots);
}

std::int64_t ModelTopology::num_moe_layers() const noexcept {
  return std::int64_t(std::count(moe_layers.begin(), moe_layers.end(), true));
}

}  // namespace moestat
