#include <cstring>
#include <moestat/tensor_view.hpp>

namespace moestat {
namespace {

/// The element at `bytes`, which need not be aligned.
template <typename T>
T read_as(const unsigned char* bytes) noexcept {
  T value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

}  // namespace

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBool:
      return "bool";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt16:
      return "int16";
    case DType::kUInt16:
      return "uint16";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBool:
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
    case DType::kUInt16:
      return 2;
  }
  return 0;
}

TensorView::TensorView(const void* data, DType dtype, std::span<const std::int64_t> shape,
                       std::span<const std::int64_t> strides, Device device)
    : data_(data), dtype_(dtype), device_(device) {
  MOESTAT_CHECK(shape.size() <= std::size_t(kMaxDims),
                "tensor has {} dimensions, at most {} supported", shape.size(), kMaxDims);
  MOESTAT_CHECK(shape.size() == strides.size(),
                "tensor shape has {} dimensions but strides have {}", shape.size(), strides.size());
  num_dims_ = int(shape.size());
  bool empty = false;
  for (int axis = 0; axis < num_dims_; ++axis) {
    MOESTAT_CHECK(shape[axis] >= 0, "tensor size {} of dimension {} is negative", shape[axis],
                  axis);
    MOESTAT_CHECK(strides[axis] >= 0, "tensor stride {} of dimension {} is negative", strides[axis],
                  axis);
    shape_[axis] = shape[axis];
    strides_[axis] = strides[axis];
    empty = empty || shape[axis] == 0;
  }
  MOESTAT_CHECK(data != nullptr || empty,
                "tensor data pointer is null but the tensor is not empty");
}

TensorView TensorView::contiguous(const void* data, DType dtype,
                                  std::span<const std::int64_t> shape, Device device) {
  std::array<std::int64_t, kMaxDims> strides{};
  MOESTAT_CHECK(shape.size() <= std::size_t(kMaxDims),
                "tensor has {} dimensions, at most {} supported", shape.size(), kMaxDims);
  std::int64_t running = 1;
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    strides[axis] = running;
    running *= shape[axis] > 0 ? shape[axis] : 1;
  }
  return TensorView(data, dtype, shape, std::span<const std::int64_t>(strides.data(), shape.size()),
                    device);
}

std::int64_t TensorView::size(int axis) const {
  MOESTAT_CHECK(axis >= 0 && axis < num_dims_, "axis {} out of range for a {}-d tensor", axis,
                num_dims_);
  return shape_[axis];
}

std::int64_t TensorView::stride(int axis) const {
  MOESTAT_CHECK(axis >= 0 && axis < num_dims_, "axis {} out of range for a {}-d tensor", axis,
                num_dims_);
  return strides_[axis];
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t count = 1;
  for (int axis = 0; axis < num_dims_; ++axis) count *= shape_[axis];
  return count;
}

bool TensorView::is_contiguous() const noexcept {
  // An empty view has no element to be out of place (as torch says), and contiguous()
  // gives size-0 dimensions the strides of size 1.
  if (numel() == 0) return true;
  std::int64_t expected = 1;
  for (int axis = num_dims_; axis-- > 0;) {
    if (shape_[axis] != 1 && strides_[axis] != expected) return false;
    expected *= shape_[axis];
  }
  return true;
}

std::int64_t TensorView::int_at(std::initializer_list<std::int64_t> index) const {
  require_cpu("tensor");
  // Only a default-constructed view has no data and an element (0-d).
  MOESTAT_CHECK(data_ != nullptr, "int_at on a view with no data");
  MOESTAT_CHECK(int(index.size()) == num_dims_, "indexing a {}-d tensor with {} indices", num_dims_,
                index.size());
  std::int64_t offset = 0;
  int axis = 0;
  for (std::int64_t i : index) {
    MOESTAT_CHECK(i >= 0 && i < shape_[axis], "index {} out of range [0, {}) on dimension {}", i,
                  shape_[axis], axis);
    offset += i * strides_[axis];
    ++axis;
  }
  const auto* bytes =
      static_cast<const unsigned char*>(data_) + offset * std::int64_t(dtype_size(dtype_));
  switch (dtype_) {
    case DType::kInt32:
      return read_as<std::int32_t>(bytes);
    case DType::kInt64:
      return read_as<std::int64_t>(bytes);
    case DType::kBool:
      return *bytes != 0 ? 1 : 0;
    case DType::kUInt8:
      return *bytes;
    case DType::kInt16:
      return read_as<std::int16_t>(bytes);
    case DType::kUInt16:
      return read_as<std::uint16_t>(bytes);
    case DType::kFloat32:
    case DType::kFloat64:
      break;
  }
  MOESTAT_FAIL("int_at on a {} tensor; expected an integer or bool dtype", dtype_name(dtype_));
}

void TensorView::require_dims(int num_dims, std::string_view what) const {
  MOESTAT_CHECK(num_dims_ == num_dims, "{} must be {}-d, got {}-d", what, num_dims, num_dims_);
}

void TensorView::require_integer(std::string_view what) const {
  MOESTAT_CHECK(dtype_ == DType::kInt32 || dtype_ == DType::kInt64,
                "{} must be int32 or int64, got {}", what, dtype_name(dtype_));
}

void TensorView::require_cpu(std::string_view what) const {
  MOESTAT_CHECK(device_.kind == DeviceKind::kCpu,
                "{} is in CUDA memory; this function needs host memory", what);
}

}  // namespace moestat
