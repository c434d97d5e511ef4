#!/bin/bash
# check_wheel.sh: what a new user does, timed. `pip install -v .` of this checkout into a fresh
# virtual environment, with a build directory of its own (nothing reused), then the installed
# `moestat --version` and `moestat demo`, whose report.html must be written. Prints the
# install's wall time; the build's [n/N] steps stream as they happen. Extra pip arguments
# (`-C cmake.define.MOESTAT_ENABLE_CUDA=OFF`) go in PIP_ARGS. Needs PyPI (scikit-build-core and
# nanobind are the build's requirements) and the packages scripts/setup.sh installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/moestat-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
start=$(date +%s)
# shellcheck disable=SC2086 # PIP_ARGS is a list of arguments
"$work/venv/bin/pip" install -v ${PIP_ARGS:-} -C build-dir="$work/build" "$root"
echo "check_wheel: pip install took $(($(date +%s) - start)) s"

# The command on PATH is the one the wheel installed, not a build tree's.
export PATH="$work/venv/bin:$PATH"
test "$(command -v moestat)" = "$work/venv/bin/moestat"
moestat --version
moestat demo --out "$work/demo-out"
test -s "$work/demo-out/report.html"
python -c 'import moestat; print("moestat", moestat.__file__)'
echo "check_wheel: ok"
