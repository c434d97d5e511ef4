# Finds what the Python package needs: an interpreter with its development headers, numpy
# (the module hands out numpy arrays) and nanobind. Sets MOESTAT_NANOBIND_FOUND.
#
# The interpreter: Python_EXECUTABLE when given (scikit-build-core gives it; its isolated
# build environment has nanobind but not numpy, a runtime dependency), else the first of
# python3 on the PATH and /usr/bin/python3 that imports numpy and nanobind (the tests run
# it). nanobind is also looked for in .deps/python, where scripts/setup.sh installs it.
set(MOESTAT_NANOBIND_FOUND OFF)
set(MOESTAT_PYTHON_DEPS_DIR ${PROJECT_SOURCE_DIR}/.deps/python)
set(modules "numpy, nanobind")
set(candidates ${Python_EXECUTABLE})
if(candidates)
  set(modules "nanobind")
else()
  find_program(MOESTAT_PATH_PYTHON3 NAMES python3)
  set(candidates ${MOESTAT_PATH_PYTHON3} /usr/bin/python3)
endif()
set(probe "import sys; sys.path.append('${MOESTAT_PYTHON_DEPS_DIR}'); import ${modules}; print(nanobind.cmake_dir())")
foreach(candidate ${candidates})
  if(EXISTS ${candidate})
    execute_process(COMMAND ${candidate} -c "${probe}" RESULT_VARIABLE failed
                    OUTPUT_VARIABLE nanobind_cmake_dir ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(failed EQUAL 0)
      set(Python_EXECUTABLE ${candidate})
      break()
    endif()
  endif()
endforeach()

if(nanobind_cmake_dir)
  find_package(Python 3.8 COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    find_package(nanobind CONFIG PATHS ${nanobind_cmake_dir} NO_DEFAULT_PATH)
    set(MOESTAT_NANOBIND_FOUND ${nanobind_FOUND})
  endif()
endif()
if(MOESTAT_NANOBIND_FOUND)
  message(STATUS "moestat: Python package for ${Python_EXECUTABLE} (nanobind ${nanobind_VERSION})")
endif()
