#!/usr/bin/env bash
# Builds llama.cpp (CPU backend) from the sources PyPI's llama-cpp-python carries, for moestat's
# llama.cpp component (src/llama_cpp), its `moestat llama-record` command and the tests that run
# real llama.cpp (tests/llama_cpp). Nothing of llama.cpp is copied into the repository: the
# pinned sdist is fetched by pip and built outside the build tree, in .deps (ignored by git).
#
#   scripts/setup_llama_cpp.sh [--force]     --force: rebuild even if a complete build is there
#   scripts/setup_llama_cpp.sh --print-dir   prints the directory below and exits
#
# Where things land (LLAMA_CPP_DIR = .deps/llama.cpp/<llama-cpp-python version>):
#   $LLAMA_CPP_DIR/source/              llama.cpp's sources (the sdist's vendor/llama.cpp):
#                                       include/llama.h, ggml/include/ggml*.h
#   $LLAMA_CPP_DIR/build/bin/           libllama.so, libggml*.so and the tools: llama-imatrix
#   $LLAMA_CPP_DIR/complete             written last: a build without it is redone
#   $LLAMA_CPP_DIR/python/              llama-cpp-python's own Python package (the sdist's
#                                       llama_cpp/: ctypes bindings, no library) and what it
#                                       imports (diskcache, jinja2, markupsafe, pinned), for
#                                       moestat.llama_cpp's tests: PYTHONPATH=$LLAMA_CPP_DIR/python
#                                       LLAMA_CPP_LIB_PATH=$LLAMA_CPP_DIR/build/bin makes
#                                       `import llama_cpp` load the libllama built here (the
#                                       same sources, so the same ABI) instead of building
#                                       llama-cpp-python's wheel (about 10 more minutes)
#   $LLAMA_CPP_DIR/python/complete      written last: a package without it is redone
# CMake finds it there by default (MOESTAT_LLAMA_CPP_DIR, see src/llama_cpp/CMakeLists.txt).
#
# Cost: the download (76 MB) takes seconds; the build (libllama, libggml, llama-imatrix only,
# Release, no tests, examples, server or HTTPS) about 7 min on 2 idle cores (651 s measured on
# 2 cores shared with another build), once: a complete build is reused, so a second run takes a
# moment. CI (.ci/run, through setup.sh --with-engines) pays it on a clean clone.
set -euo pipefail

version=0.3.36
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/.deps/llama.cpp/$version"

force=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    --print-dir) echo "$dir"; exit 0 ;;
    *) echo "usage: $0 [--force | --print-dir]" >&2; exit 2 ;;
  esac
done

download=""
trap '[[ -z $download ]] || rm -rf "$download"' EXIT
# The sdist, unpacked into $download/llama_cpp_python-$version (once per run).
fetch_sdist() {
  [[ -z $download ]] || return 0
  download="$(mktemp -d)"
  # The sdist only (--no-binary for this package alone; its build requirements come as wheels).
  /usr/bin/python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$download"
  tar -xzf "$download/llama_cpp_python-$version.tar.gz" -C "$download"
}

# llama-cpp-python's Python package, without its compiled library (a few seconds).
install_python_package() {
  [[ $force == 0 && -f $dir/python/complete ]] && return 0
  fetch_sdist
  rm -rf "$dir/python"
  mkdir -p "$dir/python"
  cp -r "$download/llama_cpp_python-$version/llama_cpp" "$dir/python/llama_cpp"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$dir/python" diskcache==5.6.3 jinja2==3.1.6 markupsafe==3.0.3
  touch "$dir/python/complete"
  echo "setup_llama_cpp: llama-cpp-python $version's Python package in $dir/python"
}

if [[ $force == 0 && -f $dir/complete ]]; then
  install_python_package
  echo "setup_llama_cpp: llama.cpp of llama-cpp-python $version is built in $dir"
  exit 0
fi

start=$SECONDS
rm -rf "$dir"
mkdir -p "$dir"
fetch_sdist
cp -r "$download/llama_cpp_python-$version/vendor/llama.cpp" "$dir/source"

# Shared libraries, so moestat links libllama.so as llama-cpp-python's users do. The server
# (which downloads a web UI), the unified app, tests and examples are off; tools stay on for
# llama-imatrix, of which only that target is built.
cmake -S "$dir/source" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_UI=OFF -DGGML_CCACHE=OFF \
  "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$root/scripts/llama_cpp_tools.cmake" >"$dir/configure.log"
cmake --build "$dir/build" --target llama ggml llama-imatrix
touch "$dir/complete"
install_python_package
echo "setup_llama_cpp: built llama.cpp of llama-cpp-python $version in $dir in $((SECONDS - start)) s"
