#!/usr/bin/env bash
# The vulkan backend on an NVIDIA GPU machine (H100 / H200: no network, none of tensorwire's
# Debian packages, at most 64 MiB carried; /work/.library/device/README.md). Two steps:
#
#   scripts/device_check.sh prepare   # here: a Release build, its shared libraries and the
#                                     # libvulkan1 .deb, packed into .devicecheck/bundle.tar.xz
#   scripts/device_check.sh run       # there (carry .devicecheck): unpacked into
#                                     # .devicecheck/root (never into /), then the op table on
#                                     # the GPU and tw_bench_kernels on vulkan:0 beside PyTorch
#                                     # CUDA (TF32 off), each result under $OUT (or .devicecheck/out)
#
# Rehearse `run` here in a clean folder (it then runs on lavapipe):
#   scripts/device_check.sh prepare && mkdir -p /tmp/dc && cp -r .devicecheck /tmp/dc/ &&
#   (cd /tmp/dc && bash /path/to/scripts/device_check.sh run)
#
# The cuda backend's check is scripts/device_check_cuda.sh: `scripts/device_check.sh --cuda ...`
# runs it (docs/cuda.md).
set -euo pipefail
if [[ "${1:-}" == "--cuda" ]]; then exec bash "$(dirname "$0")/device_check_cuda.sh" "$@"; fi

step=${1:-}
# PyTorch CUDA on the benchmarks' shapes (TF32 off: no tensor cores on the f32 path).
TORCH_BENCH='import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
def t(f, n=20):
    f(); torch.cuda.synchronize(); s = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return (time.perf_counter() - s) / n * 1e3
for n in (1024, 2048, 4096):
    a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
    print(f"torch matmul_f32_{n}: {t(lambda: a @ b):.3f} ms")
x = torch.randn(1 << 24, device="cuda"); y = torch.randn(1 << 24, device="cuda")
print(f"torch add_f32_16M: {t(lambda: x + y):.3f} ms"); print(f"torch exp_f32_16M: {t(lambda: x.exp()):.3f} ms")
big = torch.randn(1 << 28, device="cuda")
print(f"torch add_f32_256M: {t(lambda: big + big, 5):.3f} ms"); print(f"torch exp_f32_256M: {t(lambda: big.exp(), 5):.3f} ms")
'
here=$(pwd)
dc=$here/.devicecheck

prepare() {
  local root
  root=$(git rev-parse --show-toplevel)
  cd "$root"
  local build=${TW_DEVICE_BUILD:-build}
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "${JOBS:-2}" --target tw_test_ops tw_test_vulkan tw_bench_kernels \
    tw_backend_vulkan tensorwire-server
  rm -rf "$dc" && mkdir -p "$dc/bundle/bin" "$dc/bundle/lib"
  local bins=("$build/tests/tw_test_ops" "$build/tests/tw_test_vulkan"
    "$build/bench/tw_bench_kernels" "$build/apps/tensorwire-server")
  for b in "${bins[@]}"; do [ -e "$b" ] && cp -L "$b" "$dc/bundle/bin/"; done
  cp -L "$build"/libtw_backend_vulkan.so "$dc/bundle/lib/"
  # Every shared library the programs need but libc's own (the GPU machine has those), and not
  # LibTorch (the torch module is optional: it reports itself unavailable there).
  for b in "$dc"/bundle/bin/* "$dc"/bundle/lib/libtw_backend_vulkan.so; do
    ldd "$b" | awk '/=> \//{print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so|libtorch|libc10' |
    while read -r lib; do cp -L "$lib" "$dc/bundle/lib/"; done
  # The Vulkan loader (the GPU machine may lack it), as the device README prescribes.
  mkdir -p "$dc/debs" /tmp/amd64/partial
  local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update >/dev/null 2>&1 || true
  # shellcheck disable=SC2086
  (cd "$dc/debs" && apt-get $o download libvulkan1 >/dev/null)
  tar -C "$dc" -cJf "$dc/bundle.tar.xz" bundle debs
  rm -rf "$dc/bundle"
  grep -qx '/.devicecheck/' .git/info/exclude 2>/dev/null ||
    echo /.devicecheck/ >>"$(git rev-parse --git-common-dir)/info/exclude"
  echo "device_check: $(du -h "$dc/bundle.tar.xz" | cut -f1) in .devicecheck/bundle.tar.xz" \
    "(carry .devicecheck; at most 64 MiB travel)"
}

run() {
  local out=${OUT:-$dc/out}
  mkdir -p "$out"
  local root=$dc/root
  rm -rf "$root" && mkdir -p "$root"
  tar -C "$root" -xJf "$dc/bundle.tar.xz"
  # Unpacked into a folder, not into /: a package unpacked over the system can break it.
  for f in "$root"/debs/*.deb; do dpkg -x "$f" "$root/vk"; done
  export LD_LIBRARY_PATH="$root/bundle/lib:$root/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TW_VULKAN_BACKEND_MODULE="$root/bundle/lib/libtw_backend_vulkan.so"
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
    /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -e "$icd" ]; then
      export VK_DRIVER_FILES=$icd
      break
    fi
  done
  local bin=$root/bundle/bin
  {
    echo "host: $(uname -a)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
    echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-the loader default}"
  } | tee "$out/device.txt"
  # 1. The op table on vulkan:0 (local; the remote half needs the server binary's build path).
  local t0=$SECONDS
  timeout 300 "$bin/tw_test_ops" --gtest_filter='Table/OpTable.MatchesReference/vulkan_*' \
    --gtest_brief=1 >"$out/op_table.txt" 2>&1 || true
  {
    echo "op table on vulkan:0: $((SECONDS - t0)) s"
    grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests|^\[==========\]' "$out/op_table.txt" || true
    echo "failed: $(grep -c '^\[  FAILED  \] Table' "$out/op_table.txt" || true)"
  } | tee "$out/summary.txt"
  tail -5 "$out/op_table.txt"
  # 2. Kernel benchmarks on vulkan:0 (matmul, elementwise, training-step kernels).
  TW_BENCH_DEVICE=vulkan:0 timeout 240 "$bin/tw_bench_kernels" \
    --benchmark_filter='matmul_f32|add_f32|exp_f32|sum_f32|softmax|linear_relu|attention|layer_norm|gelu|conv2d_f32' \
    --benchmark_min_time=0.2 --benchmark_format=json >"$out/bench_vulkan.json" 2>"$out/bench_vulkan.err" || true
  grep -E '"name"|"real_time"' "$out/bench_vulkan.json" | paste - - | tee -a "$out/summary.txt" || true
  # 3. The same shapes on PyTorch CUDA, TF32 off, where python3 has torch with CUDA.
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    python3 -c "$TORCH_BENCH" | tee -a "$out/summary.txt"
  else
    echo "no PyTorch with CUDA here: the torch side is skipped" | tee -a "$out/summary.txt"
  fi
}

case "$step" in
  prepare) prepare ;;
  run) run ;;
  *)
    echo "usage: scripts/device_check.sh prepare|run" >&2
    exit 2
    ;;
esac
