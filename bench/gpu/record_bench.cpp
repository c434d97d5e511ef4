// GPU harness: per-layer cost of moestat's CUDA recording inside a replayed CUDA graph of
// 58 MoE layers, next to an empty kernel node measured in the same run; eager host cost per
// hook call; begin/end-pass cost. Prints one JSON document (bench/gpu/README.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <moestat/record/cuda_recorder.hpp>
#include <random>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "graph_timer.hpp"
#include "record/cuda/record_kernels.cuh"

namespace {

using moestat::DType;
using moestat::TensorView;
using moestat::bench::graph_us;

constexpr int kLayers = 58;
constexpr std::int64_t kPhysical = 288;
constexpr std::int64_t kTopK = 8;

/// Skewed routing like the baseline's: per-layer Dirichlet(0.3)-like popularity, 8 distinct
/// experts per token, 5% of tokens padded with -1.
std::vector<std::int64_t> skewed_ids(std::mt19937_64& rng, std::int64_t num_tokens) {
  std::gamma_distribution<double> gamma(0.3, 1.0);
  std::vector<double> weights(static_cast<std::size_t>(kPhysical));
  for (double& weight : weights) weight = gamma(rng) + 1e-9;
  std::discrete_distribution<std::int64_t> expert(weights.begin(), weights.end());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(num_tokens * kTopK));
  for (std::int64_t token = 0; token < num_tokens; ++token) {
    std::int64_t* row = ids.data() + token * kTopK;
    const bool padded = unit(rng) < 0.05;
    for (std::int64_t column = 0; column < kTopK; ++column) {
      std::int64_t id;
      do {
        id = expert(rng);
      } while (std::find(row, row + column, id) != row + column);
      row[column] = padded ? -1 : id;
    }
  }
  return ids;
}

/// Device buffers for timing the launchers directly: one pass slot pair, recording latched
/// on. The recorder's own buffers are private; these have the same layout.
struct RawBuffers {
  moestat::record::cuda::DeviceBuffers buffers{};
  std::vector<void*> allocations;

  template <typename T>
  T* allocate(std::int64_t count) {
    void* pointer = nullptr;
    MOESTAT_CUDA_CHECK(cudaMalloc(&pointer, std::size_t(count) * sizeof(T)));
    MOESTAT_CUDA_CHECK(cudaMemset(pointer, 0, std::size_t(count) * sizeof(T)));
    allocations.push_back(pointer);
    return static_cast<T*>(pointer);
  }

  RawBuffers() {
    buffers.state = allocate<moestat::record::cuda::DeviceState>(1);
    buffers.control = allocate<moestat::record::cuda::ControlBlock>(1);
    buffers.num_slots = 2;
    buffers.num_layers = kLayers;
    buffers.num_physical_experts = kPhysical;
    buffers.num_logical_experts = 256;
    buffers.pass_counts =
        allocate<std::int32_t>(moestat::record::cuda::kPassCopies * kLayers * kPhysical);
    buffers.window = allocate<std::int32_t>(2 * kLayers * kPhysical);
    buffers.slot_pass_ids = allocate<long long>(2);
    buffers.slot_versions = allocate<unsigned long long>(2);
    buffers.slot_num_tokens = allocate<long long>(2);
    buffers.placement_maps = allocate<std::int32_t>(2 * kLayers * kPhysical);
    const std::int32_t on = 1;
    MOESTAT_CUDA_CHECK(
        cudaMemcpy(&buffers.state->recording, &on, sizeof on, cudaMemcpyHostToDevice));
    // The end-pass kernel keeps the latched flag, so repeated ends keep recording.
  }
  ~RawBuffers() {
    for (void* pointer : allocations) cudaFree(pointer);
  }
};

/// Recording-stream milliseconds per pass of `passes` eager passes through every layer.
double stream_ms_per_pass(moestat::record::CudaRecorder& recorder,
                          const std::vector<void*>& buffers, std::int64_t tokens, int passes,
                          cudaStream_t stream) {
  cudaEvent_t start, stop;
  MOESTAT_CUDA_CHECK(cudaEventCreate(&start));
  MOESTAT_CUDA_CHECK(cudaEventCreate(&stop));
  MOESTAT_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int pass = 0; pass < passes; ++pass) {
    recorder.begin_pass(pass);
    for (int layer = 0; layer < kLayers; ++layer) {
      recorder.record_topk(
          layer, TensorView::contiguous(buffers[std::size_t(layer)], DType::kInt32, {tokens, kTopK},
                                        moestat::Device::cuda(0)));
    }
    recorder.end_pass();
  }
  MOESTAT_CUDA_CHECK(cudaEventRecord(stop, stream));
  MOESTAT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOESTAT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / passes;
}

struct TraceRun {
  double stream_ms_per_pass = 0;
  double writer_gb_per_s = 0;
  std::int64_t dropped_tokens = 0;
  std::uintmax_t file_bytes = 0;
};

/// One per_token recording of `passes` passes into `path`; the writer's rate is the file's
/// bytes over the time from the first pass to the last byte written.
TraceRun trace_run(const moestat::ModelTopology& topology, const std::vector<void*>& buffers,
                   std::int64_t tokens, int passes, const std::filesystem::path& path,
                   std::uint64_t reserve_bytes, cudaStream_t stream) {
  TraceRun run;
  {
    moestat::record::CudaRecorder recorder(
        topology, {.mode = moestat::RecordMode::kPerToken, .per_token_capacity = passes * tokens},
        -1,
        {.trace_path = path, .max_tokens_per_pass = tokens, .trace_reserve_bytes = reserve_bytes});
    recorder.set_stream(stream);
    recorder.start();
    const auto wall_start = std::chrono::steady_clock::now();
    run.stream_ms_per_pass = stream_ms_per_pass(recorder, buffers, tokens, passes, stream);
    recorder.drain_trace();
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    run.dropped_tokens = recorder.snapshot().dropped_tokens;
    run.file_bytes = std::filesystem::file_size(path);
    run.writer_gb_per_s = double(run.file_bytes) / wall_s / 1e9;
  }
  std::filesystem::remove(path);
  return run;
}

/// Per-token drain: eager passes of 8192 tokens through 58 layers, with a host ring that
/// holds them all. Prints the recording stream's time per pass in per_token and in stat
/// mode (the difference is what tracing costs the stream, the device-to-host copy
/// included), and the writer's rate into a file, appending and into a reserved file.
void measure_trace_drain(const moestat::ModelTopology& topology, cudaStream_t stream) {
  constexpr std::int64_t kTokens = 8192;
  constexpr int kPasses = 40;
  // Memory-backed when the machine has /dev/shm, so the figure is the drain's, not a disk's.
  const std::filesystem::path directory =
      std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  const auto path = directory / "moestat-bench.trace";
  std::mt19937_64 rng(1);
  std::vector<void*> buffers;
  for (int layer = 0; layer < kLayers; ++layer) {
    const auto ids = skewed_ids(rng, kTokens);
    const std::vector<std::int32_t> narrow(ids.begin(), ids.end());
    void* device = nullptr;
    MOESTAT_CUDA_CHECK(cudaMalloc(&device, narrow.size() * sizeof(std::int32_t)));
    MOESTAT_CUDA_CHECK(cudaMemcpy(device, narrow.data(), narrow.size() * sizeof(std::int32_t),
                                  cudaMemcpyHostToDevice));
    buffers.push_back(device);
  }
  double stat_ms = 0;
  {
    moestat::record::CudaRecorder recorder(topology, {.mode = moestat::RecordMode::kStat});
    recorder.set_stream(stream);
    recorder.start();
    stat_ms = stream_ms_per_pass(recorder, buffers, kTokens, kPasses, stream);
  }
  const double pass_bytes = double(kTokens) * kLayers * kTopK * sizeof(std::int32_t);
  const TraceRun appended = trace_run(topology, buffers, kTokens, kPasses, path, 0, stream);
  // A reserve that holds the whole trace (header and chunk headers included).
  const auto reserve = std::uint64_t(kPasses * (pass_bytes + 64) + 4096);
  const TraceRun reserved = trace_run(topology, buffers, kTokens, kPasses, path, reserve, stream);
  std::printf(
      "  \"trace\": {\"passes\": %d, \"tokens_per_pass\": %ld, \"pass_mbytes\": %.2f, "
      "\"stat_stream_ms_per_pass\": %.4f, \"trace_stream_ms_per_pass\": %.4f, "
      "\"writer_gb_per_s\": %.2f, \"dropped_tokens\": %ld, \"file_bytes\": %ld, "
      "\"reserved_trace_stream_ms_per_pass\": %.4f, \"reserved_writer_gb_per_s\": %.2f, "
      "\"reserved_dropped_tokens\": %ld, \"reserved_file_bytes\": %ld, "
      "\"directory\": \"%s\"}\n",
      kPasses, long(kTokens), pass_bytes / 1e6, stat_ms, appended.stream_ms_per_pass,
      appended.writer_gb_per_s, long(appended.dropped_tokens), long(appended.file_bytes),
      reserved.stream_ms_per_pass, reserved.writer_gb_per_s, long(reserved.dropped_tokens),
      long(reserved.file_bytes), directory.c_str());
  for (void* buffer : buffers) cudaFree(buffer);
}

}  // namespace

int main() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "record_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp properties{};
  MOESTAT_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  moestat::ModelTopology topology = moestat::ModelTopology::uniform(kLayers, 256, kTopK);
  topology.num_physical_experts = kPhysical;
  topology.validate();
  cudaStream_t stream;
  MOESTAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const double empty_us = graph_us(stream,
                                   [&] {
                                     for (int layer = 0; layer < kLayers; ++layer)
                                       moestat::record::cuda::launch_empty(stream);
                                   }) /
                          kLayers;
  // An engine kernel (the empty one stands in) before each layer's recording node: what
  // adding a node costs there, for an empty node and for the recorder.
  const double engine_us = empty_us;
  const double added_empty_us = graph_us(stream,
                                         [&] {
                                           for (int layer = 0; layer < kLayers; ++layer) {
                                             moestat::record::cuda::launch_empty(stream);
                                             moestat::record::cuda::launch_empty(stream);
                                           }
                                         }) /
                                    kLayers -
                                engine_us;
  RawBuffers raw;
  const double begin_us =
      graph_us(stream,
               [&] {
                 for (int layer = 0; layer < kLayers; ++layer) {
                   moestat::record::cuda::launch_begin_pass(raw.buffers, layer, stream);
                 }
               }) /
      kLayers;
  // begin_pass latched the (zero) control block: switch recording back on for the ends.
  const std::int32_t on = 1;
  MOESTAT_CUDA_CHECK(
      cudaMemcpy(&raw.buffers.state->recording, &on, sizeof on, cudaMemcpyHostToDevice));
  const double end_us =
      graph_us(stream,
               [&] {
                 for (int layer = 0; layer < kLayers; ++layer) {
                   moestat::record::cuda::launch_end_pass(raw.buffers, -1.0, true, stream);
                 }
               }) /
      kLayers;

  std::printf("{\n  \"device\": \"%s\",\n  \"layers\": %d,\n  \"physical_experts\": %ld,\n",
              properties.name, kLayers, long(kPhysical));
  std::printf(
      "  \"top_k\": %ld,\n  \"empty_node_us\": %.4f,\n  \"added_empty_node_us\": %.4f,\n"
      "  \"begin_pass_us\": %.4f,\n  \"end_pass_us\": %.4f,\n  \"rows\": [\n",
      long(kTopK), empty_us, added_empty_us, begin_us, end_us);
  std::mt19937_64 rng(0);
  bool first_row = true;
  for (bool int64_ids : {false, true}) {
    for (std::int64_t tokens : {1, 16, 128, 512, 2048, 8192, 32768}) {
      const std::size_t element = int64_ids ? 8 : 4;
      std::vector<void*> buffers;
      for (int layer = 0; layer < kLayers; ++layer) {
        const auto ids = skewed_ids(rng, tokens);
        std::vector<char> bytes(ids.size() * element);
        for (std::size_t i = 0; i < ids.size(); ++i) {
          if (int64_ids) {
            reinterpret_cast<std::int64_t*>(bytes.data())[i] = ids[i];
          } else {
            reinterpret_cast<std::int32_t*>(bytes.data())[i] = std::int32_t(ids[i]);
          }
        }
        void* device = nullptr;
        MOESTAT_CUDA_CHECK(cudaMalloc(&device, bytes.size()));
        MOESTAT_CUDA_CHECK(cudaMemcpy(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
        buffers.push_back(device);
      }
      const DType dtype = int64_ids ? DType::kInt64 : DType::kInt32;
      std::int32_t* device_rows = nullptr;
      MOESTAT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_rows), sizeof(std::int32_t)));
      const auto rows = std::int32_t(tokens);
      MOESTAT_CUDA_CHECK(cudaMemcpy(device_rows, &rows, sizeof rows, cudaMemcpyHostToDevice));
      const TensorView valid_rows =
          TensorView::contiguous(device_rows, DType::kInt32, {1}, moestat::Device::cuda(0));
      moestat::record::CudaRecorder recorder(
          topology, {.mode = moestat::RecordMode::kStat, .window_size = 1000});
      recorder.set_stream(stream);
      auto record_all = [&] {
        for (int layer = 0; layer < kLayers; ++layer) {
          recorder.record_topk(
              layer, TensorView::contiguous(buffers[std::size_t(layer)], dtype, {tokens, kTopK},
                                            moestat::Device::cuda(0)));
        }
      };
      // The flag is latched per pass: a begin_pass outside the graph opens one pass that the
      // captured record nodes then write into (on) or skip (off).
      recorder.start();
      recorder.begin_pass(0);
      const double on_us = graph_us(stream, record_all) / kLayers;
      // The same hooks given a device-side valid-token count, as an engine replaying a graph
      // of padded batches gives it (here every row counts): the kernels then bound-check ids.
      const double counted_us =
          graph_us(stream,
                   [&] {
                     for (int layer = 0; layer < kLayers; ++layer) {
                       recorder.record_topk(
                           layer,
                           TensorView::contiguous(buffers[std::size_t(layer)], dtype,
                                                  {tokens, kTopK}, moestat::Device::cuda(0)),
                           valid_rows);
                     }
                   }) /
          kLayers;
      const double added_us =
          graph_us(stream,
                   [&] {
                     for (int layer = 0; layer < kLayers; ++layer) {
                       moestat::record::cuda::launch_empty(stream);
                       recorder.record_topk(layer, TensorView::contiguous(
                                                       buffers[std::size_t(layer)], dtype,
                                                       {tokens, kTopK}, moestat::Device::cuda(0)));
                     }
                   }) /
              kLayers -
          engine_us;
      recorder.end_pass();
      recorder.stop();
      recorder.begin_pass(1);
      const double off_us = graph_us(stream, record_all) / kLayers;
      recorder.end_pass();
      recorder.start();
      const double pass_us = graph_us(stream,
                                      [&] {
                                        for (int layer = 0; layer < kLayers; ++layer) {
                                          recorder.begin_pass(layer);
                                          recorder.end_pass();
                                        }
                                      }) /
                             kLayers;
      // Each algorithm through its launcher, whatever the automatic choice.
      const moestat::record::cuda::TopkAlgorithm algorithms[] = {
          moestat::record::cuda::TopkAlgorithm::kDirectAtomics,
          moestat::record::cuda::TopkAlgorithm::kBlockHistogram};
      // Each algorithm overlapped (as the recorder launches it) and serialized.
      double algorithm_us[2][2];
      for (int choice = 0; choice < 2; ++choice) {
        for (int serialized = 0; serialized < 2; ++serialized) {
          const auto launch = serialized != 0 ? moestat::record::cuda::KernelLaunch::kSerialized
                                              : moestat::record::cuda::KernelLaunch::kOverlapped;
          algorithm_us[choice][serialized] =
              graph_us(stream,
                       [&] {
                         for (int layer = 0; layer < kLayers; ++layer) {
                           const moestat::record::cuda::IdMatrix ids{
                               buffers[std::size_t(layer)], int64_ids, tokens, kTopK, kTopK, 1};
                           moestat::record::cuda::launch_record_topk(
                               raw.buffers, layer, ids, {nullptr, false, tokens}, stream,
                               algorithms[choice], launch);
                         }
                       }) /
              kLayers;
        }
      }
      // Eager: host time to enqueue one hook call.
      recorder.begin_pass(2);
      MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto host_start = std::chrono::steady_clock::now();
      constexpr int kEagerRounds = 20;
      for (int round = 0; round < kEagerRounds; ++round) record_all();
      const double host_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start)
              .count() /
          (kEagerRounds * kLayers);
      MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
      recorder.end_pass();
      MOESTAT_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::printf(
          "%s    {\"dtype\": \"%s\", \"tokens\": %ld, \"record_us\": %.4f, "
          "\"record_device_count_us\": %.4f, \"added_record_us\": %.4f, \"record_off_us\": %.4f, "
          "\"begin_end_pass_us\": %.4f, "
          "\"eager_host_us\": %.3f, \"direct_atomics_us\": %.4f, "
          "\"direct_atomics_serialized_us\": %.4f, \"block_histogram_us\": %.4f, "
          "\"block_histogram_serialized_us\": %.4f}",
          first_row ? "" : ",\n", int64_ids ? "int64" : "int32", long(tokens), on_us, counted_us,
          added_us, off_us, pass_us, host_us, algorithm_us[0][0], algorithm_us[0][1],
          algorithm_us[1][0], algorithm_us[1][1]);
      first_row = false;
      for (void* buffer : buffers) cudaFree(buffer);
      cudaFree(device_rows);
    }
  }
  std::printf("\n  ],\n");
  measure_trace_drain(topology, stream);
  std::printf("}\n");
  return 0;
}
