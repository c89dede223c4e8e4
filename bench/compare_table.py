#!/usr/bin/python3
"""Joins tw_bench_kernels' JSON with torch_kernels.py's output into one Markdown table.

Ratio = tensorwire median / the better of the two torch medians; lower is better. Each of
--tw, --tw-torch, --torch-plain and --torch-tuned may be given once per round (compare_torch.sh
interleaves rounds of all four); a side's figure is its best (lowest) median over the rounds, so
drift of the machine between rounds (this VM's memory bandwidth moves by 2x over minutes) hits
every side alike. A workload
meets its target when the ratio is at or below it. With --tw-torch (the same benchmarks on
tensorwire's torch device), two more columns show that device's median and its ratio to the best
plain-PyTorch median: the cost of reaching PyTorch's kernels through tensorwire's op IR. Prints
the table and writes it to --out.
"""
import argparse
import datetime
import json
import os
import subprocess

# Target ratio by workload-name prefix (tensorwire time / best torch time).
TARGETS = [("matmul", 0.7), ("conv2d", 0.8), ("", 1.0)]
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def target_for(name):
    return next(t for prefix, t in TARGETS if name.startswith(prefix))


def load_tw(path):
    """{workload: median ms or error string}, in the benchmark's order."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for b in doc["benchmarks"]:
        name = b.get("run_name", b["name"]).removesuffix("/real_time").removesuffix(
            "/process_time")
        if b.get("error_occurred"):
            out[name] = "error: " + b.get("error_message", "?")
        elif b.get("aggregate_name") == "median":
            out[name] = b["real_time"] * TO_MS[b.get("time_unit", "ns")]
    return out, doc.get("context", {})


def load_torch(path):
    out, meta = {}, {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "meta" in rec:
                meta = rec["meta"]
            else:
                out[rec["workload"]] = rec["median_ms"]
    return out, meta


def best_of(rounds):
    """Merges per-round {workload: ms or error} dicts: the lowest time, else the first error."""
    out = {}
    for r in rounds:
        for name, v in r.items():
            old = out.get(name)
            if old is None or (isinstance(v, float) and (not isinstance(old, float) or v < old)):
                out[name] = v
    return out


def fmt(v):
    return f"{v:.2f}" if isinstance(v, float) else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tw", required=True, action="append")
    ap.add_argument("--tw-torch", action="append",
                    help="tw_bench_kernels JSON run with TW_BENCH_DEVICE=torch")
    ap.add_argument("--torch-plain", required=True, action="append")
    ap.add_argument("--torch-tuned", required=True, action="append")
    ap.add_argument("--out")
    args = ap.parse_args()

    tw_rounds = [load_tw(p) for p in args.tw]
    tw, ctx = best_of(r[0] for r in tw_rounds), tw_rounds[0][1]
    tw_torch = best_of(load_tw(p)[0] for p in args.tw_torch or [])
    plain_rounds = [load_torch(p) for p in args.torch_plain]
    plain, meta = best_of(r[0] for r in plain_rounds), plain_rounds[0][1]
    tuned = best_of(load_torch(p)[0] for p in args.torch_tuned)
    rounds = len(args.tw)

    names = list(tw) + [n for n in plain if n not in tw]
    rows, notes = [], []
    for name in names:
        t, p, q = tw.get(name), plain.get(name), tuned.get(name)
        torch_times = [v for v in (p, q) if isinstance(v, float)]
        best = min(torch_times) if torch_times else None
        target = target_for(name)
        if isinstance(t, float) and best:
            ratio = t / best
            verdict = "PASS" if ratio <= target else "MISS"
            ratio_s = f"{ratio:.2f}"
        else:
            ratio_s, verdict = "n/a", "ERROR" if isinstance(t, str) else "MISS"
            if isinstance(t, str):
                notes.append(f"- {name}: tensorwire {t}")
            elif t is None:
                notes.append(f"- {name}: no tensorwire result")
        tt = tw_torch.get(name)
        if isinstance(tt, str):
            notes.append(f"- {name}: tensorwire torch backend {tt}")
        tt_ratio = f"{tt / best:.2f}" if isinstance(tt, float) and best else "n/a"
        rows.append(f"| {name} | {fmt(t)} | {fmt(p)} | {fmt(q)} | {ratio_s} | <= {target} | "
                    f"{verdict} | {fmt(tt)} | {tt_ratio} |")

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        "# Kernel benchmarks: tensorwire vs PyTorch CPU",
        "",
        f"{datetime.date.today()}, commit {commit}; {ctx.get('num_cpus', '?')} CPUs at "
        f"{ctx.get('mhz_per_cpu', '?')} MHz; tensorwire threads {ctx.get('tw_threads', '?')}, "
        f"torch {meta.get('torch', '?')} threads {meta.get('threads', '?')} "
        f"(BLAS {os.path.basename(meta.get('blas', '?'))}); "
        f"load average at the end {load}.",
        f"Times are medians in ms (lower is better), each side's best over {rounds} interleaved "
        "round(s). ratio = tensorwire / best torch; "
        "torch (tuned) runs with GLIBC_TUNABLES that keep freed memory in the heap. "
        "tw torch-backend = the same tensorwire program on Device::torch() (PyTorch's kernels "
        "behind tensorwire's op IR, in-process); its ratio to the best plain PyTorch is the cost "
        "of going through tensorwire.",
        "Produced by `make bench` (bench/compare_torch.sh).",
        "",
        "| workload | tensorwire ms | torch ms (plain) | torch ms (tuned) | ratio tw/best-torch "
        "| target | result | tw torch-backend ms | ratio tw-torch/best-torch |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
        *rows,
    ]
    if notes:
        lines += ["", *notes]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
