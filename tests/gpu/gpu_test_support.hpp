// Shared helpers of the GPU tests: device arrays, skipping without a GPU, random routing, trace
// files (the comparison of a CUDA snapshot with the CPU reference is in
// unit/snapshot_expectations.hpp).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <moestat/io/trace_file.hpp>
#include <moestat/record/cuda_recorder.hpp>
#include <moestat/snapshot.hpp>
#include <moestat/tensor_view.hpp>
#include <moestat/topology.hpp>
#include <random>
#include <vector>

#include "unit/snapshot_expectations.hpp"

namespace moestat::test {

inline bool has_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define MOESTAT_REQUIRE_GPU() \
  if (!::moestat::test::has_gpu()) GTEST_SKIP() << "no CUDA device"

#define MOESTAT_EXPECT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

/// Owns a device copy of a host vector.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    if (cudaMalloc(&data_, std::max<std::size_t>(count, 1) * sizeof(T)) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc failed");
    }
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void upload(const std::vector<T>& host) {
    if (cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      throw std::runtime_error("cudaMemcpy failed");
    }
  }
  T* data() const { return static_cast<T*>(data_); }
  std::size_t size() const { return count_; }

 private:
  void* data_ = nullptr;
  std::size_t count_;
};

/// Skewed routing: each token picks `top_k` distinct experts with Zipf-like popularity,
/// then a share of entries becomes -1 and a share an out-of-range id (P + something, or
/// a negative id other than -1).
inline std::vector<std::int64_t> random_ids(std::mt19937_64& rng, std::int64_t num_tokens,
                                            std::int64_t top_k, std::int64_t num_physical,
                                            double padding_share = 0.03,
                                            double out_of_range_share = 0.01) {
  std::vector<double> weights(static_cast<std::size_t>(num_physical));
  for (std::size_t i = 0; i < weights.size(); ++i)
    weights[i] = 1.0 / double(1 + (i * 7919) % weights.size());
  std::discrete_distribution<std::int64_t> expert(weights.begin(), weights.end());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(num_tokens * top_k));
  for (std::int64_t token = 0; token < num_tokens; ++token) {
    for (std::int64_t column = 0; column < top_k; ++column) {
      std::int64_t id;
      bool repeated;
      do {  // distinct experts per token, as a router picks them
        id = expert(rng);
        repeated = false;
        for (std::int64_t c = 0; c < column; ++c)
          repeated |= ids[std::size_t(token * top_k + c)] == id;
      } while (repeated && top_k < num_physical);
      const double roll = unit(rng);
      if (roll < padding_share)
        id = -1;
      else if (roll < padding_share + out_of_range_share)
        id = roll < padding_share + out_of_range_share / 2 ? num_physical + 3 : -7;
      ids[std::size_t(token * top_k + column)] = id;
    }
  }
  return ids;
}

template <typename T>
std::vector<T> cast_ids(const std::vector<std::int64_t>& ids) {
  return std::vector<T>(ids.begin(), ids.end());
}

/// CUDA options for per_pass mode and unbounded windows: a ring of `ring_size` passes,
/// collected every `interval` (zero: only by snapshot()).
inline record::CudaOptions pass_ring_options(std::int64_t ring_size,
                                             std::chrono::microseconds interval = {}) {
  record::CudaOptions options;
  options.pass_ring_size = ring_size;
  options.pass_collect_interval = interval;
  return options;
}

/// DeepSeek-V3-like: 61 layers, the first 3 dense, 288 slots over 256 experts, top-8.
inline ModelTopology deepseek_like_topology() {
  ModelTopology topology = ModelTopology::uniform(61, 256, 8);
  for (int layer = 0; layer < 3; ++layer) topology.moe_layers[std::size_t(layer)] = false;
  topology.num_physical_experts = 288;
  topology.ep_size = 8;
  topology.validate();
  return topology;
}

/// A trace file of this process in the temporary directory, named after `name`.
inline std::filesystem::path trace_path(const char* name) {
  return std::filesystem::temp_directory_path() /
         (std::string("moestat-gpu-") + name + "-" + std::to_string(::getpid()) + ".trace");
}

/// Concatenates the file's chunks: ids [N, L, k] and the pass id of each token.
inline void flatten(const io::TraceFile& file, std::vector<std::int32_t>& ids,
                    std::vector<std::int64_t>& pass_ids) {
  const std::int64_t token_size = file.header.num_layers * file.header.top_k;
  for (const io::TraceChunk& chunk : file.chunks) {
    ids.insert(ids.end(), chunk.ids.begin(), chunk.ids.end());
    pass_ids.insert(pass_ids.end(), chunk.ids.size() / std::size_t(token_size), chunk.pass_id);
  }
}

/// Expects the trace file at `path` to hold exactly the tokens of the CPU recorder's
/// per-token snapshot `expected`, then removes it.
inline void expect_trace_holds(const std::filesystem::path& path, const Snapshot& expected) {
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> pass_ids;
  flatten(io::read_trace_file(path), ids, pass_ids);
  EXPECT_EQ(pass_ids, expected.token_pass_ids);
  EXPECT_EQ(ids, expected.token_physical_ids);
  std::filesystem::remove(path);
}

}  // namespace moestat::test
