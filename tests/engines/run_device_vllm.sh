#!/usr/bin/env bash
# Runs on a GPU machine: moestat.vllm's GPU tests (tests/engines/test_vllm_cuda.py,
# test_vllm_cuda_mask.py) against vLLM 0.33.0's own Python code, in a virtual environment over
# the machine's own torch, transformers and triton.
#
# vLLM's CUDA platform imports vLLM's compiled kernels when it loads (vllm._C_stable_libtorch,
# and the ops its modules call at import), which the bundle does not hold: they are built
# against the torch vLLM 0.33.0 pins (2.14.0), and with vLLM's flash-attention kernels (about
# 600 MB) exceed what can be carried to the machine. Where they are absent both tests run vLLM's
# Python under its CPU platform with CUDA tensors (tests/engines/vllm_gpu_platform.py), with
# vLLM's Triton EPLB kernel; test_vllm_cuda.py's async EplbState, which needs the CUDA
# platform's communicators, skips and says so.
#
# Usage: tests/engines/run_device_vllm.sh BUNDLE OUT_DIR [DEPS_PREFIX]
#   BUNDLE: made by tests/engines/vllm_device_bundle.sh where PyPI is reachable (vLLM's
#     sources and the CPython 3.12 wheels of what vLLM imports).
#   DEPS_PREFIX: extracted Debian packages the Python package's build needs (see
#     tests/routes/run_device_routes.sh).
set -uo pipefail
bundle=$(realpath "$1")
out=$2
deps=${3:-}
mkdir -p "$out"

# shellcheck source=../device_deps.sh
source "$(dirname "$0")/../device_deps.sh"
# shellcheck source=../device_python.sh
source "$(dirname "$0")/../device_python.sh"
build_python_package "$out" || exit 1

echo "== vLLM 0.33.0 (Python sources) over the machine's torch"
venv=${TMPDIR:-/tmp}/moestat-vllm-venv
# The machine's python3 may itself be a virtual environment, whose packages a venv made with
# --system-site-packages does not see: a .pth file puts them after the bundle's.
machine_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -m venv --system-site-packages "$venv" &&
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
  echo "$machine_site" >"$site/zz-machine-site.pth" &&
  "$venv/bin/python" -m pip install -q --no-index --no-deps "$bundle"/wheels/*.whl &&
  tar -xJf "$bundle/vllm-0.33.0-py.tar.xz" -C "$site" || exit 1
"$venv/bin/python" -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)'

echo "== moestat.vllm GPU tests"
status=0  # pytest's 5: every test skipped (the skip says why)
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rs tests/engines/test_vllm_cuda.py 2>&1 |
  tee "$out/pytest.log" | tail -n 40
[[ ${PIPESTATUS[0]} =~ ^[05]$ ]] || status=1
echo "== the padding mask in a captured graph (vLLM's CPU platform: a process of its own)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -rs tests/engines/test_vllm_cuda_mask.py \
  2>&1 | tee "$out/pytest_mask.log" | tail -n 40
[[ ${PIPESTATUS[0]} =~ ^[05]$ ]] || status=1
exit "$status"
