#!/usr/bin/env bash
# Builds the libFuzzer targets of the readers with clang (build-fuzz/), writes their seed
# corpora with moestat's own writers, and fuzzes each target in turn. -O1 and line tables only:
# the build takes 40% less time than -O2 -g, and reports still name lines.
#   scripts/fuzz.sh                      a smoke run: 20000 inputs (at most 30 s) per target
#   scripts/fuzz.sh -max_total_time=600  ten minutes per target; any libFuzzer flags
#   FUZZ_TARGETS="pt json" scripts/fuzz.sh    only these targets (pt safetensors json
#                                             simulation trace routes gguf routes_convert)
# Corpora grow in build-fuzz/corpus/<target>; a crash leaves its input in build-fuzz/ and
# fails the script. routes_convert is Python (tests/fuzz/routes_convert_fuzz.py: the routes
# reader and moestat.routing's converters, mutated from the routes seeds), run with the
# Python package of the Release build (MOESTAT_PYTHON_DIR, default build/python: build its
# _core target first) under /usr/bin/python3, for FUZZ_CONVERT_RUNS inputs (default 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
flags=("$@")
if ((${#flags[@]} == 0)); then flags=(-runs=20000 -max_total_time=30); fi

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DMOESTAT_BUILD_FUZZERS=ON -DMOESTAT_ENABLE_CUDA=OFF -DMOESTAT_BUILD_TESTS=OFF \
  -DMOESTAT_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target pt_fuzzer safetensors_fuzzer json_fuzzer simulation_fuzzer \
  trace_fuzzer routes_fuzzer gguf_fuzzer make_fuzz_seeds

seeds=build-fuzz/seeds
rm -rf "$seeds"
build-fuzz/tests/fuzz/make_fuzz_seeds "$seeds"
cp tests/io/fixtures/*.pt "$seeds/pt/"

# The converters' fuzzer: a Python script, not a libFuzzer binary, under the same limits.
fuzz_converters() {
  local python_dir=${MOESTAT_PYTHON_DIR:-build/python}
  if ! compgen -G "$python_dir/moestat/_core*.so" >/dev/null; then
    echo "fuzz: routes_convert needs the Python package in $python_dir (build _core)" >&2
    return 1
  fi
  PYTHONPATH=$python_dir /usr/bin/python3 tests/fuzz/routes_convert_fuzz.py \
    --runs "${FUZZ_CONVERT_RUNS:-2000}" \
    --memory-mb 2048 --timeout-s 10 --artifacts build-fuzz "$seeds/routes"
}

for target in ${FUZZ_TARGETS:-pt safetensors json simulation trace routes gguf routes_convert}; do
  echo "fuzz: $target ${flags[*]}"
  if [[ $target == routes_convert ]]; then
    fuzz_converters
    continue
  fi
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  # -rss_limit_mb: a reader that allocates far beyond its input fails the run.
  (cd build-fuzz && "tests/fuzz/${target}_fuzzer" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "${flags[@]}" "corpus/$target" "seeds/$target")
done
