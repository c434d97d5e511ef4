// Arrays across the Python boundary: any DLPack or buffer-protocol array (numpy, torch, on
// the CPU or a CUDA device) in as a TensorView, row-major std::vectors out as numpy arrays
// that own their memory.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <initializer_list>
#include <moestat/tensor_view.hpp>
#include <string_view>
#include <utility>
#include <vector>

namespace moestat::python {

namespace nb = nanobind;

/// Any array nanobind can take without copying: read-only, any dtype, device and strides.
using AnyArray = nb::ndarray<nb::ro>;

/// A view of `array` (no copy). moestat::Error naming `what` for a dtype moestat does not
/// read (it takes int32, int64, float32, float64 and bool), a device other than the CPU or
/// a CUDA GPU, more than four dimensions or negative strides.
TensorView view_of(const AnyArray& array, std::string_view what);

/// A numpy array of `shape` that takes over `values` (row-major; sizes must agree).
template <typename T>
nb::object to_numpy(std::vector<T> values, std::initializer_list<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned,
                    [](void* pointer) noexcept { delete static_cast<std::vector<T>*>(pointer); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape, owner));
}

/// The same for a shape known only at run time.
template <typename T>
nb::object to_numpy(std::vector<T> values, const std::vector<std::size_t>& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned,
                    [](void* pointer) noexcept { delete static_cast<std::vector<T>*>(pointer); });
  return nb::cast(nb::ndarray<nb::numpy, T>(owned->data(), shape.size(), shape.data(), owner));
}

/// A numpy bool array of `shape` that takes over `values` (0 or 1 each).
nb::object to_numpy_bool(std::vector<std::uint8_t> values,
                         std::initializer_list<std::size_t> shape);

/// The values of a CPU array of any integer, float or bool dtype as doubles, row-major, with
/// its shape; moestat::Error naming `what` otherwise.
std::vector<double> doubles_of(const AnyArray& array, std::string_view what,
                               std::vector<std::int64_t>& shape);

/// The values of a CPU array as counts (int64), row-major, with its shape; moestat::Error
/// naming `what` and the entry when one is not a non-negative whole number below 2^63.
std::vector<std::int64_t> counts_of_array(const AnyArray& array, std::string_view what,
                                          std::vector<std::int64_t>& shape);

}  // namespace moestat::python
