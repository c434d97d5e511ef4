// The route recorder's kernels: write the routers' ids into scratch rows, move them into the
// store at the end of the pass, gather store rows for take().
//
// A pass's writes cost one launch per 64 layers (record_topk_layers): each thread takes one
// token of one layer, maps its top_k physical ids through the placement and writes them
// narrowed to 1, 2 or 4 bytes, with the pass's stamp. No shared memory, no reduction: at
// decode sizes the cost is the launch and a few dependent loads. The stamp (a device counter
// the end-of-pass kernel advances) is what lets one captured graph serve every replay, and
// spares a kernel that clears the scratch before each pass.
#include <algorithm>

#include "cuda_check.hpp"
#include "route_kernels.cuh"

namespace moestat::routes::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxLayersPerLaunch = 64;
// The end-of-pass kernel is one block, so it can advance the stamp after every thread read it.
constexpr int kEndThreads = 1024;

struct LayerBatch {
  LayerRoutes layers[kMaxLayersPerLaunch];
};

template <typename Id>
__device__ __forceinline__ long long load_id(const LayerRoutes& layer, long long t, int k) {
  return static_cast<long long>(
      static_cast<const Id*>(layer.data)[t * layer.row_stride + k * layer.column_stride]);
}

__global__ void __launch_bounds__(kThreads)
    record_routes_kernel(RouteBuffers buffers, LayerBatch batch) {
  const LayerRoutes& layer = batch.layers[blockIdx.y];
  const long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (t >= layer.num_rows) return;
  const unsigned stamp = *buffers.pass_stamp;
  unsigned* row_stamp = buffers.scratch_stamps + t * buffers.num_columns + layer.column;
  if (*row_stamp == stamp) {
    atomicAdd(&buffers.tallies[1], 1ull);
    return;
  }
  const int* map =
      buffers.physical_to_logical + static_cast<long long>(layer.column) * buffers.num_physical;
  int logical[kMaxTopK];
  bool valid = true;
  for (int k = 0; k < buffers.top_k; ++k) {
    const long long id =
        layer.is_int64 ? load_id<long long>(layer, t, k) : load_id<int>(layer, t, k);
    valid = valid && id >= 0 && id < buffers.num_physical;
    logical[k] = valid ? map[id] : 0;
  }
  // Replicas of one logical expert chosen as two make the row as invalid as a bad id.
  for (int k = 1; k < buffers.top_k && valid; ++k) {
    for (int j = 0; j < k; ++j) valid = valid && logical[j] != logical[k];
  }
  if (!valid) {
    // Counted by the end-of-pass kernel if a span covers the row: padding is no token's.
    buffers.scratch_invalid[t * buffers.num_columns + layer.column] = stamp;
    return;
  }
  unsigned char* out =
      buffers.scratch_ids +
      ((t * buffers.num_columns + layer.column) * buffers.top_k) * buffers.id_bytes;
  for (int k = 0; k < buffers.top_k; ++k) {
    const unsigned value = static_cast<unsigned>(logical[k]);
    for (int b = 0; b < buffers.id_bytes; ++b) {
      out[k * buffers.id_bytes + b] = static_cast<unsigned char>(value >> (8 * b));
    }
  }
  *row_stamp = stamp;
}

__global__ void __launch_bounds__(kEndThreads)
    end_pass_kernel(RouteBuffers buffers, const int* device_moves, InlineMoves inline_moves,
                    long long num_moves) {
  const int* moves = device_moves != nullptr ? device_moves : inline_moves.pairs;
  const unsigned stamp = *buffers.pass_stamp;
  const long long column_bytes = static_cast<long long>(buffers.top_k) * buffers.id_bytes;
  const long long cells = num_moves * buffers.num_columns;
  unsigned long long invalid = 0;
  for (long long cell = threadIdx.x; cell < cells; cell += blockDim.x) {
    const long long i = cell / buffers.num_columns;
    const int c = static_cast<int>(cell - i * buffers.num_columns);
    const long long from = static_cast<long long>(moves[2 * i]) * buffers.num_columns + c;
    const long long to = static_cast<long long>(moves[2 * i + 1]) * buffers.num_columns + c;
    const bool written = buffers.scratch_stamps[from] == stamp;
    invalid += !written && buffers.scratch_invalid[from] == stamp;
    for (long long b = 0; b < column_bytes; ++b) {
      buffers.ids[to * column_bytes + b] =
          written ? buffers.scratch_ids[from * column_bytes + b] : 0;
    }
    buffers.valid[to] = written ? 1 : 0;
  }
  // Bad ids are rare: almost no thread adds anything, so no reduction is needed.
  if (invalid != 0) atomicAdd(&buffers.tallies[0], invalid);
  __syncthreads();
  if (threadIdx.x == 0) {
    // 0 is what the scratch starts with: never a pass's stamp.
    const unsigned next = stamp + 1;
    *buffers.pass_stamp = next == 0 ? 1 : next;
  }
}

__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(RouteBuffers buffers, const int* rows, long long num_rows,
                       unsigned char* ids, unsigned char* valid) {
  const long long row_bytes =
      static_cast<long long>(buffers.num_columns) * buffers.top_k * buffers.id_bytes;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < num_rows;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long row = rows[i];
    for (long long b = 0; b < row_bytes; ++b) {
      ids[i * row_bytes + b] = row < 0 ? 0 : buffers.ids[row * row_bytes + b];
    }
    for (int c = 0; c < buffers.num_columns; ++c) {
      valid[i * buffers.num_columns + c] =
          row < 0 ? 0 : buffers.valid[row * buffers.num_columns + c];
    }
  }
}

}  // namespace

void launch_record_routes(const RouteBuffers& buffers, std::span<const LayerRoutes> layers,
                          std::int64_t max_rows, cudaStream_t stream) {
  static_assert(sizeof(LayerBatch) + sizeof(RouteBuffers) < 4000, "kernel parameters too large");
  if (max_rows <= 0) return;
  for (std::size_t first = 0; first < layers.size(); first += kMaxLayersPerLaunch) {
    const std::size_t count = std::min<std::size_t>(kMaxLayersPerLaunch, layers.size() - first);
    LayerBatch batch{};
    std::copy_n(layers.begin() + std::ptrdiff_t(first), count, batch.layers);
    const dim3 blocks(static_cast<unsigned>((max_rows + kThreads - 1) / kThreads),
                      static_cast<unsigned>(count));
    record_routes_kernel<<<blocks, kThreads, 0, stream>>>(buffers, batch);
    MOESTAT_CUDA_CHECK(cudaGetLastError());
  }
}

void launch_end_pass(const RouteBuffers& buffers, const int* moves, const InlineMoves& inline_moves,
                     std::int64_t num_moves, cudaStream_t stream) {
  static_assert(sizeof(InlineMoves) + sizeof(RouteBuffers) < 4000, "kernel parameters too large");
  end_pass_kernel<<<1, kEndThreads, 0, stream>>>(buffers, moves, inline_moves, num_moves);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_gather_rows(const RouteBuffers& buffers, const int* rows, std::int64_t num_rows,
                        unsigned char* ids, unsigned char* valid, cudaStream_t stream) {
  if (num_rows <= 0) return;
  const auto blocks =
      static_cast<unsigned>(std::clamp<long long>((num_rows + kThreads - 1) / kThreads, 1, 4096));
  gather_rows_kernel<<<blocks, kThreads, 0, stream>>>(buffers, rows, num_rows, ids, valid);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::routes::cuda
