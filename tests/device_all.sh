#!/usr/bin/env bash
# Runs on a bare GPU machine, in one call, what only a GPU can check, most wanted first, so a
# call cut off at its time limit has run those: the CUDA recorder fed from eight threads
# (tests/python/test_recorder_threads.py), moestat.vllm's GPU tests against vLLM's own Python
# code (tests/engines/run_device_vllm.sh), then the GPU recorder tests and the CUDA tests of the
# Python package and the engines (tests/engines/run_gpu_tests.sh), all on one build. The route
# suite needs a binary built here with nvcc and runs on its own (tests/routes/run_device_routes.sh).
#
# Usage: tests/device_all.sh OUT_DIR PREPARED
#   PREPARED: made by tests/device_prepare.sh where Debian's packages and PyPI are reachable.
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

export MOESTAT_DEVICE_BUILD=build-gpu
[[ -f $prepared/sglang.zip ]] && export MOESTAT_SGLANG_WHEEL=$prepared/sglang.zip
deps=$prepared/deps
# shellcheck source=device_deps.sh
source tests/device_deps.sh
# shellcheck source=device_python.sh
source tests/device_python.sh
mkdir -p "$logs/threads"
build_python_package "$logs/threads" || status=1
echo "=== the recorders fed from eight threads, on CUDA"
python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_recorder_threads.py 2>&1 |
  tee "$logs/threads/pytest.log" | tail -n 15
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
echo "=== vLLM"
tests/engines/run_device_vllm.sh "$prepared/vllm-bundle" "$logs/vllm" "$deps" || status=1
echo "=== recorder, Python package and engine tests"
tests/engines/run_gpu_tests.sh "$logs/gpu" "$deps" || status=1

pack_logs
echo "=== device_all: exit status $status"
exit $status
