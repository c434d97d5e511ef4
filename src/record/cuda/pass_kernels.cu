// Pass-level kernels: begin (latch the control block, apply a reset, clear the copy engine
// kernels add to), end (fold the open pass into its window slot and the decayed load, then
// advance the cursor), DeepEP local counts, and an empty kernel for benchmarks.
#include <cstdint>

#include "cuda_check.hpp"
#include "kernel_common.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

constexpr int kLocalThreads = 256;
// Enough threads to clear copy 0 of a pass (L * P ints, 70 KB for DeepSeek-V3) in a few
// rounds of 16-byte stores.
constexpr int kBeginThreads = 512;
constexpr int kFoldThreads = 320;  // one bin per thread for up to 320 physical experts

template <typename Count>
__global__ void record_local_counts_kernel(DeviceBuffers buffers, long long layer,
                                           const Count* local_counts, long long num_local,
                                           long long first_physical_expert) {
  detail::overlap_launch_with_predecessor();
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Count count = j < num_local ? local_counts[j] : Count(0);  // overlaps the flag load
  if (buffers.state->recording == 0) return;
  if (count > 0) {
    atomicAdd(&detail::pass_layer_counts(buffers, 0, layer)[first_physical_expert + j],
              static_cast<int>(count));
  }
}

/// Zeroes copy 0 of the open pass with the block's threads. Engine kernels add to it through
/// CudaRecorder::pass_count_row without looking at the recording flag, so it holds whatever
/// they added while no pass recorded (an unrecorded pass's fold leaves it as it is).
__device__ void clear_engine_copy(const DeviceBuffers& buffers) {
  const long long size = buffers.num_layers * buffers.num_physical_experts;
  // Copy 0 starts the allocation, so it is aligned for 16-byte stores.
  auto* vectors = reinterpret_cast<int4*>(buffers.pass_counts);
  for (long long i = threadIdx.x; i < size / 4; i += blockDim.x) {
    vectors[i] = make_int4(0, 0, 0, 0);
  }
  for (long long i = size / 4 * 4 + threadIdx.x; i < size; i += blockDim.x) {
    buffers.pass_counts[i] = 0;
  }
}

__global__ void __launch_bounds__(kBeginThreads)
    begin_pass_kernel(DeviceBuffers buffers, long long pass_id) {
  DeviceState* state = buffers.state;
  const volatile ControlBlock* control = buffers.control;
  __shared__ unsigned long long epoch;
  __shared__ bool reset;
  __shared__ std::int32_t recording;  // one read of the flag for the clear and the latch
  if (threadIdx.x == 0) {
    epoch = control->epoch;
    recording = control->recording;
    reset = epoch != state->applied_epoch;
    if (reset) {
      state->seq += 1;  // odd: readers retry
      __threadfence();
    }
  }
  __syncthreads();
  if (reset && buffers.decayed_physical != nullptr) {
    const long long physical = buffers.num_layers * buffers.num_physical_experts;
    const long long logical = buffers.num_layers * buffers.num_logical_experts;
    for (long long i = threadIdx.x; i < physical; i += blockDim.x) buffers.decayed_physical[i] = 0;
    for (long long i = threadIdx.x; i < logical; i += blockDim.x) buffers.decayed_logical[i] = 0;
  }
  if (recording != 0) clear_engine_copy(buffers);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (reset) {
      state->base = state->cursor;
      state->dropped_ids = 0;
      state->dropped_tokens = 0;
      state->applied_epoch = epoch;
      __threadfence();
      state->seq += 1;
    }
    const unsigned long long placement_word = control->placement_word;
    state->recording = recording;
    state->placement_version = placement_word >> 1;
    state->placement_buffer = static_cast<std::int32_t>(placement_word & 1);
    state->pass_id = pass_id;
  }
}

/// One block per layer: sums the pass copies into the window slot (overwriting the pass
/// that slot held, which has left the window), zeroes the copies, updates decayed loads.
__global__ void __launch_bounds__(kFoldThreads)
    fold_pass_kernel(DeviceBuffers buffers, double decay) {
  extern __shared__ int layer_sums[];  // [P]
  DeviceState* state = buffers.state;
  const int recording = state->recording;
  const long long cursor = state->cursor;  // loaded with the flag, before any barrier
  if (recording == 0) return;
  const long long layer = blockIdx.x;
  const long long num_bins = buffers.num_physical_experts;
  const long long pass_size = buffers.num_layers * num_bins;
  const bool decayed = decay >= 0;
  if (decayed && threadIdx.x == 0) {
    atomicAdd(&state->fold_blocks, 1ull);
    __threadfence();
  }
  __syncthreads();
  const long long slot = cursor % buffers.num_slots;
  int* window_row = buffers.window + slot * pass_size + layer * num_bins;
  for (long long bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    // All loads before any store: the copies may alias as far as the compiler knows, and
    // interleaving would serialise one memory round trip per copy.
    int values[kPassCopies];
#pragma unroll
    for (int copy = 0; copy < kPassCopies; ++copy) {
      values[copy] = detail::pass_layer_counts(buffers, copy, layer)[bin];
    }
    int sum = 0;
#pragma unroll
    for (int copy = 0; copy < kPassCopies; ++copy) {
      sum += values[copy];
      detail::pass_layer_counts(buffers, copy, layer)[bin] = 0;
    }
    window_row[bin] = sum;
    layer_sums[bin] = sum;
    if (decayed) {
      double& load = buffers.decayed_physical[layer * num_bins + bin];
      load = decay * load + sum;
    }
  }
  if (!decayed) return;
  double* logical = buffers.decayed_logical + layer * buffers.num_logical_experts;
  for (long long e = threadIdx.x; e < buffers.num_logical_experts; e += blockDim.x) {
    logical[e] *= decay;
  }
  __syncthreads();
  const std::int32_t* map =
      buffers.placement_maps + state->placement_buffer * pass_size + layer * num_bins;
  for (long long bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    if (layer_sums[bin] != 0) atomicAdd(&logical[map[bin]], static_cast<double>(layer_sums[bin]));
  }
}

/// Publishes the folded pass: slot metadata, tallies, cursor. One thread.
__global__ void advance_pass_kernel(DeviceBuffers buffers) {
  DeviceState* state = buffers.state;
  // Every field is loaded before the first store, so the loads overlap.
  const int recording = state->recording;
  const unsigned long long seq = state->seq;
  const long long cursor = state->cursor;
  const long long pass_id = state->pass_id;
  const unsigned long long version = state->placement_version;
  const long long num_tokens = state->pass_num_tokens;
  const unsigned long long dropped = state->pass_dropped + state->dropped_ids;
  if (recording == 0) return;
  state->seq = seq + 1;
  __threadfence();
  const long long slot = cursor % buffers.num_slots;
  buffers.slot_pass_ids[slot] = pass_id;
  buffers.slot_versions[slot] = version;
  buffers.slot_num_tokens[slot] = num_tokens;
  state->dropped_ids = dropped;
  state->pass_num_tokens = 0;
  state->pass_dropped = 0;
  state->cursor = cursor + 1;
  __threadfence();
  state->seq = seq + 2;
}

/// One block per layer: the layer's counts in every copy of the open pass back to zero, and
/// the pass's tallies and staged trace rows, so the next pass begins as after a fold.
__global__ void __launch_bounds__(kFoldThreads) abort_pass_kernel(DeviceBuffers buffers) {
  DeviceState* state = buffers.state;
  if (state->recording == 0) return;
  const long long layer = blockIdx.x;
  for (int copy = 0; copy < kPassCopies; ++copy) {
    int* counts = detail::pass_layer_counts(buffers, copy, layer);
    for (long long bin = threadIdx.x; bin < buffers.num_physical_experts; bin += blockDim.x) {
      counts[bin] = 0;
    }
  }
  if (threadIdx.x != 0) return;
  if (buffers.trace.layer_rows != nullptr) buffers.trace.layer_rows[layer] = 0;
  if (layer == 0) {
    state->pass_num_tokens = 0;
    state->pass_dropped = 0;
  }
}

__global__ void empty_kernel() {}

}  // namespace

void launch_begin_pass(const DeviceBuffers& buffers, std::int64_t pass_id, cudaStream_t stream) {
  begin_pass_kernel<<<1, kBeginThreads, 0, stream>>>(buffers, pass_id);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_record_local_counts(const DeviceBuffers& buffers, std::int64_t layer,
                                const void* counts, bool counts_int64,
                                std::int64_t num_local_experts, std::int64_t first_physical_expert,
                                cudaStream_t stream) {
  const auto blocks = unsigned((num_local_experts + kLocalThreads - 1) / kLocalThreads);
  const long long layer_index = layer;
  const long long num_local = num_local_experts;
  const long long first = first_physical_expert;
  if (counts_int64) {
    detail::launch_kernel(KernelLaunch::kOverlapped, record_local_counts_kernel<long long>, blocks,
                          kLocalThreads, 0, stream, buffers, layer_index,
                          static_cast<const long long*>(counts), num_local, first);
  } else {
    detail::launch_kernel(KernelLaunch::kOverlapped, record_local_counts_kernel<int>, blocks,
                          kLocalThreads, 0, stream, buffers, layer_index,
                          static_cast<const int*>(counts), num_local, first);
  }
}

void launch_end_pass(const DeviceBuffers& buffers, double decay, bool fold, cudaStream_t stream) {
  if (fold) {
    const std::size_t shared_bytes = std::size_t(buffers.num_physical_experts) * sizeof(int);
    fold_pass_kernel<<<unsigned(buffers.num_layers), kFoldThreads, shared_bytes, stream>>>(buffers,
                                                                                           decay);
    MOESTAT_CUDA_CHECK(cudaGetLastError());
  }
  advance_pass_kernel<<<1, 1, 0, stream>>>(buffers);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_abort_pass(const DeviceBuffers& buffers, cudaStream_t stream) {
  abort_pass_kernel<<<unsigned(buffers.num_layers), kFoldThreads, 0, stream>>>(buffers);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::record::cuda
