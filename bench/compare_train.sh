#!/usr/bin/env bash
# Training-step benchmark: tensorwire on the local CPU device and on a remote device (a
# tensorwire-server child process over loopback), beside PyTorch CPU, in one table.
#   1. installs python3-torch if missing (through scripts/bootstrap.sh),
#   2. builds tw_bench_train (Release, in $BUILD, default build/),
#   3. runs it: per workload, rounds alternating local and remote; best and median round,
#      CPU time per step, and whether both devices hold bit-identical parameters,
#   4. runs bench/torch_train.py (same models, data shapes, loss and Adam, $THREADS threads),
#   5. prints the table (and writes it to bench/results/train.md): remote / local (target
#      <= 1.10) and tensorwire local / PyTorch (targets: CNN <= 1.0, MLP <= 0.52), on the best
#      rounds.
# Run on an idle machine: the table records the load average. OMP_WAIT_POLICY and the like are
# left as the environment has them (both sides run oneDNN/OpenMP).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-20}
STEPS=${STEPS:-50}
PY=/usr/bin/python3

scripts/bootstrap.sh python3-torch python3-threadpoolctl
source bench/torch_env.sh

source bench/build_release.sh
build_release compare_train tw_bench_train

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== tensorwire ($THREADS threads, $ROUNDS rounds of $STEPS steps)"
"$BUILD/bench/tw_bench_train" --threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS" --jsonl "$out/tw.jsonl"
# As in compare_torch.sh: OpenBLAS sizes its own pool from OPENBLAS_NUM_THREADS, and PyTorch runs
# twice, as installed and with malloc tuned to keep freed memory (sparing it this VM's page
# faults); each workload takes the faster of the two.
export OPENBLAS_NUM_THREADS=$THREADS
echo "== torch ($THREADS threads, as installed)"
torch_py bench/torch_train.py --threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS" | tee "$out/torch.jsonl"
echo "== torch ($THREADS threads, malloc tuned)"
GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296 \
  torch_py bench/torch_train.py --threads "$THREADS" --rounds "$ROUNDS" --steps "$STEPS" | tee -a "$out/torch.jsonl"

mkdir -p bench/results
$PY - "$out/tw.jsonl" "$out/torch.jsonl" bench/results/train.md <<'PYEOF'
import datetime, json, os, sys
tw, torch, meta = {}, {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    tw[(r["workload"], r["device"])] = r
for line in open(sys.argv[2]):
    r = json.loads(line)
    if "meta" in r:
        meta = r["meta"]
    elif r["workload"] not in torch or r["best_ms"] < torch[r["workload"]]["best_ms"]:
        torch[r["workload"]] = r  # the faster of the two runs
names = {"mlp_b256": "MLP 64-512-512-10, batch 256", "cnn_b64": "digits CNN, batch 64"}
lines = [
    f"Training step (forward, cross-entropy, backward, Adam), ms per step; "
    f"{datetime.date.today()}, load average {os.getloadavg()[0]:.2f}, torch {meta.get('torch', '?')} "
    f"with {meta.get('threads', '?')} threads; PyTorch's BLAS {meta.get('blas_kernel', '?')} "
    "(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for it).",
    "",
    "| workload | tw local | tw remote | remote / local (target <= 1.10) | tw local cpu | tw remote cpu "
    "| params identical | torch | local / torch (targets: CNN <= 1.0, MLP <= 0.52) |",
    "|---|---|---|---|---|---|---|---|---|",
]
for w in dict.fromkeys(k[0] for k in tw):
    l, r = tw[(w, "local")], tw[(w, "remote")]
    ratio = r["best_ms"] / l["best_ms"]
    t = torch.get(w)
    # Like with like: tensorwire's best round against PyTorch's best round.
    target = {"mlp_b256": 0.52, "cnn_b64": 1.0}.get(w)
    verdict = ("ok" if l['best_ms'] / t['best_ms'] <= target else "MISSED") if t and target \
        else "(no target)"
    torch_cells = (f"{t['best_ms']:.3f} (med {t['median_ms']:.3f}) | {l['best_ms'] / t['best_ms']:.3f} "
                   f"{verdict}" if t else "n/a | n/a")
    lines.append(
        f"| {names.get(w, w)} | {l['best_ms']:.3f} (med {l['median_ms']:.3f}) | {r['best_ms']:.3f} "
        f"(med {r['median_ms']:.3f}) | {ratio:.3f} {'ok' if ratio <= 1.10 else 'MISSED'} | "
        f"{l['cpu_ms']:.3f} | {r['cpu_ms']:.3f} | {'yes' if l['identical'] else 'NO'} | {torch_cells} |")
lines += ["", "tw: best of the rounds (median in brackets); remote: a tensorwire-server child "
          "process on 127.0.0.1; cpu: CPU time per step (remote: this process's and the server's). "
          "torch: best of the rounds (median in brackets) of the faster of its two runs (as "
          "installed, malloc tuned)."]
text = "\n".join(lines) + "\n"
print(text)
open(sys.argv[3], "w").write(text)
PYEOF
