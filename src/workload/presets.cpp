// The built-in workloads. The popularity laws are fitted by scripts/fit_workload.py to real
// routing statistics (DeepSeek-V3: SGLang's published prefill and decode counts; Mixtral:
// fiddler's MMLU counts); docs/workload.md shows the fit next to the real figures.
#include <array>
#include <moestat/error.hpp>
#include <moestat/workload.hpp>
#include <string>

namespace moestat::workload {
namespace {

ModelTopology mixtral_topology() {
  // 8 experts plus 4 replicas on 4 GPUs of 3 slots.
  ModelTopology topology = ModelTopology::uniform(32, 8, 2);
  topology.num_physical_experts = 12;
  topology.ep_size = 4;
  topology.validate();
  return topology;
}

ModelTopology qwen3_topology() {
  // Qwen3-235B-A22B: 48 MoE layers, 128 experts, top-8, no expert groups; 16 replicas on 16
  // GPUs of 9 slots (DeepSeek-V3's 1/8 redundancy).
  ModelTopology topology = ModelTopology::uniform(48, 128, 8);
  topology.num_physical_experts = 144;
  topology.ep_size = 16;
  topology.validate();
  return topology;
}

PopularityModel deepseek_v3_law() {
  return {.sigma_knots = {0.635, 0.539, 0.618, 0.692, 0.707, 0.631},
          .sigma_jitter = 0.091,
          .group_share = 0.278,
          .group_limit = 4,
          .num_hot = 8,
          .hot_boost = 1.173,
          .phase_correlation = 0.742,
          .drift_correlation = 0.912};
}

PopularityModel mixtral_law() {
  // No prefill/decode split in the data: the phase correlation is DeepSeek-V3's.
  return {.sigma_knots = {0.207, 0.304, 0.214, 0.193},
          .sigma_jitter = 0.294,
          .phase_correlation = deepseek_v3_law().phase_correlation,
          .drift_correlation = 0.569};
}

PopularityModel qwen3_law() {
  // No data: DeepSeek-V3's law (a fine-grained top-8 router too) without expert groups.
  // group_share folds into the per-expert part, so each layer's spread is unchanged.
  PopularityModel law = deepseek_v3_law();
  law.group_share = 0.0;
  law.group_limit = 0;
  return law;
}

const std::array<Preset, 3>& table() {
  static const std::array<Preset, 3> presets = {
      Preset{"deepseek-v3",
             "DeepSeek-V3/R1: 61 layers (3 dense), 256 experts on 288 slots over 32 GPUs, "
             "top-8 within 4 of 8 groups; fitted to SGLang's published counts",
             deepseek_like_topology(), deepseek_v3_law(), /*expert_groups=*/8, /*nodes=*/4},
      Preset{"mixtral-8x7b",
             "Mixtral-8x7B: 32 layers, 8 experts on 12 slots over 4 GPUs, top-2; fitted to "
             "fiddler's MMLU counts",
             mixtral_topology(), mixtral_law()},
      Preset{"qwen3-moe",
             "Qwen3-235B-A22B: 48 layers, 128 experts on 144 slots over 16 GPUs, top-8; "
             "DeepSeek-V3's law without groups (no public counts)",
             qwen3_topology(), qwen3_law()},
  };
  return presets;
}

}  // namespace

std::span<const Preset> presets() { return table(); }

const Preset& preset(std::string_view name) {
  std::string known;
  for (const Preset& candidate : table()) {
    if (candidate.name == name) return candidate;
    known += known.empty() ? "" : ", ";
    known += candidate.name;
  }
  MOESTAT_FAIL("unknown workload preset '{}' (known: {})", name, known);
}

}  // namespace moestat::workload
