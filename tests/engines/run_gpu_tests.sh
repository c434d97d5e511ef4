#!/usr/bin/env bash
# Runs on a GPU machine: builds the Python package and the GPU test binary there, then runs the
# GPU recorder tests, the CUDA tests of the Python package (the CUDA recorder fed from eight
# threads included) and the engine tests (the differential test against SGLang's recorder with
# CUDA graphs; the transformers models). tests/device_all.sh runs it with the vLLM suite.
#
# The build is configured with MOESTAT_BUILD_REPORT=OFF: the GPU tests and the Python package
# link neither the report layer nor the CLI, so librsvg, Cairo and CLI11 are not needed (the
# test tree then holds the GPU tests alone; tests/CMakeLists.txt). What the machine needs:
#   - the CUDA toolkit (nvcc; compute-sanitizer for the memcheck step), CMake >= 3.25, Ninja
#     and a C++20 compiler;
#   - libraries: fmt, nlohmann-json, libzip (through pkg-config), GoogleTest/GoogleMock and
#     rapidcheck, from the machine or from DEPS_PREFIX below;
#   - a python3 with nanobind (for the build), numpy, pytest, torch and, for their tests,
#     transformers (docs/transformers.md gives the versions supported) and sglang (or
#     MOESTAT_SGLANG_WHEEL).
#
# Usage: [BUILD_ONLY=1] tests/engines/run_gpu_tests.sh OUT_DIR [DEPS_PREFIX]
#   DEPS_PREFIX: for a machine without the library's dependencies, a folder holding them as
#     extracted Debian packages (DEPS_PREFIX/usr/...): libfmt-dev, libfmt9, nlohmann-json3-dev,
#     libzip-dev, libzip4, libgtest-dev, libgmock-dev, librapidcheck-dev, pkgconf
#     (`apt-get download` them, then `dpkg -x PACKAGE.deb DEPS_PREFIX`; tests/device_deps.sh).
#   MOESTAT_SGLANG_WHEEL: an sglang wheel, where the machine has no sglang installed
#     (tests/engines/sglang_harness.py loads SGLang's recorder from it).
set -uo pipefail
out=$1
deps=${2:-}
mkdir -p "$out"
status=0

# shellcheck source=../device_deps.sh
source "$(dirname "$0")/../device_deps.sh"

echo "== build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESTAT_BUILD_PYTHON=ON \
  -DMOESTAT_BUILD_REPORT=OFF -DMOESTAT_BUILD_TESTS=ON -DMOESTAT_BUILD_BENCH=OFF \
  -DMOESTAT_WERROR=OFF -DMOESTAT_FMT_HEADER_ONLY=ON \
  -DPython_EXECUTABLE="$(command -v python3)" "${cmake_args[@]}" >"$out/build.log" 2>&1 &&
  cmake --build build-gpu --target _core moestat_gpu_recorder_tests moestat_gpu_route_tests >>"$out/build.log" 2>&1
if [[ $? -ne 0 ]]; then
  tail -n 40 "$out/build.log"
  exit 1
fi
# BUILD_ONLY=1: the build alone, for the suites that run on it (tests/device_all.sh).
[[ ${BUILD_ONLY:-0} == 1 ]] && exit 0

echo "== GPU recorder tests"
build-gpu/tests/gpu/moestat_gpu_recorder_tests >"$out/gpu_tests.log" 2>&1 || status=1
tail -n 3 "$out/gpu_tests.log"
grep -E "^\[  FAILED" "$out/gpu_tests.log"

echo "== compute-sanitizer memcheck of the tests this suite adds"
compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/gpu/moestat_gpu_recorder_tests \
  --gtest_filter='CudaPassCountRow.*:CudaRecorderOutsidePass.*' >"$out/sanitizer.log" 2>&1 || status=1
tail -n 2 "$out/sanitizer.log"

echo "== Python package and engine tests on CUDA"
export PYTHONPATH="$PWD/build-gpu/python${PYTHONPATH:+:$PYTHONPATH}" MOESTAT_SHARED="$PWD/../shared"
# MOESTAT_GPU_SUITE: tests the CPU suite runs alone (ranks over gloo) skip, with their reason.
MOESTAT_GPU_SUITE=1 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_cuda.py \
  tests/python/test_recorder_threads.py tests/engines/test_sglang_cuda.py tests/engines/test_sglang_differential.py \
  tests/engines/test_transformers_cuda.py tests/engines/test_hf_step_cost.py 2>&1 |
  tee "$out/pytest.log" | tail -n 25
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
exit $status
