#!/usr/bin/env bash
# What recording expert routing inside llama.cpp costs (docs/BENCHMARKS.md, "Recording inside
# llama.cpp"): writes a random-weight model of Qwen3-30B-A3B's layer shape (hidden 2048, 128
# experts, top-8, expert FFN 768, 32 query and 4 KV heads of 128; Q4_0 blocks; fewer layers,
# a byte vocabulary) with tests/llama_cpp/tiny_moe_gguf.py, once, then runs
# moestat_bench_llama (C++: LlamaRecorder) and bench/llama_cpp_python_bench.py (Python:
# moestat.llama_cpp through llama-cpp-python) on it, each mode against no callback in the
# same run.
#
#   bench/llama_cpp_bench.sh [--build DIR] [--model-dir DIR] [--layers N] [--threads N]
#                            [--gpu-layers N] [--repeats R] [--no-python] [-- BENCH ARGS...]
#
# Needs scripts/setup_llama_cpp.sh's llama.cpp and a build with the llama_cpp component
# (cmake --build build --target moestat_bench_llama _core). The model (1.4 GB for 4 layers)
# is kept in --model-dir (default .deps/bench) and reused. Prints the machine, the commit and
# both tables.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
model_dir="$root/.deps/bench"
layers=4
threads="$(nproc)"
gpu_layers=0
repeats=5
python=1
llama_dir="${MOESTAT_LLAMA_CPP_DIR:-$("$root/scripts/setup_llama_cpp.sh" --print-dir)}"
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build="$2"; shift 2 ;;
    --model-dir) model_dir="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --gpu-layers) gpu_layers="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --no-python) python=0; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--build DIR] [--model-dir DIR] [--layers N] [--threads N] [--gpu-layers N] [--repeats R] [--no-python] [-- BENCH ARGS]" >&2; exit 2 ;;
  esac
done

model="$model_dir/qwen3-30b-a3b-shape-${layers}l-q4_0.gguf"
if [[ ! -f $model ]]; then
  mkdir -p "$model_dir"
  PYTHONPATH="$llama_dir/source/gguf-py" /usr/bin/python3 "$root/tests/llama_cpp/tiny_moe_gguf.py" \
    qwen3moe "$model.tmp" --layers "$layers" --embed 2048 --heads 32 --kv-heads 4 --head-dim 128 \
    --experts 128 --top-k 8 --expert-ff 768 --ff 6144 --context 4096 --type q4_0
  mv "$model.tmp" "$model"
fi

echo "date:    $(date -u +%Y-%m-%dT%H:%MZ)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src/llama_cpp python/moestat/llama_cpp.py bench/llama_cpp || echo ' (llama_cpp sources modified)')"
echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
if command -v nvidia-smi >/dev/null 2>&1 && [[ $gpu_layers != 0 ]]; then
  echo "gpu:     $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
fi
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo
LD_LIBRARY_PATH="$llama_dir/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$build/bench/llama_cpp/moestat_bench_llama" "$model" --threads "$threads" \
  --gpu-layers "$gpu_layers" --repeats "$repeats" "${extra[@]}"
if [[ $python == 1 ]]; then
  echo
  PYTHONPATH="$build/python:$llama_dir/python" LLAMA_CPP_LIB_PATH="$llama_dir/build/bin" \
    /usr/bin/python3 "$root/bench/llama_cpp_python_bench.py" "$model" --threads "$threads" \
    --gpu-layers "$gpu_layers" --repeats "$repeats" "${extra[@]}"
fi
