#!/usr/bin/python3
"""The training steps of tw_bench_train (train_bench.cc) in PyTorch on the CPU.

Same models, batch sizes, initialisation scheme (PyTorch's defaults, which tensorwire copies),
random data, loss (cross-entropy) and optimizer (Adam, lr 1e-3); a step is zero_grad, forward,
backward, step. Medians of rounds of steps, as on the tensorwire side. Prints one JSON object per
line: {"meta": ...}, then {"workload": NAME, "median_ms": ..., "best_ms": ...}. Run with Debian's /usr/bin/python3
(python3-torch 1.13).

  /usr/bin/python3 bench/torch_train.py [--threads 2] [--rounds 7] [--steps 20]
"""
import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import blas_info


def mlp():
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(128, 10))


WORKLOADS = [("mlp_b256", mlp, (256, 64)), ("cnn_b64", cnn, (64, 1, 8, 8))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    print(json.dumps({"meta": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                               "python": platform.python_version(),
                               "blas_kernel": blas_info.describe()}}), flush=True)
    for name, make, shape in WORKLOADS:
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(*shape)
        y = torch.randint(0, 10, (shape[0],))

        def step():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

        for _ in range(5):
            step()
        times = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times.append((time.perf_counter() - t0) / args.steps * 1e3)
        print(json.dumps({"workload": name, "median_ms": statistics.median(times), "best_ms": min(times)}), flush=True)


if __name__ == "__main__":
    main()
