#!/usr/bin/env bash
# Runs on a GPU machine: the route recorders' GPU tests, the capture cost alone and on a real
# decode step (bench/routes_capture_cost.py, bench/routes_step_cost.py), the Python package's
# CUDA route tests and the route-capture, SGLang capturer and routing-replay engine tests on
# the GPU, then the GPU tests under compute-sanitizer (last: the slowest, and the least needed
# to read the rest).
#
# Usage: tests/routes/run_device_routes.sh BIN_DIR OUT_DIR [DEPS_PREFIX]
#   BIN_DIR: moestat_gpu_route_tests, built with nvcc where the whole project builds.
#   DEPS_PREFIX: extracted Debian packages (DEPS_PREFIX/usr/...) of what the Python package
#     links and its build finds: libfmt-dev, libfmt9, nlohmann-json3-dev, libzip-dev, libzip4
#     and its libraries, pkgconf. The package is built here without the report layer and the
#     CLI (MOESTAT_BUILD_REPORT=OFF), so librsvg, Cairo and CLI11 are not needed.
#   BENCH_ARGS: arguments of bench/routes_step_cost.py (default: its own); CAPTURE_ARGS: those
#   of bench/routes_capture_cost.py; BENCH=0 skips both, STEP_BENCH=0 the step's.
#   TESTS: the pytest files to run (default: all four below); SANITIZE=0 skips the sanitizers.
#   MOESTAT_SGLANG_WHEEL: an sglang 0.5.23 wheel (or a zip of its state_capturer and
#     detokenizer files and dist-info), where the machine has no sglang installed.
set -uo pipefail
bin=$1
out=$2
deps=${3:-}
mkdir -p "$out"
status=0

# shellcheck source=../device_deps.sh
source "$(dirname "$0")/../device_deps.sh"

# shellcheck source=../device_python.sh
source "$(dirname "$0")/../device_python.sh"
build_python_package "$out" || exit 1

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
echo "== GPU route tests"
"$bin/moestat_gpu_route_tests" >"$out/gpu_tests.log" 2>&1 || status=1
tail -n 3 "$out/gpu_tests.log"
grep -E "^\[  FAILED" "$out/gpu_tests.log"

if [[ ${BENCH:-1} == 1 ]]; then
  # Both patterns of handing rows out: requests finishing while the next step runs, and
  # takes right after the step that wrote them; each with its GPU time by kernel.
  for pattern in finish take; do
    echo "== capture cost alone, on a graph of routers (pattern $pattern)"
    (cd bench && python3 routes_capture_cost.py --pattern "$pattern" --breakdown \
      --json "$out/routes_capture_cost_$pattern.json" ${CAPTURE_ARGS:-}) 2>&1 |
      tee "$out/routes_capture_cost_$pattern.log" | tail -n 14
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  done
fi
if [[ ${BENCH:-1} == 1 && ${STEP_BENCH:-1} == 1 ]]; then
  echo "== capture cost on a decode step"
  (cd bench && python3 routes_step_cost.py --json "$out/routes_step_cost.json" ${BENCH_ARGS:-}) \
    2>&1 | tee "$out/routes_step_cost.log" | tail -n 12
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

echo "== Python and engine tests on CUDA"
tests=${TESTS:-tests/python/test_routes_cuda.py tests/engines/test_transformers_routes.py
  tests/engines/test_sglang_routed_experts.py tests/engines/test_routing_replay.py}
# shellcheck disable=SC2086
python3 -m pytest -q -p no:cacheprovider -rs $tests 2>&1 | tee "$out/pytest.log" | tail -n 25
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

[[ ${SANITIZE:-1} == 1 ]] || exit $status
for tool in memcheck racecheck; do
  compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/moestat_gpu_route_tests" \
    --gtest_filter='CudaRouteRecorder.EqualsTheCpuRecorderEagerly:CudaRouteRecorder.ALargeBatchAndAnAbortedPassEqualTheCpuRecorder:ColumnBytes/*' \
    >"$out/sanitizer.log" 2>&1
  code=$?
  echo "compute-sanitizer $tool exit code: $code"
  cat "$out/sanitizer.log" >>"$out/sanitizers.log"
  [[ $code -eq 0 ]] || { tail -n 20 "$out/sanitizer.log"; status=1; }
done
rm -f "$out/sanitizer.log"
exit $status
