#!/usr/bin/env bash
# `make bench-lowp`: bf16 compute against f32 (issue 53). Builds tw_bench_lowp and
# tw_bench_fma_peak (Release, in $BUILD, default build/), measures the f32 and the bf16 FMA peaks
# on $THREADS threads (default 2; the bf16 one needs AVX512_BF16 and prints n/a elsewhere), then
# runs tw_bench_lowp: bf16 matmul 2048^3 against tensorwire's f32 in $ROUNDS (default 5)
# interleaved rounds, medians, the ratios against the targets, and which path bf16 computes on.
# The table goes to bench/results/lowp.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}

source bench/build_release.sh
build_release bench-lowp tw_bench_lowp
build_release bench-lowp tw_bench_fma_peak

f32_peak=$("$BUILD/bench/tw_bench_fma_peak" --threads "$THREADS")
bf16_peak=$("$BUILD/bench/tw_bench_fma_peak" --threads "$THREADS" --dtype bf16)
mkdir -p bench/results
{
  echo "# make bench-lowp, $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo
  "$BUILD/bench/tw_bench_lowp" --threads "$THREADS" --rounds "$ROUNDS" \
    --f32-peak "$f32_peak" --bf16-peak "$bf16_peak"
} | tee bench/results/lowp.md
