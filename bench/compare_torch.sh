#!/usr/bin/env bash
# Kernel benchmarks, tensorwire beside PyTorch CPU (`make bench`).
#   1. installs python3-torch, python3-numpy and OpenBLAS if missing (scripts/bootstrap.sh),
#   2. builds tw_bench_kernels (Release, in $BUILD, default build/),
#   3. in each of $ROUNDS rounds (default 3; interleaved, so that this VM's drifting memory
#      bandwidth hits every side alike; each side keeps its best round), runs it (Google
#      Benchmark, medians of repetitions, JSON) on the CPU device and, when the
#      build has the torch backend, on the torch device (the same workloads through tensorwire's
#      op IR into PyTorch's kernels: its gap to plain PyTorch is the cost of going through
#      tensorwire),
#   4. and runs bench/torch_kernels.py twice: as installed, and with glibc malloc tuned so that freed
#      64 MiB results stay in the heap instead of going back to the kernel (a fresh mmap per
#      result costs page faults, which are expensive on some VMs); the better torch of the two is
#      the bar,
#   5. prints the comparison table and writes it to bench/results/kernels.md.
# Both sides use $THREADS threads (default 2). OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as
# the environment has them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
REPETITIONS=${REPETITIONS:-3}
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3
TORCH_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296

# Debian's torch does its GEMMs through libblas.so.3, which is the unoptimised reference BLAS
# unless an optimised one provides that alternative; without OpenBLAS the matmul anchor would be
# tens of times too slow to mean anything. (OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE from the
# environment; they are left alone.)
scripts/bootstrap.sh python3-torch python3-numpy libopenblas0-pthread

source bench/build_release.sh
build_release compare_torch tw_bench_kernels

# Timings on a busy machine measure the other work; say so rather than silently print them.
read -r load1 _ < /proc/loadavg
if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
  echo "compare_torch: warning: load average $load1 on $(nproc) CPUs; timings will be noisy" >&2
fi

# OpenBLAS (pthread build) sizes its own pool from this, not from torch.set_num_threads.
export OPENBLAS_NUM_THREADS=$THREADS

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

have_tw_torch=0
if TW_BENCH_DEVICE=torch "$BUILD/bench/tw_bench_kernels" --benchmark_list_tests >/dev/null 2>&1; then
  have_tw_torch=1
else
  echo "== no torch backend in $BUILD (configured without libtorch): that column stays empty"
fi

table_args=()
for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS: tensorwire ($THREADS threads, $REPETITIONS repetitions)"
  TW_BENCH_THREADS=$THREADS "$BUILD/bench/tw_bench_kernels" \
    --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
    --benchmark_out="$out/tw.$round.json" --benchmark_out_format=json
  table_args+=(--tw "$out/tw.$round.json")
  if [[ $have_tw_torch == 1 ]]; then
    echo "== round $round of $ROUNDS: tensorwire on the torch backend"
    TW_BENCH_DEVICE=torch TW_BENCH_THREADS=$THREADS "$BUILD/bench/tw_bench_kernels" \
      --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
      --benchmark_out="$out/tw_torch.$round.json" --benchmark_out_format=json
    table_args+=(--tw-torch "$out/tw_torch.$round.json")
  fi
  echo "== round $round of $ROUNDS: torch, glibc malloc as installed"
  $PY bench/torch_kernels.py --threads "$THREADS" | tee "$out/torch_plain.$round.jsonl"
  echo "== round $round of $ROUNDS: torch, GLIBC_TUNABLES=$TORCH_TUNABLES"
  GLIBC_TUNABLES=$TORCH_TUNABLES $PY bench/torch_kernels.py --threads "$THREADS" |
    tee "$out/torch_tuned.$round.jsonl"
  table_args+=(--torch-plain "$out/torch_plain.$round.jsonl" --torch-tuned "$out/torch_tuned.$round.jsonl")
done

mkdir -p bench/results
$PY bench/compare_table.py "${table_args[@]}" --out bench/results/kernels.md
