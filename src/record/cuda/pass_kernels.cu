// Pass-level kernels: begin (latch the control block, apply a reset), end (metadata,
// decayed load, cursor, clearing the next slot), DeepEP local counts, and an empty kernel
// for benchmarks.
#include <cstdint>

#include "cuda_check.hpp"
#include "kernel_common.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

constexpr int kLocalThreads = 256;
constexpr int kBeginThreads = 128;
constexpr int kEndThreads = 1024;

template <typename Count>
__global__ void record_local_counts_kernel(DeviceBuffers buffers, long long layer,
                                           const Count* local_counts, long long num_local,
                                           long long first_physical_expert) {
  const DeviceState* state = buffers.state;
  if (state->recording == 0) return;
  const long long slot = state->cursor % buffers.num_slots;
  int* counts = detail::layer_counts(buffers, slot, layer);
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < num_local && local_counts[j] > 0) {
    atomicAdd(&counts[first_physical_expert + j], static_cast<int>(local_counts[j]));
  }
}

__global__ void begin_pass_kernel(DeviceBuffers buffers, long long pass_id) {
  DeviceState* state = buffers.state;
  const volatile ControlBlock* control = buffers.control;
  __shared__ unsigned long long epoch;
  __shared__ bool reset;
  if (threadIdx.x == 0) {
    epoch = control->epoch;
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
  __syncthreads();
  if (threadIdx.x == 0) {
    if (reset) {
      state->base = state->cursor;
      state->dropped_ids = 0;
      state->applied_epoch = epoch;
      __threadfence();
      state->seq += 1;
    }
    const unsigned long long placement_word = control->placement_word;
    state->recording = control->recording;
    state->placement_version = placement_word >> 1;
    state->placement_buffer = static_cast<std::int32_t>(placement_word & 1);
    state->pass_id = pass_id;
  }
}

__global__ void __launch_bounds__(kEndThreads)
    end_pass_kernel(DeviceBuffers buffers, double decay) {
  DeviceState* state = buffers.state;
  __shared__ bool recording;
  __shared__ long long cursor;
  if (threadIdx.x == 0) {
    recording = state->recording != 0;
    cursor = state->cursor;
    if (recording) {
      state->seq += 1;
      __threadfence();
    }
  }
  __syncthreads();
  if (!recording) return;

  const long long num_bins = buffers.num_physical_experts;
  const long long pass_size = buffers.num_layers * num_bins;
  const long long slot = cursor % buffers.num_slots;
  int* pass_counts = buffers.window + slot * pass_size;
  if (decay >= 0) {
    const long long logical_size = buffers.num_layers * buffers.num_logical_experts;
    for (long long i = threadIdx.x; i < pass_size; i += blockDim.x) {
      buffers.decayed_physical[i] = decay * buffers.decayed_physical[i] + pass_counts[i];
    }
    for (long long i = threadIdx.x; i < logical_size; i += blockDim.x) {
      buffers.decayed_logical[i] *= decay;
    }
    __syncthreads();
    const std::int32_t* map = buffers.placement_maps + state->placement_buffer * pass_size;
    for (long long i = threadIdx.x; i < pass_size; i += blockDim.x) {
      if (pass_counts[i] != 0) {
        const long long layer = i / num_bins;
        atomicAdd(&buffers.decayed_logical[layer * buffers.num_logical_experts + map[i]],
                  static_cast<double>(pass_counts[i]));
      }
    }
  }
  if (threadIdx.x == 0) {
    buffers.slot_pass_ids[slot] = state->pass_id;
    buffers.slot_versions[slot] = state->placement_version;
    state->dropped_ids += buffers.slot_dropped[slot];
  }
  __syncthreads();

  // Clear the slot the next pass writes (the oldest kept pass, or this one when only one).
  const long long next = (cursor + 1) % buffers.num_slots;
  int* next_counts = buffers.window + next * pass_size;
  if (pass_size % 4 == 0) {  // slots then start on 16-byte boundaries
    int4* vectors = reinterpret_cast<int4*>(next_counts);
    for (long long i = threadIdx.x; i < pass_size / 4; i += blockDim.x) {
      vectors[i] = make_int4(0, 0, 0, 0);
    }
  } else {
    for (long long i = threadIdx.x; i < pass_size; i += blockDim.x) next_counts[i] = 0;
  }
  if (threadIdx.x == 0) {
    buffers.slot_num_tokens[next] = 0;
    buffers.slot_dropped[next] = 0;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    state->cursor = cursor + 1;
    __threadfence();
    state->seq += 1;
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
  if (counts_int64) {
    record_local_counts_kernel<long long><<<blocks, kLocalThreads, 0, stream>>>(
        buffers, layer, static_cast<const long long*>(counts), num_local_experts,
        first_physical_expert);
  } else {
    record_local_counts_kernel<int><<<blocks, kLocalThreads, 0, stream>>>(
        buffers, layer, static_cast<const int*>(counts), num_local_experts, first_physical_expert);
  }
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_end_pass(const DeviceBuffers& buffers, double decay, cudaStream_t stream) {
  end_pass_kernel<<<1, kEndThreads, 0, stream>>>(buffers, decay);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::record::cuda
