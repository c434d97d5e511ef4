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
// Grid-stride loops cover what more blocks would: 1024 blocks of 256 fill an H100 8 times.
constexpr long long kMaxBlocks = 1024;

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

// A column's ids (top_k ids of id_bytes) and a row (every column's) move in units of the
// widest of 16, 8, 4, 2 and 1 bytes that divides a column: one load and one store per unit,
// and neighbouring threads touch neighbouring units. Byte by byte, each store waited on the
// load before it (a char store may alias any load), which made the moves latency-bound.
template <typename Launch>
void with_copy_unit(long long column_bytes, Launch launch) {
  if (column_bytes % 16 == 0) return launch(uint4{});
  if (column_bytes % 8 == 0) return launch(static_cast<unsigned long long>(0));
  if (column_bytes % 4 == 0) return launch(0u);
  if (column_bytes % 2 == 0) return launch(static_cast<unsigned short>(0));
  launch(static_cast<unsigned char>(0));
}

unsigned grid_for(long long work_items) {
  return static_cast<unsigned>(
      std::clamp<long long>((work_items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// One thread per unit of a moved column: thread (i, c, u) copies unit u of batch row
// moves[2i]'s column c. The first unit's thread also writes the column's valid byte and
// counts it if the pass marked it invalid.
template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    end_pass_kernel(RouteBuffers buffers, const int* device_moves,
                    const __grid_constant__ InlineMoves inline_moves, long long num_moves,
                    unsigned stamp) {
  const int* moves = device_moves != nullptr ? device_moves : inline_moves.pairs;
  const long long column_units =
      static_cast<long long>(buffers.top_k) * buffers.id_bytes / sizeof(Unit);
  const long long units = num_moves * buffers.num_columns * column_units;
  const auto* scratch = reinterpret_cast<const Unit*>(buffers.scratch_ids);
  auto* store = reinterpret_cast<Unit*>(buffers.ids);
  unsigned long long invalid = 0;
  for (long long unit = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; unit < units;
       unit += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long cell = unit / column_units;
    const long long u = unit - cell * column_units;
    const long long i = cell / buffers.num_columns;
    const int c = static_cast<int>(cell - i * buffers.num_columns);
    const long long from = static_cast<long long>(moves[2 * i]) * buffers.num_columns + c;
    const long long to = static_cast<long long>(moves[2 * i + 1]) * buffers.num_columns + c;
    const bool written = buffers.scratch_stamps[from] == stamp;
    store[to * column_units + u] = written ? scratch[from * column_units + u] : Unit{};
    if (u == 0) {
      buffers.valid[to] = written ? 1 : 0;
      invalid += !written && buffers.scratch_invalid[from] == stamp;
    }
  }
  // Bad ids are rare: almost no thread adds anything, so no reduction is needed.
  if (invalid != 0) atomicAdd(&buffers.tallies[0], invalid);
  // No thread of this kernel reads the device's stamp, so one may advance it at any time; the
  // next pass's record launch follows on the stream.
  if (blockIdx.x == 0 && threadIdx.x == 0) *buffers.pass_stamp = next_pass_stamp(stamp);
}

// Thread (i, u) copies unit u of store row rows[i], then thread (i, c) its column c's valid
// byte; a row of -1 gives zeros.
template <typename Unit>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(RouteBuffers buffers, const int* rows, long long num_rows, Unit* ids,
                       unsigned char* valid) {
  const long long row_units =
      static_cast<long long>(buffers.num_columns) * buffers.top_k * buffers.id_bytes / sizeof(Unit);
  const auto* store = reinterpret_cast<const Unit*>(buffers.ids);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  for (long long unit = first; unit < num_rows * row_units; unit += stride) {
    const long long i = unit / row_units;
    const long long row = rows[i];
    ids[unit] = row < 0 ? Unit{} : store[row * row_units + (unit - i * row_units)];
  }
  for (long long cell = first; cell < num_rows * buffers.num_columns; cell += stride) {
    const long long i = cell / buffers.num_columns;
    const long long row = rows[i];
    valid[cell] =
        row < 0 ? 0 : buffers.valid[row * buffers.num_columns + (cell - i * buffers.num_columns)];
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
                     std::int64_t num_moves, unsigned stamp, cudaStream_t stream) {
  static_assert(sizeof(InlineMoves) + sizeof(RouteBuffers) < 4000, "kernel parameters too large");
  const long long column_bytes = static_cast<long long>(buffers.top_k) * buffers.id_bytes;
  with_copy_unit(column_bytes, [&]<typename Unit>(Unit) {
    const long long units = num_moves * buffers.num_columns * (column_bytes / sizeof(Unit));
    end_pass_kernel<Unit>
        <<<grid_for(units), kThreads, 0, stream>>>(buffers, moves, inline_moves, num_moves, stamp);
  });
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_gather_rows(const RouteBuffers& buffers, const int* rows, std::int64_t num_rows,
                        unsigned char* ids, unsigned char* valid, cudaStream_t stream) {
  if (num_rows <= 0) return;
  const long long column_bytes = static_cast<long long>(buffers.top_k) * buffers.id_bytes;
  with_copy_unit(column_bytes, [&]<typename Unit>(Unit) {
    const long long row_units = buffers.num_columns * (column_bytes / sizeof(Unit));
    gather_rows_kernel<Unit>
        <<<grid_for(num_rows * std::max<long long>(row_units, buffers.num_columns)), kThreads, 0,
           stream>>>(buffers, rows, num_rows, reinterpret_cast<Unit*>(ids), valid);
  });
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::routes::cuda
