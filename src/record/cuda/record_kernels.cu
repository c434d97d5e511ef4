// The CUDA recorder's kernels and their launchers.
//
// Every kernel reads the pass's latched recording flag from device memory first and exits
// when it is off, so one captured graph serves both states. The window slot comes from the
// device-side cursor, the valid-token count may come from device memory: a replayed graph
// records into successive slots with the batch's real size.
#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

// Small batches (decode): one thread per id, atomics straight to global memory. A separate
// shared-memory stage costs more round trips than it saves at this size.
constexpr std::int64_t kSmallPathMaxIds = 4096;
constexpr int kSmallThreads = 256;
// Large batches (prefill): per-warp-group shared histograms, then one global atomic per
// non-zero bin per block. Few, busy blocks keep the global merge from contending.
constexpr int kLargeThreads = 512;
constexpr int kHistogramCopies = 8;
constexpr int kIdsPerThread = 16;
constexpr int kLoadsInFlight = 4;  // 16-byte loads per thread per iteration
constexpr int kEndThreads = 1024;
constexpr int kBeginThreads = 256;

__device__ __forceinline__ long long valid_rows(const ValidCount& valid, long long num_rows) {
  long long rows = valid.host_count;
  if (valid.device_count != nullptr) {
    rows = valid.is_int64 ? *static_cast<const long long*>(valid.device_count)
                          : *static_cast<const int*>(valid.device_count);
  }
  return rows < 0 ? 0 : (rows > num_rows ? num_rows : rows);
}

template <typename Id>
__device__ __forceinline__ Id load_id(const IdMatrix& ids, long long index) {
  const long long row = index / ids.num_columns;
  const long long column = index - row * ids.num_columns;
  return static_cast<const Id*>(ids.data)[row * ids.row_stride + column * ids.column_stride];
}

template <typename Id>
__device__ __forceinline__ bool in_range(Id id, long long num_bins) {
  return static_cast<unsigned long long>(static_cast<long long>(id)) <
         static_cast<unsigned long long>(num_bins);
}

/// Sums a per-thread dropped tally over the warp and adds it with one atomic.
__device__ __forceinline__ void add_dropped(unsigned long long* tally, unsigned dropped) {
  dropped = __reduce_add_sync(0xffffffffu, dropped);
  if ((threadIdx.x & 31) == 0 && dropped != 0) atomicAdd(tally, dropped);
}

template <typename Id>
__global__ void record_topk_small_kernel(DeviceBuffers buffers, long long layer, IdMatrix ids,
                                         ValidCount valid) {
  const DeviceState* state = buffers.state;
  if (state->recording == 0) return;
  const long long slot = state->cursor % buffers.num_slots;
  const long long rows = valid_rows(valid, ids.num_rows);
  const long long num_ids = rows * ids.num_columns;
  const long long num_bins = buffers.num_physical_experts;
  int* counts = buffers.window + (slot * buffers.num_layers + layer) * num_bins;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(&buffers.slot_num_tokens[slot], rows);
  unsigned dropped = 0;
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < num_ids) {
    const Id id = load_id<Id>(ids, index);
    if (in_range(id, num_bins)) {
      atomicAdd(&counts[static_cast<long long>(id)], 1);
    } else {
      dropped = id != Id(-1);
    }
  }
  add_dropped(&buffers.slot_dropped[slot], dropped);
}

template <typename Id>
__device__ __forceinline__ void tally(Id id, long long num_bins, int* histogram,
                                      unsigned& dropped) {
  if (in_range(id, num_bins)) {
    atomicAdd(&histogram[static_cast<long long>(id)], 1);
  } else {
    dropped += id != Id(-1);
  }
}

template <typename Id, bool kVectorLoads>
__global__ void __launch_bounds__(kLargeThreads)
    record_topk_large_kernel(DeviceBuffers buffers, long long layer, IdMatrix ids,
                             ValidCount valid) {
  extern __shared__ int histograms[];  // [kHistogramCopies, P]
  const DeviceState* state = buffers.state;
  if (state->recording == 0) return;
  const long long num_bins = buffers.num_physical_experts;
  for (long long i = threadIdx.x; i < kHistogramCopies * num_bins; i += blockDim.x) {
    histograms[i] = 0;
  }
  const long long slot = state->cursor % buffers.num_slots;
  const long long rows = valid_rows(valid, ids.num_rows);
  const long long num_ids = rows * ids.num_columns;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(&buffers.slot_num_tokens[slot], rows);
  __syncthreads();

  int* histogram = histograms + (threadIdx.x / 32 % kHistogramCopies) * num_bins;
  unsigned dropped = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVectorLoads) {
    // 16-byte loads: 4 int32 or 2 int64 ids each; the host checked alignment and layout.
    using Vector = int4;
    constexpr int kPerVector = 16 / sizeof(Id);
    const auto* vectors = static_cast<const Vector*>(ids.data);
    const long long num_vectors = num_ids / kPerVector;
    // kLoadsInFlight independent loads before the first use hide the memory latency.
    for (long long v = first; v < num_vectors; v += kLoadsInFlight * stride) {
      Vector loaded[kLoadsInFlight];
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k) {
        const long long index = v + k * stride;
        loaded[k] = index < num_vectors ? vectors[index] : make_int4(-1, -1, -1, -1);
      }
#pragma unroll
      for (int k = 0; k < kLoadsInFlight; ++k) {
        const Id* lanes = reinterpret_cast<const Id*>(&loaded[k]);
#pragma unroll
        for (int lane = 0; lane < kPerVector; ++lane) {
          tally(lanes[lane], num_bins, histogram, dropped);
        }
      }
    }
    for (long long i = num_vectors * kPerVector + first; i < num_ids; i += stride) {
      tally(static_cast<const Id*>(ids.data)[i], num_bins, histogram, dropped);
    }
  } else {
    for (long long i = first; i < num_ids; i += stride) {
      tally(load_id<Id>(ids, i), num_bins, histogram, dropped);
    }
  }
  add_dropped(&buffers.slot_dropped[slot], dropped);
  __syncthreads();

  int* counts = buffers.window + (slot * buffers.num_layers + layer) * num_bins;
  for (long long bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    int sum = 0;
#pragma unroll
    for (int copy = 0; copy < kHistogramCopies; ++copy) sum += histograms[copy * num_bins + bin];
    if (sum != 0) atomicAdd(&counts[bin], sum);
  }
}

template <typename Count>
__global__ void record_local_counts_kernel(DeviceBuffers buffers, long long layer,
                                           const Count* local_counts, long long num_local,
                                           long long first_physical_expert) {
  const DeviceState* state = buffers.state;
  if (state->recording == 0) return;
  const long long slot = state->cursor % buffers.num_slots;
  int* counts = buffers.window + (slot * buffers.num_layers + layer) * buffers.num_physical_experts;
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
    state->recording = control->recording;
    state->placement_version = control->placement_version;
    state->placement_buffer = control->placement_buffer;
    state->pass_id = pass_id;
  }
}

__global__ void __launch_bounds__(kEndThreads) end_pass_kernel(DeviceBuffers buffers, double decay) {
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
  for (long long i = threadIdx.x; i < pass_size; i += blockDim.x) next_counts[i] = 0;
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

bool is_aligned(const void* pointer, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

template <typename Id>
void launch_topk_typed(const DeviceBuffers& buffers, long long layer, const IdMatrix& ids,
                       const ValidCount& valid, cudaStream_t stream) {
  const std::int64_t max_ids = ids.num_rows * ids.num_columns;
  if (max_ids <= kSmallPathMaxIds) {
    const auto blocks = unsigned(std::max<std::int64_t>(1, (max_ids + kSmallThreads - 1) / kSmallThreads));
    record_topk_small_kernel<Id><<<blocks, kSmallThreads, 0, stream>>>(buffers, layer, ids, valid);
    MOESTAT_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const std::int64_t ids_per_block = std::int64_t(kLargeThreads) * kIdsPerThread;
  const auto blocks = unsigned((max_ids + ids_per_block - 1) / ids_per_block);
  const std::size_t shared_bytes =
      std::size_t(kHistogramCopies) * std::size_t(buffers.num_physical_experts) * sizeof(int);
  const bool contiguous = ids.column_stride == 1 && ids.row_stride == ids.num_columns;
  if (contiguous && is_aligned(ids.data, 16)) {
    record_topk_large_kernel<Id, true>
        <<<blocks, kLargeThreads, shared_bytes, stream>>>(buffers, layer, ids, valid);
  } else {
    record_topk_large_kernel<Id, false>
        <<<blocks, kLargeThreads, shared_bytes, stream>>>(buffers, layer, ids, valid);
  }
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_begin_pass(const DeviceBuffers& buffers, std::int64_t pass_id, cudaStream_t stream) {
  begin_pass_kernel<<<1, kBeginThreads, 0, stream>>>(buffers, pass_id);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_record_topk(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream) {
  if (ids.is_int64) {
    launch_topk_typed<long long>(buffers, layer, ids, valid, stream);
  } else {
    launch_topk_typed<int>(buffers, layer, ids, valid, stream);
  }
}

void launch_record_local_counts(const DeviceBuffers& buffers, std::int64_t layer,
                                const void* counts, bool counts_int64,
                                std::int64_t num_local_experts, std::int64_t first_physical_expert,
                                cudaStream_t stream) {
  const auto blocks = unsigned((num_local_experts + kSmallThreads - 1) / kSmallThreads);
  if (counts_int64) {
    record_local_counts_kernel<long long><<<blocks, kSmallThreads, 0, stream>>>(
        buffers, layer, static_cast<const long long*>(counts), num_local_experts,
        first_physical_expert);
  } else {
    record_local_counts_kernel<int><<<blocks, kSmallThreads, 0, stream>>>(
        buffers, layer, static_cast<const int*>(counts), num_local_experts,
        first_physical_expert);
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
