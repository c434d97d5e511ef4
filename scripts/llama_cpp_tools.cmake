# Included into llama.cpp's own configure by scripts/setup_llama_cpp.sh (CMAKE_PROJECT_<name>_INCLUDE).
# llama-imatrix, which only writes the tests' imatrix files, needs llama.cpp's common library and
# its HTTP client: two thirds of the build's compile time at -O3. At -O0 they compile in less
# than half the time (common/arg.cpp: 21 s against 9 s); libllama and libggml, which moestat
# links and benchmarks, keep the Release flags.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL
  set_property TARGET llama-common cpp-httplib APPEND PROPERTY COMPILE_OPTIONS -O0)
