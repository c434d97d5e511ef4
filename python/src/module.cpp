// moestat._core: the C++ library as a Python extension (nanobind). The `moestat` package
// re-exports it with Python-side helpers; see docs/python.md.
#include <nanobind/nanobind.h>

#include <moestat/error.hpp>

#include "bindings.hpp"

namespace nb = nanobind;

NB_MODULE(_core, module) {
  module.doc() = "moestat's C++ library: recorders, snapshots, planners and file formats";
  module.attr("__version__") = MOESTAT_VERSION;
  module.attr("has_cuda") =
#ifdef MOESTAT_HAS_CUDA
      true;
#else
      false;
#endif
  module.attr("has_http") =
#ifdef MOESTAT_HAS_HTTP
      true;
#else
      false;
#endif

  // moestat::Error becomes moestat.Error, a ValueError carrying the message without the
  // C++ source location (which means nothing to a Python caller).
  static nb::object error_type = nb::steal(PyErr_NewExceptionWithDoc(
      "moestat._core.Error", "Bad input or state, as moestat::Error reports it in C++.",
      PyExc_ValueError, nullptr));
  module.attr("Error") = error_type;
  nb::register_exception_translator(
      [](const std::exception_ptr& error, void* type) {
        try {
          std::rethrow_exception(error);
        } catch (const moestat::Error& failure) {
          PyErr_SetString(static_cast<PyObject*>(type), failure.message().c_str());
        }
      },
      error_type.ptr());

  moestat::python::bind_model(module);
  moestat::python::bind_recorders(module);
  moestat::python::bind_planning(module);
  moestat::python::bind_files(module);
  moestat::python::bind_online(module);
  moestat::python::bind_routes(module);
}
