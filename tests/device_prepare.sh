#!/usr/bin/env bash
# Run here, where Debian's packages and PyPI are reachable (after scripts/setup.sh
# --with-engines): makes in .deps/device what one call on a bare GPU machine needs, for
# tests/device_all.sh there.
#   .deps/device/deps         the library dependencies of the GPU build (fmt, nlohmann-json,
#                             libzip, GoogleTest/GoogleMock, rapidcheck, pkgconf) as extracted
#                             Debian packages, without their documentation (tests/device_deps.sh)
#   .deps/device/vllm-bundle  vLLM 0.33.0's Python sources and the wheels it imports
#                             (tests/engines/vllm_device_bundle.sh)
#   .deps/device/sglang.zip   the files of .venv-engines' sglang that the differential and
#                             routed-experts tests load (tests/engines/sglang_harness.py:
#                             MOESTAT_SGLANG_WHEEL)
#   .deps/device/llama.cpp-src.tar.xz  llama.cpp's sources for its CUDA build there (LLAMA=1;
#                             tests/llama_cpp/pack_llama_sources.sh, 2.5 MB)
# The device tool carries at most 64 MiB with the working tree; the script prints the size.
# Then, on the device: tests/device_all.sh "$OUT" .deps/device   (carry: .deps/device)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.deps/device
rm -rf "$dest"
mkdir -p "$dest/debs"

packages=(libfmt-dev libfmt9 nlohmann-json3-dev libzip-dev libzip4 libgtest-dev libgmock-dev
  librapidcheck-dev pkgconf pkgconf-bin libpkgconf3)
(cd "$dest/debs" && apt-get download -qq "${packages[@]}")
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/deps"; done
rm -rf "$dest/debs" "$dest/deps/usr/share/doc" "$dest/deps/usr/share/man"

tests/engines/vllm_device_bundle.sh "$dest/vllm-bundle"
.venv-engines/bin/python tests/engines/sglang_harness.py --zip "$dest/sglang.zip"
tests/llama_cpp/pack_llama_sources.sh "$dest/llama.cpp-src.tar.xz"
du -sh "$dest" "$dest"/*
