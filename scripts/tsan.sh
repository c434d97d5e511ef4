#!/usr/bin/env bash
# Builds the tests that run threads with ThreadSanitizer (build-tsan/) and runs them: recorders
# fed from several threads while another starts, stops, resets and snapshots them, the metrics
# endpoint serving concurrent clients, the cross-rank reduction over threads, the trace file's
# parallel copy, and the route recorder's layer hooks on several threads while others change
# its placement, end its passes and take its rows. AddressSanitizer (the asan preset) sees
# memory errors once they happen; ThreadSanitizer sees the unsynchronised access that makes
# them happen one run in ten.
#   scripts/tsan.sh                 build and run them all
#   TSAN_TESTS="recorder_threads_test" scripts/tsan.sh    only these
# Any data race, lock-order inversion or failed test fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra tests <<<"${TSAN_TESTS:-recorder_threads_test cpu_recorder_stress_test \
route_recorder_test route_recorder_threads_test live_metrics_test metrics_server_test \
trace_file_test}"

# -O1 and line tables: a third of the build time of -O2 -g, and reports still name lines.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DMOESTAT_TSAN=ON \
  -DMOESTAT_ENABLE_CUDA=OFF -DMOESTAT_BUILD_PYTHON=OFF \
  -DMOESTAT_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan --target "${tests[@]}"

# halt_on_error: the first report fails the test binary, and so the script.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
for test in "${tests[@]}"; do
  binary=$(find build-tsan/tests -type f -name "$test" -perm -u+x | head -n 1)
  [[ -n $binary ]] || { echo "tsan: no binary $test" >&2; exit 1; }
  echo "tsan: $test"
  "$binary" --gtest_brief=1
done
