#!/usr/bin/env bash
# OpenMP's wait policy on a quiet machine (issue 50, src/core/wait_policy.cc): every
# tw_bench_kernels row under the library's default (a spin of 10,000 pauses), under libgomp's own
# default (GOMP_SPINCOUNT=300000, what programs got before issue 50) and under
# OMP_WAIT_POLICY=PASSIVE (sleep at once), in ROUNDS interleaved rounds; each row's median ratio of
# per-round times to the 300,000 row, and their geometric mean. Target: the default's geomean
# <= 1.0x (no worse than spinning); bench/busy_core.sh checks the loaded side.
#   bench/wait_policy_ab.sh            (BUILD=build, ROUNDS=3, FILTER=all rows)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
FILTER=${FILTER:-.}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
configs=(default GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=PASSIVE)
echo "bench/wait_policy_ab.sh: $ROUNDS rounds, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < ROUNDS; r++)); do
  for c in "${!configs[@]}"; do
    env_arg=()
    [[ ${configs[$c]} != default ]] && env_arg=("${configs[$c]}")
    env "${env_arg[@]}" "$BUILD/bench/tw_bench_kernels" --benchmark_filter="$FILTER" \
      --benchmark_format=csv 2>/dev/null >"$out/$c.$r.csv"
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" "${configs[@]}" <<'PY'
import csv, math, statistics, sys
out, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(c, r):
    with open(f"{out}/{c}.{r}.csv") as f:
        return {row["name"]: float(row["real_time"]) for row in csv.DictReader(f)}
data = [[load(c, r) for r in range(rounds)] for c in range(len(configs))]
base = configs.index("GOMP_SPINCOUNT=300000")
print("| row | " + " | ".join(configs) + " |")
print("|---" * (len(configs) + 1) + "|")
logs = [[] for _ in configs]
for name in data[base][0]:
    ratios = []
    for c in range(len(configs)):
        m = statistics.median(data[c][r][name] / data[base][r][name] for r in range(rounds))
        logs[c].append(math.log(m))
        ratios.append(f"{m:.3f}")
    print(f"| {name} | " + " | ".join(ratios) + " |")
print("| geomean | " + " | ".join(f"{math.exp(sum(l) / len(l)):.3f}" for l in logs) + " |")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
