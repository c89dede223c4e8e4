#!/usr/bin/python3
"""Differential fuzzer: random tensor programs on every tensorwire device against PyTorch.

Each program (3-12 ops, drawn from a seed) runs forward and backward on PyTorch (Debian's
python3-torch 1.13, its own kernels and autograd: the oracle) and on every tensorwire device
(cpu, torch when built, and the same two as devices 0 and 1 of a real server on
tcp://127.0.0.1:0). Every intermediate value and every leaf's gradient is compared: int and bool
exactly, floats within a tolerance, NaN and +-inf at the same positions. Devices of one backend
(cpu and remote) must also agree bit for bit. See tests/difffuzz/README.md.

  diff_fuzz.py --seed 1 --count 200        programs with seeds 1..200 (the ctest entry)
  diff_fuzz.py --minutes 10                 seeds from the clock for 10 minutes (make diff-fuzz)
  diff_fuzz.py --seed 1234 --count 1 --show the program of seed 1234 as tensorwire Python code
  diff_fuzz.py --check-planted              requires the fuzzer to find the planted gradient bug

The driver runs the programs in a worker process; a worker that dies (a crash) is reported with
the seed it was running and a new worker goes on from the next seed.
"""
import argparse
import collections
import json
import math
import os
import subprocess
import sys
import time

# A share of the draws of some ops is made invalid on purpose (shapes that do not broadcast, a
# matmul's inner dims apart, a reshape to the wrong count, an index out of range): PyTorch refuses
# those and tensorwire must refuse them too. Such a program ends there and counts as refused; one
# that ran to the end counts as executed. Other draws PyTorch refuses are drawn again.
PROVOKE_ERRORS = 0.03
FLOAT_RTOL = 1e-4
# Gradients are compared end to end (PyTorch's autograd on its own forward values), so rounding
# differences upstream pass through ill-conditioned rules (prod / x near 0): 1e-3 gave false
# reports; a wrong rule is off by O(1) (the planted bug: a sign).
GRAD_RTOL = 1e-2
# layer_norm divides the rounding error of x - mean by sqrt(var + eps), up to 1/sqrt(1e-5) = 316:
# over a row of near-equal values PyTorch's own f32 result is off by 1e-4 (tensorwire's is 0).
OP_TOLERANCE = {"layer_norm": 300}
# Ops that combine many elements (sums of products, normalisations): where an input is infinite,
# two correct arrangements of the formula give NaN (inf - inf) or inf, so their values, like every
# gradient, count NaN and +-inf as one class. Elementwise ops are held to the exact positions.
COMPOUND = {"matmul", "attention", "layer_norm", "softmax", "log_softmax", "reduce", "cumsum"}

# ======================================= known bugs ============================================
# Bugs found and not yet fixed. A mismatch of one of the listed kinds in a program with an op the
# predicate matches is counted under the bug's key, not as a finding; "avoid" ones (crashes,
# which would end the worker) are not drawn at all. Empty this table entry by entry as the fixes
# land: each then becomes a live check.
#   predicate(op, ins): op is the op's dict, ins the PyTorch values of its inputs.


KNOWN_BUGS = {
    # Fixed, with a regression test each (tests/regress, python/tests/test_regress.py): the
    # six of issue 52 §2, and pow's and relu's gradients at a NaN, prod's of a 0-d inf and
    # attention's backward spreading a NaN upstream gradient to keys a query does not attend
    # (found by this fuzzer).
}


def _attends_nothing(op, ins):
    """Whether a query row of an attention attends no key: its mask row all false, the causal
    rule leaving it no key (more queries than keys), or both together."""
    import torch
    tq, tk = ins[0].shape[-2], ins[1].shape[-2]
    keep = torch.ones((tq, tk), dtype=torch.bool)
    if op["p"]["causal"]:
        keep = keep.tril()
    if op["p"]["mask"]:
        keep = keep & ins[3]
    return tk > 0 and bool((~keep).all(-1).any())


def _cast_int_undefined(op, ins):
    t = ins[0]
    return (op["k"] == "cast" and op["p"]["to"] == "long" and t.is_floating_point() and
            bool((~t.isfinite() | (t.abs() >= 2.0**63)).any()))


# Not bugs: results PyTorch leaves undefined and docs/ops.md defines. Counted as KNOWN_BUGS are,
# reported apart.
DOCUMENTED = {
    # docs/ops.md Cast: float -> integral maps NaN to 0 and saturates out of range; in PyTorch the
    # conversion is C++ undefined behaviour (INT64_MIN on x86).
    "cast_nonfinite_to_int": dict(pred=_cast_int_undefined, kinds="*", avoid=False),
    # PyTorch computes x ** 0.5 as sqrt(x): NaN at x = -inf; tensorwire (and numpy) use
    # std::pow, which gives +inf there (C99 Annex F).
    "pow_half_at_neg_inf": dict(
        pred=lambda op, ins: op["k"] in ("scalar", "binary") and op["p"]["fn"] == "pow" and
        bool(ins[0].isneginf().any()), kinds=("nonfinite",), avoid=False),
    # docs/ops.md ScaledDotProductAttention: a query row that attends no key (its mask row all
    # false, or causal with more queries than keys) gives zeros; the softmax over only -inf that
    # this fuzzer composes on the PyTorch side gives NaN there.
    "attention_row_attends_nothing": dict(
        pred=lambda op, ins: op["k"] == "attention" and _attends_nothing(op, ins),
        kinds=("nonfinite", "grad_nonfinite"), avoid=False),
    # docs/ops.md Gradients: abs's gradient g * sign(x) is NaN at a NaN x, since sign(NaN) is NaN
    # as numpy's; PyTorch 1.13's sign(NaN) is 0, and so is its abs gradient there.
    "abs_grad_at_nan": dict(
        pred=lambda op, ins: op["k"] == "unary" and op["p"]["fn"] == "abs" and bool(
            ins[0].isnan().any()), kinds=("grad_nonfinite",), avoid=False),
    # src/api/grad_rules.cc (kRelu): g * (y > 0), a multiply for speed: "Unlike PyTorch, a NaN or
    # inf in g where y <= 0 gives NaN there rather than 0" (the max/min case is filed as a bug in
    # issue 52 §2: the lead may want this one to follow).
    "relu_grad_spreads_nan": dict(
        pred=lambda op, ins: op["k"] == "unary" and op["p"]["fn"] == "relu" and bool(
            (ins[0] <= 0).any()), kinds=("grad_nonfinite",), avoid=False),
}

# --draw-avoided (in the workers' environment): draw the "avoid" entries' ops too, to see whether
# their crashes are fixed.
DRAW_AVOIDED = os.environ.get("TW_DIFF_FUZZ_DRAW_AVOIDED") == "1"

# =================================== the program generator ====================================


class Gen:
    """Draws a program while running it on PyTorch: each drawn op is tried at once, so a draw
    PyTorch refuses is drawn again (or, now and then, kept as the program's deliberate last op)."""

    def __init__(self, seed):
        import numpy as np
        import torch
        self.np, self.torch = np, torch
        self.rng = np.random.default_rng(seed)
        self.ops = []  # the program
        self.vals = []  # PyTorch values, one per op
        self.leaves = []  # (op index, PyTorch leaf) of float inputs
        self.special = self.rng.random() < 0.15  # NaN/inf/zeros/ties in the inputs

    # --- draws ---
    def r(self):
        return float(self.rng.random())

    def i(self, lo, hi):  # inclusive
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq):
        return seq[int(self.rng.integers(0, len(seq)))]

    def dim_size(self):
        x = self.r()
        return 0 if x < 0.04 else 1 if x < 0.28 else self.i(2, 5)

    def shape(self, lo=0, hi=4):
        return tuple(self.dim_size() for _ in range(self.i(lo, hi)))

    def partner(self, s):
        """A shape that broadcasts with s: leading dims dropped, some dims set to 1."""
        s = list(s[self.i(0, len(s)):] if self.r() < 0.4 else s)
        s = [1 if self.r() < 0.3 else d for d in s]
        if self.r() < 0.15:
            s = [self.i(1, 3)] + s
        return tuple(s)

    def sub_partner(self, s):
        """A shape that broadcasts to s (s itself unchanged)."""
        s = list(s[self.i(0, len(s)):] if self.r() < 0.4 else s)
        return tuple(1 if self.r() < 0.3 else d for d in s)

    def data(self, shape, dtype):
        np = self.np
        n = int(np.prod(shape)) if shape else 1
        if dtype == "bool":
            a = self.rng.random(n) < 0.5
        elif dtype == "i64":
            a = self.rng.integers(-4, 5, n).astype(np.int64)
        else:
            a = (self.rng.standard_normal(n) * self.pick([0.5, 1.0, 3.0])).astype(np.float32)
            if self.special and n:
                for _ in range(self.i(1, 3)):
                    a[self.i(0, n - 1)] = self.pick([np.nan, np.inf, -np.inf, 0.0, 1.0])
        return a.reshape(shape)

    # --- inputs ---
    def add(self, op, val):
        self.ops.append(op)
        self.vals.append(val)
        return len(self.ops) - 1

    def fresh(self, shape, dtype=None, grad=True):
        """A new input (an op of kind "input"): contiguous, transposed, strided or expanded."""
        dtype = dtype or self.pick(["f32", "f32", "f32", "i64", "bool"])
        layout = self.pick(["contig", "contig", "transposed", "strided", "expanded"])
        if layout == "transposed" and len(shape) < 2:
            layout = "contig"
        if layout == "expanded" and 1 not in shape and 0 not in shape:
            layout = "contig"
        base_shape = shape
        if layout == "transposed":
            base_shape = shape[:-2] + (shape[-1], shape[-2])
        elif layout == "strided":
            base_shape = tuple(2 * d for d in shape)
        elif layout == "expanded":
            base_shape = tuple(1 if (d != 0 and self.r() < 0.5) else d for d in shape)
        op = dict(k="input", a=[], p=dict(shape=shape, dtype=dtype, layout=layout,
                                          data=self.data(base_shape, dtype),
                                          grad=grad and dtype == "f32"))
        val, leaf = make_input("torch", op["p"], None)
        idx = self.add(op, val)
        if leaf is not None:
            self.leaves.append((idx, leaf))
        return idx

    def operand(self, pred=lambda v: True, make=None):
        """An earlier value that satisfies pred (mostly), else a fresh input from make()."""
        cands = [j for j, v in enumerate(self.vals) if pred(v)]
        if cands and (make is None or self.r() < 0.7):
            return self.pick(cands)
        return make() if make else None

    def is_float(self, v):
        return v.dtype == self.torch.float32

    # --- ops ---
    def draw_op(self):
        """One op's (kind, args, params), or None when no operand fits."""
        k = self.pick(OP_KINDS)
        v = self.vals
        T = self.torch
        if k == "unary":
            x = self.operand()
            fl = self.is_float(v[x])
            fns = UNARY_FLOAT if fl else (["neg", "abs", "square"] if v[x].dtype == T.int64
                                          else ["logical_not"]) + ["exp", "sqrt", "sigmoid"]
            return k, [x], dict(fn=self.pick(fns))
        if k == "binary":
            x = self.operand(lambda t: t.dtype != T.bool)
            if x is None:
                return None
            dt = self.pick(["f32", "f32", "i64"]) if self.r() < 0.8 else None
            y = self.operand(lambda t: broadcasts(t.shape, v[x].shape) and t.dtype != T.bool,
                             lambda: self.fresh(self.partner(v[x].shape), dt or "f32"))
            if v[x].dim() > 0 and self.provoke():
                y = self.fresh(tuple(v[x].shape[:-1]) + (v[x].shape[-1] + 2,), "f32")
            fns = ["add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "ge", "ne"]
            if self.is_float(v[x]) and self.is_float(v[y]):
                fns += ["pow", "sub", "mul"]
            if self.r() < 0.5:
                x, y = y, x
            return k, [x, y], dict(fn=self.pick(fns))
        if k == "logical":
            x = self.operand(lambda t: t.dtype == T.bool,
                             lambda: self.fresh(self.shape(), "bool"))
            y = self.operand(lambda t: t.dtype == T.bool and broadcasts(t.shape, v[x].shape),
                             lambda: self.fresh(self.partner(v[x].shape), "bool"))
            return k, [x, y], dict(fn=self.pick(["logical_and", "logical_or", "logical_xor"]))
        if k == "scalar":
            x = self.operand(lambda t: t.dtype != T.bool)
            if x is None:
                return None
            fn = self.pick(["add", "sub", "mul", "div", "rsub", "pow"] if self.is_float(v[x])
                           else ["add", "sub", "mul", "rsub"])
            c = self.pick([2, -1, 0.5, -1.5, 3.0]) if fn != "pow" else self.pick([2, 0.5, 3, -1])
            return k, [x], dict(fn=fn, c=c)
        if k == "where":
            x = self.operand()
            c = self.operand(lambda t: t.dtype == T.bool and broadcasts(t.shape, v[x].shape),
                             lambda: self.fresh(self.partner(v[x].shape), "bool"))
            y = self.operand(lambda t: t.dtype == v[x].dtype and broadcasts(t.shape, v[x].shape),
                             lambda: self.fresh(self.partner(v[x].shape),
                                                {T.float32: "f32", T.int64: "i64"}.get(
                                                    v[x].dtype, "bool")))
            return k, [c, x, y], {}
        if k == "clamp":
            x = self.operand(self.is_float)
            if x is None:
                return None
            lo = self.pick([None, -1.0, 0.0])
            hi = self.pick([None, 1.0, 2.0]) if lo is not None else self.pick([1.0, 2.0])
            return k, [x], dict(lo=lo, hi=hi)
        if k == "reduce":
            x = self.operand()
            fl = self.is_float(v[x])
            fn = self.pick(["sum", "mean", "prod", "max", "min", "argmax", "argmin", "sum"]
                           if fl else ["sum", "prod", "max", "min", "argmax"])
            rank = v[x].dim()
            dim = None if self.r() < 0.3 else self.i(-max(rank, 1), max(rank, 1) - 1)
            if fn in ("sum", "mean") and rank >= 2 and self.r() < 0.3:
                dim = tuple(sorted(self.rng.choice(rank, self.i(1, rank), replace=False).tolist()))
            return k, [x], dict(fn=fn, dim=dim, keepdim=self.r() < 0.5)
        if k == "cumsum":
            x = self.operand(lambda t: t.dim() > 0 and t.dtype != T.bool)
            if x is None:
                return None
            return k, [x], dict(dim=self.i(-v[x].dim(), v[x].dim() - 1))
        if k == "view":
            return self.draw_view()
        if k == "index":
            x = self.operand(lambda t: t.dim() > 0 and t.shape[0] > 0)
            if x is None:
                return None
            n = v[x].shape[0]
            lo = -n if self.r() < 0.3 else 0
            ix = self.fresh((self.i(0, 4),), "i64")
            self.vals[ix] = self.torch.randint(lo, n, self.vals[ix].shape,
                                               generator=self.tgen())
            self.ops[ix]["p"]["data"] = self.vals[ix].numpy().copy()
            self.ops[ix]["p"]["layout"] = "contig"
            return k, [x, ix], {}
        if k == "index_int":
            x = self.operand(lambda t: t.dim() > 0 and t.shape[0] > 0)
            if x is None:
                return None
            n = v[x].shape[0]
            return k, [x], dict(i=self.i(-n, n - 1))
        if k in ("index_select", "gather"):
            x = self.operand(lambda t: t.dim() > 0)
            if x is None:
                return None
            d = self.i(0, v[x].dim() - 1)
            n = v[x].shape[d]
            if n == 0:
                return None
            shp = (self.i(0, 4),) if k == "index_select" else tuple(
                self.i(0, s) if j != d else self.i(0, 4) for j, s in enumerate(v[x].shape))
            ix = self.fresh(shp, "i64")
            self.vals[ix] = self.torch.randint(0, n + self.provoke(), shp, generator=self.tgen())
            self.ops[ix]["p"]["data"] = self.vals[ix].numpy().copy()
            self.ops[ix]["p"]["layout"] = "contig"
            return k, [x, ix], dict(dim=d)
        if k == "matmul":
            x = self.operand(lambda t: t.dim() >= 1 and t.dtype == T.float32,
                             lambda: self.fresh(self.shape(1, 3), "f32"))
            s = v[x].shape
            kdim = s[-1] + (1 if self.provoke() else 0)
            n = self.dim_size()
            if len(s) == 1:
                other = self.pick([(kdim,), (kdim, n), (self.i(1, 3), kdim, n)])
            else:
                other = self.pick([(kdim,), (kdim, n), self.partner(s[:-2]) + (kdim, n)])
            y = self.fresh(tuple(other), "f32")
            return k, [x, y], {}
        if k in ("softmax", "log_softmax"):
            x = self.operand(lambda t: t.dim() > 0 and self.is_float(t))
            if x is None:
                return None
            return k, [x], dict(dim=self.i(-v[x].dim(), v[x].dim() - 1))
        if k == "layer_norm":
            x = self.operand(lambda t: t.dim() > 0 and self.is_float(t))
            if x is None:
                return None
            m = self.i(1, v[x].dim())
            ns = tuple(v[x].shape[-m:])
            w = self.fresh(ns, "f32") if self.r() < 0.5 else None
            b = self.fresh(ns, "f32") if self.r() < 0.5 else None
            return k, [x] + [j for j in (w, b) if j is not None], dict(
                ns=ns, w=w is not None, b=b is not None)
        if k == "attention":
            q = self.operand(lambda t: t.dim() >= 2 and self.is_float(t),
                             lambda: self.fresh(self.shape(2, 4), "f32"))
            s = tuple(v[q].shape)
            tk = self.dim_size()
            kk = self.fresh(s[:-2] + (tk, s[-1]), "f32")
            vv = self.fresh(s[:-2] + (tk, self.dim_size()), "f32")
            args = [q, kk, vv]
            mask = self.r() < 0.3
            if mask:
                args.append(self.fresh(self.sub_partner(s[:-1] + (tk,)), "bool"))
            return k, args, dict(mask=mask, causal=self.r() < 0.3,
                                 scale=self.pick([None, None, 0.5]))
        if k == "cat":
            x = self.operand(lambda t: t.dim() > 0)
            if x is None:
                return None
            d = self.i(0, v[x].dim() - 1)
            s = list(v[x].shape)
            s[d] = self.dim_size()
            y = self.fresh(tuple(s), {T.float32: "f32", T.int64: "i64"}.get(v[x].dtype, "bool"))
            return k, [x, y], dict(dim=d, stack=False)
        if k == "stack":
            x = self.operand()
            y = self.fresh(tuple(v[x].shape),
                           {T.float32: "f32", T.int64: "i64"}.get(v[x].dtype, "bool"))
            return "cat", [x, y], dict(dim=self.i(0, v[x].dim()), stack=True)
        if k == "cast":
            x = self.operand()
            return k, [x], dict(to=self.pick(["float", "long", "bool"]))
        if k == "masked_fill":
            x = self.operand()
            m = self.operand(lambda t: t.dtype == T.bool and broadcasts_to(t.shape, v[x].shape),
                             lambda: self.fresh(self.sub_partner(v[x].shape), "bool"))
            val = self.pick([0, -1, 2.5]) if v[x].dtype == T.float32 else self.pick([0, 3])
            return k, [x, m], dict(value=val)
        raise AssertionError(k)

    def draw_view(self):
        v = self.vals
        x = self.operand()
        s = tuple(v[x].shape)
        rank = len(s)
        fn = self.pick(["reshape", "permute", "transpose", "slice", "narrow", "expand",
                        "unsqueeze", "squeeze", "flip", "t", "flatten"])
        p = dict(fn=fn)
        if fn == "reshape":
            n = int(math.prod(s))
            shape = []
            m = n
            for _ in range(self.i(0, 3)):
                divs = [d for d in range(1, 7) if m % d == 0] if m else [0, 1, 2]
                d = self.pick(divs)
                shape.append(d)
                m = m // d if d else m
            shape.append(m if n else self.i(0, 2))
            shape = list(self.rng.permutation(shape))
            if n and self.r() < 0.3:
                shape[self.i(0, len(shape) - 1)] = -1
            p["shape"] = tuple(int(d) for d in shape)
            if self.provoke():
                p["shape"] = p["shape"] + (2,)
        elif fn in ("permute",):
            p["dims"] = tuple(int(d) for d in self.rng.permutation(rank))
        elif fn == "transpose":
            if rank == 0:
                return None
            p["d0"], p["d1"] = self.i(-rank, rank - 1), self.i(-rank, rank - 1)
        elif fn in ("slice", "narrow"):
            if rank == 0:
                return None
            d = self.i(0, rank - 1)
            n = s[d]
            a = self.i(-n - 1, n) if fn == "slice" else self.i(0, n)
            b = self.i(-n - 1, n + 1) if fn == "slice" else self.i(0, n - a)
            p.update(dim=d, a=a, b=b, step=self.pick([1, 1, 2, 3]) if fn == "slice" else 1)
        elif fn == "expand":
            p["shape"] = tuple([self.i(1, 3)] * (self.r() < 0.3)) + tuple(
                (self.i(0, 4) if d == 1 else -1 if self.r() < 0.2 else d) for d in s)
        elif fn == "unsqueeze":
            p["dim"] = self.i(-rank - 1, rank)
        elif fn == "squeeze":
            if rank == 0:
                return None
            p["dim"] = self.i(-rank, rank - 1)
        elif fn == "flip":
            if rank == 0:
                return None
            p["dims"] = tuple(sorted(set(self.i(0, rank - 1) for _ in range(self.i(1, 2)))))
        elif fn == "t":
            if rank != 2:
                return None
        elif fn == "flatten":
            if rank == 0:
                return None
            a = self.i(0, rank - 1)
            p.update(a=a, b=self.i(a, rank - 1))
        return "view", [x], p

    def provoke(self):
        """True for a draw to be made invalid on purpose (PROVOKE_ERRORS)."""
        self.provoked = self.provoked or self.r() < PROVOKE_ERRORS
        return self.provoked

    def tgen(self):
        g = self.torch.Generator()
        g.manual_seed(int(self.rng.integers(0, 2**31)))
        return g

    def program(self):
        for _ in range(self.i(1, 3)):
            self.fresh(self.shape())
        n_ops = self.i(3, 12)
        done = 0
        refused = None
        while done < n_ops:
            mark = len(self.ops), len(self.leaves)
            self.provoked = False
            drawn = self.draw_op()
            if drawn is None:
                continue
            k, args, p = drawn
            op = dict(k=k, a=args, p=p)
            ins = [self.vals[j] for j in args]
            if DRAW_AVOIDED:
                pass
            elif any(b["avoid"] and b["pred"](op, ins) for b in KNOWN_BUGS.values()):
                del self.ops[mark[0]:], self.vals[mark[0]:], self.leaves[mark[1]:]
                continue
            try:
                out = apply("torch", op, ins)
            except Exception as e:  # noqa: BLE001 - PyTorch's refusal, kept or drawn again
                if self.provoked:
                    self.ops.append(op)
                    refused = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    break
                del self.ops[mark[0]:], self.vals[mark[0]:], self.leaves[mark[1]:]
                continue
            self.add(op, out)
            done += 1
        return self.ops, refused


OP_KINDS = (["unary"] * 3 + ["binary"] * 4 + ["logical", "scalar", "scalar", "where", "clamp"] +
            ["reduce"] * 4 + ["cumsum"] + ["view"] * 5 + ["index", "index_int", "index_select",
                                                          "gather"] +
            ["matmul"] * 2 + ["softmax", "log_softmax", "layer_norm"] + ["attention"] * 2 +
            ["cat", "stack", "cast", "masked_fill"])
UNARY_FLOAT = ["neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "sin", "cos",
               "square", "reciprocal", "gelu", "erf", "rsqrt", "log1p"]


def broadcasts(a, b):
    for x, y in zip(reversed(tuple(a)), reversed(tuple(b))):
        if x != y and x != 1 and y != 1:
            return False
    return True


def broadcasts_to(a, b):
    return len(a) <= len(b) and all(x == y or x == 1 for x, y in zip(reversed(a), reversed(b)))


# ==================================== running one op ==========================================
# The same op on both sides: "torch" (the oracle) or "tw" (any tensorwire device).


def make_input(side, p, device):
    """(value, leaf): the input's value (a view of the leaf for non-contiguous layouts) and the
    leaf that takes the gradient (None without one)."""
    import numpy as np
    data = np.array(p["data"], order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
    if side == "torch":
        import torch
        base = torch.from_numpy(data.copy())
    else:
        import tensorwire as tw
        base = tw.from_numpy(data.copy(), device)
    if p["grad"]:
        base.requires_grad_(True)
    shape = tuple(p["shape"])
    x = base
    if p["layout"] == "transposed":
        x = base.transpose(-1, -2)
    elif p["layout"] == "strided":
        x = base[tuple(slice(0, None, 2) for _ in shape)] if shape else base
    elif p["layout"] == "expanded":
        x = base.expand(shape)
    return x, (base if p["grad"] else None)


def apply(side, op, ins):
    """op on ins: PyTorch's tensors (side "torch"), tensorwire's ("tw"), or Sym expressions
    ("sym": the tensorwire code that does it, for source())."""
    k, p = op["k"], op["p"]
    if side == "torch":
        import torch as L
        F = L.nn.functional
    elif side == "sym":
        L = F = SymModule()
    else:
        import tensorwire as L
        F = L
    if k == "unary":
        if p["fn"] == "gelu":
            return F.gelu(ins[0]) if side == "torch" else ins[0].gelu()
        return getattr(ins[0], p["fn"])()
    if k in ("binary", "logical"):
        return getattr(ins[0], p["fn"])(ins[1])
    if k == "scalar":
        x, c = ins[0], p["c"]
        return {"add": lambda: x + c, "sub": lambda: x - c, "mul": lambda: x * c,
                "div": lambda: x / c, "rsub": lambda: c - x, "pow": lambda: x ** c}[p["fn"]]()
    if k == "where":
        return L.where(ins[0], ins[1], ins[2])
    if k == "clamp":
        return ins[0].clamp(min=p["lo"], max=p["hi"])
    if k == "reduce":
        return reduce_op(side, ins[0], p)
    if k == "cumsum":
        return ins[0].cumsum(p["dim"])
    if k == "view":
        return view_op(ins[0], p)
    if k == "index":
        return ins[0][ins[1]]
    if k == "index_int":
        return ins[0][p["i"]]
    if k == "index_select":
        return ins[0].index_select(p["dim"], ins[1])
    if k == "gather":
        return ins[0].gather(p["dim"], ins[1])
    if k == "matmul":
        return ins[0].matmul(ins[1])
    if k == "softmax":
        return ins[0].softmax(p["dim"])
    if k == "log_softmax":
        return ins[0].log_softmax(p["dim"])
    if k == "layer_norm":
        rest = iter(ins[1:])
        w = next(rest) if p["w"] else None
        b = next(rest) if p["b"] else None
        return F.layer_norm(ins[0], p["ns"], w, b)
    if k == "attention":
        mask = ins[3] if p["mask"] else None
        if side != "torch":
            return L.scaled_dot_product_attention(ins[0], ins[1], ins[2], mask=mask,
                                                  causal=p["causal"], scale=p["scale"])
        return torch_attention(ins[0], ins[1], ins[2], mask, p["causal"], p["scale"])
    if k == "cat":
        return (L.stack if p["stack"] else L.cat)([ins[0], ins[1]], p["dim"])
    if k == "cast":
        return getattr(ins[0], p["to"])()
    if k == "masked_fill":
        return ins[0].masked_fill(ins[1], p["value"])
    raise AssertionError(k)


def reduce_op(side, x, p):
    fn, dim, keepdim = p["fn"], p["dim"], p["keepdim"]
    if side != "torch":
        if fn in ("max", "min") and dim is not None:  # x.max(dim) is (values, indices), as torch's
            return getattr(x, fn)(dim, keepdim).values
        return getattr(x, fn)(dim, keepdim)
    # PyTorch 1.13 has no keepdim without a dim for most reductions; docs/ops.md's meaning: every
    # dim reduced, each kept as size 1.
    if dim is None:
        out = getattr(x, fn)()
        return out.reshape((1,) * x.dim()) if keepdim else out
    if fn in ("max", "min"):
        return _extreme(fn, dim, keepdim).apply(x)
    return getattr(x, fn)(dim, keepdim)


def _extreme(fn, dim, keepdim):
    """max/min over dim with docs/ops.md's gradient (src/api/grad_rules.cc): to the elements
    equal to the result (a NaN result: the NaNs), split evenly between ties, the others exactly 0
    whatever the upstream gradient holds, as torch.max(x) without a dim does (masked_fill).
    PyTorch 1.13 has no single op for it: amax splits ties but multiplies the others by 0, so a
    NaN upstream gradient reaches them; max(dim) sends all to one index."""
    import torch

    class Extreme(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = getattr(x, "a" + fn)(dim, keepdim)
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            if not keepdim:
                y, g = y.unsqueeze(dim), g.unsqueeze(dim)
            hit = (x == y) | (x != x)
            count = hit.sum(dim, keepdim=True).to(x.dtype)
            return torch.where(hit, g / count, torch.zeros((), dtype=x.dtype))

    return Extreme


def view_op(x, p):
    fn = p["fn"]
    if fn == "reshape":
        return x.reshape(p["shape"])
    if fn == "permute":
        return x.permute(p["dims"])
    if fn == "transpose":
        return x.transpose(p["d0"], p["d1"])
    if fn == "slice":
        return x[(slice(None),) * p["dim"] + (slice(p["a"], p["b"], p["step"]),)]
    if fn == "narrow":
        return x.narrow(p["dim"], p["a"], p["b"])
    if fn == "expand":
        return x.expand(p["shape"])
    if fn == "unsqueeze":
        return x.unsqueeze(p["dim"])
    if fn == "squeeze":
        return x.squeeze(p["dim"])
    if fn == "flip":
        return x.flip(p["dims"])
    if fn == "t":
        return x.t()
    if fn == "flatten":
        return x.flatten(p["a"], p["b"])
    raise AssertionError(fn)


def torch_attention(q, k, v, mask, causal, scale):
    """docs/ops.md's ScaledDotProductAttention composed from PyTorch ops (1.13 has no SDPA): a
    query that attends no key gives zeros."""
    import torch
    if scale is None:  # 1/sqrt(D); with D = 0 every score is 0 whatever the scale
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    s = q.matmul(k.transpose(-1, -2)) * scale
    keep = torch.ones(s.shape, dtype=torch.bool)
    if mask is not None:
        keep = keep & mask
    if causal:
        keep = keep & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    s = s.masked_fill(~keep, -math.inf)
    any_key = keep.any(-1, keepdim=True)
    pr = torch.where(any_key, s.softmax(-1), torch.zeros((), dtype=s.dtype))
    return pr.matmul(v)


# =============================== running a program everywhere =================================


def run_program(side, ops, device, weights=None):
    """Runs the program; returns (values, leaves, error). values[i] is op i's value or None."""
    vals, leaves = [], []
    try:
        for op in ops:
            if op["k"] == "input":
                v, leaf = make_input(side, op["p"], device)
                if leaf is not None:
                    leaves.append((len(vals), leaf))
                vals.append(v)
            else:
                vals.append(apply(side, op, [vals[j] for j in op["a"]]))
    except Exception as e:  # noqa: BLE001 - a refusal, compared with the oracle's
        vals.append(None)
        return vals, leaves, e
    return vals, leaves, None


def loss_of(side, vals, weights, device):
    """sum_i (v_i * w_i).sum() over the float values that take a gradient."""
    total = None
    for j, w in weights.items():
        if side == "torch":
            import torch
            t = torch.from_numpy(w.copy())
        else:
            import tensorwire as tw
            t = tw.from_numpy(w.copy(), device)
        term = (vals[j] * t).sum()
        total = term if total is None else total + term
    return total


def to_np(side, t):
    import numpy as np
    if t is None:
        return None
    if side == "torch":
        return t.detach().numpy()
    return np.asarray(t.numpy())


def same_bits(a, b):
    """Equal values, NaN equal to NaN, and +0 apart from -0."""
    import numpy as np
    if not np.array_equal(a, b, equal_nan=True):
        return False
    num = ~np.isnan(b)
    return bool(np.array_equal(np.signbit(a)[num], np.signbit(b)[num]))


def compare(a, b, rtol, exact, grad=False):
    """None when a (tensorwire) matches b (PyTorch), else (kind suffix, detail). For a gradient
    (grad), NaN and +-inf count as one: where one input is infinite, two correct arrangements of
    a rule's formula may give inf - inf = NaN in one and inf in the other."""
    import numpy as np
    if a.shape != b.shape:
        return "shape", f"shape {a.shape} vs torch {b.shape}"
    if a.dtype != b.dtype:
        return "dtype", f"dtype {a.dtype} vs torch {b.dtype}"
    if a.size == 0:
        return None
    if exact or a.dtype.kind in "biu":
        bad = a != b
        if a.dtype.kind == "f":
            bad &= ~(np.isnan(a) & np.isnan(b))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            return "value", f"at {at}: {a[at]!r} vs torch {b[at]!r}"
        return None
    checks = (("non-finite", lambda t: ~np.isfinite(t)),) if grad else (
        ("nan", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf))
    for name, f in checks:
        if (f(a) != f(b)).any():
            at = tuple(int(i) for i in np.argwhere(f(a) != f(b))[0])
            return "nonfinite", f"{name} positions differ, at {at}: {a[at]!r} vs torch {b[at]!r}"
    fin = np.isfinite(b)
    scale = max(1.0, float(np.abs(b[fin]).max())) if fin.any() else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        bad = fin & (diff > rtol * scale + rtol * np.abs(b))
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        return "value", f"at {at}: {a[at]!r} vs torch {b[at]!r} (scale {scale:.3g})"
    return None


class Runner:
    """The worker: the devices, and one program at a time."""

    def __init__(self):
        import tensorwire as tw
        self.tw = tw
        backends = ["cpu"] + (["torch"] if tw.Device.torch_available() else [])
        self.server = tw.serve(listen=["tcp://127.0.0.1:0"], devices=len(backends),
                               backend=",".join(backends))
        self.devices = [("cpu", tw.Device.cpu(), None)]
        if "torch" in backends:
            self.devices.append(("torch", tw.Device.torch(), None))
        for i, b in enumerate(backends):
            d = tw.Device.remote(self.server.url, i)
            d.connect()
            # A remote device must give its backend's local bytes exactly.
            self.devices.append(("remote" if b == "cpu" else "remote_" + b, d, b))

    def run(self, seed):
        """{"seed", "status": executed|refused|..., "mismatches": [(kind, device, detail)],
        "known": {key: n}}"""
        import numpy as np
        import torch
        torch.manual_seed(seed)
        gen = Gen(seed)
        ops, refused = gen.program()
        res = dict(seed=seed, status="refused" if refused else "executed", mismatches=[],
                   inconclusive=False,
                   known=collections.Counter(), ops=len(ops))
        # Oracle, forward (again, from scratch, as the devices do) and backward.
        tvals, tleaves, terr = run_program("torch", ops, None)
        assert (terr is None) == (refused is None), (seed, terr, refused)
        wrng = np.random.default_rng(seed ^ 0x5EED)
        weights = {}
        if terr is None:
            for j, v in enumerate(tvals):
                if v is not None and v.requires_grad:
                    weights[j] = wrng.standard_normal(tuple(v.shape)).astype(np.float32)
            if weights:
                loss_of("torch", tvals, weights, None).backward()
        tgrads = {j: to_np("torch", leaf.grad) if leaf.grad is not None else
                  np.zeros(tuple(leaf.shape), np.float32) for j, leaf in tleaves}
        tnp = [to_np("torch", v) for v in tvals]
        local = {}
        for name, dev, same_as in self.devices:
            found, partial, complete = self.check_device(ops, dev, tnp, terr, weights, tgrads)
            outs = partial if complete else None
            if same_as is not None and same_as in local and outs is not None:
                ref = local[same_as]
                for j, (a, b) in enumerate(zip(outs, ref)):
                    if (a is None) != (b is None) or (
                            a is not None and not (a.shape == b.shape and a.dtype == b.dtype and
                                                   a.tobytes() == b.tobytes())):
                        found.append(("device_bytes", f"value {j} differs from {same_as}'s"))
                        break
            local[name] = outs
            for kind, detail in found:
                if kind == "drift":
                    res["inconclusive"] = True
                    continue
                key = self.known(kind, ops, tvals, gen, partial)
                if key:
                    res["known"][key] += 1
                else:
                    res["mismatches"].append((kind, name, detail))
        res["known"] = dict(res["known"])
        return res

    def known(self, kind, ops, tvals, gen, outs):
        """The KNOWN_BUGS or DOCUMENTED entry that explains a mismatch, or None. A predicate sees
        an op's inputs as the device computed them where it has them, else PyTorch's."""
        import torch
        base = kind.split(":")[0]
        for key, b in list(DOCUMENTED.items()) + list(KNOWN_BUGS.items()):
            if b["kinds"] != "*" and base not in b["kinds"]:
                continue
            for op in ops:
                if op["k"] == "input":
                    continue
                for src in ("device", "torch"):
                    if src == "device" and not all(j < len(outs) for j in op["a"]):
                        continue
                    ins = [torch.from_numpy(outs[j].copy()) for j in op["a"]] if src == "device" \
                        else [tvals[j] if j < len(tvals) and tvals[j] is not None else gen.vals[j]
                              for j in op["a"]]
                    if b["pred"](op, ins):
                        return key
        return None

    def check_device(self, ops, dev, tnp, terr, weights, tgrads):
        """Mismatches [(kind, detail)] of one device, then its values (for device_bytes)."""
        import numpy as np
        found = []
        vals, leaves, err = run_program("tw", ops, dev)
        err_at = len(vals) - 1 if err is not None else None  # the op that raised
        outs = []
        grads = None
        try:
            for v in vals:
                if v is None:
                    break
                outs.append(to_np("tw", v))
            if err is None and terr is None:
                if weights:
                    loss_of("tw", vals, weights, dev).backward()
                grads = {j: to_np("tw", leaf.grad) if leaf.grad is not None else
                         np.zeros(tuple(leaf.shape), np.float32) for j, leaf in leaves}
        except Exception as e:  # noqa: BLE001 - an error seen at a read (remote) or in backward
            if err is None:
                err, err_at = e, len(outs)
        terr_at = len(tnp) - 1 if terr is not None else None
        if err is not None and (terr is None or err_at < terr_at):
            label = op_label(ops[err_at]) if err_at < len(ops) else "backward"
            found.append((f"tw_refuses:{label}",
                          f"op {err_at}: {type(err).__name__}: {str(err).splitlines()[0][:300]}"))
        elif terr is not None and err is None:
            found.append((f"tw_accepts:{op_label(ops[-1])}",
                          f"torch refused op {terr_at}: {type(terr).__name__}: "
                          f"{str(terr).splitlines()[0][:200]}"))
        # Each op's value against PyTorch's op applied to this device's own inputs (so rounding
        # differences upstream never reach a comparison, a cast or a pole such as 1/x at +-0),
        # and against the oracle's run: a discrete or non-finite result that differs there
        # although every op agreed leaves the gradients without a verdict (inconclusive).
        diverged = None
        for j in range(min(len(outs), len(tnp))):
            if tnp[j] is None:
                continue
            ref = tnp[j] if ops[j]["k"] == "input" else local_reference(ops[j], outs)
            if isinstance(ref, Exception):
                found.append((f"tw_accepts:{op_label(ops[j])}",
                              f"value {j}: PyTorch refuses this device's inputs: {ref}"))
                break
            bad = compare(outs[j], ref, FLOAT_RTOL * OP_TOLERANCE.get(ops[j]["k"], 1),
                          exact=False, grad=ops[j]["k"] in COMPOUND)
            if bad:
                found.append((f"{bad[0]}:{op_label(ops[j])}",
                              f"value {j} ({op_label(ops[j])}): {bad[1]}"))
                break  # later values depend on this one
            end_to_end = compare(outs[j], tnp[j], FLOAT_RTOL, exact=False)
            if end_to_end and diverged is None:
                diverged = f"value {j} ({op_label(ops[j])}): {end_to_end[1]}"
        if diverged and not found:
            found.append(("drift", diverged))
            grads = None
        if grads is not None and not found:
            for j, g in grads.items():
                bad = compare(g, tgrads[j], GRAD_RTOL, exact=False, grad=True)
                if bad:
                    kind = "grad_nonfinite" if bad[0] == "nonfinite" else "grad"
                    found.append((kind, f"gradient of input {j}: {bad[1]}"))
                    break
        return found, outs, err is None


def local_reference(op, outs):
    """PyTorch's value of op on a device's values of its inputs (or the exception it raised)."""
    import torch
    try:
        with torch.no_grad():
            return to_np("torch", apply("torch", op, [torch.from_numpy(outs[a].copy())
                                                      for a in op["a"]]))
    except Exception as e:  # noqa: BLE001 - reported as a mismatch
        return e


def op_label(op):
    p = op["p"]
    if op["k"] in ("unary", "binary", "logical", "scalar", "reduce", "view"):
        return f"{op['k']}.{p['fn']}"
    if op["k"] == "cast":
        return f"cast.{p['to']}"
    return op["k"]


# ================================== reproduction source =======================================


class Sym:
    """A tensorwire expression as text: apply("sym", ...) on these writes an op as code."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **kw: Sym(f"{self.text}.{name}({sym_args(a, kw)})")

    def __getitem__(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        return Sym(f"{self.text}[{', '.join(sym_index(i) for i in parts)}]")

    def __add__(self, c):
        return Sym(f"{self.text} + {c!r}")

    def __sub__(self, c):
        return Sym(f"{self.text} - {c!r}")

    def __rsub__(self, c):
        return Sym(f"{c!r} - {self.text}")

    def __mul__(self, c):
        return Sym(f"{self.text} * {c!r}")

    def __truediv__(self, c):
        return Sym(f"{self.text} / {c!r}")

    def __pow__(self, c):
        return Sym(f"{self.text} ** {c!r}")


class SymModule:
    """The module `tw` for Sym expressions."""

    def __getattr__(self, name):
        return lambda *a, **kw: Sym(f"tw.{name}({sym_args(a, kw)})")


def sym_args(a, kw):
    return ", ".join([repr(x) for x in a] + [f"{k}={v!r}" for k, v in kw.items()])


def sym_index(i):
    if not isinstance(i, slice):
        return repr(i)
    return ":".join("" if x is None else str(x) for x in (i.start, i.stop, i.step)).rstrip(":") \
        or ":"


def source(ops):
    """The program as tensorwire Python code (dev: the device)."""
    import numpy as np
    lines = ["import numpy as np, tensorwire as tw", "from numpy import nan, inf",
             "dev = tw.Device.cpu()"]
    for j, op in enumerate(ops):
        p = op["p"]
        if op["k"] == "input":
            dt = {"f32": "np.float32", "i64": "np.int64", "bool": "np.bool_"}[p["dtype"]]
            data = np.asarray(p["data"])
            arr = f"np.array({data.tolist()!r}, dtype={dt}).reshape({data.shape})"
            lines.append(f"x{j} = tw.from_numpy({arr}, dev)" +
                         (".requires_grad_()" if p["grad"] else ""))
            view = {"contig": "", "transposed": ".transpose(-1, -2)",
                    "strided": f"[{', '.join(['::2'] * len(p['shape']))}]" if p["shape"] else "",
                    "expanded": f".expand({tuple(p['shape'])})"}[p["layout"]]
            lines.append(f"v{j} = x{j}{view}")
            continue
        e = apply("sym", op, [Sym(f"v{i}") for i in op["a"]])
        lines.append(f"v{j} = {e}")
    lines.append("# backward: the sum over every float value v_j that takes a gradient of "
                 "(v_j * w_j).sum(), w_j drawn from numpy's default_rng(seed ^ 0x5EED)")
    return "\n".join(lines)


# ===================================== worker and driver ======================================


def worker(first, count, deadline):
    runner = Runner()
    s = first
    while (count is None or s < first + count) and (deadline is None or time.time() < deadline):
        print(json.dumps(dict(begin=s)), flush=True)
        r = runner.run(s)
        print(json.dumps(r), flush=True)
        s += 1


def drive(args, extra_env=None):
    """Runs workers until the seeds or the time are spent; returns the totals."""
    env = dict(os.environ, **(extra_env or {}))
    first = args.seed if args.seed is not None else int(time.time()) % 1000000000
    count = args.count
    deadline = time.time() + args.minutes * 60 if args.minutes else None
    tot = dict(programs=0, executed=0, refused=0, inconclusive=0, crashes=0, first_seed=first,
               mismatches=collections.Counter(), known=collections.Counter(), failing=[])
    s = first
    t0 = time.time()
    while (count is None or s < first + count) and (deadline is None or time.time() < deadline):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(s)]
        if count is not None:
            cmd += ["--count", str(first + count - s)]
        if deadline is not None:
            cmd += ["--deadline", str(deadline)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
        current = None
        for line in p.stdout:
            if not line.startswith("{"):
                print(line, end="")
                continue
            r = json.loads(line)
            if "begin" in r:
                current = r["begin"]
                continue
            current = None
            s = r["seed"] + 1
            tot["programs"] += 1
            tot[r["status"]] += 1
            tot["inconclusive"] += r["inconclusive"]
            for k, n in r["known"].items():
                tot["known"][k] += n
            if r["mismatches"]:
                tot["failing"].append(r["seed"])
            for kind, dev, detail in r["mismatches"]:
                tot["mismatches"][kind] += 1
                print(f"MISMATCH seed={r['seed']} device={dev} kind={kind}: {detail}", flush=True)
        rc = p.wait()
        if current is not None:
            tot["programs"] += 1
            tot["crashes"] += 1
            tot["mismatches"]["crash"] += 1
            tot["failing"].append(current)
            print(f"MISMATCH seed={current} device=? kind=crash: the worker ended with "
                  f"status {rc} while running this program", flush=True)
            s = current + 1
        elif rc != 0:
            raise SystemExit(f"diff_fuzz: the worker failed (status {rc}) between programs")
    tot["seconds"] = time.time() - t0
    return tot


def report(tot):
    n = tot["programs"]
    share = 100.0 * tot["executed"] / n if n else 0.0
    print(f"diff_fuzz: {n} programs from seed {tot['first_seed']} in {tot['seconds']:.0f} s: "
          f"{tot['executed']} executed to the end ({share:.1f}%), {tot['refused']} refused by "
          f"both sides (provoked errors), {tot['crashes']} crashes; gradients not compared in "
          f"{tot['inconclusive']} (every op agreed on its inputs, but a comparison, cast or pole "
          f"of floats within the tolerance came out differently end to end)")
    for title, table in (("known bugs (KNOWN_BUGS)", KNOWN_BUGS),
                         ("documented differences (DOCUMENTED)", DOCUMENTED)):
        rows = [f"{k} {v}" for k, v in sorted(tot["known"].items()) if k in table]
        if rows:
            print(f"  {title}, mismatches attributed: " + ", ".join(rows))
    if tot["mismatches"]:
        print("  NEW mismatches by kind: " +
              ", ".join(f"{k} {v}" for k, v in tot["mismatches"].most_common()))
        seeds = sorted(set(tot["failing"]))
        print(f"  failing seeds ({len(seeds)}): {' '.join(map(str, seeds[:50]))}")
        print(f"  reproduce one: {sys.argv[0]} --seed SEED --count 1 --show")
    else:
        print("  no new mismatches")


def check_planted(args):
    """The planted bug (TW_TEST_PLANT_GRAD_BUG=sub_broadcast: Sub's gradient for a broadcast
    right operand loses its sign, src/api/grad_rules.cc) must be reported as a gradient
    mismatch; the same seeds without it must report none."""
    args.count = args.count or 150
    args.seed = 1 if args.seed is None else args.seed
    tot = drive(args, {"TW_TEST_PLANT_GRAD_BUG": "sub_broadcast"})
    report(tot)
    grad = tot["mismatches"]["grad"]
    with_sub = [s for s in sorted(set(tot["failing"]))
                if any(op_label(op) == "binary.sub" for op in Gen(s).program()[0])]
    if grad == 0 or not with_sub:
        raise SystemExit("diff_fuzz --check-planted: the planted wrong gradient of Sub was not "
                         f"found in {tot['programs']} programs from seed {args.seed}")
    print(f"diff_fuzz --check-planted: the planted bug was reported ({grad} grad mismatches; "
          f"programs with a sub: seeds {' '.join(map(str, with_sub))})")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="first program's seed (default: from the clock)")
    ap.add_argument("--count", type=int, help="programs to run")
    ap.add_argument("--minutes", type=float, help="run for this long")
    ap.add_argument("--show", action="store_true", help="print the programs as code and run them")
    ap.add_argument("--check-planted", action="store_true")
    ap.add_argument("--draw-avoided", action="store_true",
                    help="draw the ops of KNOWN_BUGS entries marked avoid (crashes) too")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.draw_avoided:
        os.environ["TW_DIFF_FUZZ_DRAW_AVOIDED"] = "1"
        global DRAW_AVOIDED
        DRAW_AVOIDED = True
    if args.worker:
        return worker(args.seed, args.count, args.deadline)
    if args.show:
        for s in range(args.seed, args.seed + (args.count or 1)):
            ops, refused = Gen(s).program()
            print(f"# seed {s}" + (f" (PyTorch refuses the last op: {refused})" if refused else ""))
            print(source(ops))
            r = Runner().run(s)
            for kind, dev, detail in r["mismatches"]:
                print(f"# MISMATCH device={dev} kind={kind}: {detail}")
            for key, n in r["known"].items():
                print(f"# known bug {key}: {n} mismatches")
        return 0
    if args.check_planted:
        return check_planted(args)
    if args.count is None and args.minutes is None:
        args.count = 100
    tot = drive(args)
    report(tot)
    return 1 if tot["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
