#include "arrays.hpp"

#include <array>
#include <cmath>
#include <moestat/error.hpp>
#include <string>

namespace moestat::python {
namespace {

/// DLPack's name of a type, as numpy spells it ("uint8", "float16", ...).
std::string dtype_name_of(const nb::dlpack::dtype& dtype) {
  static constexpr std::array<std::string_view, 7> kNames = {"int",    "uint",    "float", "",
                                                             "bfloat", "complex", "bool"};
  const std::string_view name = dtype.code < kNames.size() ? kNames[dtype.code] : "";
  if (name.empty()) return fmt::format("DLPack type code {}", int(dtype.code));
  if (name == "bool") return "bool";
  return fmt::format("{}{}", name, int(dtype.bits));
}

DType dtype_of(const nb::dlpack::dtype& dtype, std::string_view what) {
  const auto code = static_cast<nb::dlpack::dtype_code>(dtype.code);
  if (dtype.lanes == 1) {
    if (code == nb::dlpack::dtype_code::Int && dtype.bits == 32) return DType::kInt32;
    if (code == nb::dlpack::dtype_code::Int && dtype.bits == 64) return DType::kInt64;
    if (code == nb::dlpack::dtype_code::Float && dtype.bits == 32) return DType::kFloat32;
    if (code == nb::dlpack::dtype_code::Float && dtype.bits == 64) return DType::kFloat64;
    if (code == nb::dlpack::dtype_code::Bool && dtype.bits == 8) return DType::kBool;
    if (code == nb::dlpack::dtype_code::UInt && dtype.bits == 8) return DType::kUInt8;
    if (code == nb::dlpack::dtype_code::Int && dtype.bits == 16) return DType::kInt16;
    if (code == nb::dlpack::dtype_code::UInt && dtype.bits == 16) return DType::kUInt16;
  }
  MOESTAT_FAIL(
      "{}: dtype {} is not supported (int32, int64, float32, float64, bool, uint8, "
      "int16 or uint16)",
      what, dtype_name_of(dtype));
}

Device device_of(const AnyArray& array, std::string_view what) {
  if (array.device_type() == nb::device::cpu::value) return Device::cpu();
  if (array.device_type() == nb::device::cuda::value) return Device::cuda(array.device_id());
  MOESTAT_FAIL("{}: arrays on DLPack device type {} are not supported (CPU or CUDA)", what,
               array.device_type());
}

}  // namespace

TensorView view_of(const AnyArray& array, std::string_view what) {
  const auto num_dims = array.ndim();
  MOESTAT_CHECK(num_dims <= std::size_t(TensorView::kMaxDims),
                "{}: {} dimensions, at most {} are supported", what, num_dims,
                TensorView::kMaxDims);
  std::array<std::int64_t, TensorView::kMaxDims> shape{};
  std::array<std::int64_t, TensorView::kMaxDims> strides{};
  for (std::size_t axis = 0; axis < num_dims; ++axis) {
    shape[axis] = std::int64_t(array.shape(axis));
    strides[axis] = array.stride(axis);
    MOESTAT_CHECK(strides[axis] >= 0, "{}: axis {} has a negative stride; pass a copy", what, axis);
  }
  return TensorView(array.data(), dtype_of(array.dtype(), what), {shape.data(), num_dims},
                    {strides.data(), num_dims}, device_of(array, what));
}

nb::object to_numpy_bool(std::vector<std::uint8_t> values,
                         std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<std::uint8_t>(std::move(values));
  nb::capsule owner(owned, [](void* pointer) noexcept {
    delete static_cast<std::vector<std::uint8_t>*>(pointer);
  });
  return nb::cast(nb::ndarray<nb::numpy>(owned->data(), shape, owner, {}, nb::dtype<bool>()));
}

std::vector<double> doubles_of(const AnyArray& array, std::string_view what,
                               std::vector<std::int64_t>& shape) {
  const TensorView view = view_of(array, what);
  view.require_cpu(what);
  shape.assign(view.shape().begin(), view.shape().end());
  std::vector<double> values;
  values.reserve(std::size_t(view.numel()));
  // Walks the view in row-major order whatever its strides.
  std::array<std::int64_t, TensorView::kMaxDims> index{};
  const auto element = dtype_size(view.dtype());
  const auto* base = static_cast<const unsigned char*>(view.data());
  for (std::int64_t n = 0; n < view.numel(); ++n) {
    std::int64_t offset = 0;
    for (int axis = 0; axis < view.dim(); ++axis)
      offset += index[std::size_t(axis)] * view.stride(axis);
    const unsigned char* item = base + offset * std::int64_t(element);
    switch (view.dtype()) {
      case DType::kInt32:
        values.push_back(double(*reinterpret_cast<const std::int32_t*>(item)));
        break;
      case DType::kInt64:
        values.push_back(double(*reinterpret_cast<const std::int64_t*>(item)));
        break;
      case DType::kFloat32:
        values.push_back(double(*reinterpret_cast<const float*>(item)));
        break;
      case DType::kFloat64:
        values.push_back(*reinterpret_cast<const double*>(item));
        break;
      case DType::kBool:
        values.push_back(*item != 0 ? 1.0 : 0.0);
        break;
      case DType::kUInt8:
        values.push_back(double(*item));
        break;
      case DType::kInt16:
        values.push_back(double(*reinterpret_cast<const std::int16_t*>(item)));
        break;
      case DType::kUInt16:
        values.push_back(double(*reinterpret_cast<const std::uint16_t*>(item)));
        break;
    }
    for (int axis = view.dim() - 1; axis >= 0; --axis) {
      if (++index[std::size_t(axis)] < view.size(axis)) break;
      index[std::size_t(axis)] = 0;
    }
  }
  return values;
}

std::vector<std::int64_t> counts_of_array(const AnyArray& array, std::string_view what,
                                          std::vector<std::int64_t>& shape) {
  const std::vector<double> values = doubles_of(array, what, shape);
  std::vector<std::int64_t> counts;
  counts.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    // 2^63 bounds the conversion below, which is undefined past int64 (or for NaN).
    MOESTAT_CHECK(values[i] >= 0 && values[i] < 0x1p63 && values[i] == std::floor(values[i]),
                  "{}: entry {} ({}) is not a non-negative integer", what, i, values[i]);
    counts.push_back(std::int64_t(values[i]));
  }
  return counts;
}

}  // namespace moestat::python
