// Stand-ins for engine kernels that count their own routing: through
// moestat/record/cuda_fused.cuh, or into CudaRecorder::pass_count_row as SGLang's fused
// dispatch map does (defined in fused_kernels.cu, free of gtest and fmt so nvcc compiles
// them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <moestat/record/fused_target.hpp>

namespace moestat::test {

/// Counts the first `*num_valid` rows of `ids` [num_rows, top_k] (int32, device) into
/// `target`, one thread per id, as a router kernel would after choosing them.
void launch_fused_count(const std::int32_t* ids, std::int64_t num_rows, std::int64_t top_k,
                        const std::int32_t* num_valid, const record::FusedRecordTarget& target,
                        cudaStream_t stream);

/// Adds one to `row[ids[i]]` for each of the `count` ids (int32, device, all in [0, P)),
/// one atomic per id and no look at the recording flag, as SGLang's dispatch-map kernel
/// adds into the row its recorder hands out.
void launch_row_add(const std::int32_t* ids, std::int64_t count, std::int32_t* row,
                    cudaStream_t stream);

}  // namespace moestat::test
