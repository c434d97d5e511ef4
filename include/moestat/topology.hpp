// The shape of a Mixture-of-Experts model as the recorder and planners see it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace moestat {

/// The most layer x physical-slot entries (L x P, and so L x E) moestat takes from a topology
/// or a file: 2^24, about a thousand times DeepSeek-V3's 61 x 288. Arrays of that shape are
/// allocated from sizes a file declares (a snapshot with an empty window), so the bound caps
/// them at 128 MiB of int64 counts.
inline constexpr std::int64_t kMaxLayerSlots = std::int64_t(1) << 24;

/// moestat::Error, starting with `what`, unless `num_layers` x `num_slots` <= kMaxLayerSlots
/// (both positive).
void check_layer_slots(std::string_view what, std::int64_t num_layers, std::int64_t num_slots);

/// Layers, experts and how physical expert slots are spread over ranks.
///
/// Layers are indexed over ALL decoder layers, dense ones included (as SGLang's recorder
/// does), so layer l of a recording is decoder layer l of the model. Physical experts are
/// the slots that hold expert weights (logical experts plus redundant replicas); rank r
/// holds slots [r * P/ep_size, (r + 1) * P/ep_size).
struct ModelTopology {
  std::int64_t num_layers = 0;            ///< L: decoder layers, dense ones included.
  std::vector<bool> moe_layers;           ///< [L]: true where the layer routes to experts.
  std::int64_t num_logical_experts = 0;   ///< E: experts of the model.
  std::int64_t num_physical_experts = 0;  ///< P >= E: expert slots including replicas.
  std::int64_t top_k = 1;                 ///< Experts each token is routed to.
  std::int64_t ep_size = 1;               ///< Expert-parallel ranks; divides P.
  std::int64_t num_nodes = 1;             ///< Nodes the ranks span; divides ep_size.
  std::int64_t num_groups = 1;            ///< Expert groups (DeepSeek group-limited routing).
  /// Shared-expert slots DeepEP appends to each rank's local counts (fused shared experts);
  /// the recorder drops them from `masked_m`-style input.
  std::int64_t num_shared_expert_slots = 0;

  /// A topology whose every layer is MoE and whose P = E, ep_size = 1.
  static ModelTopology uniform(std::int64_t num_layers, std::int64_t num_experts,
                               std::int64_t top_k);

  /// Throws moestat::Error naming the first inconsistent field.
  void validate() const;

  std::int64_t num_local_experts() const noexcept { return num_physical_experts / ep_size; }
  std::int64_t num_moe_layers() const noexcept;
  bool is_moe(std::int64_t layer) const noexcept {
    return layer >= 0 && layer < num_layers && moe_layers[std::size_t(layer)];
  }

  friend bool operator==(const ModelTopology&, const ModelTopology&) = default;
};

}  // namespace moestat
