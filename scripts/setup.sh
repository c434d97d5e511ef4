#!/usr/bin/env bash
# Installs what moestat needs to build and test, idempotently: Debian packages only where
# one is missing, so a second run is fast and changes nothing.
#
#   scripts/setup.sh [--with-engines]
#
# --with-engines also creates .venv-engines, the virtual environment of the engine tests
# (tests/engines: a current torch, transformers and SGLang's recorder) with
# scripts/setup_engine_venv.sh; about 1.5 min the first time, a moment once it is up to date.
# It also builds llama.cpp (CPU backend, from PyPI's llama-cpp-python sdist) into .deps/llama.cpp
# with scripts/setup_llama_cpp.sh, for the llama.cpp component and its tests: about 7 min on
# 2 cores the first time, a moment once built.
set -euo pipefail

with_engines=0
for arg in "$@"; do
  case $arg in
    --with-engines) with_engines=1 ;;
    *) echo "usage: $0 [--with-engines]" >&2; exit 2 ;;
  esac
done

packages=(
  cmake ninja-build g++ pkg-config
  libfmt-dev nlohmann-json3-dev libcli11-dev libzip-dev
  libgtest-dev libgmock-dev librapidcheck-dev libbenchmark-dev
  clang-format
  # torch interop test (Debian's CPU build; tests skip without it) and libFuzzer targets
  python3-torch clang libclang-rt-dev
  # report: SVG figures rendered to PNG in DejaVu Sans (the PNG test's reference image), and
  # the headless-browser render test
  librsvg2-dev libcairo2-dev fonts-dejavu-core chromium
  # live metrics: the parser the Prometheus endpoint's scrape test reads with
  python3-prometheus-client
  # the Python package: headers, numpy, pytest, and pip to fetch nanobind (not in Debian)
  python3-dev python3-numpy python3-pytest python3-pip
  # the engine tests' virtual environment (scripts/setup_engine_venv.sh)
  python3-venv
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all build dependencies present"
fi

# nanobind for the Python package, from PyPI into the project's .deps/python (not into the
# system's Python, which Debian manages); CMake looks there.
nanobind_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/python"
if ! /usr/bin/python3 -c "import sys; sys.path.insert(0, '$nanobind_dir'); import nanobind" 2>/dev/null; then
  echo "setup: installing nanobind into $nanobind_dir"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --target "$nanobind_dir" \
    "nanobind>=2.1,<3"
fi

if ((with_engines)); then
  "$(dirname "$0")/setup_engine_venv.sh"
  "$(dirname "$0")/setup_llama_cpp.sh"
fi
