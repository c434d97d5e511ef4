#!/usr/bin/env bash
# Packs the llama.cpp sources scripts/setup_llama_cpp.sh unpacked (the pinned llama-cpp-python
# sdist's vendor/llama.cpp) for a GPU machine without network (tests/llama_cpp/
# run_device_llama.sh): what a CUDA build of libllama and libggml needs, and gguf-py for the
# test models; not the other backends' sources, the tools, tests or docs. About 2.5 MB.
#   tests/llama_cpp/pack_llama_sources.sh OUT.tar.xz
set -euo pipefail
out=$(realpath -m "$1")
root="$(cd "$(dirname "$0")/../.." && pwd)"
source_dir="$("$root/scripts/setup_llama_cpp.sh" --print-dir)/source"
[[ -f $source_dir/CMakeLists.txt ]] || { echo "no llama.cpp in $source_dir: run scripts/setup_llama_cpp.sh" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tar -cJf "$out" -C "$source_dir" \
  --exclude='ggml/src/ggml-vulkan' --exclude='ggml/src/ggml-sycl' --exclude='ggml/src/ggml-metal' \
  --exclude='ggml/src/ggml-opencl' --exclude='ggml/src/ggml-cann' --exclude='ggml/src/ggml-webgpu' \
  --exclude='ggml/src/ggml-hexagon' --exclude='ggml/src/ggml-zdnn' --exclude='ggml/src/ggml-openvino' \
  CMakeLists.txt cmake ggml src include common vendor gguf-py licenses LICENSE
du -h "$out"
