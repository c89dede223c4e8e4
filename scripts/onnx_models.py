#!/usr/bin/env python3
"""PyTorch models exported to ONNX with torch.onnx.export (Debian's python3-torch), for the ONNX
importer's tests (python/tests/test_onnx.py) and for trying `tensorwire onnx run`:

    /usr/bin/python3 scripts/onnx_models.py OUT_DIR [--large]
        writes OUT_DIR/digits_cnn.onnx, resnet.onnx and transformer_lm.onnx (--large: the
        sizes bench/onnx_remote.sh times)

digits_cnn is the digits example's CNN (apps/digits/digits.cc, make_model(kCnn)); resnet a
ResNet-18-style network with batch normalisation; transformer_lm a small GPT-style decoder (token and position embeddings, causal self-attention, GELU MLP,
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


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return (y + (x if self.down is None else self.down(x))).relu()


class ResNet(nn.Module):
    """A ResNet-18-style network for 32x32 images: a 3x3 stem, three stages of two basic blocks
    (widths w, 2w, 4w; the last two stride 2), global average pooling and a linear head."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU())
        layers, cin = [], width
        for i, w in enumerate((width, 2 * width, 4 * width)):
            layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)
        for m in self.modules():  # running statistics as after training, so BN is not identity
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.running_mean, -0.1, 0.1)
                nn.init.uniform_(m.running_var, 0.5, 1.5)
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.1, 0.1)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


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


def models(large=False):
    """(name, model in eval mode, example input) for each model, seeded. large: the sizes
    bench/onnx_remote.sh times (a ResNet of width 64 on 16 images, an LM of width 256)."""
    torch.manual_seed(0)
    cnn = DigitsCnn().eval()
    resnet = (ResNet(64) if large else ResNet()).eval()
    lm = (TransformerLm(vocab=512, dim=256, heads=8, layers=4, context=128) if large
          else TransformerLm()).eval()
    return [("digits_cnn", cnn, torch.rand(4, 1, 8, 8)),
            ("resnet", resnet, torch.rand(16 if large else 2, 3, 32, 32)),
            ("transformer_lm", lm, torch.randint(0, lm.tok.num_embeddings,
                                                 (8 if large else 2, lm.pos.num_embeddings)))]


def export(model, example, path):
    with torch.no_grad():
        torch.onnx.export(model, (example,), path, opset_version=OPSET, input_names=["input"],
                          output_names=["output"], do_constant_folding=True)


def main():
    args = [a for a in sys.argv[1:] if a != "--large"]
    out = args[0] if args else "."
    os.makedirs(out, exist_ok=True)
    for name, model, example in models(large="--large" in sys.argv):
        path = os.path.join(out, name + ".onnx")
        export(model, example, path)
        print(f"{path}: input {tuple(example.shape)} {example.dtype}")


if __name__ == "__main__":
    main()
