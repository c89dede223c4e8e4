#!/usr/bin/python3
"""Runs the kernel workloads in tensorwire and in PyTorch side by side, workload by workload.

For each of --rounds rounds and each workload, four measurements are taken back to back (their
order reversed every other round): tw_bench_kernels on the CPU device, tw_bench_kernels on the
torch device (when the build has it), and torch_kernels.py as installed and with glibc malloc
tuned (two long-lived `--serve` processes, so Python starts once). Each measurement is a median
over repetitions. This VM's memory bandwidth drifts by up to 2x within a minute, so the two sides
of a ratio must be measured seconds apart, not a whole suite apart: compare_table.py takes the
ratio within each round and reports the median over rounds.

Writes every measurement to --results (JSON), for compare_table.py.
  bench/compare_torch.py --build build --threads 2 --rounds 5 --repetitions 3 --results FILE
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def tw_run(binary, name, threads, repetitions, device=None):
    """(median ms or "error: ..." string, Google Benchmark context) for one workload."""
    env = dict(os.environ, TW_BENCH_THREADS=str(threads))
    if device:
        env["TW_BENCH_DEVICE"] = device
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run(
            [binary, f"--benchmark_filter=^{name}(/|$)", f"--benchmark_repetitions={repetitions}",
             "--benchmark_report_aggregates_only=true", f"--benchmark_out={out.name}",
             "--benchmark_out_format=json"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            with open(out.name) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return f"error: tw_bench_kernels exited {proc.returncode}: {proc.stderr.strip()[-300:]}", {}
    for b in doc.get("benchmarks", []):
        if b.get("error_occurred"):
            return "error: " + b.get("error_message", "?"), doc.get("context", {})
        # With one repetition there are no aggregates: the run itself is the median.
        if b.get("aggregate_name") == "median" or (repetitions == 1 and b.get("run_type") == "iteration"):
            return b["real_time"] * TO_MS[b.get("time_unit", "ns")], doc.get("context", {})
    return f"error: no median for {name} (exit {proc.returncode})", doc.get("context", {})


class TorchServer:
    """A torch_kernels.py --serve process: one workload name in, one result line out."""

    def __init__(self, python, threads, env_extra):
        # OpenBLAS's handicap variables are unset for PyTorch alone (bench/blas_info.py).
        env = {k: v for k, v in dict(os.environ, **env_extra).items()
               if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "torch_kernels.py"), "--serve", "--threads", str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.meta = json.loads(self.proc.stdout.readline())["meta"]

    def run(self, name):
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            return "error: torch_kernels.py exited"
        rec = json.loads(line)
        return rec["median_ms"] if "median_ms" in rec else "error: " + rec.get("error", "?")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def fmt(v):
    return f"{v:.2f}" if isinstance(v, float) else "err"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--tuned-env", default="", help="GLIBC_TUNABLES for the tuned torch side")
    ap.add_argument("--results", required=True)
    ap.add_argument("--filter", default="", help="only the workloads whose name contains this")
    args = ap.parse_args()

    binary = os.path.join(args.build, "bench", "tw_bench_kernels")
    # Google Benchmark lists "add_f32_16M/process_time/real_time"; the workload is the first part.
    listed = [n.split("/")[0] for n in subprocess.run(
        [binary, "--benchmark_list_tests"], capture_output=True, text=True, check=True).stdout.split()]
    listed = [n for n in listed if args.filter in n]
    have_tw_torch = subprocess.run([binary, "--benchmark_list_tests"], capture_output=True,
                                   env=dict(os.environ, TW_BENCH_DEVICE="torch")).returncode == 0
    if not have_tw_torch:
        print("== no torch backend in this build (configured without libtorch): "
              "the tw torch-backend column stays empty", flush=True)

    plain = TorchServer(args.python, args.threads, {})
    tuned = TorchServer(args.python, args.threads, {"GLIBC_TUNABLES": args.tuned_env})
    print(f"== PyTorch's BLAS: {plain.meta.get('blas_kernel', '?')}", flush=True)
    context = {}

    def tw_cpu(name):
        ms, ctx = tw_run(binary, name, args.threads, args.repetitions)
        if not context:
            context.update(ctx)
        return ms

    sides = {
        "tw": tw_cpu,
        "torch_plain": plain.run,
        "torch_tuned": tuned.run,
    }
    if have_tw_torch:
        sides["tw_torch"] = lambda n: tw_run(binary, n, args.threads, args.repetitions, "torch")[0]

    rounds = []
    for r in range(args.rounds):
        this = {side: {} for side in sides}
        for name in listed:
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                this[side][name] = sides[side](name)
            print(f"== round {r + 1} of {args.rounds}: {name}: " +
                  ", ".join(f"{s} {fmt(this[s][name])}" for s in sides), flush=True)
        rounds.append(this)
    plain.close()
    tuned.close()

    with open(args.results, "w") as f:
        json.dump({"context": context, "torch_meta": plain.meta, "workloads": listed,
                   "rounds": rounds}, f)


if __name__ == "__main__":
    sys.exit(main())
