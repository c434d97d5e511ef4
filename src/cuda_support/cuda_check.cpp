#include "cuda_check.hpp"

#include <moestat/error.hpp>

namespace moestat::cuda_support {

void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line) {
  throw Error(file, line,
              fmt::format("{} failed: {} ({})", call, cudaGetErrorName(status),
                          cudaGetErrorString(status)));
}

}  // namespace moestat::cuda_support
