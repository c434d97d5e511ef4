// A CPU and a CUDA recorder fed the same ids, the CUDA one on a stream of its own: the setup of
// the GPU tests that follow a running recorder (passes_since, gpu_loads_since, live metrics),
// where the CPU recorder is the reference.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <moestat/record/cpu_recorder.hpp>
#include <moestat/record/cuda_recorder.hpp>
#include <random>
#include <stdexcept>
#include <vector>

#include "gpu/gpu_test_support.hpp"

namespace moestat::test {

class PairedRecorders {
 public:
  static constexpr std::int64_t kTopK = 8;
  /// Which layers a pass records: every MoE layer, unless a test skips one.
  using LayerFilter = std::function<bool(std::int64_t layer)>;

  /// Both recorders with `options`; the CUDA one's pass ring (per_pass) holds 64 passes and is
  /// collected every millisecond, so it drops none at these tests' pace.
  PairedRecorders(const ModelTopology& topology, const RecorderOptions& options)
      : topology_(topology),
        cpu_(topology, options),
        gpu_(topology, options, -1, pass_ring_options(64, std::chrono::milliseconds(1))) {
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
      throw std::runtime_error("cudaStreamCreateWithFlags failed");
    }
    gpu_.set_stream(stream_);
  }
  ~PairedRecorders() {
    gpu_.set_stream(nullptr);
    cudaStreamDestroy(stream_);
  }
  PairedRecorders(const PairedRecorders&) = delete;
  PairedRecorders& operator=(const PairedRecorders&) = delete;

  record::CpuRecorder& cpu() { return cpu_; }
  record::CudaRecorder& gpu() { return gpu_; }
  cudaStream_t stream() const { return stream_; }

  void start() {
    cpu_.start();
    gpu_.start();
  }

  /// Device ids for `num_tokens` tokens of every MoE layer: room enough for one enqueue_pass.
  std::size_t ids_per_pass(std::int64_t num_tokens) const {
    std::size_t layers = 0;
    for (std::int64_t layer = 0; layer < topology_.num_layers; ++layer) {
      layers += topology_.is_moe(layer) ? 1 : 0;
    }
    return layers * std::size_t(num_tokens * kTopK);
  }

  /// Records pass `pass_id` on both: `num_tokens` random tokens (random_ids, top-8) in every
  /// MoE layer `records` accepts, the CUDA recorder's ids uploaded into `device_ids`
  /// (ids_per_pass elements, alive until the stream has run the pass). Does not wait for the
  /// stream: the pass may still run when this returns.
  void enqueue_pass(std::int64_t pass_id, std::int64_t num_tokens, std::mt19937_64& rng,
                    std::int64_t* device_ids, const LayerFilter& records = nullptr) {
    cpu_.begin_pass(pass_id);
    gpu_.begin_pass(pass_id);
    std::int64_t* next = device_ids;
    for (std::int64_t layer = 0; layer < topology_.num_layers; ++layer) {
      if (!topology_.is_moe(layer) || (records && !records(layer))) continue;
      const std::vector<std::int64_t> ids =
          random_ids(rng, num_tokens, kTopK, topology_.num_physical_experts);
      // A copy on the legacy default stream, which does not wait for the recorder's stream.
      if (cudaMemcpy(next, ids.data(), ids.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice) !=
          cudaSuccess) {
        throw std::runtime_error("cudaMemcpy failed");
      }
      cpu_.record_topk(layer,
                       TensorView::contiguous(ids.data(), DType::kInt64, {num_tokens, kTopK}));
      gpu_.record_topk(
          layer, TensorView::contiguous(next, DType::kInt64, {num_tokens, kTopK}, Device::cuda(0)));
      next += num_tokens * kTopK;
    }
    cpu_.end_pass();
    gpu_.end_pass();
  }

  /// As enqueue_pass with ids of its own, then waits for the stream to run the pass.
  void record_pass(std::int64_t pass_id, std::int64_t num_tokens, std::mt19937_64& rng,
                   const LayerFilter& records = nullptr) {
    DeviceArray<std::int64_t> device_ids(ids_per_pass(num_tokens));
    enqueue_pass(pass_id, num_tokens, rng, device_ids.data(), records);
    if (cudaStreamSynchronize(stream_) != cudaSuccess) {
      throw std::runtime_error("cudaStreamSynchronize failed");
    }
  }

 private:
  ModelTopology topology_;
  record::CpuRecorder cpu_;
  record::CudaRecorder gpu_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace moestat::test
