// Arguments taken as Python objects and converted here, so that a wrong type raises a
// TypeError naming the function, the argument and what it takes ("record_topk: topk_ids must
// be an array ..., got list") instead of nanobind's "incompatible function arguments".
//
// Each converter runs the same nanobind caster a typed parameter would (with implicit
// conversions, as a function of one overload gets them), so a call that worked with a typed
// parameter works the same and costs the same; only a failed conversion does more. Functions
// that take these keep their typed signature for __doc__ and the stubs through nb::sig.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>

#include "arrays.hpp"

namespace moestat::python {

namespace nb = nanobind;

/// The Python type of `value` as a user would write it: "list", "float", "None",
/// "numpy.ndarray", "torch.Tensor".
std::string python_type_name(nb::handle value);

/// Raises TypeError "{function}: {argument} must be {expected}, got {type of value}".
/// Names are C strings so that the converters below build nothing until they fail.
[[noreturn]] void raise_argument_type(const char* function, const char* argument,
                                      std::string_view expected, nb::handle value);

/// How nanobind spells an array parameter (nb::ndarray<nb::ro>) in a signature, for nb::sig.
#define MOESTAT_STUB_ARRAY "ndarray[writable=False]"

/// What array arguments take, for messages.
inline constexpr std::string_view kArrayKinds =
    "an array (numpy, torch or any DLPack/buffer-protocol object)";

/// The failure of integer_argument: says "an int", or the range when `value` is an int.
[[noreturn]] void raise_integer_argument(const char* function, const char* argument, bool is_signed,
                                         std::size_t bits, nb::handle value);

/// The failure of array_argument.
[[noreturn]] void raise_array_argument(const char* function, const char* argument, const char* what,
                                       nb::handle value);

/// `value` as an integer of type T (a Python int, or anything with __index__); TypeError
/// naming the argument otherwise, or when the value does not fit T.
template <typename T>
T integer_argument(nb::handle value, const char* function, const char* argument) {
  nb::detail::make_caster<T> caster;
  if (caster.from_python(value, std::uint8_t(nb::detail::cast_flags::convert), nullptr))
      [[likely]] {
    return caster.value;
  }
  raise_integer_argument(function, argument, std::is_signed_v<T>, sizeof(T) * 8, value);
}

/// `value` as a T through nanobind's caster (str as std::string, float as double, ...);
/// TypeError "{function}: {argument} must be {expected}, got {type}" otherwise.
template <typename T>
T value_argument(nb::handle value, const char* function, const char* argument,
                 const char* expected) {
  T out{};
  if (nb::try_cast(value, out)) [[likely]] {
    return out;
  }
  raise_argument_type(function, argument, expected, value);
}

/// `value` as an array without a copy; TypeError "... must be {kArrayKinds} {what}" otherwise.
/// `what` says what the array holds ("of int32/int64 physical expert ids").
inline AnyArray array_argument(nb::handle value, const char* function, const char* argument,
                               const char* what) {
  // An array of any dtype, order and device is never converted (the flag only matters when
  // one of them must change), so the caster needs no cleanup list.
  nb::detail::make_caster<AnyArray> caster;
  if (caster.from_python(value, 0, nullptr)) [[likely]] {
    return std::move(caster.value);
  }
  raise_array_argument(function, argument, what, value);
}

/// `value` as a file system path (a str or an os.PathLike).
std::filesystem::path path_argument(nb::handle value, const char* function, const char* argument);

/// The C++ object of a bound class `T` (named `class_name` in Python) that `value` is.
template <typename T>
T& instance_argument(nb::handle value, const char* function, const char* argument,
                     const char* class_name) {
  T* out = nullptr;
  if (nb::try_cast(value, out) && out != nullptr) [[likely]] {
    return *out;
  }
  raise_argument_type(function, argument, class_name, value);
}

}  // namespace moestat::python
