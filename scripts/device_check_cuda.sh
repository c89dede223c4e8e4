#!/usr/bin/env bash
# The check of the cuda backend on a machine with a GPU (docs/cuda.md), as one prepared run that
# must end well inside 10 minutes there (scripts/device_check.sh --cuda ... runs this file):
#   scripts/device_check.sh --cuda --fetch     here (Debian 12 with apt): downloads the .deb files
#                                              the build needs that a GPU machine lacks into
#                                              .devdeps/ (ignored by git; about 40 MiB), to carry
#   scripts/device_check.sh --cuda             there: unpacks .devdeps/*.deb into a folder (never
#                                              into /), builds the cuda module and the suites
#                                              against it, runs the op table, autograd and graph
#                                              suites on cuda against cpu (printing run and skip
#                                              counts; registered graphs as CUDA Graphs, and
#                                              the graph suite again op by op), then the bench
#                                              rows beside PyTorch CUDA
#   scripts/device_check.sh --cuda --dry-run   the same without a GPU: every step up to running
#                                              the suites (the rehearsal, in a clean folder)
# The GPU machine has nvcc, CMake, ninja, g++ and PyTorch with NVIDIA's libraries from pip, and
# none of tensorwire's Debian dependencies; CUDA_LIBS below finds cuBLASLt among pip's packages
# when the toolkit beside nvcc has none. Output: the build log and results under $OUT (or
# build-device/ when OUT is unset).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
debs="$root/.devdeps"
mode=run
[[ "${1:-}" == "--cuda" ]] || { echo "usage: $0 --cuda [--fetch|--dry-run]" >&2; exit 2; }
case "${2:-}" in
  --fetch) mode=fetch ;;
  --dry-run) mode=dry ;;
  "") ;;
  *) echo "usage: $0 --cuda [--fetch|--dry-run]" >&2; exit 2 ;;
esac

# The libraries (and their headers) of the root CMakeLists.txt's REQUIRED packages, GoogleTest
# and Google Benchmark, with the runtime libraries they link that a non-Debian image lacks
# (scripts/bootstrap.sh's run_packages, less the toolchain).
packages=(libdnnl-dev libdnnl2 libasio-dev libssl-dev libssl3 libzstd-dev libzstd1 libxxhash-dev
          libxxhash0 prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
          libprometheus-cpp-push1.0 libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1
          libcurl4-openssl-dev libcurl4 libgloo-dev libgloo0 libonnx-dev libonnx1 libonnxifi
          libprotobuf-dev libprotobuf32 libprotobuf-lite32 libabsl20220623 libgtest-dev
          libgmock-dev googletest libbenchmark-dev libbenchmark1debian zlib1g-dev libomp5-14
          pkgconf pkgconf-bin libpkgconf3)

if [[ $mode == fetch ]]; then
  mkdir -p "$debs"  # (ignored by .gitignore: it travels as a carried path)
  (cd "$debs" && apt-get download "${packages[@]}")
  echo "device_check: $(ls "$debs"/*.deb | wc -l) packages, $(du -sm "$debs" | cut -f1) MiB in $debs"
  exit 0
fi

out=${OUT:-$root/build-device}
mkdir -p "$out"
log="$out/device_check.log"
start=$(date +%s)
step() { echo "device_check: [$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }

# Unpack the carried packages into a prefix of their own.
prefix=/tmp/tw-devdeps
rm -rf "$prefix" && mkdir -p "$prefix"
for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$prefix" 2>/dev/null || dpkg -x "$f" "$prefix"; done
step "unpacked $(ls "$debs"/*.deb | wc -l) packages into $prefix"
multi=$prefix/usr/lib/x86_64-linux-gnu
export PATH="$prefix/usr/bin:$PATH"
export PKG_CONFIG_PATH="$multi/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export CPATH="$prefix/usr/include:$prefix/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
export LIBRARY_PATH="$multi${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$multi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The packages' CMake files name /usr paths: a sysroot-like prefix for find_package.
cmake_prefix="$prefix/usr;$multi/cmake"

# cuBLASLt: beside nvcc, else pip's nvidia-cublas (PyTorch's).
nvcc_dir=$(dirname "$(command -v nvcc)")
cuda_libs=""
if ! ls "$nvcc_dir"/../lib64/libcublasLt.so* >/dev/null 2>&1; then
  cuda_libs=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
  [[ -n "$cuda_libs" ]] && export LD_LIBRARY_PATH="$cuda_libs:$LD_LIBRARY_PATH" &&
    export LIBRARY_PATH="$cuda_libs:$LIBRARY_PATH"
fi
step "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), cuBLASLt from ${cuda_libs:-the toolkit}"

build="$root/build-device"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTW_WITH_TORCH=OFF \
  -DTW_WITH_VULKAN=OFF -DTW_WITH_CUDA=ON -DTW_WERROR=OFF -DCMAKE_PREFIX_PATH="$cmake_prefix" \
  ${cuda_libs:+-DCMAKE_LIBRARY_PATH="$cuda_libs"} >>"$log" 2>&1 ||
  { tail -30 "$log"; exit 1; }
step "configured"
cmake --build "$build" -j "$(nproc)" --target tw_backend_cuda tw_test_cuda tw_test_ops \
  tw_test_autograd tw_test_graph tensorwire-server tw_bench_cuda >>"$log" 2>&1 ||
  { tail -40 "$log"; exit 1; }
step "built"

# A suite on cuda: its run and skip counts (gtest's summary lines).
suite() {
  local name=$1 filter=$2
  local res="$out/$name${3:+_$3}.txt"  # (a third argument tags a second run of one suite)
  timeout 240 "$build/tests/$name" --gtest_filter="$filter" --gtest_brief=1 >"$res" 2>&1 || true
  local ran skipped failed
  ran=$(sed -n 's/.*\[==========\] \([0-9]*\) tests\? from .* ran.*/\1/p' "$res" | tail -1)
  skipped=$(sed -n 's/.*\[  SKIPPED \] \([0-9]*\) tests\?.*/\1/p' "$res" | tail -1)
  failed=$(sed -n 's/.*\[  FAILED  \] \([0-9]*\) tests\?.*/\1/p' "$res" | tail -1)
  step "$name ($filter): ${ran:-0} run, ${skipped:-0} skipped, ${failed:-0} failed"
}
# The op table's cuda refusals ("declared unsupported"): the ops without a cuda kernel, by name.
refusals() {
  local res="$out/tw_test_ops.txt" names
  names=$(sed -n 's/.*declared unsupported: \([a-z0-9_]*\)[: ].*not supported by the cuda.*/\1/p' \
    "$res" | sort | uniq -c | awk '{printf "%s%s(%s)", sep, $2, $1; sep=" "}')
  step "tw_test_ops: cuda refusals by op: ${names:-none}"
}
# The op table's cases of the ops given cuda kernels in the second round, on cuda devices.
new_ops_filter() {
  local f="" op
  # (index_select and scaled_dot_product_attention match their _backward cases too; the random
  # ops and adam_step have no op-table cases: the autograd suite's training cases run them)
  for op in cat stack flip repeat slice_assign gather scatter_add index_select embedding one_hot \
            cumsum gelu_backward layer_norm_backward adaptive_avg_pool2d max_pool2d avg_pool2d \
            scaled_dot_product_attention; do
    f+="${f:+:}*cuda*_${op}*"
  done
  echo "$f"
}
if [[ $mode == dry ]]; then
  suite tw_test_cuda '*'
  suite tw_test_cuda 'CudaDeviceGraph.*:GraphRunHook.*:CudaGraph*' graphs
  step "op table filter for the new ops: $(new_ops_filter)"
  step "dry run: stopping before the GPU suites"
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$log" || true
suite tw_test_cuda '*'
suite tw_test_ops '*cuda*'
refusals
# The ops given kernels last (issue 49's second round), on their own: their counts apart.
suite tw_test_ops "$(new_ops_filter)" new_ops
suite tw_test_autograd '*cuda*'
suite tw_test_graph '*'  # (its cases are numbered, not named by device)
# Registered graphs: the graph suite runs them as CUDA Graphs (the default); once more op by op
# (TW_CUDA_GRAPHS=0), which must give the same counts. The CUDA Graph cases and f16/bf16
# attention of tw_test_cuda on their own (their counts apart; they ran in the first line too).
TW_CUDA_GRAPHS=0 suite tw_test_graph '*' op_by_op
suite tw_test_cuda 'CudaDeviceGraph.*:GraphRunHook.*:CudaGraph*' graphs
suite tw_test_cuda 'CudaDeviceRun.LowPrecisionAttention*' lowp_attention
# (whether cuDNN served f16/bf16 attention: the cudnn-only case's failure names cuDNN's reason)
grep -m3 "cuDNN" "$out/tw_test_cuda_lowp_attention.txt" | tee -a "$log" || true

# Bench rows beside PyTorch CUDA on the same GPU.
"$build/bench/tw_bench_cuda" | tee -a "$log" "$out/bench.txt" || true
python3 "$root/bench/cuda_torch.py" | tee -a "$log" "$out/bench_torch.txt" || true
step "done"
