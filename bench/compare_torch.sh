#!/usr/bin/env bash
# Kernel benchmarks, tensorwire beside PyTorch CPU (`make bench`).
#   1. installs python3-torch, python3-numpy and OpenBLAS if missing (scripts/bootstrap.sh),
#   2. builds tw_bench_kernels (Release, in $BUILD, default build/),
#   3. runs bench/compare_torch.py: $ROUNDS rounds (default 5), each running every workload on
#      every side back to back: tw_bench_kernels on the CPU device (Google Benchmark, median of
#      $REPETITIONS repetitions), on the torch device when the build has the torch backend (the
#      same workloads through tensorwire's op IR into PyTorch's kernels: its gap to plain PyTorch
#      is the cost of going through tensorwire), and bench/torch_kernels.py twice: as installed,
#      and with glibc malloc tuned so that freed 64 MiB results stay in the heap instead of going
#      back to the kernel (a fresh mmap per result costs page faults, which are expensive on some
#      VMs); the better torch of the two is the bar. This VM's memory bandwidth drifts by up to
#      2x within a minute, so each ratio is taken within a round, seconds apart,
#   4. prints the comparison table (bench/compare_table.py: medians over rounds) and writes it to
#      bench/results/kernels.md.
# FILTER=TEXT runs only the workloads whose name contains TEXT (the table is printed, not written).
# Both sides use $THREADS threads (default 2). OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for
# the PyTorch processes alone (bench/compare_torch.py; bench/blas_info.py prints which OpenBLAS
# kernel they then run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
REPETITIONS=${REPETITIONS:-3}
ROUNDS=${ROUNDS:-5}
PY=/usr/bin/python3
TORCH_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296

# Debian's torch does its GEMMs through libblas.so.3, which is the unoptimised reference BLAS
# unless an optimised one provides that alternative; without OpenBLAS the matmul anchor would be
# tens of times too slow to mean anything. threadpoolctl reports which OpenBLAS kernel torch runs.
scripts/bootstrap.sh python3-torch python3-numpy libopenblas0-pthread python3-threadpoolctl

source bench/build_release.sh
build_release compare_torch tw_bench_kernels
build_release compare_torch tw_bench_fma_peak

# Timings on a busy machine measure the other work; say so rather than silently print them.
read -r load1 _ < /proc/loadavg
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
  echo "compare_torch: warning: load average $load1 on $(nproc) CPUs; timings will be noisy" >&2
fi

# OpenBLAS (pthread build) sizes its own pool from this, not from torch.set_num_threads.
export OPENBLAS_NUM_THREADS=$THREADS

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

$PY bench/compare_torch.py --build "$BUILD" --threads "$THREADS" --rounds "$ROUNDS" \
  --repetitions "$REPETITIONS" --tuned-env "$TORCH_TUNABLES" --results "$out/results.json" \
  --filter "${FILTER:-}"
# The chip's f32 FMA peak on the same threads, right after: the ceiling the matmul rows sit under.
peak=$("$BUILD/bench/tw_bench_fma_peak" --threads "$THREADS")
mkdir -p bench/results
# A run of some rows only (FILTER=name-part) leaves the table of record alone.
$PY bench/compare_table.py --results "$out/results.json" --fma-peak "$peak" \
  --out "$([[ -n ${FILTER:-} ]] && echo "$out/kernels.md" || echo bench/results/kernels.md)"
