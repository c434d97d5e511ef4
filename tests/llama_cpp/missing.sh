#!/usr/bin/env bash
# Stands in for the llama.cpp tests when this build has no llama.cpp: skipped (exit 77, the
# test's SKIP_RETURN_CODE) with the reason, or failed when MOESTAT_REQUIRE_ENGINE_VENV=1 (CI,
# whose scripts/setup.sh --with-engines builds llama.cpp).
echo "llama.cpp tests not built: no llama.cpp in MOESTAT_LLAMA_CPP_DIR=$1 (run scripts/setup_llama_cpp.sh, then configure again)" >&2
if [[ ${MOESTAT_REQUIRE_ENGINE_VENV:-0} == 1 ]]; then
  exit 1
fi
exit 77
