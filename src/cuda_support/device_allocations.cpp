#include "device_allocations.hpp"

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"

namespace moestat::cuda_support {

DeviceAllocations::~DeviceAllocations() {
  for (void* pointer : pointers_) cudaFree(pointer);
}

void* DeviceAllocations::allocate_zeroed(std::size_t bytes) {
  void* pointer = nullptr;
  MOESTAT_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  pointers_.push_back(pointer);
  MOESTAT_CUDA_CHECK(cudaMemset(pointer, 0, bytes));
  return pointer;
}

}  // namespace moestat::cuda_support
