#!/usr/bin/env python3
"""One GPT over two compute servers (docs/remote.md, "One model, several servers"): its layers
placed by the servers' free memory (tw.nn.place) and trained as a pipeline, the activations
moving from server to server, or split tensor-parallel (--mode tensor); then a sample generated
with each server holding its own key/value cache. The servers are started in-process (tw.serve),
each limited (max_memory_bytes) to 70% of the whole model's training state (Adam: 4x its
parameters) plus 8 MiB for activations, or given with --server URL twice.

  PYTHONPATH=build/python /usr/bin/python3 examples/split_gpt.py [--mode pipeline|tensor]
      [--server URL --server URL] [--steps N] [--batch N] [--micro-batches M]
"""
import argparse
import gzip
import os
import sys
import time

import tensorwire as tw
from tensorwire import nn, optim


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["pipeline", "tensor"], default="pipeline")
    ap.add_argument("--server", action="append", default=[], help="a running tensorwire-server")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.server and len(a.server) != 2:
        ap.error("give --server twice, or not at all")

    path = os.environ.get("TW_LM_TEXT") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "kjv_genesis_exodus.txt.gz")
    with gzip.open(path, "rb") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = [index[c] for c in text]

    tw.manual_seed(a.seed)
    model = nn.GPT(len(chars), context=a.context, n_layer=a.layers, n_head=a.heads,
                   n_embd=a.embd)  # on the host: placing it uploads each layer to its server
    n_bytes = sum(p.data.numel() * 4 for p in model.parameters())
    servers = []
    if not a.server:
        # Each server may hold 70% of what training the whole model needs (Adam: 4x the
        # parameters), and room for activations.
        limit = int(n_bytes * 4 * 0.7) + (8 << 20)
        servers = [tw.serve(max_memory_bytes=limit) for _ in range(2)]
        urls = [s.url for s in servers]
    else:
        urls = a.server
    devices = [tw.Device.remote(u) for u in urls]
    for d in devices:
        d.connect()
    print(f"model: GPT {a.layers} layers, d={a.embd}, {n_bytes / 2**20:.1f} MiB of parameters; "
          f"servers: {', '.join(urls)}")
    try:
        if a.mode == "pipeline":
            plan = nn.place(model, devices, memory_factor=4)
            print(f"placed: {plan}")
            pipe = nn.Pipeline(model, plan, micro_batches=a.micro_batches)
            params = model.parameters()
        else:
            tp = nn.TensorParallelGPT(model, devices)
            params = tp.parameters()
            print(f"tensor-parallel: {a.heads // 2} heads of each block on each server")
        opt = optim.Adam(params, lr=3e-3)
        x_dev = devices[0]
        y_dev = devices[-1] if a.mode == "pipeline" else devices[0]
        start, loss = time.perf_counter(), None
        n = len(tokens) - a.context - 1
        for s in range(a.steps):
            offs = [(s * 7919 + i * 104729) % n for i in range(a.batch)]
            xs = [tokens[o:o + a.context] for o in offs]
            ys = [tokens[o + 1:o + a.context + 1] for o in offs]
            x = tw.tensor(xs, dtype=tw.int64, device=x_dev)
            y = tw.tensor(ys, dtype=tw.int64, device=y_dev)
            opt.zero_grad()
            if a.mode == "pipeline":
                loss = pipe.forward_backward(x, y)
            else:
                loss = tp.loss(x, y)
                loss.backward()
                tp.reduce_grads()
            opt.step()
            if s == 0 or s + 1 == a.steps:
                print(f"step {s + 1}: loss {loss.item():.3f}")
        secs = time.perf_counter() - start
        print(f"time per step: {1e3 * secs / a.steps:.1f} ms")
        prompt = [index[c] for c in b"And God said"]
        t = time.perf_counter()
        if a.mode == "pipeline":
            out = nn.PipelineGenerator(pipe).generate(prompt, 40, temperature=0.8, top_k=10,
                                                      seed=a.seed)
        else:
            out = tp.generate(prompt, 40, temperature=0.8, top_k=10, seed=a.seed)
        print(f"sample ({len(out) / (time.perf_counter() - t):.0f} tokens/s):")
        print("And God said" + bytes(chars[t] for t in out).decode(errors="replace"))
    finally:
        for s in servers:
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
