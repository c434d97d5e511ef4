#!/usr/bin/env bash
# Runs on a bare GPU machine, in one call: the GPU recorder tests and the CUDA tests of the
# Python package and the engines, the CUDA recorder fed from eight threads included
# (tests/engines/run_gpu_tests.sh, which also builds the route recorders' GPU tests), then
# moestat.vllm's GPU tests against vLLM's own Python code (tests/engines/run_device_vllm.sh),
# then the route suite: the route recorders' GPU tests, the route-capture, SGLang capturer and
# routing-replay tests on CUDA, compute-sanitizer (tests/routes/run_device_routes.sh), all on
# the one build. Each suite's start time is printed.
#
# Usage: [SUITES="gpu vllm routes"] [LLAMA=1] tests/device_all.sh OUT_DIR PREPARED
#   PREPARED: made by tests/device_prepare.sh where Debian's packages and PyPI are reachable.
#   SUITES: the suites to run, of gpu, vllm and routes (default: all three); the build they
#   share is made either way.
# Each suite's summary goes to standard output; their logs are packed into OUT_DIR/logs.tar.gz
# (the device tool brings back at most 8 files).
set -uo pipefail
out=$1
prepared=$(realpath "$2")
logs=$(mktemp -d)
status=0
pack_logs() { mkdir -p "$out" && tar -czf "$out/logs.tar.gz" -C "$logs" .; }
# A call cut off at its time limit still brings back the logs written so far.
trap 'pack_logs; exit 124' TERM

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__)'
c++ --version | head -n 1

[[ -f $prepared/sglang.zip ]] && export MOESTAT_SGLANG_WHEEL=$prepared/sglang.zip
suites=" ${SUITES:-gpu vllm routes} "
selected() { [[ $suites == *" $1 "* ]]; }
if selected gpu; then
  echo "=== recorder, Python package and engine tests"
  tests/engines/run_gpu_tests.sh "$logs/gpu" "$prepared/deps" || status=1
else
  echo "=== the build the suites share"
  BUILD_ONLY=1 tests/engines/run_gpu_tests.sh "$logs/gpu" "$prepared/deps" || status=1
fi
if selected vllm; then
  echo "=== vLLM (at ${SECONDS} s)"
  MOESTAT_DEVICE_BUILD=build-gpu tests/engines/run_device_vllm.sh "$prepared/vllm-bundle" \
    "$logs/vllm" "$prepared/deps" || status=1
fi
if selected routes; then
  echo "=== routes (at ${SECONDS} s)"
  # The capture-cost benchmark is a measurement, not a test: tests/routes/run_device_routes.sh
  # runs it on its own (BENCH=1 here adds it).
  BENCH=${BENCH:-0} MOESTAT_DEVICE_BUILD=build-gpu tests/routes/run_device_routes.sh \
    build-gpu/tests/gpu "$logs/routes" "$prepared/deps" || status=1
fi

# llama.cpp built with CUDA there, its recorder checked and benchmarked: off by default (its
# CUDA build takes minutes); LLAMA=1 adds it within what is left of 570 s
# (tests/llama_cpp/run_device_llama.sh; PREPARED/llama.cpp-src.tar.xz).
if [[ ${LLAMA:-0} == 1 ]]; then
  echo "=== llama.cpp on CUDA (at ${SECONDS} s)"
  LLAMA_BUDGET_S=${LLAMA_BUDGET_S:-$((570 - SECONDS))} \
    tests/llama_cpp/run_device_llama.sh "$logs/llama" "$prepared" || status=1
fi

pack_logs
echo "=== device_all: exit status $status after ${SECONDS} s"
exit $status
