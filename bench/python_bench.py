#!/usr/bin/env python3
"""The Python module's overhead against the C++ API, measured in one run (`make bench-python`):

  adds   200k chained adds of 1-element tensors on a remote device (a tensorwire-server child
         process over loopback TCP), one read at the end: ops/s from Python against the C++ row
         (c) of tw_bench_remote, run by this script. Target: Python >= 0.5x C++.
  train  one training step of the digits CNN (batch 64, Adam; bench/train_bench.cc's cnn_b64) on
         a remote device served in-process over loopback: the best round from Python against
         tw_bench_train's remote column, run by this script. Target: Python / C++ <= 1.10.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--build build] [--quick]
"""
import argparse
import os
import re
import subprocess
import sys
import time

import tensorwire as tw
from tensorwire import nn, optim


def cpp_adds(build, quick):
    out = subprocess.run([os.path.join(build, "bench", "tw_bench_remote"), "--only", "c"]
                         + (["--quick"] if quick else []),
                         capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| c |"))
    return float(row.split("|")[3])


def python_adds(build, n):
    server = subprocess.Popen([os.path.join(build, "apps", "tensorwire-server"), "--listen",
                               "tcp://127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split()[-1]
        d = tw.Device.remote(url)
        d.connect()

        def rate(count):
            one = tw.full([1], 1.0, device=d)
            x = tw.full([1], 0.0, device=d)
            d.sync()
            t0 = time.perf_counter()
            for _ in range(count):
                x = x + one
            v = x.item()
            s = time.perf_counter() - t0
            if v != float(count):
                raise RuntimeError(f"wrong sum {v}")
            return count / s

        rate(n // 10)  # warm up, as the C++ bench does
        return rate(n)
    finally:
        server.terminate()
        server.wait(timeout=30)


def cpp_train(build, rounds, steps):
    out = subprocess.run([os.path.join(build, "bench", "tw_bench_train"), "--rounds", str(rounds),
                          "--steps", str(steps)], capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("cnn_b64"))
    return float(row.split()[2])  # the remote column, ms per step (best round)


def python_train(rounds, steps):
    tw.set_num_threads(2)  # tw_bench_train's default
    with tw.serve(tw.Device.cpu()) as server:
        d = tw.Device.remote(server.url)
        d.connect()
        tw.manual_seed(1234)
        model = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, device=d), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, device=d), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(128, 10, device=d))
        opt = optim.Adam(model.parameters(), lr=1e-3)
        x = tw.randn(64, 1, 8, 8, device=d)
        y = (tw.rand(64, device=d) * 10.0).floor().to(tw.int64).clamp(0, 9)

        def step():
            loss = nn.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        for _ in range(5):
            step()
        best = float("inf")
        for _ in range(rounds):
            d.sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            d.sync()
            best = min(best, (time.perf_counter() - t0) / steps)
        return best * 1e3


def main():
    ap = argparse.ArgumentParser(description="Python vs C++ on a remote device")
    ap.add_argument("--build", default="build")
    ap.add_argument("--quick", action="store_true", help="50k adds and fewer rounds")
    a = ap.parse_args()
    n = 50000 if a.quick else 200000
    rounds, steps = (5, 10) if a.quick else (15, 10)

    c_adds = cpp_adds(a.build, a.quick)
    p_adds = python_adds(a.build, n)
    c_step = cpp_train(a.build, rounds, steps)
    p_step = python_train(rounds, steps)
    adds_ratio, step_ratio = p_adds / c_adds, p_step / c_step
    print(f"tensorwire Python module vs C++ API, remote devices over loopback; "
          f"{os.cpu_count()} hardware threads, load average {os.getloadavg()[0]:.2f}\n")
    print("| measurement | Python | C++ | ratio | target | met |")
    print("|---|---:|---:|---:|---|---|")
    print(f"| {n} chained 1-element adds, one read at the end (ops/s; tensorwire-server child) "
          f"| {p_adds:.0f} | {c_adds:.0f} | {adds_ratio:.2f}x | Python >= 0.5x C++ "
          f"| {'yes' if adds_ratio >= 0.5 else 'NO'} |")
    print(f"| digits CNN training step, batch 64, Adam (ms, best of {rounds} rounds of {steps}; "
          f"in-process server) | {p_step:.3f} | {c_step:.3f} | {step_ratio:.3f} "
          f"| Python / C++ <= 1.10 | {'yes' if step_ratio <= 1.10 else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
