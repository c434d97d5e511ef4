// Launchers of the CUDA recorder's kernels (topk_histogram.cu, pass_kernels.cu,
// trace_kernels.cu and gpu_loads_kernels.cu define and launch them; no other file writes
// <<<...>>>). Inputs, outputs, sizes, then the stream. None of
// them synchronises, allocates or branches on device data on the host, so all are safe to capture
// in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <moestat/record/fused_target.hpp>
#include <span>

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

/// How a record kernel is launched after the kernel before it on the stream.
/// - kOverlapped: programmatic dependent launch (sm_90+). The GPU schedules the kernel while
///   its predecessor finishes; the kernel waits on the device for the predecessor's results
///   before its first load, so its launch latency leaves the stream's critical path.
/// - kSerialized: an ordinary launch (bench/gpu measures both).
enum class KernelLaunch { kOverlapped, kSerialized };

/// Layer `layer` of the open pass as the record kernels take it: the few fields they use,
/// so a launch carries a small parameter block (CudaRecorder::fused_target hands out the
/// same to engine kernels).
FusedRecordTarget layer_target(const DeviceBuffers& buffers, std::int64_t layer);

/// Latches the control block (recording flag, placement) for the pass and applies a
/// pending reset. When the pass records, zeroes copy 0 of its counts, which engine kernels
/// may have added to while no pass recorded (CudaRecorder::pass_count_row). One block.
void launch_begin_pass(const DeviceBuffers& buffers, std::int64_t pass_id, cudaStream_t stream);

/// Adds the valid rows of `ids` to layer `layer` of the open pass's slot; ids outside
/// [0, P) other than -1 go to the slot's dropped tally. Exits at once when not recording.
void launch_record_topk(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream,
                        TopkAlgorithm algorithm = TopkAlgorithm::kAuto,
                        KernelLaunch launch = KernelLaunch::kOverlapped);

/// One layer of a launch_record_topk_layers batch.
struct LayerIds {
  std::int64_t layer;
  IdMatrix ids;
};

/// Adds the valid rows of each layer's ids to its layer of the open pass, as
/// launch_record_topk would layer by layer, in one launch per 64 layers of one id type.
/// `valid` applies to every layer (clamped to each layer's rows).
void launch_record_topk_layers(const DeviceBuffers& buffers, std::span<const LayerIds> layers,
                               const ValidCount& valid, cudaStream_t stream);

/// Adds counts[0, num_local_experts) (int32 or int64; DeepEP low-latency masked_m) to
/// slots [first_physical_expert, first_physical_expert + num_local_experts) of the layer.
void launch_record_local_counts(const DeviceBuffers& buffers, std::int64_t layer,
                                const void* counts, bool counts_int64,
                                std::int64_t num_local_experts, std::int64_t first_physical_expert,
                                cudaStream_t stream);

/// Per-token mode: stages the valid rows of `ids` (at most max_tokens) as layer `layer` of
/// the open pass; out-of-range ids become -1 and are tallied as dropped.
void launch_trace_layer(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream);

/// Per-token mode, on the recording stream before launch_end_pass: reserves room in the
/// host ring for the pass's tokens (dropping and counting what does not fit) and writes
/// its descriptor.
void launch_trace_close(const DeviceBuffers& buffers, cudaStream_t stream);

/// Per-token mode, on a side stream after launch_trace_close: copies the reserved tokens
/// into the pinned host ring and publishes the descriptor to the writer thread.
/// `max_rows` bounds the tokens of the pass (the largest captured batch of its hooks).
void launch_trace_copy(const DeviceBuffers& buffers, std::int64_t max_rows, cudaStream_t stream);

/// Closes a recorded pass: when `fold`, sums the pass copies into the window slot (and the
/// decayed load when `decay` >= 0); then writes the slot's metadata and advances the cursor.
void launch_end_pass(const DeviceBuffers& buffers, double decay, bool fold, cudaStream_t stream);

/// Discards the open pass: zeroes every copy of its counts, its tallies and (per-token mode)
/// its staged rows; the window, its cursor and the decayed loads stay as they were.
void launch_abort_pass(const DeviceBuffers& buffers, cudaStream_t stream);

/// Reduces passes already copied out of the window ring, for Recorder::gpu_loads_since (on the
/// reader's stream, never the recording one).
/// - `rows`: [num_passes, L, P] int32 counts, device.
/// - `run_starts`: [num_runs + 1] device; run r is passes [run_starts[r], run_starts[r + 1]),
///   consecutive passes of one placement version.
/// - `gpu_loads`: [num_passes, L, num_gpus] out: each pass's loads, slot p on GPU p / (P / G).
/// - `balancedness`: [num_passes] out: pass_balancedness of each pass's loads, bit for bit.
/// - `run_sums`: [num_runs, L, P] out: the counts of each run's passes summed (the host turns
///   them into logical counts with the run's placement).
/// num_gpus must divide P.
void launch_reduce_gpu_loads(const std::int32_t* rows, const std::int64_t* run_starts,
                             std::int64_t* gpu_loads, double* balancedness, std::int64_t* run_sums,
                             std::int64_t num_passes, std::int64_t num_runs,
                             std::int64_t num_layers, std::int64_t num_physical_experts,
                             std::int64_t num_gpus, cudaStream_t stream);

/// An empty kernel, for benchmarks to set the cost of a graph node against.
void launch_empty(cudaStream_t stream);

}  // namespace moestat::record::cuda
