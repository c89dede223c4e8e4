#!/usr/bin/env python3
"""Trains the character-level GPT of apps/train_lm.cc from Python on a remote device: a compute
server this script starts in-process with tw.serve (or the one given by --server), Genesis and
Exodus (data/kjv_genesis_exodus.txt.gz), Adam, each step one replayed graph (tw.graph.Step), a
progress bar with the loss and tokens/s, then a sample generated with the key/value cache.

  PYTHONPATH=build/python /usr/bin/python3 examples/train_lm.py [--server tcp://host:port]
      [--steps N] [--batch N] [--context N] [--layers N] [--heads N] [--embd N] [--lr X]
      [--seed N] [--data PATH] [--max-loss X] [--checkpoint DIR [--checkpoint-every N]]

The vocabulary, the model, its initialisation and the batches (window offsets from the same
splitmix64) are the C++ example's, so both train the same network on the same data.

With --checkpoint DIR it saves a tw.Checkpoint every N steps (default 100) into DIR in the
background (save_async: the loop goes on while it writes; parameters, Adam's state, the random
generator and the step). When DIR already holds one, the run resumes from the newest and ends with
the parameters an uninterrupted run ends with, bit for bit; a checkpoint saved with other settings
(--seed, --batch, --lr, --heads, the text) is refused, as apps/train_lm refuses it.
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


def run_settings(a, n_tokens):
    """What a checkpoint records and a resume checks (apps/lm/lm.cc's run_settings keys)."""
    return {"lm.lr": "%.17g" % a.lr, "lm.batch": str(a.batch), "lm.seed": str(a.seed),
            "lm.tokens": str(n_tokens), "lm.heads": str(a.heads)}


def resume(ckpt, run, model, opt):
    """Loads the newest checkpoint in `ckpt` when it was saved with the settings `run`; returns
    its step (0 when there is none). One saved with other settings is refused: resuming from it
    would not continue that run."""
    info = ckpt.latest()
    if info is None:
        return 0
    for k, v in run.items():
        saved = info.extra.get(k, "(none)")
        if saved != v:
            raise SystemExit(f"train_lm.py: the checkpoint {info.manifest} was saved by a run "
                             f"with {k} {saved}, this run has {v}: resuming would not continue "
                             "that run (use another --checkpoint DIR)")
    ckpt.load(info, model, opt)
    return info.step


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
    ap.add_argument("--checkpoint", metavar="DIR",
                    help="save checkpoints into DIR; resume from the newest one there")
    ap.add_argument("--checkpoint-every", type=int, metavar="N",
                    help="steps between checkpoints (default 100)")
    a = ap.parse_args(argv)
    if a.checkpoint_every is not None and not a.checkpoint:
        ap.error("--checkpoint-every needs --checkpoint DIR")
    if a.checkpoint_every is not None and a.checkpoint_every < 1:
        ap.error("--checkpoint-every must be at least 1")
    if a.checkpoint and a.checkpoint_every is None:
        a.checkpoint_every = 100

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
        ckpt, run, start_step = None, run_settings(a, len(tokens)), 0
        if a.checkpoint:
            ckpt = tw.Checkpoint(a.checkpoint)
            start_step = resume(ckpt, run, model, opt)
            if start_step > 0:
                print(f"resumed from the checkpoint at step {start_step} in {a.checkpoint}")
            print(f"checkpoints: every {a.checkpoint_every} steps into {a.checkpoint}, saved in "
                  "the background")

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
        in_window, saved, stall = 0, 0, 0.0
        for s in range(start_step, a.steps):
            offs = tw.tensor(batch_offsets(len(tokens), a.context, a.batch, a.seed, s),
                             dtype=tw.int64, device=device)
            loss = step([data, offs])[0]
            with tw.no_grad():
                window = loss if window is None else window + loss
            in_window += 1
            if ckpt and (s + 1) % a.checkpoint_every == 0:
                t = time.perf_counter()
                ckpt.save_async(s + 1, model, opt, run)  # waits for the previous save, if any
                stall += time.perf_counter() - t
                saved += 1
            if (s + 1) % a.report_every == 0 or s + 1 == a.steps:
                last = window.item() / in_window
                window, in_window = None, 0
                secs = time.perf_counter() - start
                progress_bar(s + 1, a.steps, last,
                             (s + 1 - start_step) * a.batch * a.context / secs)
        device.sync()
        steps_run = a.steps - start_step
        secs = time.perf_counter() - start
        if ckpt:
            t = time.perf_counter()
            ckpt.wait()
            waited = 1e3 * (time.perf_counter() - t)
            print(f"checkpoints: {saved} saved into {a.checkpoint}; the loop spent "
                  f"{1e3 * stall:.1f} ms in save_async, the last took {waited:.1f} ms more to "
                  "be durable")
        if steps_run <= 0:
            print(f"loss:   not measured (the checkpoint was already at step {start_step})")
            return 0
        print(f"time per step: {1e3 * secs / steps_run:.1f} ms ({steps_run} steps in "
              f"{secs:.1f} s); graph: {step.replays} of {steps_run} steps replayed")
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
