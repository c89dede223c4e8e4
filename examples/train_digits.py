#!/usr/bin/env python3
"""Trains the digits CNN of apps/train_digits.cc from Python on a remote device: a compute server
this script starts in-process with tw.serve (or the one given by --server), the UCI handwritten
digits (data/digits.csv.gz), Adam, a plain-text progress bar, then the test accuracy.

  PYTHONPATH=build/python /usr/bin/python3 examples/train_digits.py [--server tcp://host:port]
      [--epochs N] [--batch N] [--lr X] [--seed N] [--data PATH] [--min-accuracy X]

The model, the data split and the epoch order are the C++ example's (the same splitmix64
shuffles), so both train the same network on the same batches.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np

import tensorwire as tw
from example_device import remote_device
from tensorwire import nn, optim

ATTRIBUTION = ("Alpaydin, E. & Kaynak, C. (1998). Optical Recognition of Handwritten Digits. UCI "
               "Machine Learning Repository. https://doi.org/10.24432/C50P49 (CC BY 4.0)")
N_TEST = 360
MASK = (1 << 64) - 1


def default_data_path():
    if os.environ.get("TW_DIGITS"):
        return os.environ["TW_DIGITS"]
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "digits.csv.gz")


def load(path):
    """(pixels [n, 64] f32 in [0, 1], labels [n] i64) from the gzip-compressed CSV."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    if rows.shape[1] != 65:
        raise ValueError(f"{path}: {rows.shape[1]} fields per line, expected 65")
    return (rows[:, :64] / 16.0).astype(np.float32), rows[:, 64].copy()


def permutation(n, seed):
    """apps/digits' Fisher-Yates shuffle on a splitmix64 stream."""
    p = list(range(n))
    state = seed & MASK
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        x = state
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
        x ^= x >> 31
        j = x % (i + 1)
        p[i], p[j] = p[j], p[i]
    return np.array(p, dtype=np.int64)


def make_model(device):
    """conv 1->16 3x3 pad 1, relu, maxpool 2, conv 16->32, relu, maxpool 2, flatten, linear 128->10."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, device=device), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10, device=device))


def progress_bar(epoch, epochs, step, steps, loss, acc, seconds, width=24):
    filled = width * step // max(steps, 1)
    bar = "#" * filled + "." * (width - filled)
    rate = step / seconds if seconds > 0 else 0.0
    end = "\n" if step == steps else ""
    print(f"\repoch {epoch}/{epochs} [{bar}] {step:3d}/{steps}  loss {loss:.4f}  "
          f"acc {100 * acc:5.1f}%  {rate:6.1f} steps/s", end=end, flush=True)


def train_epoch(model, opt, x, y, n, batch, epoch, epochs, seed, report_every, quiet=False):
    """One epoch in the order apps/digits' Trainer uses; running sums stay on the device and are
    read every report_every steps (one round trip)."""
    device = x.device
    start = time.perf_counter()
    model.train()
    order = tw.tensor(permutation(n, seed * 1000003 + epoch), device=device)
    steps = (n + batch - 1) // batch
    loss_sum = correct = None
    seen = 0
    for s in range(steps):
        begin, end = s * batch, min(n, (s + 1) * batch)
        idx = order[begin:end]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        logits = model(xb)
        loss = nn.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen += end - begin
        with tw.no_grad():
            batch_loss = loss.detach() * float(end - begin)
            hits = (logits.detach().argmax(1) == yb).sum()
            loss_sum = batch_loss if loss_sum is None else loss_sum + batch_loss
            correct = hits if correct is None else correct + hits
        if s + 1 == steps or (report_every > 0 and (s + 1) % report_every == 0):
            with tw.no_grad():
                v = tw.cat([loss_sum.reshape([1]).to(tw.float64),
                            correct.reshape([1]).to(tw.float64)]).numpy()
            if not quiet:
                progress_bar(epoch, epochs, s + 1, steps, v[0] / seen, v[1] / seen,
                             time.perf_counter() - start)
    return steps


def accuracy(model, x, y):
    with tw.no_grad():
        model.eval()
        hits = (model(x).argmax(1) == y).sum().item()
        model.train()
    return hits / x.shape[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="a running tensorwire-server (default: start one here)")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--report-every", type=int, default=4)
    ap.add_argument("--data", default=default_data_path())
    ap.add_argument("--min-accuracy", type=float, default=0.95,
                    help="exit with status 1 below this test accuracy")
    a = ap.parse_args(argv)

    pixels, labels = load(a.data)
    p = permutation(len(labels), a.seed)
    train_rows, test_rows = p[:len(p) - N_TEST], p[len(p) - N_TEST:]
    print(f"tensorwire (Python): training a cnn on handwritten digits")
    print(f"data:   {a.data}: {len(labels)} images of 8x8 pixels, {len(train_rows)} to train, "
          f"{len(test_rows)} to test")
    print(f"        {ATTRIBUTION}")

    with remote_device(a.server) as device:
        tw.manual_seed(a.seed)
        model = make_model(device)
        opt = optim.Adam(model.parameters(), lr=a.lr)
        x = tw.tensor(pixels[train_rows].reshape(-1, 1, 8, 8), device=device)
        y = tw.tensor(labels[train_rows], device=device)
        start = time.perf_counter()
        steps = 0
        for epoch in range(1, a.epochs + 1):
            steps += train_epoch(model, opt, x, y, len(train_rows), a.batch, epoch, a.epochs,
                                 a.seed, a.report_every)
        device.sync()
        seconds = time.perf_counter() - start
        xt = tw.tensor(pixels[test_rows].reshape(-1, 1, 8, 8), device=device)
        yt = tw.tensor(labels[test_rows], device=device)
        acc = accuracy(model, xt, yt)
        n_params = sum(p.data.numel() for p in model.parameters())
        print(f"model:  cnn, {n_params} parameters, Adam lr {a.lr:g}, batch {a.batch}")
        met = acc >= a.min_accuracy
        print(f"test accuracy: {100 * acc:.1f}% ({round(acc * len(test_rows))}/{len(test_rows)}), "
              f"target >= {100 * a.min_accuracy:.0f}%: {'met' if met else 'MISSED'}")
        print(f"time per step: {1e3 * seconds / steps:.2f} ms ({steps} steps in {seconds:.2f} s)")
        return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
