#!/usr/bin/env bash
# Runs on a GPU machine: the GPU tests, the same tests under compute-sanitizer (memcheck,
# racecheck), then the GPU benchmark and its SGLang-style baseline in the same run.
# Usage: tests/gpu/run_device_suite.sh BIN_DIR OUT_DIR
#   BIN_DIR holds moestat_gpu_recorder_tests, moestat_bench_gpu, moestat_bench_gpu_fused
#   (built with nvcc) and moestat_bench_file_ceiling.
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
status=0

# Six files under OUT_DIR (the device tool brings back at most eight); the tables are printed
# and can be rebuilt from the JSON with make_table.py and fused_table.py.
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu_tests.log"

echo "== GPU tests"
"$bin/moestat_gpu_recorder_tests" 2>&1 | tee -a "$out/gpu_tests.log" | tail -n 30 || status=1

# The sanitizers slow every launch by orders of magnitude: the eager tests cover every
# kernel; the replay, control and full-trace tests run without the tool.
sanitized="CudaRecorder.*:CudaRecorderTrace.Overflow*:CudaPassCollector.P*:CudaPassCollector.R*"
sanitized+=":CudaPassCountRow.*:CudaRecorderOutsidePass.*:CudaGpuLoadsSince.Equal*"
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" --error-exitcode 3 \
    "$bin/moestat_gpu_recorder_tests" --gtest_filter="$sanitized" >"$out/sanitizer.log" 2>&1
  code=$?
  tail -n 3 "$out/sanitizer.log"
  cat "$out/sanitizer.log" >>"$out/sanitizers.log"
  echo "compute-sanitizer $tool exit code: $code"
  [[ $code -eq 0 ]] || status=1
done

echo "== benchmark"
"$bin/moestat_bench_gpu" >"$out/moestat_gpu.json" || status=1
python3 bench/gpu/sglang_style_baseline.py >"$out/sglang_style.json" || status=1
python3 bench/gpu/make_table.py "$out/moestat_gpu.json" "$out/sglang_style.json"
"$bin/moestat_bench_gpu_fused" >"$out/moestat_gpu_fused.json" || status=1
python3 bench/gpu/fused_table.py "$out/moestat_gpu_fused.json"
# What the trace writer's file system takes at all, for the per-token drain figure above.
"$bin/moestat_bench_file_ceiling" | tee "$out/file_ceiling.json" || status=1
rm -f "$out/sanitizer.log"
exit $status
