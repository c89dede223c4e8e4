#!/usr/bin/env python3
"""PyTorch models exported to ONNX with torch.onnx.export (Debian's python3-torch), for the ONNX
importer's tests (python/tests/test_onnx.py) and for trying `tensorwire onnx run`:

    /usr/bin/python3 scripts/onnx_models.py OUT_DIR     writes OUT_DIR/digits_cnn.onnx and
                                                        OUT_DIR/transformer_lm.onnx

digits_cnn is the digits example's CNN (apps/digits/digits.cc, make_model(kCnn)); transformer_lm
a small GPT-style decoder (token and position embeddings, causal self-attention, GELU MLP,
pre-LayerNorm, tied vocabulary head). Weights are random (seeded): the point is that the imported
model computes what torch computes."""
import math
import os
import sys

import torch
from torch import nn

OPSET = 13


class DigitsCnn(nn.Sequential):
    def __init__(self):
        super().__init__(
            nn.Conv2d(1, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(2, 3)) / math.sqrt(c // self.heads) + self.mask[:t, :t]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TransformerLm(nn.Module):
    def __init__(self, vocab=96, dim=64, heads=4, layers=2, context=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, context) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        # GPT-2's scale, N(0, 0.02), for weights and (nonzero, so that they are tested) biases;
        # LayerNorm weights stay 1.
        for name, p in self.named_parameters():
            if p.dim() > 1 or name.endswith("bias"):
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        return self.ln(self.blocks(x)) @ self.tok.weight.t()


def models():
    """(name, model in eval mode, example input) for each model, seeded."""
    torch.manual_seed(0)
    cnn = DigitsCnn().eval()
    lm = TransformerLm().eval()
    return [("digits_cnn", cnn, torch.rand(4, 1, 8, 8)),
            ("transformer_lm", lm, torch.randint(0, 96, (2, 32)))]


def export(model, example, path):
    with torch.no_grad():
        torch.onnx.export(model, (example,), path, opset_version=OPSET, input_names=["input"],
                          output_names=["output"], do_constant_folding=True)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for name, model, example in models():
        path = os.path.join(out, name + ".onnx")
        export(model, example, path)
        print(f"{path}: input {tuple(example.shape)} {example.dtype}")


if __name__ == "__main__":
    main()
