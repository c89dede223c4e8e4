# Sourced by the bench scripts: builds one target in the Release build directory $BUILD
# (configuring it if needed, refusing a directory configured otherwise).
#   build_release NAME TARGET
build_release() {
  local name=$1 target=$2
  if [[ ! -f $BUILD/build.ninja ]]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTW_BUILD_BENCH=ON
  fi
  local build_type
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
  if [[ "$build_type" != Release ]]; then
    echo "$name: $BUILD is configured as '$build_type', not Release; use BUILD=<other dir>" >&2
    exit 1
  fi
  cmake --build "$BUILD" --target "$target" -j "$(nproc)"
}
