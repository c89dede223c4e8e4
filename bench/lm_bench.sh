#!/usr/bin/env bash
# `make bench-lm`: the character-level GPT of apps/train_lm.cc (4 layers, d=192, 4 heads, context
# 128, batch 16) in tensorwire and in PyTorch, side by side in one table with issue 33's targets.
#   1. builds tw_bench_lm (Release, in $BUILD, default build/),
#   2. runs it: $STEPS training steps from one seed on the local CPU device and on a remote device
#      served in-process (graph steps), generation with the key/value cache on both, a per-op
#      profile of an eager step; it writes the initial parameters (safetensors) and results (JSON),
#   3. runs bench/lm_torch.py: the same module in PyTorch loaded from those parameters, the same
#      batches, Adam, its own cached generation loop, with the same thread count (OPENBLAS_CORETYPE
#      and OPENBLAS_L2_SIZE unset for it: bench/torch_env.sh); generation is measured in
#      $GEN_ROUNDS (default 9) interleaved rounds of tensorwire local, remote and PyTorch, medians
#      (tw_bench_lm --gen-serve); prints the table (also written to bench/results/lm.md with the
#      profile).
# TW_PROFILE=1 adds the client's wire profile of the remote device at exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-50}

scripts/bootstrap.sh python3-torch python3-threadpoolctl
source bench/torch_env.sh

source bench/build_release.sh
build_release bench-lm tw_bench_lm

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== tensorwire ($THREADS threads, $STEPS steps)"
# The remote device's server runs in this same process, so two tensorwire CPU devices (the local
# one on the main thread, the server's on its worker) each have their own OpenMP team; libgomp's
# default active wait lets the idle team spin against the busy one on the shared cores (a 2-thread
# remote step measured 1.09-1.12x the local one that way, 0.97-1.01x with passive waits, and
# 1.00x with 1 thread). A real server is another process or machine, so both sides wait passively
# here: the same policy for the local and the remote device.
OMP_WAIT_POLICY=passive TW_NUM_THREADS=$THREADS "$BUILD/bench/tw_bench_lm" "$out" --steps "$STEPS"
echo "== PyTorch ($THREADS threads)"
export OPENBLAS_NUM_THREADS=$THREADS
mkdir -p bench/results
{
  echo "# make bench-lm, $(date -u +%Y-%m-%d), load average $(cut -d' ' -f1 /proc/loadavg)"
  echo
  echo '```'
  torch_py bench/lm_torch.py --init "$out/init.safetensors" --tw "$out/tw.json" --threads "$THREADS" \
    --tw-gen "$BUILD/bench/tw_bench_lm" --gen-rounds "${GEN_ROUNDS:-9}"
  echo
  cat "$out/profile.txt"
  echo '```'
} | tee bench/results/lm.md
