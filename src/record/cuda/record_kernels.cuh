// Launchers of the CUDA recorder's kernels (topk_histogram.cu and pass_kernels.cu define and
// launch them; no other file writes <<<...>>>). Inputs, outputs, sizes, then the stream. None of
// them synchronises, allocates or branches on device data on the host, so all are safe to capture
// in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_state.cuh"

namespace moestat::record::cuda {

/// A 2-d id tensor on the device: element (t, c) at data[t * row_stride + c * column_stride].
struct IdMatrix {
  const void* data;
  bool is_int64;
  std::int64_t num_rows;
  std::int64_t num_columns;
  std::int64_t row_stride;
  std::int64_t column_stride;
};

/// How many rows of an IdMatrix are real tokens: `*device_count` (int32 or int64) when
/// non-null, clamped to [0, num_rows]; otherwise `host_count`.
struct ValidCount {
  const void* device_count;
  bool is_int64;
  std::int64_t host_count;
};

/// How record_topk's histogram is computed (bench/gpu measures each; kAuto picks by size).
enum class TopkAlgorithm { kAuto, kDirectAtomics, kBlockHistogram };

/// Latches the control block (recording flag, placement) for the pass and applies a
/// pending reset. One small block.
void launch_begin_pass(const DeviceBuffers& buffers, std::int64_t pass_id, cudaStream_t stream);

/// Adds the valid rows of `ids` to layer `layer` of the open pass's slot; ids outside
/// [0, P) other than -1 go to the slot's dropped tally. Exits at once when not recording.
void launch_record_topk(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream,
                        TopkAlgorithm algorithm = TopkAlgorithm::kAuto);

/// Adds counts[0, num_local_experts) (int32 or int64; DeepEP low-latency masked_m) to
/// slots [first_physical_expert, first_physical_expert + num_local_experts) of the layer.
void launch_record_local_counts(const DeviceBuffers& buffers, std::int64_t layer,
                                const void* counts, bool counts_int64,
                                std::int64_t num_local_experts, std::int64_t first_physical_expert,
                                cudaStream_t stream);

/// Closes a recorded pass: writes its metadata, folds it into the decayed load when
/// `decay` >= 0, advances the cursor and clears the next slot. One block.
void launch_end_pass(const DeviceBuffers& buffers, double decay, cudaStream_t stream);

/// An empty kernel, for benchmarks to set the cost of a graph node against.
void launch_empty(cudaStream_t stream);

}  // namespace moestat::record::cuda
