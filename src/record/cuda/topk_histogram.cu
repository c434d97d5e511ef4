// record_topk's kernels: a histogram of a layer's router ids added to the open pass's slot.
//
// Two algorithms, chosen by the host from the captured (padded) batch shape:
// - direct atomics (decode sizes): one thread per id, one global atomic per id. At this
//   size a kernel's cost is its chain of dependent memory round trips, so every load (flag,
//   cursor, valid count, id) is issued before any is used, and there is no shared stage.
// - cluster histogram (prefill sizes): each block tallies its share of ids into per-warp
//   shared-memory copies (skewed routing makes a single copy contend), sums them, and the
//   8 blocks of a thread-block cluster reduce their sums through distributed shared memory
//   so that only one global atomic per bin per cluster reaches L2.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "kernel_common.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kDirectThreads = 256;
constexpr int kClusterSize = 8;
constexpr int kClusterThreads = 256;
constexpr int kClusterWarps = kClusterThreads / 32;
constexpr int kVectorsPerThread = 2;  // 16-byte loads in flight per thread per round
constexpr int kMaxClusterBlocks = 128;
// Up to this many ids the direct kernel wins (bench/gpu measures both).
constexpr std::int64_t kDirectMaxIds = 1024;

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

template <typename Id>
__global__ void __launch_bounds__(kDirectThreads)
    direct_atomics_kernel(DeviceBuffers buffers, long long layer, IdMatrix ids, ValidCount valid) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // NOTE: the id is loaded before the flag is checked: it lies inside the captured batch
  // (padding rows included), and overlapping the loads is what makes this kernel cheap.
  const bool in_batch = index < ids.num_rows * ids.num_columns;
  const Id id = in_batch ? load_id<Id>(ids, index) : Id(-1);
  const int recording = buffers.state->recording;
  const long long cursor = buffers.state->cursor;
  const long long rows = detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;
  const long long slot = cursor % buffers.num_slots;
  if (index == 0) atomicMax(&buffers.slot_num_tokens[slot], rows);
  unsigned dropped = 0;
  if (index < rows * ids.num_columns) {
    if (in_range(id, buffers.num_physical_experts)) {
      atomicAdd(&detail::layer_counts(buffers, slot, layer)[static_cast<long long>(id)], 1);
    } else {
      dropped = id != Id(-1);
    }
  }
  detail::add_warp_tally(&buffers.slot_dropped[slot], dropped);
}

template <typename Id>
__device__ __forceinline__ void tally(Id id, bool counted, long long num_bins, int* histogram,
                                      unsigned& dropped) {
  if (!counted) return;
  if (in_range(id, num_bins)) {
    atomicAdd(&histogram[static_cast<long long>(id)], 1);
  } else {
    dropped += id != Id(-1);
  }
}

template <typename Id, bool kVectorLoads>
__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(kClusterThreads)
    cluster_histogram_kernel(DeviceBuffers buffers, long long layer, IdMatrix ids,
                             ValidCount valid) {
  // [kClusterWarps, P] per-warp copies, then [P] this block's sums (read by the cluster).
  extern __shared__ int shared[];
  cg::cluster_group cluster = cg::this_cluster();
  const long long num_bins = buffers.num_physical_experts;
  const long long batch_ids = ids.num_rows * ids.num_columns;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;

  using Vector = int4;
  constexpr int kPerVector = 16 / sizeof(Id);
  // First round of loads in flight before the flag is known (see direct_atomics_kernel).
  Vector loaded[kVectorsPerThread];
  if constexpr (kVectorLoads) {
    const auto* vectors = static_cast<const Vector*>(ids.data);
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) {
      const long long v = first + k * stride;
      loaded[k] = v < batch_ids / kPerVector ? vectors[v] : make_int4(-1, -1, -1, -1);
    }
  }
  const int recording = buffers.state->recording;
  const long long cursor = buffers.state->cursor;
  const long long rows = detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;  // uniform over the grid, so no block waits at a cluster barrier

  int* sums = shared + kClusterWarps * num_bins;
  for (long long i = threadIdx.x; i < kClusterWarps * num_bins; i += blockDim.x) {
    shared[i] = 0;
  }
  const long long slot = cursor % buffers.num_slots;
  const long long num_ids = rows * ids.num_columns;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(&buffers.slot_num_tokens[slot], rows);
  __syncthreads();

  int* histogram = shared + (threadIdx.x / 32) * num_bins;
  unsigned dropped = 0;
  if constexpr (kVectorLoads) {
    const auto* vectors = static_cast<const Vector*>(ids.data);
    const long long num_vectors = batch_ids / kPerVector;
    for (long long base = first;; base += kVectorsPerThread * stride) {
#pragma unroll
      for (int k = 0; k < kVectorsPerThread; ++k) {
        const long long v = base + k * stride;
        const Id* lanes = reinterpret_cast<const Id*>(&loaded[k]);
#pragma unroll
        for (int lane = 0; lane < kPerVector; ++lane) {
          tally(lanes[lane], v * kPerVector + lane < num_ids, num_bins, histogram, dropped);
        }
      }
      const long long next = base + kVectorsPerThread * stride;
      if (next >= num_vectors) break;
#pragma unroll
      for (int k = 0; k < kVectorsPerThread; ++k) {
        const long long v = next + k * stride;
        loaded[k] = v < num_vectors ? vectors[v] : make_int4(-1, -1, -1, -1);
      }
    }
    // A batch that is not a whole number of vectors leaves a tail of single ids.
    const long long tail = num_vectors * kPerVector + first;
    if (tail < num_ids)
      tally(static_cast<const Id*>(ids.data)[tail], true, num_bins, histogram, dropped);
  } else {
    for (long long i = first; i < num_ids; i += stride) {
      tally(load_id<Id>(ids, i), true, num_bins, histogram, dropped);
    }
  }
  detail::add_warp_tally(&buffers.slot_dropped[slot], dropped);
  __syncthreads();

  for (long long bin = threadIdx.x; bin < num_bins; bin += blockDim.x) {
    int sum = 0;
#pragma unroll
    for (int warp = 0; warp < kClusterWarps; ++warp) sum += shared[warp * num_bins + bin];
    sums[bin] = sum;
  }
  cluster.sync();
  // Block r of the cluster merges bins [r * share, (r + 1) * share) of all blocks' sums.
  const long long share = (num_bins + kClusterSize - 1) / kClusterSize;
  const long long begin = cluster.block_rank() * share;
  const long long end = begin + share < num_bins ? begin + share : num_bins;
  int* counts = detail::layer_counts(buffers, slot, layer);
  for (long long bin = begin + threadIdx.x; bin < end; bin += blockDim.x) {
    int sum = 0;
#pragma unroll
    for (int rank = 0; rank < kClusterSize; ++rank) sum += cluster.map_shared_rank(sums, rank)[bin];
    if (sum != 0) atomicAdd(&counts[bin], sum);
  }
  cluster.sync();  // no block may exit while others still read its shared memory
}

bool is_aligned(const void* pointer, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

template <typename Id>
void launch_typed(const DeviceBuffers& buffers, long long layer, const IdMatrix& ids,
                  const ValidCount& valid, TopkAlgorithm algorithm, cudaStream_t stream) {
  const std::int64_t batch_ids = ids.num_rows * ids.num_columns;
  if (algorithm == TopkAlgorithm::kAuto) {
    algorithm = batch_ids <= kDirectMaxIds ? TopkAlgorithm::kDirectAtomics
                                           : TopkAlgorithm::kClusterHistogram;
  }
  if (algorithm == TopkAlgorithm::kDirectAtomics) {
    const auto blocks =
        unsigned(std::max<std::int64_t>(1, (batch_ids + kDirectThreads - 1) / kDirectThreads));
    direct_atomics_kernel<Id><<<blocks, kDirectThreads, 0, stream>>>(buffers, layer, ids, valid);
    MOESTAT_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const bool vector_loads =
      ids.column_stride == 1 && ids.row_stride == ids.num_columns && is_aligned(ids.data, 16);
  const std::int64_t per_vector = 16 / std::int64_t(sizeof(Id));
  const std::int64_t ids_per_block = std::int64_t(kClusterThreads) * kVectorsPerThread * per_vector;
  std::int64_t blocks = (batch_ids + ids_per_block - 1) / ids_per_block;
  blocks = std::clamp<std::int64_t>((blocks + kClusterSize - 1) / kClusterSize * kClusterSize,
                                    kClusterSize, kMaxClusterBlocks);
  const std::size_t shared_bytes =
      std::size_t(kClusterWarps + 1) * std::size_t(buffers.num_physical_experts) * sizeof(int);
  if (vector_loads) {
    cluster_histogram_kernel<Id, true>
        <<<unsigned(blocks), kClusterThreads, shared_bytes, stream>>>(buffers, layer, ids, valid);
  } else {
    cluster_histogram_kernel<Id, false>
        <<<unsigned(blocks), kClusterThreads, shared_bytes, stream>>>(buffers, layer, ids, valid);
  }
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_record_topk(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream, TopkAlgorithm algorithm) {
  if (ids.is_int64) {
    launch_typed<long long>(buffers, layer, ids, valid, algorithm, stream);
  } else {
    launch_typed<int>(buffers, layer, ids, valid, algorithm, stream);
  }
}

}  // namespace moestat::record::cuda
