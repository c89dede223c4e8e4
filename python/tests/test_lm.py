"""tw.nn's transformer modules: PyTorch's parameter names, cached generation against the full
forward, a few training steps bit-identical on the CPU device and on a remote device, and the
examples/train_lm.py example's first steps, and its checkpoints (a resumed run ends bit for bit
where an uninterrupted one does; other settings are refused)."""
import os
import subprocess
import sys

import numpy as np

import tensorwire as tw
from tensorwire import graph, nn, optim

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "train_lm.py")


def tiny(device=None, tied=False):
    return nn.GPT(11, context=12, n_layer=2, n_head=2, n_embd=16, tied=tied, device=device)


def test_names_and_shapes():
    tw.manual_seed(0)
    names = [n for n, _ in tiny().named_parameters()]
    assert names[:6] == ["wte.weight", "wpe.weight", "blocks.0.ln1.weight", "blocks.0.ln1.bias",
                         "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias"]
    assert names[-3:] == ["ln_f.weight", "ln_f.bias", "head.weight"]
    assert "head.weight" not in [n for n, _ in tiny(tied=True).named_parameters()]
    x = tw.zeros([2, 5, 16])
    assert nn.MultiheadAttention(16, 4)(x).shape == (2, 5, 16)
    assert nn.TransformerBlock(16, 4)(x).shape == (2, 5, 16)


def test_cached_generation_equals_full_forward(device):
    tw.manual_seed(1)
    model = tiny(device)
    seq = [3, 1, 4, 1, 5, 9, 2, 6]
    with tw.no_grad():
        model.eval()
        full = model(tw.tensor([seq], dtype=tw.int64, device=device)).numpy()[0]
        model.train()
    gen = nn.Generator(model)
    for i, t in enumerate(seq):
        np.testing.assert_allclose(gen.step(t), full[i], atol=1e-5)
    assert gen.position == len(seq)
    greedy = gen.generate([3, 1], 5, temperature=0)
    assert len(greedy) == 5
    assert gen.generate([2], 6, temperature=0.9, top_k=4, seed=5) == \
        gen.generate([2], 6, temperature=0.9, top_k=4, seed=5)


def train_bytes(device):
    tw.manual_seed(2)
    model = tiny(device)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    data = tw.tensor([[(i * 7 + j) % 11 for j in range(13)] for i in range(3)], dtype=tw.int64,
                     device=device)

    def fn(args):
        loss = model.loss(args[0][:, :12], args[0][:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return [loss.detach()]

    step = graph.compile(fn, graph.state_slots(opt))
    losses = [step([data])[0].item() for _ in range(4)]
    assert losses[-1] < losses[0]
    return [p.data.numpy().tobytes() for p in model.parameters()]


def test_training_is_bit_identical_local_and_remote(remote):
    assert train_bytes(tw.Device.cpu()) == train_bytes(remote)


def test_example_runs():
    r = subprocess.run([sys.executable, EXAMPLE, "--steps", "4", "--report-every", "2",
                        "--layers", "1", "--embd", "32", "--context", "16", "--max-loss", "10"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "served in-process" in r.stdout
    assert "step     4/4 [##############################]" in r.stdout
    assert "target < 10.0: met" in r.stdout and "sample:" in r.stdout


def run_lm_example(steps, ckpt_dir, *more):
    return subprocess.run([sys.executable, EXAMPLE, "--steps", str(steps), "--report-every", "2",
                           "--layers", "1", "--embd", "32", "--context", "16", "--max-loss", "10",
                           "--checkpoint", str(ckpt_dir), "--checkpoint-every", "2", *more],
                          capture_output=True, text=True, timeout=240)


def test_example_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for steps, d in ((6, whole), (4, cut), (6, cut)):
        r = run_lm_example(steps, d)
        assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed from the checkpoint at step 4" in r.stdout
    assert "checkpoints: 1 saved" in r.stdout
    last = "ckpt-000000000006.safetensors"
    assert (whole / last).read_bytes() == (cut / last).read_bytes()
    refused = run_lm_example(8, cut, "--lr", "0.002")
    assert refused.returncode != 0
    assert "saved by a run with lm.lr 0.001, this run has 0.002" in refused.stderr


def assert_same_logits(model, ref, seq, torch):
    """tw.nn.GPT `model` and lm_torch's `ref` give the same logits for the token rows `seq`."""
    with tw.no_grad():
        model.eval()
        ours = model(tw.tensor(seq, dtype=tw.int64)).numpy()
    with torch.no_grad():
        theirs = ref(torch.tensor(seq)).numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-5)


def test_state_dict_round_trips_with_pytorch(tmp_path, source_dir):
    """tensorwire's safetensors file loads into bench/lm_torch.py's module with strict names and
    gives the same logits; PyTorch's state_dict loads back into tw.nn.GPT strictly."""
    torch = __import__("pytest").importorskip("torch")
    sys.path.insert(0, os.path.join(source_dir, "bench"))
    try:
        import lm_torch
    finally:
        sys.path.pop(0)
    tw.manual_seed(3)
    model = tiny()
    path = str(tmp_path / "tw.safetensors")
    tw.save_safetensors(path, model)
    ref = lm_torch.GPT(11, 12, 2, 2, 16)
    ref.load_state_dict(lm_torch.load_safetensors(path), strict=True)
    seq = [[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]]
    assert_same_logits(model, ref, seq, torch)
    # Back: PyTorch's parameters (perturbed) into a fresh tensorwire model.
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01)
    back = {k: tw.tensor(v.numpy()) for k, v in ref.state_dict().items()}
    tw.save_safetensors(str(tmp_path / "torch.safetensors"), back)
    fresh = tiny()
    tw.load_safetensors_into(str(tmp_path / "torch.safetensors"), fresh, strict=True)
    assert_same_logits(fresh, ref, seq, torch)
