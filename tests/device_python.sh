# Sourced by the scripts that run on a GPU machine (tests/routes/run_device_routes.sh,
# tests/engines/run_device_vllm.sh) after tests/device_deps.sh: build_python_package OUT builds
# moestat's Python package in build-device (without the report layer and the CLI, so librsvg,
# Cairo and CLI11 are not needed), logging to OUT/build.log; on failure prints the log's end
# and returns 1. Then PYTHONPATH finds it (and tests/engines' helpers). MOESTAT_DEVICE_BUILD
# names another build folder; one configured already (tests/device_all.sh: run_gpu_tests.sh's
# build-gpu) is built as it is, so the CUDA kernels are not compiled twice in one call.
build_python_package() {
  local out=$1 build=${MOESTAT_DEVICE_BUILD:-build-device}
  echo "== build the Python package ($build)"
  if [[ ! -f $build/CMakeCache.txt ]] && ! cmake -S . -B "$build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DMOESTAT_BUILD_PYTHON=ON -DMOESTAT_BUILD_REPORT=OFF \
      -DMOESTAT_BUILD_TESTS=OFF -DMOESTAT_BUILD_BENCH=OFF -DMOESTAT_WERROR=OFF \
      -DMOESTAT_FMT_HEADER_ONLY=ON \
      -DPython_EXECUTABLE="$(command -v python3)" "${cmake_args[@]}" \
      >"$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    return 1
  fi
  if ! cmake --build "$build" --target _core >>"$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    return 1
  fi
  export PYTHONPATH="$PWD/$build/python:$PWD/tests/engines${PYTHONPATH:+:$PYTHONPATH}"
}
