#include <algorithm>
#include <moestat/record/cuda_fused.cuh>

#include "gpu/fused_kernels.hpp"

namespace moestat::test {
namespace {

__global__ void fused_count_kernel(const std::int32_t* ids, long long num_rows, long long top_k,
                                   const std::int32_t* num_valid,
                                   record::FusedRecordTarget target) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool recording = record::fused::is_recording(target);
  const long long rows = *num_valid;
  const std::int32_t id = index < num_rows * top_k ? ids[index] : -1;
  if (!recording) return;
  if (index == 0) record::fused::add_valid_tokens(target, rows);
  if (index < rows * top_k) record::fused::add_id(target, id);
}

__global__ void row_add_kernel(const std::int32_t* ids, long long count, std::int32_t* row) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index < count) atomicAdd(row + ids[index], 1);
}

}  // namespace

void launch_fused_count(const std::int32_t* ids, std::int64_t num_rows, std::int64_t top_k,
                        const std::int32_t* num_valid, const record::FusedRecordTarget& target,
                        cudaStream_t stream) {
  constexpr unsigned kThreads = 128;
  const auto blocks =
      unsigned(std::max<std::int64_t>(1, (num_rows * top_k + kThreads - 1) / kThreads));
  fused_count_kernel<<<blocks, kThreads, 0, stream>>>(ids, num_rows, top_k, num_valid, target);
}

void launch_row_add(const std::int32_t* ids, std::int64_t count, std::int32_t* row,
                    cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const auto blocks = unsigned(std::max<std::int64_t>(1, (count + kThreads - 1) / kThreads));
  row_add_kernel<<<blocks, kThreads, 0, stream>>>(ids, count, row);
}

}  // namespace moestat::test
