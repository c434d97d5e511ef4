#!/usr/bin/env bash
# Runs on a GPU machine (no network): builds llama.cpp with its CUDA backend from the sources
# of the pinned llama-cpp-python sdist (carried as PREPARED/llama.cpp-src.tar.xz, made by
# tests/device_prepare.sh from scripts/setup_llama_cpp.sh's .deps/llama.cpp), builds moestat's
# llama_cpp component against it (tests/llama_cpp/device: the libraries without the report
# layer), then
#   1. moestat_llama_device_check on tiny random-weight models (qwen3moe; qwen2moe, which has a
#      shared expert), every layer on the GPU: counts and per-token traces of LlamaRecorder
#      (ids in device memory, copied to the host) equal the routers' top-k taken on the host;
#   2. moestat_bench_llama on a model of Qwen3-30B-A3B's layer shape (Q4_0, LLAMA_BENCH_LAYERS
#      layers, default 8), every layer on the GPU: tokens/s of a prompt pass and a decode with
#      no callback, the recorder stopped, recording counts, per-token traces, and a callback
#      asking for every ffn_moe_* node (docs/BENCHMARKS.md).
# tests/device_all.sh runs it when LLAMA=1.
#
# Usage: tests/llama_cpp/run_device_llama.sh OUT_DIR PREPARED
#   PREPARED/llama.cpp-src.tar.xz  llama.cpp's sources (tests/device_prepare.sh)
#   PREPARED/deps                  the libraries' Debian packages, extracted (device_deps.sh)
# Time: LLAMA_BUDGET_S (default 480) bounds the whole script; the CUDA build (one
# architecture, the GPU's own; FlashAttention kernels left out) takes most of it. A step that
# would start past the budget is skipped, saying so.
set -uo pipefail
out=$1
prepared=$(realpath "$2")
deps=$prepared/deps
mkdir -p "$out"
budget=${LLAMA_BUDGET_S:-480}
layers=${LLAMA_BENCH_LAYERS:-8}
status=0
root=$PWD
# shellcheck source=../device_deps.sh
source "$(dirname "$0")/../device_deps.sh"

left() { echo $((budget - SECONDS)); }
step() {  # step NAME: false (and says so) when the budget is spent
  if (($(left) <= 10)); then
    echo "== $1: skipped, the budget of ${budget} s is spent (at ${SECONDS} s)"
    status=1
    return 1
  fi
  echo "== $1 (at ${SECONDS} s)"
}

llama=$root/build-llama-cuda/llama.cpp  # source/ and build/, as scripts/setup_llama_cpp.sh lays out
if step "llama.cpp with CUDA"; then
  rm -rf "$llama" && mkdir -p "$llama/source"
  tar -xJf "$prepared/llama.cpp-src.tar.xz" -C "$llama/source"
  # The GPU's own architecture only; no FlashAttention kernels, NCCL, tools or server.
  timeout "$(left)" cmake -S "$llama/source" -B "$llama/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native -DGGML_CUDA_FA=OFF \
    -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_COMMON=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DGGML_CCACHE=OFF >"$out/llama_build.log" 2>&1 &&
    timeout "$(left)" cmake --build "$llama/build" --target llama ggml >>"$out/llama_build.log" 2>&1
  if [[ $? -ne 0 ]]; then
    tail -n 30 "$out/llama_build.log"
    echo "== llama.cpp CUDA build failed or ran out of time at ${SECONDS} s"
    exit 1
  fi
  ls "$llama/build/bin" | grep -E 'libggml-cuda|libllama' | tr '\n' ' '
  echo
fi

if step "moestat's llama_cpp component against it"; then
  timeout "$(left)" cmake -S tests/llama_cpp/device -B build-llama-gpu -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DMOESTAT_LLAMA_CPP_DIR="$llama" \
    -DMOESTAT_WERROR=OFF -DMOESTAT_FMT_HEADER_ONLY=ON "${cmake_args[@]}" >"$out/moestat_build.log" 2>&1 &&
    timeout "$(left)" cmake --build build-llama-gpu --target moestat_llama_device_check moestat_bench_llama \
      >>"$out/moestat_build.log" 2>&1
  if [[ $? -ne 0 ]]; then
    tail -n 30 "$out/moestat_build.log"
    exit 1
  fi
fi

export LD_LIBRARY_PATH="$llama/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models=$root/build-llama-gpu/models
mkdir -p "$models"
if step "LlamaRecorder on CUDA: counts and per-token traces against the routers' top-k"; then
  for arch in qwen3moe qwen2moe; do
    PYTHONPATH="$llama/source/gguf-py" python3 tests/llama_cpp/tiny_moe_gguf.py "$arch" \
      "$models/$arch.gguf" &&
      timeout "$(left)" build-llama-gpu/moestat_llama_device_check "$models/$arch.gguf" \
        --gpu-layers 99 2>&1 | tee "$out/device_check_$arch.log" | sed "s/^/$arch: /"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  done
fi

if step "benchmark: Qwen3-30B-A3B's layer shape, ${layers} layers, on the GPU"; then
  model=$models/qwen3-30b-a3b-shape-${layers}l-q4_0.gguf
  PYTHONPATH="$llama/source/gguf-py" python3 tests/llama_cpp/tiny_moe_gguf.py qwen3moe "$model" \
    --layers "$layers" --embed 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 \
    --top-k 8 --expert-ff 768 --ff 6144 --context 4096 --type q4_0 || status=1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout "$(left)" build-llama-gpu/moestat_bench_llama "$model" --gpu-layers 99 \
    --threads "$(nproc)" --repeats "${LLAMA_BENCH_REPEATS:-5}" --prompt-tokens 512 \
    --decode-tokens 128 2>&1 | tee "$out/bench_gpu.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
echo "== run_device_llama: exit status $status after ${SECONDS} s"
exit $status
