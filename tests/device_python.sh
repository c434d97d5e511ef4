# Sourced by the scripts that run on a GPU machine (tests/routes/run_device_routes.sh,
# tests/engines/run_device_vllm.sh) after tests/device_deps.sh: build_python_package OUT builds
# moestat's Python package in build-device (without the report layer and the CLI, so librsvg,
# Cairo and CLI11 are not needed), logging to OUT/build.log; on failure prints the log's end
# and returns 1. Then PYTHONPATH finds it (and tests/engines' helpers).
build_python_package() {
  local out=$1
  echo "== build the Python package"
  if ! { cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMOESTAT_BUILD_PYTHON=ON -DMOESTAT_BUILD_REPORT=OFF -DMOESTAT_BUILD_TESTS=OFF \
      -DMOESTAT_BUILD_BENCH=OFF -DMOESTAT_WERROR=OFF -DMOESTAT_ENABLE_MPI=OFF \
      -DPython_EXECUTABLE="$(command -v python3)" "${cmake_args[@]}" >"$out/build.log" 2>&1 &&
      cmake --build build-device --target _core >>"$out/build.log" 2>&1; }; then
    tail -n 40 "$out/build.log"
    return 1
  fi
  export PYTHONPATH="$PWD/build-device/python:$PWD/tests/engines${PYTHONPATH:+:$PYTHONPATH}"
}
