#!/usr/bin/env bash
# `make bench-lowp`: bf16 compute against f32 (issue 53). Builds tw_bench_lowp and
# tw_bench_fma_peak (Release, in $BUILD, default build/), measures the f32 and the bf16 FMA peaks
# on $THREADS threads (default 2; the bf16 one needs AVX512_BF16 and prints n/a elsewhere), then
# runs tw_bench_lowp: bf16 matmul 2048^3 against tensorwire's f32 in $ROUNDS (default 5)
# interleaved rounds, medians, the ratios against the targets, and which path bf16 computes on;
# then the quantization rows: int8 linear against f32 and against PyTorch's quantize_dynamic
# (bench/lowp_torch.py, each quantized engine, the fastest reported), and batch-1 generation of a
# GPT-2-small-sized model in f32, q8 and q4 with its upload bytes.
# The table goes to bench/results/lowp.md. Then tw_bench_quality (bench/quality_bench.cc): the KJV
# character model trained on 90% of the text, its held-out perplexity in f32, Q8_0 and Q4_0, and
# bf16-autocast training against f32 (step time, loss after 200 steps) into
# bench/results/lowp_quality.md ($QUALITY_STEPS steps, default 400; QUALITY=0 skips it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}

source bench/build_release.sh
build_release bench-lowp tw_bench_lowp
build_release bench-lowp tw_bench_fma_peak
QUALITY=${QUALITY:-1}
[ "$QUALITY" = 0 ] || build_release bench-lowp tw_bench_quality

source bench/torch_env.sh
# PyTorch's dynamic int8 Linear on each quantized engine it has (the fastest first) and its f32.
torch_out=$(torch_py bench/lowp_torch.py --threads "$THREADS" || true)
torch_engine=$(awk '$1 == "engine" {print $2; exit}' <<<"$torch_out")
torch_int8=$(awk '$1 == "engine" {print $3; exit}' <<<"$torch_out")
torch_f32=$(awk '$1 == "f32" {print $2}' <<<"$torch_out")

f32_peak=$("$BUILD/bench/tw_bench_fma_peak" --threads "$THREADS")
bf16_peak=$("$BUILD/bench/tw_bench_fma_peak" --threads "$THREADS" --dtype bf16)
mkdir -p bench/results
{
  echo "# make bench-lowp, $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo
  "$BUILD/bench/tw_bench_lowp" --threads "$THREADS" --rounds "$ROUNDS" \
    --f32-peak "$f32_peak" --bf16-peak "$bf16_peak" \
    --torch-engine "${torch_engine:-n/a}" --torch-int8-ms "${torch_int8:-0}" --torch-f32-ms "${torch_f32:-0}"
} | tee bench/results/lowp.md

if [ "$QUALITY" != 0 ]; then
  {
    echo "# make bench-lowp (tw_bench_quality), $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo
    "$BUILD/bench/tw_bench_quality" --threads "$THREADS" --steps "${QUALITY_STEPS:-400}"
  } | tee bench/results/lowp_quality.md
fi
