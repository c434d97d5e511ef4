// Per-token trace kernels: stage each layer's ids for the open pass on the device, then at
// end_pass reserve room in the pinned host ring and copy the pass there from a side stream.
// The recording stream never waits for the host: when the writer thread falls behind, the
// ring has no room and whole tokens are dropped and counted.
#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"
#include "kernel_common.cuh"
#include "record_kernels.cuh"

namespace moestat::record::cuda {
namespace {

constexpr int kStageThreads = 256;
constexpr int kCopyThreads = 256;
constexpr long long kMaxCopyBlocks = 264;

template <typename Id>
__global__ void __launch_bounds__(kStageThreads)
    trace_layer_kernel(DeviceBuffers buffers, long long layer, IdMatrix ids, ValidCount valid) {
  DeviceState* state = buffers.state;
  const TraceBuffers& trace = buffers.trace;
  const int recording = state->recording;
  const long long rows = detail::load_valid_rows(valid, ids.num_rows);
  if (recording == 0) return;
  const long long staged_rows = rows < trace.max_tokens ? rows : trace.max_tokens;
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index == 0) {
    atomicMax(&state->pass_num_tokens, rows);
    trace.layer_rows[layer] = static_cast<int>(staged_rows);
  }
  unsigned dropped = 0;
  if (index < rows * ids.num_columns) {
    const long long token = index / ids.num_columns;
    const long long column = index - token * ids.num_columns;
    const Id id =
        static_cast<const Id*>(ids.data)[token * ids.row_stride + column * ids.column_stride];
    const bool in_range = static_cast<unsigned long long>(static_cast<long long>(id)) <
                          static_cast<unsigned long long>(buffers.num_physical_experts);
    dropped = !in_range && id != Id(-1);
    if (token < staged_rows) {
      trace.staging[(token * buffers.num_layers + layer) * trace.top_k + column] =
          in_range ? static_cast<std::int32_t>(id) : -1;
    }
  }
  detail::add_warp_tally(&state->pass_dropped, dropped);
}

__global__ void trace_close_kernel(DeviceBuffers buffers) {
  DeviceState* state = buffers.state;
  const TraceBuffers& trace = buffers.trace;
  if (state->recording == 0) return;
  const volatile TraceCursors* cursors = trace.cursors;
  const long long consumed_tokens = cursors->consumed_tokens;
  const long long consumed_descriptors = cursors->consumed_descriptors;
  const long long tokens = state->pass_num_tokens;
  const long long staged = tokens < trace.max_tokens ? tokens : trace.max_tokens;
  const long long room = trace.capacity - (state->trace_head - consumed_tokens);
  const bool descriptor_free =
      state->trace_descriptors - consumed_descriptors < trace.descriptor_capacity;
  const long long kept = descriptor_free ? (staged < room ? staged : room) : 0;
  state->dropped_tokens += static_cast<unsigned long long>(tokens - kept);
  state->trace_pending_first = state->trace_head;
  state->trace_pending_count = kept;
  if (kept == 0) return;
  TraceDescriptor& descriptor =
      trace.host_descriptors[state->trace_descriptors % trace.descriptor_capacity];
  descriptor.pass_id = state->pass_id;
  descriptor.placement_version = state->placement_version;
  descriptor.first_token = state->trace_head;
  descriptor.num_tokens = kept;
  state->trace_head += kept;
  state->trace_descriptors += 1;
}

__global__ void __launch_bounds__(kCopyThreads) trace_copy_kernel(DeviceBuffers buffers) {
  DeviceState* state = buffers.state;
  const TraceBuffers& trace = buffers.trace;
  const long long first = state->trace_pending_first;
  const long long count = state->recording != 0 ? state->trace_pending_count : 0;
  const long long token_size = buffers.num_layers * trace.top_k;
  const long long total = count * token_size;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const long long token = i / token_size;
    const long long within = i - token * token_size;
    const long long layer = within / trace.top_k;
    // Rows a layer did not stage this pass hold another pass's ids: write -1 instead.
    const std::int32_t value = token < trace.layer_rows[layer] ? trace.staging[i] : -1;
    trace.host_ring[((first + token) % trace.capacity) * token_size + within] = value;
  }
  // The last block to finish publishes the pass and clears the staged row counts.
  __threadfence_system();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(trace.copy_ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  for (long long layer = threadIdx.x; layer < buffers.num_layers; layer += blockDim.x) {
    trace.layer_rows[layer] = 0;
  }
  if (threadIdx.x == 0) {
    *trace.copy_ticket = 0;
    if (count > 0) {
      __threadfence_system();
      *reinterpret_cast<volatile long long*>(&trace.cursors->published_descriptors) =
          state->trace_descriptors;
    }
  }
}

}  // namespace

void launch_trace_layer(const DeviceBuffers& buffers, std::int64_t layer, const IdMatrix& ids,
                        const ValidCount& valid, cudaStream_t stream) {
  const std::int64_t batch_ids = ids.num_rows * ids.num_columns;
  const auto blocks =
      unsigned(std::max<std::int64_t>(1, (batch_ids + kStageThreads - 1) / kStageThreads));
  if (ids.is_int64) {
    trace_layer_kernel<long long><<<blocks, kStageThreads, 0, stream>>>(buffers, layer, ids, valid);
  } else {
    trace_layer_kernel<int><<<blocks, kStageThreads, 0, stream>>>(buffers, layer, ids, valid);
  }
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_trace_close(const DeviceBuffers& buffers, cudaStream_t stream) {
  trace_close_kernel<<<1, 1, 0, stream>>>(buffers);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

void launch_trace_copy(const DeviceBuffers& buffers, std::int64_t max_rows, cudaStream_t stream) {
  const std::int64_t rows = std::min<std::int64_t>(max_rows, buffers.trace.max_tokens);
  const std::int64_t entries = rows * buffers.num_layers * buffers.trace.top_k;
  const auto blocks = unsigned(
      std::clamp<std::int64_t>((entries + kCopyThreads - 1) / kCopyThreads, 1, kMaxCopyBlocks));
  trace_copy_kernel<<<blocks, kCopyThreads, 0, stream>>>(buffers);
  MOESTAT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moestat::record::cuda
