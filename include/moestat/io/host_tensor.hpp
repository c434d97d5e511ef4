// A dense tensor that owns its bytes in host memory: what the .pt and safetensors readers
// hand out and their writers take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <moestat/error.hpp>
#include <moestat/tensor_view.hpp>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace moestat::io {

/// Row-major, contiguous, little-endian. `device` is where the file said the tensor lived
/// (a torch storage location such as "cuda:0"); the bytes are always in host memory.
struct HostTensor {
  DType dtype = DType::kInt64;
  std::vector<std::int64_t> shape;  ///< Empty for a 0-d (scalar) tensor.
  std::vector<std::byte> data;      ///< numel() * dtype_size(dtype) bytes.
  Device device = Device::cpu();

  /// Product of the shape (1 for a 0-d tensor).
  std::int64_t numel() const noexcept;

  /// A copy of the elements as `T`; moestat::Error unless `T` matches the dtype
  /// (bool tensors read as std::uint8_t, one byte each).
  template <typename T>
  std::vector<T> values() const {
    require_element_type(dtype_of<T>());
    std::vector<T> out(data.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), data.data(), data.size());
    return out;
  }
  /// Integer or bool elements widened to int64; moestat::Error for floating dtypes.
  std::vector<std::int64_t> to_int64() const;

  /// A tensor of `values` with `shape`; moestat::Error when the sizes disagree.
  template <typename T>
  static HostTensor of(std::vector<std::int64_t> shape, std::span<const T> values) {
    HostTensor tensor;
    tensor.dtype = dtype_of<T>();
    tensor.shape = std::move(shape);
    MOESTAT_CHECK(tensor.numel() == std::int64_t(values.size()),
                  "tensor of shape [{}] needs {} values, got {}", fmt::join(tensor.shape, ", "),
                  tensor.numel(), values.size());
    tensor.data.resize(values.size_bytes());
    if (!values.empty()) std::memcpy(tensor.data.data(), values.data(), values.size_bytes());
    return tensor;
  }

  /// The dtype whose elements are `T` (std::uint8_t stands for bool).
  template <typename T>
  static constexpr DType dtype_of() noexcept {
    if constexpr (std::is_same_v<T, std::int32_t>) return DType::kInt32;
    if constexpr (std::is_same_v<T, std::int64_t>) return DType::kInt64;
    if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
    if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
    if constexpr (std::is_same_v<T, std::uint8_t> || std::is_same_v<T, bool>) return DType::kBool;
    static_assert(std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t> ||
                      std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, std::uint8_t> || std::is_same_v<T, bool>,
                  "HostTensor holds int32, int64, float32, float64 or bool (uint8)");
    return DType::kInt64;
  }

  friend bool operator==(const HostTensor&, const HostTensor&) = default;

 private:
  void require_element_type(DType wanted) const;
};

/// "cpu" or "cuda:N", as torch names storage locations.
std::string device_name(Device device);
/// The device a torch storage location or device string names: "cpu", "cuda" (device 0) or
/// "cuda:N"; moestat::Error for anything else.
Device device_of_name(std::string_view name);

}  // namespace moestat::io
