# Sourced by the scripts that build on a GPU machine (tests/engines/run_gpu_tests.sh,
# tests/routes/run_device_routes.sh): when $deps names a folder of extracted Debian packages
# (deps/usr/...), puts its programs, libraries and pkg-config files first and sets cmake_args
# to find its CMake packages; otherwise leaves the machine's own.
cmake_args=()
if [[ -n ${deps:-} ]]; then
  deps=$(realpath "$deps")
  export PATH="$deps/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PKG_CONFIG_SYSROOT_DIR=$deps
  export PKG_CONFIG_LIBDIR="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig"
  cmake_args+=("-DCMAKE_PREFIX_PATH=$deps/usr")
fi
