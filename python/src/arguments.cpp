#include "arguments.hpp"

#include <fmt/format.h>
#include <nanobind/stl/string.h>

namespace moestat::python {

std::string python_type_name(nb::handle value) {
  if (value.is_none()) return "None";
  const nb::handle type = value.type();
  std::string name = nb::cast<std::string>(nb::str(type.attr("__qualname__")));
  const nb::object module = nb::getattr(type, "__module__", nb::none());
  if (nb::isinstance<nb::str>(module)) {
    const std::string module_name = nb::cast<std::string>(module);
    if (module_name != "builtins") name = module_name + "." + name;
  }
  return name;
}

void raise_argument_type(const char* function, const char* argument, std::string_view expected,
                         nb::handle value) {
  throw nb::type_error(fmt::format("{}: {} must be {}, got {}", function, argument, expected,
                                   python_type_name(value))
                           .c_str());
}

void raise_integer_argument(const char* function, const char* argument, bool is_signed,
                            std::size_t bits, nb::handle value) {
  if (PyLong_Check(value.ptr())) {
    const std::string range = is_signed ? fmt::format("-2**{} to 2**{} - 1", bits - 1, bits - 1)
                                        : fmt::format("0 to 2**{} - 1", bits);
    throw nb::type_error(fmt::format("{}: {} must be an int from {}, got {}", function, argument,
                                     range, nb::cast<std::string>(nb::repr(value)))
                             .c_str());
  }
  raise_argument_type(function, argument, "an int", value);
}

void raise_array_argument(const char* function, const char* argument, const char* what,
                          nb::handle value) {
  raise_argument_type(function, argument, fmt::format("{} {}", kArrayKinds, what), value);
}

std::filesystem::path path_argument(nb::handle value, const char* function, const char* argument) {
  std::filesystem::path out;
  if (nb::try_cast(value, out)) [[likely]] {
    return out;
  }
  raise_argument_type(function, argument, "a str or os.PathLike", value);
}

}  // namespace moestat::python
