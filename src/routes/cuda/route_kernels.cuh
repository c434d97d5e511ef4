// Launchers of the route recorder's kernels (route_kernels.cu defines and launches them; no
// other file writes <<<...>>> for routes). Inputs, outputs, sizes, then the stream. None
// synchronises, allocates or branches on device data on the host: the record launch is safe
// to capture in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace moestat::routes::cuda {

/// The largest top_k the record kernel keeps in registers (DeepSeek-V3 and Qwen3 use 8).
inline constexpr int kMaxTopK = 32;

/// The device buffers of a route recorder. All device pointers.
struct RouteBuffers {
  unsigned char* scratch_ids;      ///< [max_tokens_per_pass, C, K] of id_bytes, little-endian.
  unsigned* scratch_stamps;        ///< [max_tokens_per_pass, C]: the pass that wrote the row.
  unsigned* scratch_invalid;       ///< [max_tokens_per_pass, C]: the pass that found bad ids.
  unsigned* pass_stamp;            ///< [1]: the open pass's stamp, never 0.
  unsigned char* ids;              ///< [capacity, C, K]: the store.
  unsigned char* valid;            ///< [capacity, C]: 1 where the pass wrote the row.
  const int* physical_to_logical;  ///< [C, P].
  unsigned long long* tallies;     ///< [2]: invalid ids (of moved rows), layers written twice.
  int num_columns;                 ///< C: MoE layers.
  int top_k;                       ///< K.
  int id_bytes;                    ///< 1, 2 or 4.
  int num_physical;                ///< P.
};

/// One layer's router ids: element (t, k) at data[t * row_stride + k * column_stride].
struct LayerRoutes {
  const void* data;
  bool is_int64;
  int column;
  long long num_rows;
  long long row_stride;
  long long column_stride;
};

/// Writes each layer's ids, mapped to logical ids, into the scratch rows of their batch rows
/// and stamps them with the open pass; a row the pass already stamped (written twice) is
/// tallied and left as it was; one with an id outside [0, P) or two ids of one logical expert
/// is left as it was and marked, for the end of the pass to tally if a span covers it.
/// One launch per 64 layers.
void launch_record_routes(const RouteBuffers& buffers, std::span<const LayerRoutes> layers,
                          std::int64_t max_rows, cudaStream_t stream);

/// The row moves of a pass small enough to travel in the end-of-pass kernel's parameters
/// (decode batches), which spares a copy to the device before it.
inline constexpr int kInlineMoves = 256;
struct InlineMoves {
  int pairs[2 * kInlineMoves];
};

/// Ends the pass: moves scratch row moves[2i] into store row moves[2i + 1] for i < num_moves,
/// valid where the pass stamped it, tallies the moved rows marked invalid, then advances the
/// stamp. `moves`: [2 * num_moves] int32 on
/// the device, or nullptr when `inline_moves` holds them (num_moves <= kInlineMoves).
void launch_end_pass(const RouteBuffers& buffers, const int* moves, const InlineMoves& inline_moves,
                     std::int64_t num_moves, cudaStream_t stream);

/// Gathers store rows `rows` ([num_rows] device; -1 gives zeros) into `ids` ([num_rows, C, K])
/// and `valid` ([num_rows, C]), device buffers.
void launch_gather_rows(const RouteBuffers& buffers, const int* rows, std::int64_t num_rows,
                        unsigned char* ids, unsigned char* valid, cudaStream_t stream);

}  // namespace moestat::routes::cuda
