// What stays on the GPU when llama.cpp runs a MoE model as a CPU/GPU hybrid, under a budget
// of GPU bytes for expert tensors, at two granularities (docs/llama-cpp.md, "What stays on the
// GPU"):
//  - whole tensors, what llama.cpp accepts today: all experts of a layer's
//    blk.N.ffn_{gate,up,down}_exps stay on the GPU or go to the CPU together
//    (`-ot/--override-tensor`, `--n-cpu-moe N`);
//  - single experts, what a per-expert cache can hold: the hot-expert planner's global top-G
//    (choose_hot_experts, kFrequency) with G as large as the budget allows.
//
//   const plan::LlamaOffload plan = plan::plan_llama_offload(loads, expert_bytes, 24ull << 30);
//   fmt::print("-ot '{}'\n", plan::llama_cpu_override(plan.whole_layers.gpu_layers, moe_layers));
#pragma once

#include <cstdint>
#include <moestat/expert_mask.hpp>
#include <moestat/plan/loads.hpp>
#include <span>
#include <string>
#include <vector>

namespace moestat::plan {

/// MoE layers whose expert tensors stay on the GPU, whole.
struct LayerChoice {
  std::vector<std::int64_t> gpu_layers;  ///< Ascending.
  std::uint64_t bytes = 0;               ///< Their expert tensors' bytes.
  double share = 0;                      ///< Of all routed tokens, those these layers serve.
};

struct LlamaOffload {
  /// The MoE layers (those with load), ascending.
  std::vector<std::int64_t> moe_layers;
  /// -ot: the layers of most routed tokens per byte, greedily, while they fit.
  LayerChoice whole_layers;
  /// --n-cpu-moe N: the expert tensors of the first N layers on the CPU, N the least whose
  /// remaining MoE layers fit; gpu_layers are the MoE layers from N on.
  std::int64_t n_cpu_moe = 0;
  LayerChoice last_layers;
  /// Per expert: the hot-expert planner's mask (dense layers all on the GPU, as it writes
  /// them), its bytes and share.
  ExpertMask experts;
  std::uint64_t expert_bytes_used = 0;
  double expert_share = 0;
};

/// The plan for `budget_bytes` of GPU memory for expert tensors. `expert_bytes` is [L]: the
/// bytes of one expert of each layer (its gate, up and down rows; a layer's expert tensors
/// take E times that), any value for layers without load. moestat::Error when the loads are
/// invalid, `expert_bytes` is not [L] or is 0 for a MoE layer.
LlamaOffload plan_llama_offload(const ExpertLoads& loads,
                                std::span<const std::uint64_t> expert_bytes,
                                std::uint64_t budget_bytes);

/// The -ot value that puts the expert tensors of every MoE layer not in `gpu_layers` on the
/// CPU: blk\.(1|4)\.ffn_.*_exps\.=CPU; empty when every MoE layer stays on the GPU. The
/// `\.` after the number keeps blk.1 from matching blk.11 (llama.cpp searches, unanchored).
std::string llama_cpu_override(std::span<const std::int64_t> gpu_layers,
                               std::span<const std::int64_t> moe_layers);

}  // namespace moestat::plan
