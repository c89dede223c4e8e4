#!/usr/bin/python3
"""The workloads of tw_bench_kernels (kernels_bench.cc) in PyTorch on the CPU.

Same shapes, dtypes, input distributions and thread count; every timed run builds a fresh result
(as `c = a + b` does) and the sum is read back with .item(), as on the tensorwire side. Prints one
JSON object per line: first {"meta": ...}, then one {"workload": NAME, "median_ms": ...} per
workload, NAME matching the Google Benchmark name. Run with Debian's /usr/bin/python3
(python3-torch 1.13).

  /usr/bin/python3 bench/torch_kernels.py [--threads 2] [--min-runs 10] [--min-seconds 1.0]

With --serve it prints the meta line, then reads workload names from stdin, one per line, and
answers each with its result line (bench/compare_torch.py keeps one such process per malloc
setting and interleaves it with tensorwire, workload by workload).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import blas_info

BIG_NUMEL = 1 << 24  # 16M f32, as kBigNumel in kernels_bench.cc
WARMUP_RUNS = 3
MAX_RUNS = 1000


def workloads():
    """(name, setup) pairs; setup() makes the inputs and returns the function to time."""

    def matmul(rows, k=None, cols=None):
        k, cols = k or rows, cols or rows

        def setup():
            a, b = torch.randn(rows, k), torch.randn(k, cols)
            return lambda: a @ b
        return setup

    def batched_matmul():
        a, b = torch.randn(8, 256, 768), torch.randn(768, 3072)
        return lambda: a @ b

    def permute_copy():
        x = torch.randn(64, 256, 1024)
        return lambda: x.permute(0, 2, 1).contiguous()

    def conv2d():
        x = torch.randn(32, 3, 32, 32)
        w = torch.randn(64, 3, 3, 3)
        bias = torch.randn(64)
        return lambda: F.conv2d(x, w, bias, stride=1, padding=1)

    def depthwise(n, c, hw, backward):
        def setup():
            x = torch.randn(n, c, hw, hw, requires_grad=backward)
            w = torch.randn(c, 1, 3, 3, requires_grad=backward)
            bias = torch.randn(c)
            g = torch.randn(n, c, hw, hw)
            if not backward:
                return lambda: F.conv2d(x, w, bias, stride=1, padding=1, groups=c)

            def run():
                x.grad = None
                w.grad = None
                with torch.enable_grad():
                    F.conv2d(x, w, bias, stride=1, padding=1, groups=c).backward(g)
                return x.grad
            return run
        return setup

    def add():
        a, b = torch.rand(BIG_NUMEL), torch.rand(BIG_NUMEL)
        return lambda: a + b

    def exp():
        a = torch.randn(BIG_NUMEL)
        return lambda: torch.exp(a)

    def sum_():
        a = torch.rand(BIG_NUMEL)
        return lambda: a.sum().item()

    def softmax():
        x = torch.randn(4096, 4096)
        return lambda: torch.softmax(x, dim=-1)

    def linear_relu():
        x = torch.randn(256, 512)
        layer = torch.nn.Linear(512, 512)
        def run():
            with torch.no_grad():
                return F.relu(layer(x))
        return run

    def attention(causal):
        # Composed as a PyTorch 1.13 user writes it (no fused attention there): forward and
        # backward of softmax(q k^T / sqrt(d)) v, the gradients of q, k and v.
        def setup():
            q, k, v = (torch.randn(4, 8, 512, 64, requires_grad=True) for _ in range(3))
            g = torch.randn(4, 8, 512, 64)
            above = torch.ones(512, 512, dtype=torch.bool).triu(1)

            def run():
                for t in (q, k, v):
                    t.grad = None
                with torch.enable_grad():  # main() runs the workloads under no_grad
                    s = q @ k.transpose(-2, -1) * (1.0 / 8.0)
                    if causal:
                        s = s.masked_fill(above, float("-inf"))
                    (torch.softmax(s, dim=-1) @ v).backward(g)
                return v.grad
            return run
        return setup

    def layer_norm():
        # [64 * 128 tokens, d_model 192]: forward and backward into x, weight and bias.
        def setup():
            x = torch.randn(8192, 192, requires_grad=True)
            w = (torch.randn(192) * 0.1 + 1.0).requires_grad_()
            b = (torch.randn(192) * 0.1).requires_grad_()
            g = torch.randn(8192, 192)

            def run():
                for t in (x, w, b):
                    t.grad = None
                with torch.enable_grad():
                    F.layer_norm(x, (192,), w, b).backward(g)
                return x.grad
            return run
        return setup

    def gelu():
        # The MLP's hidden activations [64 * 128 tokens, 4 * 192]: forward and backward (erf form).
        x = torch.randn(8192, 768, requires_grad=True)
        g = torch.randn(8192, 768)

        def run():
            x.grad = None
            with torch.enable_grad():
                F.gelu(x).backward(g)
            return x.grad
        return run

    return [
        ("matmul_f32_1024", matmul(1024)),
        ("matmul_f32_2048", matmul(2048)),
        ("matmul_f32_256x768x3072", matmul(256, 768, 3072)),
        ("batched_matmul_f32_8x256x768x3072", batched_matmul),
        ("permute_copy_f32_64x256x1024", permute_copy),
        ("conv2d_f32_b32_c3to64_32x32_k3p1", conv2d),
        ("depthwise_conv2d_f32_2x144x56x56_k3p1", depthwise(2, 144, 56, False)),
        ("depthwise_conv2d_f32_2x384x14x14_k3p1", depthwise(2, 384, 14, False)),
        ("depthwise_conv2d_fwd_bwd_f32_2x144x56x56_k3p1", depthwise(2, 144, 56, True)),
        ("depthwise_conv2d_fwd_bwd_f32_2x384x14x14_k3p1", depthwise(2, 384, 14, True)),
        ("add_f32_16M", add),
        ("exp_f32_16M", exp),
        ("sum_f32_16M", sum_),
        ("softmax_f32_4096x4096", softmax),
        ("linear_relu_f32_256x512x512", linear_relu),
        ("attention_fwd_bwd_f32_4x8x512x64", attention(False)),
        ("attention_causal_fwd_bwd_f32_4x8x512x64", attention(True)),
        ("layer_norm_fwd_bwd_f32_8192x192", layer_norm()),
        # tensorwire's composed backward (before its kernel) against the same PyTorch step.
        ("layer_norm_composed_fwd_bwd_f32_8192x192", layer_norm()),
        ("gelu_fwd_bwd_f32_8192x768", gelu),
    ]


def time_one(fn, min_runs, min_seconds):
    for _ in range(WARMUP_RUNS):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < MAX_RUNS and (len(times) < min_runs or
                                     time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        del result  # the result is freed before the next run, as in `c = a + b` in a loop
    return times


def blas_library():
    """The file behind the libblas.so.3 this process loaded (torch's GEMM goes through it)."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "libblas.so" in path or "openblas" in path:
                return os.path.realpath(path)
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-runs", type=int, default=10)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--filter", default="", help="run only workloads whose name contains this")
    ap.add_argument("--serve", action="store_true",
                    help="read workload names from stdin and answer each with its result line")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(20240601)
    print(json.dumps({"meta": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                               "python": platform.python_version(),
                               "blas": blas_library(), "blas_kernel": blas_info.describe()}}),
          flush=True)
    setups = dict(workloads())

    def run(name):
        times = time_one(setups[name](), args.min_runs, args.min_seconds)
        print(json.dumps({"workload": name,
                          "median_ms": round(statistics.median(times) * 1e3, 4),
                          "min_ms": round(min(times) * 1e3, 4),
                          "runs": len(times)}), flush=True)

    with torch.no_grad():
        if args.serve:
            for line in sys.stdin:
                name = line.strip()
                if name in setups:
                    run(name)
                else:
                    print(json.dumps({"workload": name, "error": "no such workload"}), flush=True)
            return
        for name in setups:
            if args.filter in name:
                run(name)


if __name__ == "__main__":
    main()
