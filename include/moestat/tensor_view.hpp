// A non-owning view of an n-dimensional array: the one currency at every moestat boundary.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <moestat/error.hpp>
#include <span>
#include <string_view>

namespace moestat {

/// Element types moestat reads and writes.
// kUInt8, kInt16 and kUInt16 hold routed expert ids (moestat/routes): the narrowest type
// that fits a model's experts. Appended, so the values of the others stay what they were.
enum class DType : std::uint8_t {
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kBool,
  kUInt8,
  kInt16,
  kUInt16
};

std::string_view dtype_name(DType dtype) noexcept;
std::size_t dtype_size(DType dtype) noexcept;

enum class DeviceKind : std::uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static constexpr Device cpu() noexcept { return {}; }
  static constexpr Device cuda(int index = 0) noexcept { return {DeviceKind::kCuda, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// Non-owning (pointer, dtype, shape, strides, device). Strides count elements, not bytes,
/// as torch's do, and may be any non-negative value (sliced, transposed, broadcast views).
/// The caller keeps the memory alive while the view is used; the view never frees it.
/// Shape and strides live inline (no allocation), so views are cheap to build per call.
class TensorView {
 public:
  static constexpr int kMaxDims = 4;

  TensorView() = default;

  /// A view with explicit strides. Throws moestat::Error on more than kMaxDims dimensions,
  /// negative sizes or strides, a null pointer with a non-empty shape, or mismatched ranks.
  TensorView(const void* data, DType dtype, std::span<const std::int64_t> shape,
             std::span<const std::int64_t> strides, Device device = Device::cpu());

  /// A row-major contiguous view.
  static TensorView contiguous(const void* data, DType dtype, std::span<const std::int64_t> shape,
                               Device device = Device::cpu());
  static TensorView contiguous(const void* data, DType dtype,
                               std::initializer_list<std::int64_t> shape,
                               Device device = Device::cpu()) {
    return contiguous(data, dtype, std::span<const std::int64_t>(shape.begin(), shape.size()),
                      device);
  }

  const void* data() const noexcept { return data_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  int dim() const noexcept { return num_dims_; }
  std::int64_t size(int axis) const;
  std::int64_t stride(int axis) const;
  std::span<const std::int64_t> shape() const noexcept {
    return {shape_.data(), std::size_t(num_dims_)};
  }
  std::span<const std::int64_t> strides() const noexcept {
    return {strides_.data(), std::size_t(num_dims_)};
  }
  std::int64_t numel() const noexcept;
  bool is_contiguous() const noexcept;

  /// Checked element read, converted to int64: index count must equal dim(), every index
  /// must be in range, the view must be on the CPU and hold an integer or bool dtype.
  std::int64_t int_at(std::initializer_list<std::int64_t> index) const;

  /// Throws unless the view has exactly `num_dims` dimensions; `what` names the argument.
  void require_dims(int num_dims, std::string_view what) const;
  /// Throws unless the dtype is int32 or int64; `what` names the argument.
  void require_integer(std::string_view what) const;
  /// Throws unless the view lives in host memory; `what` names the argument.
  void require_cpu(std::string_view what) const;

 private:
  const void* data_ = nullptr;
  DType dtype_ = DType::kInt32;
  Device device_{};
  int num_dims_ = 0;
  std::array<std::int64_t, kMaxDims> shape_{};
  std::array<std::int64_t, kMaxDims> strides_{};
};

}  // namespace moestat
