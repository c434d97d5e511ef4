#!/usr/bin/env bash
# Packs what tests/engines/run_device_vllm.sh needs on a GPU machine that has torch,
# transformers and triton but no vLLM and no package registry: vLLM 0.33.0's Python sources
# (no compiled kernels: the GPU tests route in torch and use vLLM's Triton kernels) and
# CPython 3.12 wheels of the packages vLLM imports that such a machine lacks, at the versions
# .venv-engines holds (where the CPU tests pass).
#
# Usage (where PyPI is reachable, after scripts/setup_engine_venv.sh):
#   tests/engines/vllm_device_bundle.sh BUNDLE_DIR
# BUNDLE_DIR gets vllm-0.33.0-py.tar.xz and wheels/ (about 40 MB).
set -euo pipefail
mkdir -p "$1/wheels"
bundle=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/.venv-engines
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# vLLM's sources and metadata; not its kernels (vllm/*.so, vllm-rs) or bundled C++ headers
(cd "$site" && {
  find vllm -type f \( -name '*.py' -o -name '*.json' -o -name '*.jinja' -o -name '*.yaml' \) \
    ! -path '*__pycache__*' ! -path 'vllm/third_party/deep_gemm/*' \
    ! -path 'vllm/third_party/fmha_sm100/*'
  find vllm-0.33.0.dist-info -type f
} | tar -cJf "$bundle/vllm-0.33.0-py.tar.xz" -T -)

# Every package of .venv-engines but what the GPU machine's image brings (torch and its CUDA
# libraries, transformers and its dependencies, pytest) and what vLLM does not import.
provided='torch|triton|nvidia-.*|cuda-.*|transformers|tokenizers|safetensors|huggingface.hub|'
provided+='hf.xet|numpy|sympy|mpmath|networkx|jinja2|markupsafe|fsspec|filelock|'
provided+='typing.extensions|packaging|pyyaml|tqdm|setuptools|pip|sglang|vllm|pytest|pluggy|'
provided+='iniconfig|pygments|regex|requests|urllib3|idna|certifi|charset.normalizer|uv|rich|'
provided+='typer|click|shellingham|markdown.it.py|mdurl'
platforms=()
for tag in 2_39 2_35 2_34 2_31 2_28 2_27 2_26 2_24 2_17 2_12 2_5; do
  platforms+=(--platform "manylinux_${tag}_x86_64")
done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64
  --platform manylinux1_x86_64 --platform any)
"$venv/bin/python" -m pip freeze | grep '==' | grep -viE "^($provided)==" |
  while read -r requirement; do
    "$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --abi cp312 --abi abi3 --abi none "${platforms[@]}" \
      -d "$bundle/wheels" "$requirement"
  done
du -sh "$bundle"
