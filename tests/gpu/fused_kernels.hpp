// A stand-in for an engine kernel that counts its own routing through
// moestat/record/cuda_fused.cuh (defined in fused_kernels.cu, free of gtest and fmt so nvcc
// compiles it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <moestat/record/fused_target.hpp>

namespace moestat::testing {

/// Counts the first `*num_valid` rows of `ids` [num_rows, top_k] (int32, device) into
/// `target`, one thread per id, as a router kernel would after choosing them.
void launch_fused_count(const std::int32_t* ids, std::int64_t num_rows, std::int64_t top_k,
                        const std::int32_t* num_valid, const record::FusedRecordTarget& target,
                        cudaStream_t stream);

}  // namespace moestat::testing
