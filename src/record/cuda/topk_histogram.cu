// record_topk's kernels: a histogram of one layer's router ids added to the open pass.
//
// Two algorithms, chosen by the host from the captured (padded) batch shape:
// - direct atomics (decode sizes): one thread per id, one global atomic per id. At this
//   size a kernel's cost is its chain of dependent memory round trips, so every load (flag,
//   valid count, id) is issued before any is used, and there is no shared-memory stage.
// - block histogram (prefill sizes): each block tallies its share of the ids into per-warp
//   shared-memory copies (skewed routing makes one copy contend), sums them and adds one
//   global atomic per non-zero bin.
// Either way block b adds to copy b % kPassCopies of the open pass, so a hot expert's
// counter takes at most 1/kPassCopies of the blocks' atomics; end_pass folds the copies.
// bench/gpu measures both algorithms at every size.
#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "kernel_common.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

constexpr int kDirectThreads = 256;
constexpr int kBlockThreads = 256;
constexpr int kBlockWarps = kBlockThreads / 32;
constexpr int kVectorsPerThread = 2;  // 16-byte loads in flight per thread per round
constexpr int kMaxBlocks = 128;
// Up to this many ids (2048 tokens of top-8) the direct kernel wins on an H200 (bench/gpu
// measures both algorithms at every size).
constexpr std::int64_t kDirectMaxIds = 16384;

/// Id number `index` in row-major order; a contiguous matrix needs no 64-bit division.
template <typename Id, bool kContiguous>
__device__ __forceinline__ Id load_id(const IdMatrix& ids, long long index) {
  if constexpr (kContiguous) return static_cast<const Id*>(ids.data)[index];
  const long long row = index / ids.num_columns;
  const long long column = index - row * ids.num_columns;
  return static_cast<const Id*>(ids.data)[row * ids.row_stride + column * ids.column_stride];
}

template <typename Id>
__device__ __forceinline__ bool in_range(Id id, long long num_bins) {
  return static_cast<unsigned long long>(static_cast<long long>(id)) <
         static_cast<unsigned long long>(num_bins);
}

/// Copy blockIdx.x % kPassCopies (= target.num_copies) of the layer's counts.
__device__ __forceinline__ int* block_counts(const FusedRecordTarget& target) {
  return target.layer_counts + (blockIdx.x % kPassCopies) * target.copy_stride;
}

template <typename Id, bool kContiguous>
__global__ void __launch_bounds__(kDirectThreads)
    direct_atomics_kernel(FusedRecordTarget target, IdMatrix ids, ValidCount valid) {
  detail::overlap_launch_with_predecessor();
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  // NOTE: the id is loaded before the flag is checked: it lies inside the captured batch
  // (padding rows included), and overlapping the loads is what makes this kernel cheap.
  const bool in_batch = index < ids.num_rows * ids.num_columns;
  const Id id = in_batch ? load_id<Id, kContiguous>(ids, index) : Id(-1);
  const int recording = *target.recording;
  const long long rows = detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;
  if (index == 0) atomicMax(target.pass_num_tokens, rows);
  unsigned dropped = 0;
  if (index < rows * ids.num_columns) {
    if (in_range(id, target.num_physical_experts)) {
      atomicAdd(&block_counts(target)[static_cast<long long>(id)], 1);
    } else {
      dropped = id != Id(-1);
    }
  }
  detail::add_warp_tally(target.dropped_ids, dropped);
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
__global__ void __launch_bounds__(kBlockThreads)
    block_histogram_kernel(FusedRecordTarget target, IdMatrix ids, ValidCount valid) {
  extern __shared__ int histograms[];  // [kBlockWarps, P]
  detail::overlap_launch_with_predecessor();
  const long long num_bins = target.num_physical_experts;
  const long long batch_ids = ids.num_rows * ids.num_columns;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;

  using Vector = int4;
  constexpr int kPerVector = 16 / sizeof(Id);
  const long long num_vectors = batch_ids / kPerVector;
  const auto* vectors = static_cast<const Vector*>(ids.data);
  // First round of loads in flight before the flag is known (see direct_atomics_kernel).
  Vector loaded[kVectorsPerThread];
  if constexpr (kVectorLoads) {
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) {
      const long long v = first + k * stride;
      loaded[k] = v < num_vectors ? vectors[v] : make_int4(-1, -1, -1, -1);
    }
  }
  const int recording = *target.recording;
  const long long rows = detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;

  // 32-bit indices: the shared histograms are far smaller than 2^31.
  const int shared_bins = static_cast<int>(num_bins);
  for (int i = threadIdx.x; i < kBlockWarps * shared_bins; i += blockDim.x) histograms[i] = 0;
  const long long num_ids = rows * ids.num_columns;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(target.pass_num_tokens, rows);
  __syncthreads();

  int* histogram = histograms + (threadIdx.x / 32) * shared_bins;
  unsigned dropped = 0;
  if constexpr (kVectorLoads) {
    for (long long base = first;; base += kVectorsPerThread * stride) {
      // Issue the next round's loads before tallying this round's.
      const long long next = base + kVectorsPerThread * stride;
      Vector upcoming[kVectorsPerThread];
#pragma unroll
      for (int k = 0; k < kVectorsPerThread; ++k) {
        const long long v = next + k * stride;
        upcoming[k] = v < num_vectors ? vectors[v] : make_int4(-1, -1, -1, -1);
      }
#pragma unroll
      for (int k = 0; k < kVectorsPerThread; ++k) {
        const long long v = base + k * stride;
        const Id* lanes = reinterpret_cast<const Id*>(&loaded[k]);
#pragma unroll
        for (int lane = 0; lane < kPerVector; ++lane) {
          tally(lanes[lane], v * kPerVector + lane < num_ids, num_bins, histogram, dropped);
        }
      }
      if (next >= num_vectors) break;
#pragma unroll
      for (int k = 0; k < kVectorsPerThread; ++k) loaded[k] = upcoming[k];
    }
    // A batch that is not a whole number of vectors leaves a tail of single ids.
    const long long tail = num_vectors * kPerVector + first;
    if (tail < num_ids) {
      tally(static_cast<const Id*>(ids.data)[tail], true, num_bins, histogram, dropped);
    }
  } else {
    for (long long i = first; i < num_ids; i += stride) {
      tally(load_id<Id, false>(ids, i), true, num_bins, histogram, dropped);
    }
  }
  detail::add_warp_tally(target.dropped_ids, dropped);
  __syncthreads();

  int* counts = block_counts(target);
  for (int bin = threadIdx.x; bin < shared_bins; bin += blockDim.x) {
    int sum = 0;
#pragma unroll
    for (int warp = 0; warp < kBlockWarps; ++warp) sum += histograms[warp * shared_bins + bin];
    if (sum != 0) atomicAdd(&counts[bin], sum);
  }
}

bool is_aligned(const void* pointer, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

template <typename Id>
void launch_typed(const FusedRecordTarget& target, const IdMatrix& ids, const ValidCount& valid,
                  TopkAlgorithm algorithm, KernelLaunch launch, cudaStream_t stream) {
  const std::int64_t batch_ids = ids.num_rows * ids.num_columns;
  if (algorithm == TopkAlgorithm::kAuto) {
    algorithm =
        batch_ids <= kDirectMaxIds ? TopkAlgorithm::kDirectAtomics : TopkAlgorithm::kBlockHistogram;
  }
  if (algorithm == TopkAlgorithm::kDirectAtomics) {
    // Whole warps only, and no more of them than the batch needs.
    const auto threads =
        unsigned(std::clamp<std::int64_t>((batch_ids + 31) / 32 * 32, 32, kDirectThreads));
    const auto blocks = unsigned(std::max<std::int64_t>(1, (batch_ids + threads - 1) / threads));
    const bool contiguous = ids.column_stride == 1 && ids.row_stride == ids.num_columns;
    detail::launch_kernel(
        launch, contiguous ? direct_atomics_kernel<Id, true> : direct_atomics_kernel<Id, false>,
        blocks, threads, 0, stream, target, ids, valid);
    return;
  }
  const bool vector_loads =
      ids.column_stride == 1 && ids.row_stride == ids.num_columns && is_aligned(ids.data, 16);
  const std::int64_t per_vector = 16 / std::int64_t(sizeof(Id));
  const std::int64_t ids_per_block = std::int64_t(kBlockThreads) * kVectorsPerThread * per_vector;
  const auto blocks = unsigned(
      std::clamp<std::int64_t>((batch_ids + ids_per_block - 1) / ids_per_block, 1, kMaxBlocks));
  const std::size_t shared_bytes =
      std::size_t(kBlockWarps) * std::size_t(target.num_physical_experts) * sizeof(int);
  detail::launch_kernel(
      launch, vector_loads ? block_histogram_kernel<Id, true> : block_histogram_kernel<Id, false>,
      blocks, kBlockThreads, shared_bytes, stream, target, ids, valid);
}

}  // namespace

FusedRecordTarget layer_target(const DeviceBuffers& buffers, std::int64_t layer) {
  return FusedRecordTarget{
      .recording = &buffers.state->recording,
      .layer_counts = buffers.pass_counts + layer * buffers.num_physical_experts,
      .copy_stride = buffers.num_layers * buffers.num_physical_experts,
      .num_copies = kPassCopies,
      .num_physical_experts = buffers.num_physical_experts,
      .dropped_ids = &buffers.state->pass_dropped,
      .pass_num_tokens = &buffers.state->pass_num_tokens,
  };
}

void launch_record_topk(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream, TopkAlgorithm algorithm,
                        KernelLaunch launch) {
  const FusedRecordTarget target = layer_target(buffers, layer);
  if (ids.is_int64) {
    launch_typed<long long>(target, ids, valid, algorithm, launch, stream);
  } else {
    launch_typed<int>(target, ids, valid, algorithm, launch, stream);
  }
}

}  // namespace moestat::record::cuda
