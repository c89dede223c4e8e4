"""The PyTorch side of `make bench-lm` (bench/lm_bench.sh): the GPT of tensorwire/transformer.h
as a torch.nn.Module with the same parameter names, initialised from the safetensors file
tensorwire wrote, trained on the same batches (bench/lm_bench.cc's offsets, recomputed here with
the same splitmix64), and sampled with its own key/value-cache loop. With --tw RESULTS.json it
prints both sides as one table with the targets of issue 33.

    /usr/bin/python3 bench/lm_torch.py --init init.safetensors --tw tw.json [--threads N]
        [--tw-gen build/bench/tw_bench_lm --gen-rounds 9]

With --tw-gen, generation is measured in interleaved rounds (issue 53: best-of-3 runs in separate
phases gave local 1163-1612 tokens/s and remote/local 0.79-1.28 on one quiet machine): each round
runs one generation on tensorwire's local device, on its remote device (tw_bench_lm --gen-serve,
a child process) and in PyTorch, back to back, the order reversed every other round; the table
gives the medians over rounds and the median of the per-round ratios.
"""
import argparse
import gzip
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import blas_info

MASK64 = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def batch_offsets(n_tokens, context, batch, seed, step):
    """apps/lm/lm.cc's batch_offsets."""
    span = n_tokens - context
    s = (seed * 0x100000001B3 + step) & MASK64
    out = []
    for _ in range(batch):
        s, z = splitmix64(s)
        out.append(z % span)
    return out


def load_text(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    chars = sorted(set(data))
    index = {c: i for i, c in enumerate(chars)}
    return np.array([index[c] for c in data], dtype=np.int64), bytes(chars)


def load_safetensors(path):
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        a = np.frombuffer(raw[base + lo:base + hi], dtype=dtypes[info["dtype"]])
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out


class Attention(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.e, self.h = e, h
        self.qkv = nn.Linear(e, 3 * e)
        self.proj = nn.Linear(e, e)

    def forward(self, x):  # [B, T, E], causal
        b, t, e = x.shape
        d = e // self.h
        q, k, v = self.qkv(x).split(e, dim=2)
        q = q.view(b, t, self.h, d).transpose(1, 2)
        k = k.view(b, t, self.h, d).transpose(1, 2)
        v = v.view(b, t, self.h, d).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        y = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, e))

    def step(self, x, pos, cache):  # x [B, E] at position pos; cache (k, v) [B, H, C, D]
        b, e = x.shape
        d = e // self.h
        q, k, v = self.qkv(x).split(e, dim=1)
        kc, vc = cache
        kc[:, :, pos] = k.view(b, self.h, d)
        vc[:, :, pos] = v.view(b, self.h, d)
        q = q.view(b, self.h, 1, d)
        s = (q @ kc[:, :, :pos + 1].transpose(-2, -1)) * (1.0 / math.sqrt(d))
        y = s.softmax(-1) @ vc[:, :, :pos + 1]
        return self.proj(y.reshape(b, e))


class Block(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(e)
        self.attn = Attention(e, h)
        self.ln2 = nn.LayerNorm(e)
        self.mlp = nn.Sequential(nn.Linear(e, 4 * e), nn.GELU(), nn.Linear(4 * e, e))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def step(self, x, pos, cache):
        x = x + self.attn.step(self.ln1(x), pos, cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, n_embd, tied=False):
        super().__init__()
        self.context, self.tied = context, tied
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(context, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        if not tied:
            self.head = nn.Linear(n_embd, vocab, bias=False)

    def logits(self, h):
        h = self.ln_f(h)
        return h @ self.wte.weight.t() if self.tied else self.head(h)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:t]
        for blk in self.blocks:
            x = blk(x)
        return self.logits(x)

    def step(self, tok, pos, caches):  # tok [B] at position pos -> [B, V]
        x = self.wte(tok) + self.wpe.weight[pos]
        for blk, c in zip(self.blocks, caches):
            x = blk.step(x, pos, c)
        return self.logits(x)


def train(model, text, cfg, steps, lr, seed):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, times = [], []
    ar = torch.arange(cfg["context"] + 1)
    data = torch.from_numpy(text)
    for s in range(steps):
        t0 = time.perf_counter()
        offs = torch.tensor(batch_offsets(len(text), cfg["context"], cfg["batch"], seed, s))
        w = data[offs.view(-1, 1) + ar.view(1, -1)]
        x, y = w[:, :-1], w[:, 1:]
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times


@torch.no_grad()
def generate_tps(model, cfg, tokens, repeats):
    """Tokens per second of greedy generation with the key/value cache: `tokens` positions from
    position 0, `repeats` times; the best run."""
    model.eval()
    h, e = cfg["n_head"], cfg["n_embd"]
    best = 0.0
    for _ in range(repeats):
        caches = [(torch.zeros(1, h, cfg["context"], e // h), torch.zeros(1, h, cfg["context"], e // h))
                  for _ in range(cfg["n_layer"])]
        tok = torch.tensor([1])
        t0 = time.perf_counter()
        for pos in range(tokens):
            logits = model.step(tok, pos, caches)
            tok = torch.tensor([int(logits[0].argmax())])
        best = max(best, tokens / (time.perf_counter() - t0))
    return best


def generation_rounds(model, cfg, tw, binary, rounds, threads):
    """(medians {side: tokens/s}, median per-round ratios {local/torch, remote/local}, ranges)."""
    env = dict(os.environ, OMP_WAIT_POLICY="passive", TW_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as scratch:
        proc = subprocess.Popen([binary, scratch, "--gen-serve", "1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
        try:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{binary} --gen-serve did not start (exit {proc.poll()})")

            def tw_side(which):
                proc.stdin.write(which + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline().strip()
                try:
                    return float(line)
                except ValueError:
                    raise RuntimeError(f"{binary} --gen-serve answered {line!r} to {which}")

            sides = {"local": lambda: tw_side("local"), "remote": lambda: tw_side("remote"),
                     "torch": lambda: generate_tps(model, cfg, tw["gen_tokens"], 1)}
            sides["torch"]()  # warm-up
            got = {k: [] for k in sides}
            for r in range(rounds):
                for k in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                    got[k].append(sides[k]())
        finally:
            proc.stdin.close()
            proc.wait()
    med = {k: statistics.median(v) for k, v in got.items()}
    ratios = {"local/torch": [l / t for l, t in zip(got["local"], got["torch"])],
              "remote/local": [r / l for r, l in zip(got["remote"], got["local"])]}
    return med, {k: statistics.median(v) for k, v in ratios.items()}, \
        {k: (min(v), max(v)) for k, v in ratios.items()}


def yes(ok):
    return "YES" if ok else "NO"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="the initial parameters tensorwire saved")
    ap.add_argument("--tw", required=True, help="bench/lm_bench.cc's results (JSON)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tw-gen", default="", help="tw_bench_lm, for interleaved generation rounds")
    ap.add_argument("--gen-rounds", type=int, default=9)
    a = ap.parse_args()
    with open(a.tw) as f:
        tw = json.load(f)
    cfg = tw["config"]
    threads = a.threads or tw["threads"]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    text, _ = load_text(tw["data"])
    model = GPT(cfg["vocab"], cfg["context"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"],
                cfg["tied"])
    model.load_state_dict(load_safetensors(a.init), strict=True)
    steps = tw["steps"]
    losses, times = train(model, text, cfg, steps, tw["lr"], tw["seed"])
    skip = tw["timed_from"]
    torch_step = 1e3 * sorted(times[skip:])[len(times[skip:]) // 2]
    if a.tw_gen:
        med, ratio, spread = generation_rounds(model, cfg, tw, a.tw_gen, a.gen_rounds, threads)
        torch_tps, gen_local, gen_remote = med["torch"], med["local"], med["remote"]
        gen_how = (f"median of {a.gen_rounds} interleaved rounds of one run per side; ratios: "
                   "median of the per-round ratios (range " +
                   ", ".join(f"{k} {lo:.2f}-{hi:.2f}" for k, (lo, hi) in spread.items()) + ")")
    else:
        torch_tps = generate_tps(model, cfg, tw["gen_tokens"], tw["gen_repeats"])
        gen_local, gen_remote = tw["gen_tps_local"], tw["gen_tps_remote"]
        ratio = {"local/torch": gen_local / torch_tps, "remote/local": gen_remote / gen_local}
        gen_how = f"best of {tw['gen_repeats']} runs per side, measured apart"

    tw_loss, th_loss = tw["losses"][-1], losses[-1]
    rel = abs(tw_loss - th_loss) / abs(th_loss)
    rows = []

    def row(what, tw_v, th_v, ratio, target, ok):
        rows.append((what, tw_v, th_v, ratio, target, yes(ok)))

    r = tw["step_ms_local"] / torch_step
    row("training step, local (ms)", f"{tw['step_ms_local']:.1f}", f"{torch_step:.1f}",
        f"{r:.2f}", "local/torch <= 0.8", r <= 0.8)
    r = tw["step_ms_remote"] / tw["step_ms_local"]
    row("training step, remote graph (ms)", f"{tw['step_ms_remote']:.1f}", "", f"{r:.3f}",
        "remote/local <= 1.02", r <= 1.02)
    r = ratio["local/torch"]
    row("generation, KV cache, local (tokens/s)", f"{gen_local:.0f}", f"{torch_tps:.0f}",
        f"{r:.2f}", "local/torch >= 1.5", r >= 1.5)
    r = ratio["remote/local"]
    row("generation, KV cache, remote graph (tokens/s)", f"{gen_remote:.0f}", "",
        f"{r:.2f}", "remote/local >= 0.95", r >= 0.95)
    row(f"loss after {steps} steps, same init and batches", f"{tw_loss:.6f}", f"{th_loss:.6f}",
        f"{rel:.1e}", "relative difference <= 1e-3", rel <= 1e-3)
    row("parameters after training, local vs remote", tw["bit_identical"] and "identical" or "differ",
        "", "", "bit-identical", tw["bit_identical"])

    print(f"bench-lm: GPT {cfg['n_layer']} layers, d={cfg['n_embd']}, {cfg['n_head']} heads, "
          f"context {cfg['context']}, vocab {cfg['vocab']}, batch {cfg['batch']}; "
          f"{threads} threads each; torch {torch.__version__}; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"          PyTorch's BLAS: {blas_info.describe()} "
          "(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for it)")
    print(f"          step time: median of steps {skip}..{steps - 1}; generation: "
          f"{tw['gen_tokens']} tokens from position 0, {gen_how}")
    head = ("", "tensorwire", "PyTorch", "ratio", "target", "met")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(6)]
    for x in [head] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(x, widths)).rstrip())
    print(f"remote wire per generated token: {tw['gen_frames_out_per_token']:.2f} frames out "
          f"({tw['gen_bytes_out_per_token']:.0f} B), {tw['gen_frames_in_per_token']:.2f} frames in; "
          f"per training step: {tw['train_frames_out_per_step']:.2f} frames out "
          f"({tw['train_bytes_out_per_step']:.0f} B, the registration included)")
    print(f"generation without the graph (every op of every token): local "
          f"{tw['gen_tps_local_eager']:.0f}, remote {tw['gen_tps_remote_eager']:.0f} tokens/s")
    print(f"loss curve (every 10 steps), tensorwire: "
          + " ".join(f"{v:.4f}" for v in tw["losses"][::10]))
    print(f"                            PyTorch:    " + " ".join(f"{v:.4f}" for v in losses[::10]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
