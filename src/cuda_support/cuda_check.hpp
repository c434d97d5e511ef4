// Checked CUDA runtime calls: every failure becomes a moestat::Error naming the call and
// CUDA's error. Free of fmt so that .cu files (compiled by nvcc) can include it.
#pragma once

#include <cuda_runtime_api.h>

namespace moestat::cuda_support {
/// Throws moestat::Error "`call` failed: <error name> (<description>)" at file:line.
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, const char* file,
                                   int line);
}  // namespace moestat::cuda_support

/// Throws moestat::Error with the call's text and CUDA's error name when `expr` fails.
#define MOESTAT_CUDA_CHECK(expr)                                                                 \
  do {                                                                                           \
    const cudaError_t moestat_cuda_status = (expr);                                              \
    if (moestat_cuda_status != cudaSuccess) [[unlikely]] {                                       \
      ::moestat::cuda_support::throw_cuda_error(#expr, moestat_cuda_status, __FILE__, __LINE__); \
    }                                                                                            \
  } while (false)
