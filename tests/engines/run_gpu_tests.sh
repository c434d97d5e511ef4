#!/usr/bin/env bash
# Runs on a GPU machine that has CUDA, CMake, Ninja and a Python with torch (transformers and
# Triton where installed): builds the Python package and the GPU test binary there, then runs
# the GPU recorder tests, the CUDA tests of the Python package and the engine tests (the
# differential test against SGLang's recorder with CUDA graphs; the transformers models).
#
# Usage: tests/engines/run_gpu_tests.sh OUT_DIR [DEPS_PREFIX]
#   DEPS_PREFIX: for a machine without the library's dependencies, a folder holding them as
#     extracted Debian packages (DEPS_PREFIX/usr/...): libfmt-dev, libfmt9, nlohmann-json3-dev,
#     libcli11-dev, libzip-dev, libzip4, libgtest-dev, libgmock-dev, librapidcheck-dev,
#     pkgconf (`apt-get download` them, then `dpkg -x PACKAGE.deb DEPS_PREFIX`).
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
  -DMOESTAT_BUILD_BENCH=OFF -DMOESTAT_WERROR=OFF -DMOESTAT_ENABLE_MPI=OFF \
  -DPython_EXECUTABLE="$(command -v python3)" "${cmake_args[@]}" >"$out/build.log" 2>&1 &&
  cmake --build build-gpu --target _core moestat_gpu_recorder_tests >>"$out/build.log" 2>&1
if [[ $? -ne 0 ]]; then
  tail -n 40 "$out/build.log"
  exit 1
fi

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
python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_cuda.py \
  tests/engines/test_sglang_cuda.py tests/engines/test_sglang_differential.py \
  -k "not ranks_over_gloo and not tensor_parallel" \
  $(ls tests/engines/test_transformers_cuda.py 2>/dev/null) 2>&1 | tee "$out/pytest.log" | tail -n 25
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
exit $status
