"""The PyTorch snippets of torch_snippets.py, run on torch 1.13 (Debian's python3-torch) and on
tensorwire with the module substituted, give equal results; the refused ones raise an error that
names the missing feature. Report: `python3 -m pytest python/tests/test_torch_snippets.py -q`
(PYTHONPATH=build/python) prints one test per snippet; test_counts states the totals."""
import math
import os
import sys

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as twF

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_snippets import REFUSED, SNIPPETS  # noqa: E402

torch = pytest.importorskip("torch")
import torch.nn.functional as torchF  # noqa: E402


class _TorchF:
    """torch.nn.functional, plus torch 2's scaled_dot_product_attention written out for 1.13."""

    def __getattr__(self, name):
        return getattr(torchF, name)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None):
        if hasattr(torchF, "scaled_dot_product_attention"):
            return torchF.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = q @ k.transpose(-2, -1) * s
        if is_causal:
            keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
            scores = scores.masked_fill(~keep, -math.inf)
        if attn_mask is not None:
            scores = (scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool
                      else scores + attn_mask)
        return torch.softmax(scores, -1) @ v


def _inputs(mod):
    rng = np.random.default_rng(50)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    arrays = dict(a=f(3, 4), b=f(3, 4), m=f(4, 3), v=f(5), img=f(2, 3, 6, 6), w=f(4, 3, 3, 3),
                  logits=f(4, 5), q=f(2, 2, 4, 8), k=f(2, 2, 4, 8), val=f(2, 2, 4, 8))
    arrays["ints"] = np.array([[1, -2, 3], [7, -5, 6]], dtype=np.int64)
    arrays["target"] = np.array([1, 0, 3, 4], dtype=np.int64)
    arrays["mask"] = arrays["a"] > 0.3
    return {name: mod.tensor(arr) for name, arr in arrays.items()}


def run(code, mod, F):
    ns = dict(torch=mod, F=F, np=np, **_inputs(mod))
    *body, last = code.split("\n")
    exec("\n".join(body), ns)
    return eval(last, ns)


def plain(r):
    """A result as numpy arrays, tuples, numbers and strings."""
    if isinstance(r, (torch.Tensor, tw.Tensor)):
        arr = r.detach().numpy() if isinstance(r, torch.Tensor) else np.asarray(r.numpy())
        return np.array(arr)
    if isinstance(r, (tuple, list)):
        return tuple(plain(x) for x in r)
    if isinstance(r, torch.dtype):
        return str(r).replace("torch.", "")
    if isinstance(r, tw.dtype):
        return {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64", "u8": "uint8",
                "bool": "bool", "f16": "float16", "bf16": "bfloat16"}[str(r).split(".")[-1]]
    if isinstance(r, np.ndarray):
        return r
    return r


def assert_same(got, want, where=""):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: got {type(got).__name__}, want an array"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, want {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {got.shape}, want {want.shape}"
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True,
                                       err_msg=where)
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: got {got!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5), f"{where}: {got} != {want}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("code", SNIPPETS)
def test_snippet_matches_torch(code):
    want = plain(run(code, torch, _TorchF()))
    got = plain(run(code, tw, twF))
    assert_same(got, want, code.replace("\n", "; "))


@pytest.mark.parametrize("code,feature", REFUSED)
def test_refused_snippet_names_the_feature(code, feature):
    run(code, torch, _TorchF())  # valid PyTorch
    with pytest.raises(Exception) as e:
        run(code, tw, twF)
    assert feature in str(e.value), f"{code}: the error {e.value!r} does not name '{feature}'"


def test_counts():
    assert len(SNIPPETS) + len(REFUSED) >= 150
    assert len(SNIPPETS) >= 140
