#!/usr/bin/env bash
# run_in_venv.sh VENV COMMAND...: runs COMMAND (its first word relative to VENV/bin) when the
# engine-test virtual environment VENV exists. Without it the test is skipped (exit 77, the
# tests' SKIP_RETURN_CODE), or fails when MOESTAT_REQUIRE_ENGINE_VENV=1 (CI).
set -euo pipefail
venv=$1
shift
program="$venv/bin/$1"
shift
if [[ ! -x $program ]]; then
  if [[ ${MOESTAT_REQUIRE_ENGINE_VENV:-0} == 1 ]]; then
    echo "error: $program not found and MOESTAT_REQUIRE_ENGINE_VENV=1; run scripts/setup_engine_venv.sh" >&2
    exit 1
  fi
  echo "skipped: $program not found; scripts/setup_engine_venv.sh (or scripts/setup.sh --with-engines) creates it"
  exit 77
fi
exec "$program" "$@"
