// record_topk's kernels: a histogram of one layer's router ids added to the open pass.
//
// Two algorithms, chosen by the host from the captured (padded) batch shape:
// - direct atomics (decode sizes): one thread per id, one global atomic per id. At this
//   size a kernel's cost is its chain of dependent memory round trips, so every load (flag,
//   valid count, id) is issued before any is used, and there is no shared-memory stage.
// - block histogram (prefill sizes): each block tallies 1024 ids into a few shared-memory
//   copies of the histogram, sums them and adds one global atomic per non-zero bin. What
//   reads nothing the kernel before writes (clearing the copies, prefetching the ids into
//   L2) runs before the wait on that kernel, and a batch with no device count skips the
//   per-vector bound check.
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
// A block histogram block takes 1024 ids: one 16-byte vector per thread.
template <typename Id>
constexpr int kBlockThreads = 1024 / (16 / int(sizeof(Id)));
// The threads of a block share this many histograms: fewer copies are quicker to clear and
// sum, which outweighs the contention they add (bench/gpu, 2026-11-30).
constexpr int kSharedCopies = 4;
// Enough blocks for a million ids (131072 top-8 rows) in one round; larger batches loop.
constexpr int kMaxBlocks = 1024;
// Up to this many ids (1024 tokens of top-8) the direct kernel wins on an H200 (bench/gpu
// measures both algorithms at every size).
constexpr std::int64_t kDirectMaxIds = 8192;

/// Id number `index` in row-major order; a contiguous matrix needs no 64-bit division.
template <typename Id, bool kContiguous>
__device__ __forceinline__ Id load_id(const IdMatrix& ids, long long index) {
  if constexpr (kContiguous) return static_cast<const Id*>(ids.data)[index];
  const long long row = index / ids.num_columns;
  const long long column = index - row * ids.num_columns;
  return static_cast<const Id*>(ids.data)[row * ids.row_stride + column * ids.column_stride];
}

/// Whether `id` is an expert slot in [0, num_bins): one 32-bit compare for int32 ids.
template <typename Id>
__device__ __forceinline__ bool in_range(Id id, int num_bins) {
  if constexpr (sizeof(Id) == 4) return static_cast<unsigned>(id) < static_cast<unsigned>(num_bins);
  return static_cast<unsigned long long>(id) < static_cast<unsigned long long>(num_bins);
}

/// Copy blockIdx.x % kPassCopies (= target.num_copies) of the layer's counts.
__device__ __forceinline__ int* block_counts(const FusedRecordTarget& target) {
  return target.layer_counts + (blockIdx.x % kPassCopies) * target.copy_stride;
}

template <typename Id, bool kContiguous>
__device__ __forceinline__ void count_with_direct_atomics(const FusedRecordTarget& target,
                                                          const IdMatrix& ids,
                                                          const ValidCount& valid) {
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
    if (in_range(id, static_cast<int>(target.num_physical_experts))) {
      atomicAdd(&block_counts(target)[static_cast<long long>(id)], 1);
    } else {
      dropped = id != Id(-1);
    }
  }
  detail::add_warp_tally(target.dropped_ids, dropped);
}

/// Adds `id` to the block's shared histogram, or to the dropped tally when it is neither a
/// slot nor the -1 of padding.
template <typename Id>
__device__ __forceinline__ void tally(Id id, int num_bins, int* histogram, unsigned& dropped) {
  if (in_range(id, num_bins)) {
    atomicAdd(&histogram[static_cast<int>(id)], 1);
  } else {
    dropped += id != Id(-1);
  }
}

/// Pulls the 128-byte line holding `address` into L2 without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

template <typename Id, bool kVectorLoads, bool kEveryRowValid>
__device__ __forceinline__ void count_with_block_histogram(const FusedRecordTarget& target,
                                                           const IdMatrix& ids,
                                                           const ValidCount& valid) {
  constexpr int kThreads = kBlockThreads<Id>;
  constexpr int kThreadsPerCopy = kThreads / kSharedCopies;
  extern __shared__ int histograms[];  // [kSharedCopies, P]
  // 32-bit indices: the shared histograms are far smaller than 2^31.
  const int shared_bins = static_cast<int>(target.num_physical_experts);
  const long long batch_ids = ids.num_rows * ids.num_columns;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  using Vector = int4;
  constexpr int kPerVector = 16 / sizeof(Id);
  constexpr int kThreadsPerLine = 128 / 16;
  const long long num_vectors = kVectorLoads ? batch_ids / kPerVector : 0;
  const auto* vectors = static_cast<const Vector*>(ids.data);

  // Overlapped with the end of the kernel before: work that reads nothing it writes. The
  // shared histograms are this block's own. The prefetch only moves this thread's first ids
  // into L2, which every write to device memory passes through, so the loads after the wait
  // still see what the kernel before wrote; it takes the HBM round trip off the critical
  // path when the ids are not in L2 already.
  detail::allow_dependent_launch();
  for (int i = threadIdx.x; i < kSharedCopies * shared_bins; i += kThreads) histograms[i] = 0;
  if (kVectorLoads && first < num_vectors && threadIdx.x % kThreadsPerLine == 0) {
    prefetch_l2(vectors + first);
  }
  detail::wait_for_predecessor();

  // The first ids are loaded before the flag is known (see direct_atomics_kernel).
  Vector loaded = make_int4(-1, -1, -1, -1);
  if (kVectorLoads && first < num_vectors) loaded = vectors[first];
  const int recording = *target.recording;
  const long long rows =
      kEveryRowValid ? ids.num_rows : detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;
  const long long num_ids = rows * ids.num_columns;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicMax(target.pass_num_tokens, rows);
  __syncthreads();

  int* histogram = histograms + (threadIdx.x / kThreadsPerCopy) * shared_bins;
  unsigned dropped = 0;
  if constexpr (kVectorLoads) {
    // One 16-byte vector per thread per round; a batch larger than the grid takes more.
    for (long long v = first; v < num_vectors; v += stride) {
      if (v != first) loaded = vectors[v];
      const Id* lanes = reinterpret_cast<const Id*>(&loaded);
      // Only the vector holding the last valid id has lanes past it. Both loops unrolled: an
      // indexed lane would put the vector in local memory.
      const long long valid_lanes = num_ids - v * kPerVector;
      if (kEveryRowValid || valid_lanes >= kPerVector) {
#pragma unroll
        for (int lane = 0; lane < kPerVector; ++lane) {
          tally(lanes[lane], shared_bins, histogram, dropped);
        }
      } else {
#pragma unroll
        for (int lane = 0; lane < kPerVector; ++lane) {
          if (lane < valid_lanes) tally(lanes[lane], shared_bins, histogram, dropped);
        }
      }
    }
    // A batch that is not a whole number of vectors leaves a tail of single ids.
    const long long tail = num_vectors * kPerVector + first;
    if (tail < num_ids) {
      tally(static_cast<const Id*>(ids.data)[tail], shared_bins, histogram, dropped);
    }
  } else {
    for (long long i = first; i < num_ids; i += stride) {
      tally(load_id<Id, false>(ids, i), shared_bins, histogram, dropped);
    }
  }
  detail::add_warp_tally(target.dropped_ids, dropped);
  __syncthreads();

  int* counts = block_counts(target);
  for (int bin = threadIdx.x; bin < shared_bins; bin += kThreads) {
    int sum = 0;
#pragma unroll
    for (int copy = 0; copy < kSharedCopies; ++copy) sum += histograms[copy * shared_bins + bin];
    if (sum != 0) atomicAdd(&counts[bin], sum);
  }
}

// The kernels: one layer (record_topk), or one layer per blockIdx.y (record_topk_layers).

template <typename Id, bool kContiguous>
__global__ void __launch_bounds__(kDirectThreads)
    direct_atomics_kernel(FusedRecordTarget target, IdMatrix ids, ValidCount valid) {
  count_with_direct_atomics<Id, kContiguous>(target, ids, valid);
}

template <typename Id, bool kVectorLoads, bool kEveryRowValid>
__global__ void __launch_bounds__(kBlockThreads<Id>)
    block_histogram_kernel(FusedRecordTarget target, IdMatrix ids, ValidCount valid) {
  count_with_block_histogram<Id, kVectorLoads, kEveryRowValid>(target, ids, valid);
}

/// Up to this many layers go in one launch: the batch is a kernel parameter (2.6 KB).
constexpr int kMaxBatchLayers = 64;

/// The layers of one launch of a layers kernel, all of one id type.
struct LayerBatch {
  struct Entry {
    const void* data;
    long long num_rows;
    long long row_stride;
    long long column_stride;
    int num_columns;
    int layer;
  };
  FusedRecordTarget layer_zero;  // layer_counts of layer 0; the layers are P ints apart
  Entry entries[kMaxBatchLayers];

  __device__ __forceinline__ FusedRecordTarget target(int index) const {
    FusedRecordTarget target = layer_zero;
    target.layer_counts +=
        static_cast<long long>(entries[index].layer) * target.num_physical_experts;
    return target;
  }
  __device__ __forceinline__ IdMatrix ids(int index, bool is_int64) const {
    const Entry& entry = entries[index];
    return IdMatrix{entry.data,        is_int64,         entry.num_rows,
                    entry.num_columns, entry.row_stride, entry.column_stride};
  }
};

template <typename Id, bool kContiguous>
__global__ void __launch_bounds__(kDirectThreads)
    direct_atomics_layers_kernel(LayerBatch batch, ValidCount valid) {
  count_with_direct_atomics<Id, kContiguous>(batch.target(blockIdx.y),
                                             batch.ids(blockIdx.y, sizeof(Id) == 8), valid);
}

template <typename Id, bool kVectorLoads, bool kEveryRowValid>
__global__ void __launch_bounds__(kBlockThreads<Id>)
    block_histogram_layers_kernel(LayerBatch batch, ValidCount valid) {
  count_with_block_histogram<Id, kVectorLoads, kEveryRowValid>(
      batch.target(blockIdx.y), batch.ids(blockIdx.y, sizeof(Id) == 8), valid);
}

/// The kernels of record_topk, by id type: one layer per launch.
template <typename Id>
struct OneLayerKernels {
  static auto direct(bool contiguous) {
    return contiguous ? direct_atomics_kernel<Id, true> : direct_atomics_kernel<Id, false>;
  }
  static auto block_histogram(bool vector_loads, bool every_row_valid) {
    if (vector_loads) {
      return every_row_valid ? block_histogram_kernel<Id, true, true>
                             : block_histogram_kernel<Id, true, false>;
    }
    return every_row_valid ? block_histogram_kernel<Id, false, true>
                           : block_histogram_kernel<Id, false, false>;
  }
};

/// The kernels of record_topk_layers, by id type: one layer per blockIdx.y.
template <typename Id>
struct LayerBatchKernels {
  static auto direct(bool contiguous) {
    return contiguous ? direct_atomics_layers_kernel<Id, true>
                      : direct_atomics_layers_kernel<Id, false>;
  }
  static auto block_histogram(bool vector_loads, bool every_row_valid) {
    if (vector_loads) {
      return every_row_valid ? block_histogram_layers_kernel<Id, true, true>
                             : block_histogram_layers_kernel<Id, true, false>;
    }
    return every_row_valid ? block_histogram_layers_kernel<Id, false, true>
                           : block_histogram_layers_kernel<Id, false, false>;
  }
};

bool is_aligned(const void* pointer, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

/// What a launch is shaped by, over every layer it counts.
struct IdsShape {
  std::int64_t max_ids = 0;   // ids of the largest layer
  std::int64_t max_rows = 0;  // rows of the largest layer
  bool contiguous = true;     // every layer row-major without gaps
  bool aligned = true;        // every layer's data on a 16-byte boundary

  void add(const IdMatrix& ids) {
    max_ids = std::max(max_ids, ids.num_rows * ids.num_columns);
    max_rows = std::max(max_rows, ids.num_rows);
    contiguous = contiguous && ids.column_stride == 1 && ids.row_stride == ids.num_columns;
    aligned = aligned && is_aligned(ids.data, 16);
  }
};

/// Launches the kernel of `Kernels` that suits `shape`, with gridDim.y = `num_layers`;
/// `args` are the kernel's parameters.
template <typename Id, template <typename> class Kernels, typename... Args>
void launch_typed(const IdsShape& shape, unsigned num_layers, std::int64_t num_physical_experts,
                  const ValidCount& valid, TopkAlgorithm algorithm, KernelLaunch launch,
                  cudaStream_t stream, const Args&... args) {
  if (algorithm == TopkAlgorithm::kAuto) {
    algorithm = shape.max_ids <= kDirectMaxIds ? TopkAlgorithm::kDirectAtomics
                                               : TopkAlgorithm::kBlockHistogram;
  }
  if (algorithm == TopkAlgorithm::kDirectAtomics) {
    // Whole warps only, and no more of them than the batch needs.
    const auto threads =
        unsigned(std::clamp<std::int64_t>((shape.max_ids + 31) / 32 * 32, 32, kDirectThreads));
    const auto blocks =
        unsigned(std::max<std::int64_t>(1, (shape.max_ids + threads - 1) / threads));
    detail::launch_kernel(launch, Kernels<Id>::direct(shape.contiguous), dim3(blocks, num_layers),
                          threads, 0, stream, args...);
    return;
  }
  const bool vector_loads = shape.contiguous && shape.aligned;
  // Every row counts when no device count can cut the batch: the kernel then skips the bound
  // checks, which cost up to 0.4 us at 32768 tokens even when they cut nothing.
  const bool every_row_valid = valid.device_count == nullptr && valid.host_count >= shape.max_rows;
  constexpr std::int64_t kIdsPerBlock =
      std::int64_t(kBlockThreads<Id>) * std::int64_t(16 / sizeof(Id));
  const auto blocks = unsigned(
      std::clamp<std::int64_t>((shape.max_ids + kIdsPerBlock - 1) / kIdsPerBlock, 1, kMaxBlocks));
  const std::size_t shared_bytes =
      std::size_t(kSharedCopies) * std::size_t(num_physical_experts) * sizeof(int);
  detail::launch_kernel(launch, Kernels<Id>::block_histogram(vector_loads, every_row_valid),
                        dim3(blocks, num_layers), kBlockThreads<Id>, shared_bytes, stream, args...);
}

/// One launch for `layers` (at most kMaxBatchLayers, all of one id type).
void launch_layer_batch(const DeviceBuffers& buffers, std::span<const LayerIds> layers,
                        const ValidCount& valid, cudaStream_t stream) {
  LayerBatch batch{};
  batch.layer_zero = layer_target(buffers, 0);
  IdsShape shape;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const IdMatrix& ids = layers[i].ids;
    batch.entries[i] = {ids.data,          ids.num_rows,         ids.row_stride,
                        ids.column_stride, int(ids.num_columns), int(layers[i].layer)};
    shape.add(ids);
  }
  const auto num_layers = unsigned(layers.size());
  if (layers.front().ids.is_int64) {
    launch_typed<long long, LayerBatchKernels>(shape, num_layers, buffers.num_physical_experts,
                                               valid, TopkAlgorithm::kAuto,
                                               KernelLaunch::kOverlapped, stream, batch, valid);
  } else {
    launch_typed<int, LayerBatchKernels>(shape, num_layers, buffers.num_physical_experts, valid,
                                         TopkAlgorithm::kAuto, KernelLaunch::kOverlapped, stream,
                                         batch, valid);
  }
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
  IdsShape shape;
  shape.add(ids);
  if (ids.is_int64) {
    launch_typed<long long, OneLayerKernels>(shape, 1, target.num_physical_experts, valid,
                                             algorithm, launch, stream, target, ids, valid);
  } else {
    launch_typed<int, OneLayerKernels>(shape, 1, target.num_physical_experts, valid, algorithm,
                                       launch, stream, target, ids, valid);
  }
}

void launch_record_topk_layers(const DeviceBuffers& buffers, std::span<const LayerIds> layers,
                               const ValidCount& valid, cudaStream_t stream) {
  // Runs of one id type, at most kMaxBatchLayers to a launch.
  std::size_t first = 0;
  while (first < layers.size()) {
    std::size_t end = first + 1;
    while (end < layers.size() && end - first < std::size_t(kMaxBatchLayers) &&
           layers[end].ids.is_int64 == layers[first].ids.is_int64) {
      ++end;
    }
    launch_layer_batch(buffers, layers.subspan(first, end - first), valid, stream);
    first = end;
  }
}

}  // namespace moestat::record::cuda
