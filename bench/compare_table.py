#!/usr/bin/python3
"""Turns bench/compare_torch.py's measurements into one Markdown table.

Per workload and round: ratio = tensorwire median / the better of the two torch medians of that
round (lower is better); the two sides of a round were measured seconds apart, so drift of this
VM's memory bandwidth (up to 2x within a minute) hits both alike. The table gives, per workload,
each side's median over rounds, the median of the per-round ratios with their range, and the
verdict against the target. With a torch-backend side (the same benchmarks on tensorwire's torch
device), two more columns show its median and the median of its per-round ratios to the best
plain PyTorch: the cost of reaching PyTorch's kernels through tensorwire's op IR. Prints the
table and writes it to --out.
"""
import argparse
import datetime
import json
import os
import subprocess

# Target ratio by workload-name prefix (tensorwire time / best torch time).
# conv2d forward: <= 0.7 since issue 17 (was 0.8). Matmul rows (plain and batched): <= 1.02 and at
# least MATMUL_PEAK_SHARE of the measured FMA peak since issue 31; their earlier <= 0.7 is retired
# as unreachable (both GEMMs sit at 70-80% of the peak, so 0.7 needed more than the peak).
# attention (fused forward + backward against PyTorch's composed matmul + softmax): <= 0.7, issue 33.
TARGETS = [("matmul", 1.02), ("batched_matmul", 1.02), ("conv2d", 0.7), ("attention", 0.7),
           ("", 1.0)]
MATMUL_PEAK_SHARE = 0.70


def matmul_flops(name):
    """Floating-point operations of a matmul workload, from its name: matmul_f32_N (N x N x N),
    matmul_f32_RxKxC or batched_matmul_f32_BxRxKxC; None for other workloads."""
    batch = 1
    if name.startswith("batched_matmul_f32_"):
        batch, *dims = [int(d) for d in name[len("batched_matmul_f32_"):].split("x")]
    elif name.startswith("matmul_f32_"):
        dims = [int(d) for d in name[len("matmul_f32_"):].split("x")]
    else:
        return None
    rows, k, cols = dims * 3 if len(dims) == 1 else dims
    return 2.0 * batch * rows * k * cols


def target_for(name):
    return next(t for prefix, t in TARGETS if name.startswith(prefix))


def median(values):
    v = sorted(values)
    n = len(v)
    return None if n == 0 else (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


def numbers(values):
    return [v for v in values if isinstance(v, (int, float))]


def first_error(values):
    return next((v for v in values if isinstance(v, str)), None)


def fmt(v):
    return f"{v:.2f}" if isinstance(v, float) else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True, help="the JSON bench/compare_torch.py wrote")
    ap.add_argument("--out")
    ap.add_argument("--fma-peak", type=float,
                    help="GFLOP/s of tw_bench_fma_peak on the same threads (matmul rows' ceiling)")
    args = ap.parse_args()
    with open(args.results) as f:
        res = json.load(f)
    ctx, meta, rounds = res["context"], res["torch_meta"], res["rounds"]

    def series(side, name):
        return [r.get(side, {}).get(name) for r in rounds]

    rows, notes = [], []
    medians = {}  # name -> (tensorwire's median, the best torch's median), in ms
    for name in res["workloads"]:
        tw, plain, tuned = series("tw", name), series("torch_plain", name), series("torch_tuned", name)
        tw_torch = series("tw_torch", name)
        best = [min(numbers([p, q])) if numbers([p, q]) else None for p, q in zip(plain, tuned)]
        ratios = [t / b for t, b in zip(tw, best) if isinstance(t, (int, float)) and b]
        tt_ratios = [t / b for t, b in zip(tw_torch, best) if isinstance(t, (int, float)) and b]
        target = target_for(name)
        flops = matmul_flops(name)
        target_s = f"<= {target}"
        if flops:
            target_s += f" and >= {MATMUL_PEAK_SHARE:.0%} of peak"
        if ratios:
            ratio = median(ratios)
            met = ratio <= target
            ratio_s = f"{ratio:.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            if flops:
                tw_ms = median(numbers(tw))
                if args.fma_peak and tw_ms:
                    share = flops / tw_ms / 1e6 / args.fma_peak
                    met = met and share >= MATMUL_PEAK_SHARE
                    ratio_s += f"; {share:.0%} of peak"
                else:
                    met, ratio_s = None, ratio_s + "; peak not measured"
            verdict = "n/a" if met is None else ("PASS" if met else "MISS")
        else:
            ratio_s, verdict = "n/a", "ERROR"
        for side, values in (("tensorwire", tw), ("torch plain", plain), ("torch tuned", tuned),
                             ("tensorwire torch backend", tw_torch)):
            err = first_error(values)
            if err:
                notes.append(f"- {name}: {side}: {err}")
        tt_s = f"{median(tt_ratios):.2f}" if tt_ratios else "n/a"
        medians[name] = (median(numbers(tw)), median([b for b in best if b]))
        rows.append(f"| {name} | {fmt(median(numbers(tw)))} | {fmt(median(numbers(plain)))} | "
                    f"{fmt(median(numbers(tuned)))} | {ratio_s} | {target_s} | {verdict} | "
                    f"{fmt(median(numbers(tw_torch)))} | {tt_s} |")

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
        f"(BLAS {os.path.basename(meta.get('blas', '?'))}: "
        f"{meta.get('blas_kernel', 'kernel not reported')}, OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE "
        "unset for PyTorch); "
        f"load average at the end {load}.",
        f"Times in ms (lower is better): each side's median over {len(rounds)} rounds of the "
        "median of its repetitions. In each round the sides of a workload run back to back "
        "(seconds apart); ratio = tensorwire / the faster torch of the same round, the median "
        "over rounds (range in brackets); "
        "torch (tuned) runs with GLIBC_TUNABLES that keep freed memory in the heap. "
        "tw torch-backend = the same tensorwire program on Device::torch() (PyTorch's kernels "
        "behind tensorwire's op IR, in-process); its ratio to the best plain PyTorch is the cost "
        "of going through tensorwire.",
        "Produced by `make bench` (bench/compare_torch.sh).",
        "",
        "| workload | tensorwire ms | torch ms (plain) | torch ms (tuned) | ratio tw/best-torch "
        "(range) | target | result | tw torch-backend ms | ratio tw-torch/best-torch |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
        *rows,
    ]
    if args.fma_peak:
        lines += ["", f"The chip's f32 FMA peak on the same threads, registers only "
                  f"(`tw_bench_fma_peak`, run right after): {args.fma_peak:.0f} GFLOP/s. "
                  "Matmul rows as GFLOP/s and share of that peak (tensorwire / best torch): a matmul "
                  f"row passes at <= its ratio target and >= {MATMUL_PEAK_SHARE:.0%} of the peak.", ""]
        for name in res["workloads"]:
            flops = matmul_flops(name)
            if not flops:
                continue
            tw, best = medians[name]
            if not tw or not best:
                continue
            g_tw, g_torch = flops / tw / 1e6, flops / best / 1e6
            lines.append(f"- {name}: {g_tw:.0f} / {g_torch:.0f} GFLOP/s ({100 * g_tw / args.fma_peak:.0f}% / "
                         f"{100 * g_torch / args.fma_peak:.0f}%)")
    if notes:
        lines += ["", *notes]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
