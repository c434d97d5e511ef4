#!/usr/bin/env bash
# Fails, listing the files, when any C++/CUDA source differs from clang-format's output.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu' '*.h')
if ((${#files[@]} == 0)); then exit 0; fi
clang-format --dry-run --Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
