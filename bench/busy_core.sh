#!/usr/bin/env bash
# Idle OpenMP threads against other work (issue 50, src/core/wait_policy.cc): the training
# examples alone and beside one busy core (`yes >/dev/null`), in alternating rounds, on the same
# CPUS; then the same with libgomp's spinning default restored (GOMP_SPINCOUNT=300000, what a
# process got before the library answered OMP_WAIT_POLICY=PASSIVE), for the before/after row.
#   bench/busy_core.sh                       train_digits, 5 rounds of each
#   LM_STEPS=400 bench/busy_core.sh          also train_lm (400: its default run; LM_SPIN=1 adds
#                                            the spinning row for it)
# Environment: BUILD (build/), CPUS (taskset list the programs and the busy loop share, default
# 0,1: the busy loop takes the first), ROUNDS (5), LM_STEPS (0: no train_lm rows).
# Target: train_digits beside a busy core <= 2.5x its ms/step alone (median rounds).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
CPUS=${CPUS:-0,1}
ROUNDS=${ROUNDS:-5}
LM_STEPS=${LM_STEPS:-0}
busy_cpu=${CPUS%%,*}
unset OMP_WAIT_POLICY GOMP_SPINCOUNT

# The "time per step: X ms" line of a run.
ms_of() { sed -n 's/^time per step: \([0-9.]*\) ms.*/\1/p' | tail -1; }

# One run of "$@" on CPUS, alone or beside the busy loop: its ms/step.
run_once() {
  local busy=$1
  shift
  local pid=
  if [[ $busy == 1 ]]; then
    taskset -c "$busy_cpu" yes >/dev/null &
    pid=$!
  fi
  local ms
  ms=$(taskset -c "$CPUS" "$@" 2>/dev/null | tr '\r' '\n' | ms_of || true)
  if [[ -n $pid ]]; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  echo "${ms:-nan}"
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# A row: the program's median ms/step alone and busy over ROUNDS alternating rounds.
row() {
  local name=$1 env=$2
  shift 2
  local alone=() busy=()
  for ((r = 0; r < ROUNDS; r++)); do
    alone+=("$(run_once 0 env $env "$@")")
    busy+=("$(run_once 1 env $env "$@")")
  done
  local a b
  a=$(printf '%s\n' "${alone[@]}" | median)
  b=$(printf '%s\n' "${busy[@]}" | median)
  printf '| %s | %s | %s | %s | %.2fx |\n' "$name" "${env:-default}" "$a" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN {print b / a}')"
}

echo "bench/busy_core.sh on CPUs $CPUS (busy loop on $busy_cpu), $ROUNDS rounds, load before:" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
echo "| program | OpenMP | ms/step alone | ms/step beside a busy core | ratio (target <= 2.5x for digits) |"
echo "|---|---|---|---|---|"
digits=("$BUILD/apps/train_digits" --data data/digits.csv.gz)
row train_digits "" "${digits[@]}"
row train_digits "GOMP_SPINCOUNT=300000" "${digits[@]}"
if [[ $LM_STEPS -gt 0 ]]; then
  lm=("$BUILD/apps/train_lm" --steps "$LM_STEPS" --data data/kjv_genesis_exodus.txt.gz --target 0
      --sample 1)
  ROUNDS=1 row "train_lm --steps $LM_STEPS" "" "${lm[@]}"
  # (The spinning default took the 400-step run from 2 to 12 minutes on a loaded machine: LM_SPIN=1
  # adds its row.)
  if [[ ${LM_SPIN:-0} == 1 ]]; then
    ROUNDS=1 row "train_lm --steps $LM_STEPS" "GOMP_SPINCOUNT=300000" "${lm[@]}"
  fi
fi
