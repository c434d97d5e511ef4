#!/usr/bin/env bash
# Installs a build of moestat into a scratch prefix (`cmake --install`), then builds and runs
# the consumer program against it both ways an engine would: find_package (asking for
# COMPONENTS, which the installation must have) and pkg-config. Also checks that a component
# the installation lacks is reported not found.
# Usage: tests/consumer/run.sh BUILD_DIRECTORY WORK_DIRECTORY [COMPONENTS, e.g. "cuda mpi"]
set -euo pipefail
build=$1
work=$2
components=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
prefix=$(realpath "$work")/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"

echo "consumer: find_package(moestat COMPONENTS ${components}) in $prefix"
cmake -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
      -DMOESTAT_COMPONENTS="${components// /;}" > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake"
"$work/cmake/moestat_consumer" "$work"

echo "consumer: a component this installation lacks is not found"
if cmake -S "$here" -B "$work/missing" -DCMAKE_PREFIX_PATH="$prefix" \
         -DMOESTAT_COMPONENTS=no_such_component > "$work/missing.log" 2>&1; then
  echo "consumer: find_package(moestat COMPONENTS no_such_component) succeeded" >&2
  exit 1
fi
grep -q "without the component no_such_component" "$work/missing.log" ||
  { cat "$work/missing.log"; exit 1; }

echo "consumer: pkg-config moestat"
pc_file=$(find "$prefix" -name moestat.pc -path '*/pkgconfig/*' | head -n 1)
pc_dir=$(dirname "$pc_file")
export PKG_CONFIG_PATH="$pc_dir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# shellcheck disable=SC2046  # pkg-config's flags are words
c++ -std=c++20 -O1 "$here/consumer.cpp" -o "$work/pkg_config_consumer" \
    $(pkg-config --cflags --libs moestat)
"$work/pkg_config_consumer" "$work"
