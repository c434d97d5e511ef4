// Device memory a part of the CUDA recorder allocates once, when the recorder is created, and
// frees when it goes: hooks never allocate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moestat::cuda_support {

class DeviceAllocations {
 public:
  DeviceAllocations() = default;
  ~DeviceAllocations();
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;

  /// `count` zeroed elements on the current device (at least one, so every buffer has an
  /// address), freed with this object.
  template <typename T>
  T* allocate(std::int64_t count) {
    return static_cast<T*>(
        allocate_zeroed(std::size_t(std::max<std::int64_t>(count, 1)) * sizeof(T)));
  }

 private:
  void* allocate_zeroed(std::size_t bytes);

  std::vector<void*> pointers_;
};

}  // namespace moestat::cuda_support
