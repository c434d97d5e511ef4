// GPU harness: what counting costs when it rides in the engine's router kernel
// (moestat/record/cuda_fused.cuh) instead of a graph node of its own. A graph of 58 router
// top-k kernels (one per MoE layer, E = 288, top-8) is timed bare, with fused counting, with
// the record_topk hook after each router, and with an empty kernel after each router, all
// in the same run. Prints one JSON document.
#include <cuda_runtime.h>

#include <cstdio>
#include <moestat/record/cuda_recorder.hpp>
#include <random>
#include <vector>

#include "cuda_check.hpp"
#include "graph_timer.hpp"
#include "record/cuda/record_kernels.cuh"
#include "router_kernel.hpp"

namespace {

using moestat::bench::graph_us;
using moestat::bench::kRouterExperts;

constexpr int kLayers = 58;
constexpr int kTopK = 8;

/// Logits whose expert popularity is skewed like real routing: a per-expert bias drawn from
/// a heavy-tailed distribution plus per-token noise.
std::vector<float> skewed_logits(std::mt19937_64& rng, std::int64_t num_tokens) {
  std::gamma_distribution<float> gamma(0.3f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> bias(kRouterExperts);
  for (float& value : bias) value = 3.0f * gamma(rng);
  std::vector<float> logits(static_cast<std::size_t>(num_tokens) * kRouterExperts);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = bias[i % kRouterExperts] + noise(rng);
  return logits;
}

}  // namespace

int main() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "fused_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp properties{};
  MOESTAT_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  moestat::ModelTopology topology = moestat::ModelTopology::uniform(kLayers, 256, kTopK);
  topology.num_physical_experts = kRouterExperts;
  topology.validate();
  cudaStream_t stream;
  MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  moestat::record::CudaRecorder recorder(topology,
                                         {.mode = moestat::RecordMode::kStat, .window_size = 100});
  recorder.set_stream(stream);
  std::vector<moestat::record::FusedRecordTarget> targets;
  for (int layer = 0; layer < kLayers; ++layer) targets.push_back(recorder.fused_target(layer));

  std::printf("{\n  \"device\": \"%s\",\n  \"layers\": %d,\n  \"experts\": %d,\n  \"top_k\": %d,\n",
              properties.name, kLayers, kRouterExperts, kTopK);
  std::printf("  \"rows\": [\n");
  std::mt19937_64 rng(0);
  bool first_row = true;
  for (std::int64_t tokens : {1, 16, 128, 512, 2048, 8192, 32768}) {
    const std::vector<float> logits = skewed_logits(rng, tokens);
    float* device_logits = nullptr;
    MOESTAT_CUDA_CHECK(cudaMalloc(&device_logits, logits.size() * sizeof(float)));
    MOESTAT_CUDA_CHECK(cudaMemcpy(device_logits, logits.data(), logits.size() * sizeof(float),
                                  cudaMemcpyHostToDevice));
    std::vector<std::int32_t*> ids(kLayers);
    for (auto& buffer : ids) {
      MOESTAT_CUDA_CHECK(cudaMalloc(&buffer, std::size_t(tokens) * kTopK * sizeof(std::int32_t)));
    }
    // Recording on, one pass open outside the graphs: every timed node really counts.
    recorder.start();
    recorder.begin_pass(0);
    auto routers = [&](auto&& after_router, bool fused) {
      return graph_us(stream,
                      [&] {
                        for (int layer = 0; layer < kLayers; ++layer) {
                          moestat::bench::launch_router_topk(
                              device_logits, ids[std::size_t(layer)], tokens, kTopK,
                              fused ? &targets[std::size_t(layer)] : nullptr, stream);
                          after_router(layer);
                        }
                      }) /
             kLayers;
    };
    const double router_us = routers([](int) {}, false);
    const double fused_us = routers([](int) {}, true);
    const double hook_us = routers(
        [&](int layer) {
          recorder.record_topk(layer, moestat::TensorView::contiguous(
                                          ids[std::size_t(layer)], moestat::DType::kInt32,
                                          {tokens, kTopK}, moestat::Device::cuda(0)));
        },
        false);
    const double empty_us =
        routers([&](int) { moestat::record::cuda::launch_empty(stream); }, false);
    recorder.end_pass();
    MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::printf(
        "%s    {\"tokens\": %ld, \"router_us\": %.4f, \"fused_added_us\": %.4f, "
        "\"hook_added_us\": %.4f, \"empty_node_added_us\": %.4f}",
        first_row ? "" : ",\n", long(tokens), router_us, fused_us - router_us, hook_us - router_us,
        empty_us - router_us);
    first_row = false;
    for (auto* buffer : ids) cudaFree(buffer);
    cudaFree(device_logits);
  }
  std::printf("\n  ]\n}\n");
  return 0;
}
