// Device helpers shared by the recorder's kernel families.
#pragma once

#include "record_kernels.cuh"

namespace moestat::record::cuda::detail {

/// Rows of an IdMatrix that are real tokens, clamped to [0, num_rows].
__device__ __forceinline__ long long load_valid_rows(const ValidCount& valid, long long num_rows) {
  long long rows = valid.host_count;
  if (valid.device_count != nullptr) {
    rows = valid.is_int64 ? *static_cast<const long long*>(valid.device_count)
                          : *static_cast<const int*>(valid.device_count);
  }
  return rows < 0 ? 0 : (rows > num_rows ? num_rows : rows);
}

/// Sums a per-thread tally over the warp and adds it with one atomic. All lanes must call.
__device__ __forceinline__ void add_warp_tally(unsigned long long* tally, unsigned value) {
  value = __reduce_add_sync(0xffffffffu, value);
  if ((threadIdx.x & 31) == 0 && value != 0) atomicAdd(tally, value);
}

/// Counts of layer `layer` in copy `copy` of the open pass: [P] ints.
__device__ __forceinline__ int* pass_layer_counts(const DeviceBuffers& buffers, long long copy,
                                                  long long layer) {
  return buffers.pass_counts + (copy * buffers.num_layers + layer) * buffers.num_physical_experts;
}

}  // namespace moestat::record::cuda::detail
