// Which experts of each layer a CPU/GPU hybrid engine (KTransformers' style) keeps on the
// GPU: what plan::choose_hot_experts makes and io reads and writes.
#pragma once

#include <cstdint>
#include <vector>

namespace moestat {

/// A mask [L, E]: on_gpu[l * E + e] = 1 when expert e of layer l lives on the GPU, 0 when it
/// runs on the CPU.
struct ExpertMask {
  std::int64_t num_layers = 0;
  std::int64_t num_experts = 0;
  std::vector<std::uint8_t> on_gpu;  ///< [L, E], 1 = on the GPU, 0 = on the CPU.

  /// [L] experts on the GPU per layer.
  std::vector<std::int64_t> gpu_experts_per_layer() const {
    std::vector<std::int64_t> out(std::size_t(num_layers), 0);
    for (std::size_t i = 0; i < on_gpu.size() && num_experts > 0; ++i) {
      out[i / std::size_t(num_experts)] += on_gpu[i] != 0 ? 1 : 0;
    }
    return out;
  }

  friend bool operator==(const ExpertMask&, const ExpertMask&) = default;
};

}  // namespace moestat
