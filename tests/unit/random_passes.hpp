// A small CPU recorder fed random passes: the setup of the tests that follow a running
// recorder (passes_since, gpu_loads_since).
#pragma once

#include <cstdint>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/tensor_view.hpp>
#include <moestat/topology.hpp>
#include <random>
#include <vector>

namespace moestat::test::random_passes {

inline constexpr std::int64_t kLayers = 3, kExperts = 4, kSlots = 6, kTopK = 2;

/// kLayers layers of kExperts experts in kSlots slots, top-kTopK, on 2 GPUs.
inline ModelTopology topology() {
  ModelTopology topology = ModelTopology::uniform(kLayers, kExperts, kTopK);
  topology.num_physical_experts = kSlots;
  topology.ep_size = 2;
  return topology;
}

/// One pass of `tokens` random ids (some -1, some out of range) on every layer.
inline void run_pass(record::CpuRecorder& recorder, std::mt19937_64& rng, std::int64_t pass_id,
                     std::int64_t tokens) {
  std::uniform_int_distribution<std::int64_t> id(-1, kSlots);
  recorder.begin_pass(pass_id);
  for (std::int64_t layer = 0; layer < kLayers; ++layer) {
    std::vector<std::int64_t> ids(std::size_t(tokens * kTopK));
    for (auto& value : ids) value = id(rng);
    recorder.record_topk(layer, TensorView::contiguous(ids.data(), DType::kInt64, {tokens, kTopK}));
  }
  recorder.end_pass();
}

}  // namespace moestat::test::random_passes
