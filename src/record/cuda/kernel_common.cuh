// Device helpers shared by the recorder's kernel families.
#pragma once

#include <utility>

#include "cuda_check.hpp"
#include "record_kernels.cuh"

namespace moestat::record::cuda::detail {

/// Lets the next kernel on the stream be scheduled (it waits for this one's results itself).
/// A no-op under an ordinary launch.
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// Waits until the kernels before this one have finished and their writes are visible.
/// Nothing written by an earlier kernel may be read before this call. A no-op under an
/// ordinary launch.
__device__ __forceinline__ void wait_for_predecessor() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

/// Start of a kernel launched with launch_kernel that has nothing to do before its inputs
/// are ready.
__device__ __forceinline__ void overlap_launch_with_predecessor() {
  allow_dependent_launch();
  wait_for_predecessor();
}

/// Launches `kernel`, as a programmatic dependent launch when `launch` is kOverlapped
/// (captured into a graph as a programmatic edge).
template <typename... Params, typename... Args>
void launch_kernel(KernelLaunch launch, void (*kernel)(Params...), dim3 blocks, unsigned threads,
                   std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = blocks;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = launch == KernelLaunch::kOverlapped ? 1 : 0;
  MOESTAT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

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
