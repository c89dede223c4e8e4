#!/usr/bin/env python3
"""Trains the character-level GPT of apps/train_lm.cc from Python on a remote device: a compute
server this script starts in-process with tw.serve (or the one given by --server), Genesis and
Exodus (data/kjv_genesis_exodus.txt.gz), Adam, each step one replayed graph (tw.graph.Step), a
progress bar with the loss and tokens/s, then a sample generated with the key/value cache.

  PYTHONPATH=build/python /usr/bin/python3 examples/train_lm.py [--server tcp://host:port]
      [--steps N] [--batch N] [--context N] [--layers N] [--heads N] [--embd N] [--lr X]
      [--seed N] [--data PATH] [--max-loss X]

The vocabulary, the model, its initialisation and the batches (window offsets from the same
splitmix64) are the C++ example's, so both train the same network on the same data.
"""
import argparse
import gzip
import math
import os
import sys
import time

import tensorwire as tw
from example_device import remote_device
from tensorwire import graph, nn, optim

ATTRIBUTION = ("King James Version (1611), Genesis and Exodus: public domain; from Debian's "
               "bible-kjv-text 4.38")
MASK = (1 << 64) - 1


def default_data_path():
    if os.environ.get("TW_LM_TEXT"):
        return os.environ["TW_LM_TEXT"]
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                        "kjv_genesis_exodus.txt.gz")


def batch_offsets(n_tokens, context, batch, seed, step):
    """apps/lm/lm.cc's batch_offsets: splitmix64 seeded with (seed, step)."""
    span = n_tokens - context
    s = (seed * 0x100000001B3 + step) & MASK
    out = []
    for _ in range(batch):
        s = (s + 0x9E3779B97F4A7C15) & MASK
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append((z ^ (z >> 31)) % span)
    return out


def progress_bar(step, steps, loss, tokens_per_s, width=30):
    filled = width * step // max(steps, 1)
    bar = "#" * filled + "." * (width - filled)
    end = "\n" if step == steps else ""
    print(f"\rstep {step:5d}/{steps} [{bar}] loss {loss:.4f}  {tokens_per_s:8.0f} tokens/s",
          end=end, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", help="a running tensorwire-server (default: start one here)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--report-every", type=int, default=10)
    ap.add_argument("--data", default=default_data_path())
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--max-loss", type=float, default=2.0,
                    help="exit with status 1 when the final loss is not below this")
    a = ap.parse_args(argv)

    with gzip.open(a.data, "rb") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = [index[c] for c in text]
    print("tensorwire (Python): training a character-level GPT")
    print(f"data:   {a.data}: {len(text)} characters, {len(chars)} distinct")
    print(f"        {ATTRIBUTION}")

    with remote_device(a.server) as device:
        tw.manual_seed(a.seed)
        model = nn.GPT(len(chars), context=a.context, n_layer=a.layers, n_head=a.heads,
                       n_embd=a.embd, device=device)
        opt = optim.Adam(model.parameters(), lr=a.lr)
        n_params = sum(p.data.numel() for p in model.parameters())
        print(f"model:  GPT, {a.layers} layers, {a.heads} heads, d={a.embd}, context {a.context}, "
              f"{n_params} parameters; Adam lr {a.lr:g}, batch {a.batch} x {a.context} tokens")
        print(f"        loss at chance: ln({len(chars)}) = {math.log(len(chars)):.3f} nats/char")
        data = tw.tensor(tokens, dtype=tw.int64, device=device)

        def train_step(args):
            text_t, offs = args
            # Made from the arguments' device: while recording, that is the capture device.
            span = tw.arange(0, a.context + 1, 1, dtype=tw.int64, device=offs.device)
            span = span.reshape([1, -1])
            w = text_t.index_select(0, (offs.reshape([-1, 1]) + span).reshape([-1]))
            w = w.reshape([a.batch, a.context + 1])
            loss = model.loss(w[:, :a.context], w[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
            return [loss.detach()]

        step = graph.compile(train_step, graph.state_slots(opt))
        start = time.perf_counter()
        window, last = None, float("nan")
        in_window = 0
        for s in range(a.steps):
            offs = tw.tensor(batch_offsets(len(tokens), a.context, a.batch, a.seed, s),
                             dtype=tw.int64, device=device)
            loss = step([data, offs])[0]
            with tw.no_grad():
                window = loss if window is None else window + loss
            in_window += 1
            if (s + 1) % a.report_every == 0 or s + 1 == a.steps:
                last = window.item() / in_window
                window, in_window = None, 0
                secs = time.perf_counter() - start
                progress_bar(s + 1, a.steps, last, (s + 1) * a.batch * a.context / secs)
        device.sync()
        secs = time.perf_counter() - start
        print(f"time per step: {1e3 * secs / a.steps:.1f} ms ({a.steps} steps in {secs:.1f} s); "
              f"graph: {step.replays} of {a.steps} steps replayed")
        met = last < a.max_loss
        print(f"loss:   {last:.3f} over the last steps; target < {a.max_loss}: "
              f"{'met' if met else 'MISSED'}")
        prompt = [index[c] for c in a.prompt.encode()]
        gen = nn.Generator(model)
        out = gen.generate(prompt, a.context - len(prompt), temperature=0.8, top_k=10, seed=a.seed)
        print("sample:\n------\n" + a.prompt + bytes(chars[t] for t in out).decode() + "\n------")
        return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
