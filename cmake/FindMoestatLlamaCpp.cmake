# llama.cpp for the component moestat_llama_cpp (src/llama_cpp), the `moestat llama-record`
# command and tests/llama_cpp: its headers (llama.h, ggml.h, ggml-backend.h) and shared libraries
# (libllama, libggml, libggml-base) under MOESTAT_LLAMA_CPP_DIR, by default where
# scripts/setup_llama_cpp.sh builds them (.deps/llama.cpp/<version>: source/ and build/bin/).
# A llama.cpp checkout built with BUILD_SHARED_LIBS=ON works too: headers are searched in
# DIR/{source/,}{include,ggml/include}, libraries in DIR/{build/,}{bin,lib,src,ggml/src}.
#
# Sets MOESTAT_LLAMA_CPP_FOUND, MOESTAT_LLAMA_CPP_LIBRARIES (full paths) and the build-only
# interface target moestat_llama_cpp_api (headers + libraries) for the targets that call llama.cpp.
set(MOESTAT_LLAMA_CPP_DIR "${PROJECT_SOURCE_DIR}/.deps/llama.cpp/0.3.36"
    CACHE PATH "llama.cpp's sources and shared-library build (scripts/setup_llama_cpp.sh)")

set(_moestat_llama_roots ${MOESTAT_LLAMA_CPP_DIR}/source ${MOESTAT_LLAMA_CPP_DIR})
find_path(MOESTAT_LLAMA_CPP_INCLUDE_DIR llama.h
          PATHS ${_moestat_llama_roots} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(MOESTAT_GGML_INCLUDE_DIR ggml-backend.h
          PATHS ${_moestat_llama_roots} PATH_SUFFIXES ggml/include include NO_DEFAULT_PATH)
set(_moestat_llama_lib_dirs "")
foreach(_moestat_root ${MOESTAT_LLAMA_CPP_DIR}/build ${MOESTAT_LLAMA_CPP_DIR})
  list(APPEND _moestat_llama_lib_dirs ${_moestat_root}/bin ${_moestat_root}/lib
       ${_moestat_root}/src ${_moestat_root}/ggml/src)
endforeach()
set(MOESTAT_LLAMA_CPP_LIBRARIES "")
set(MOESTAT_LLAMA_CPP_FOUND ON)
foreach(_moestat_lib llama ggml ggml-base)
  string(MAKE_C_IDENTIFIER "MOESTAT_LIB_${_moestat_lib}" _moestat_var)
  find_library(${_moestat_var} NAMES ${_moestat_lib} PATHS ${_moestat_llama_lib_dirs}
               NO_DEFAULT_PATH)
  if(${_moestat_var})
    list(APPEND MOESTAT_LLAMA_CPP_LIBRARIES ${${_moestat_var}})
  else()
    set(MOESTAT_LLAMA_CPP_FOUND OFF)
  endif()
endforeach()
if(NOT MOESTAT_LLAMA_CPP_INCLUDE_DIR OR NOT MOESTAT_GGML_INCLUDE_DIR)
  set(MOESTAT_LLAMA_CPP_FOUND OFF)
endif()

if(MOESTAT_LLAMA_CPP_FOUND AND NOT TARGET moestat_llama_cpp_api)
  add_library(moestat_llama_cpp_api INTERFACE)
  # SYSTEM: llama.cpp's headers are not held to this project's warning set.
  target_include_directories(moestat_llama_cpp_api SYSTEM INTERFACE ${MOESTAT_LLAMA_CPP_INCLUDE_DIR}
                                                                   ${MOESTAT_GGML_INCLUDE_DIR})
  target_link_libraries(moestat_llama_cpp_api INTERFACE ${MOESTAT_LLAMA_CPP_LIBRARIES})
endif()
unset(_moestat_llama_roots)
unset(_moestat_llama_lib_dirs)
unset(_moestat_root)
unset(_moestat_lib)
unset(_moestat_var)
