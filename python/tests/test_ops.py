"""Every Tensor op against numpy, on the CPU device and on a remote device: exact for integer and
bool results, a tolerance for floats."""
import math

import numpy as np
import pytest

import tensorwire as tw

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4)).astype(np.float32)
B = rng.standard_normal((3, 4)).astype(np.float32)
POS = (rng.random((3, 4)) + 0.5).astype(np.float32)
IA = rng.integers(-20, 20, (3, 4)).astype(np.int64)
IB = rng.integers(1, 9, (3, 4)).astype(np.int64)
MASK = rng.random((3, 4)) > 0.5


def check(t, expected, rtol=1e-5, atol=1e-6):
    got = t.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def erf(x):
    return np.vectorize(math.erf)(x).astype(x.dtype)


UNARY = {
    "neg": (A, lambda x: -x), "abs": (A, np.abs), "exp": (A, np.exp), "log": (POS, np.log),
    "log1p": (POS, np.log1p), "sqrt": (POS, np.sqrt), "rsqrt": (POS, lambda x: 1 / np.sqrt(x)),
    "sin": (A, np.sin), "cos": (A, np.cos), "tanh": (A, np.tanh),
    "sigmoid": (A, lambda x: 1 / (1 + np.exp(-x))), "relu": (A, lambda x: np.maximum(x, 0)),
    "gelu": (A, lambda x: x * 0.5 * (1 + erf(x / np.sqrt(2)))), "erf": (A, erf),
    "reciprocal": (POS, lambda x: 1 / x), "floor": (A * 3, np.floor), "ceil": (A * 3, np.ceil),
    "round": (A * 3, np.round), "sign": (A, np.sign), "square": (A, np.square),
    "logical_not": (MASK, np.logical_not),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(device, name):
    x, ref = UNARY[name]
    check(getattr(tw.tensor(x, device=device), name)(), ref(x))


def test_unary_integers(device):
    check(tw.tensor(IA, device=device).neg(), -IA)
    check(tw.tensor(IA, device=device).abs(), np.abs(IA))
    check(tw.tensor(IA, device=device).sign(), np.sign(IA))
    check(tw.tensor(IA, device=device).exp(), np.exp(IA.astype(np.float32)), rtol=1e-4)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "remainder": np.mod,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float(device, name):
    a, b = tw.tensor(A, device=device), tw.tensor(POS, device=device)
    check(getattr(a, name)(b), BINARY[name](A, POS))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_int(device, name):
    a, b = tw.tensor(IA, device=device), tw.tensor(IB, device=device)
    expected = BINARY[name](IA, IB)
    if name == "div":
        expected = expected.astype(np.float32)
    check(getattr(a, name)(b), expected)


def test_pow_and_broadcast(device):
    check(tw.tensor(POS, device=device).pow(tw.tensor(A, device=device)), POS ** A, rtol=1e-4)
    check(tw.tensor(IB, device=device).pow(2), IB ** 2)
    row = rng.standard_normal((1, 4)).astype(np.float32)
    check(tw.tensor(A, device=device) + tw.tensor(row, device=device), A + row)


def test_logical(device):
    m, n = tw.tensor(MASK, device=device), tw.tensor(~MASK[::-1].copy(), device=device)
    other = ~MASK[::-1]
    check(m.logical_and(n), MASK & other)
    check(m.logical_or(n), MASK | other)
    check(m.logical_xor(n), MASK ^ other)
    check(m & n, MASK & other)
    check(m | n, MASK | other)
    check(~m, ~MASK)


def test_operators(device):
    a, b = tw.tensor(A, device=device), tw.tensor(POS, device=device)
    check(a + b, A + POS)
    check(a - b, A - POS)
    check(a * b, A * POS)
    check(a / b, A / POS)
    check(-a, -A)
    check(a + 2, A + 2)
    check(2 - a, 2 - A)
    check(a * 0.5, A * 0.5)
    check(1 / b, 1 / POS)
    check(a ** 2, A ** 2)
    check(b % 0.3, np.mod(POS, np.float32(0.3)), atol=1e-5)
    check(a < b, A < POS)
    check(a <= 0.1, A <= 0.1)
    check(a > b, A > POS)
    check(a >= 0, A >= 0)
    check(a == a, np.ones_like(MASK))
    check(a != b, A != POS)
    check(a @ b.T, A @ POS.T, rtol=1e-4)
    check(abs(a), np.abs(A))
    i = tw.tensor(IA, device=device)
    check(i + 3, IA + 3)
    check(i * 2, IA * 2)
    check(i == 3, IA == 3)


def test_scalar_dtypes(device):
    i = tw.tensor(IA, device=device)
    assert (i + 1).dtype == tw.int64
    assert (i + 1.5).dtype == tw.float32
    assert (i / 2).dtype == tw.float32
    assert (i + np.int64(2)).dtype == tw.int64
    check(i + np.int64(2), IA + 2)


def test_clamp_masked_fill_where(device):
    a = tw.tensor(A, device=device)
    check(a.clamp(-0.5, 0.5), np.clip(A, -0.5, 0.5))
    check(a.clamp(min=0), np.maximum(A, 0))
    check(a.clamp(max=0), np.minimum(A, 0))
    m = tw.tensor(MASK, device=device)
    check(a.masked_fill(m, 7.0), np.where(MASK, 7.0, A).astype(np.float32))
    check(tw.where(m, a, tw.tensor(B, device=device)), np.where(MASK, A, B))


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min"])
def test_reductions(device, name):
    a = tw.tensor(A, device=device)
    ref = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min}[name]

    def over(*args, **kwargs):  # max and min over a dim give (values, indices), as in PyTorch
        r = getattr(a, name)(*args, **kwargs)
        return r.values if name in ("max", "min") else r
    check(getattr(a, name)(), ref(A), rtol=1e-5)
    check(over(1), ref(A, axis=1), rtol=1e-5)
    check(over(0, keepdim=True), ref(A, axis=0, keepdims=True), rtol=1e-5)
    if name in ("max", "min"):
        check(getattr(a, name)(1).indices, getattr(np, "arg" + name)(A, axis=1))
    if name in ("sum", "mean"):
        check(getattr(a, name)([0, 1]), ref(A, axis=(0, 1)), rtol=1e-5)


def test_integer_reductions(device):
    i = tw.tensor(IA, device=device)
    check(i.sum(), IA.sum())
    check(i.sum(0), IA.sum(0))
    check(i.max(1).values, IA.max(1))
    check(i.mean(), np.float32(IA.mean()))
    check(tw.tensor(MASK, device=device).sum(), MASK.sum())


def test_arg_and_cumsum(device):
    a = tw.tensor(A, device=device)
    check(a.argmax(), np.argmax(A))
    check(a.argmax(1), np.argmax(A, 1))
    check(a.argmin(0), np.argmin(A, 0))
    check(a.cumsum(1), np.cumsum(A, 1), rtol=1e-5)
    check(tw.tensor(IA, device=device).cumsum(0), np.cumsum(IA, 0))


def test_matmul(device):
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    check(tw.tensor(x, device=device).matmul(tw.tensor(w, device=device)), x @ w, rtol=1e-4)
    check(tw.matmul(tw.tensor(IA, device=device), tw.tensor(IB.T.copy(), device=device)),
          IA @ IB.T)
    v = rng.standard_normal(4).astype(np.float32)
    check(tw.tensor(A, device=device) @ tw.tensor(v, device=device), A @ v, rtol=1e-4)


def test_movement(device):
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    t = tw.tensor(x, device=device)
    check(t.reshape([4, 6]), x.reshape(4, 6))
    check(t.view([-1]), x.reshape(-1))
    check(t.flatten(), x.reshape(-1))
    check(t.flatten(1), x.reshape(2, 12))
    check(t.permute([2, 0, 1]), x.transpose(2, 0, 1))
    check(t.transpose(0, 2), x.swapaxes(0, 2))
    check(tw.tensor(IA, device=device).t(), IA.T)
    check(tw.tensor(IA, device=device).T, IA.T)
    check(t[:, :1].expand([2, 3, 4]), np.broadcast_to(x[:, :1], (2, 3, 4)))
    check(t[:, :1].squeeze(), x[:, 0])
    check(t[:, :1].squeeze(1), x[:, 0])
    check(t.unsqueeze(1), x[:, None])
    check(t.slice(2, 1, 4, 2), x[:, :, 1:4:2])
    check(t.slice(1, -2, 3), x[:, -2:3])
    check(t.narrow(2, 1, 2), x[:, :, 1:3])
    check(t.flip([0, 2]), x[::-1, :, ::-1])
    check(t.flip(1), x[:, ::-1])
    check(t.repeat([2, 1, 1]), np.tile(x, (2, 1, 1)))
    src = tw.zeros(2, 3, 1, dtype=tw.int64, device=device)
    expected = x.copy()
    expected[:, :, 1:2] = 0
    check(t.slice_assign(2, 1, 2, 1, src), expected)
    check(t.expand_as(t), x)


def test_indexing(device):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = tw.tensor(x, device=device)
    check(t[1], x[1])
    check(t[-1, 2], x[-1, 2])
    check(t[:, 1:, ::2], x[:, 1:, ::2])
    check(t[..., 1], x[..., 1])
    check(t[None, 0], x[None, 0])
    check(t[0, ..., None], x[0, ..., None])
    check(t[:, tw.tensor([2, 0], device=device)], x[:, [2, 0]])
    assert t[1, 2, 3].item() == x[1, 2, 3]
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]


def test_setitem(device):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = tw.tensor(x, device=device)
    t[0, 1] = 100.0
    x[0, 1] = 100.0
    check(t, x)
    t[:, 1:, ::2] = tw.tensor(np.full((2, 2, 2), -1, np.float32), device=device)
    x[:, 1:, ::2] = -1
    check(t, x)
    t[1] = tw.tensor(np.arange(4, dtype=np.float32), device=device)
    x[1] = np.arange(4)
    check(t, x)


def test_gather_scatter_index_select(device):
    idx = np.array([[0, 2, 1, 0], [1, 1, 0, 2]], dtype=np.int64)
    t = tw.tensor(A, device=device)
    i = tw.tensor(idx, device=device)
    check(t.gather(0, i), np.take_along_axis(A, idx, 0))
    src = np.ones((2, 4), np.float32)
    expected = A.copy()
    for r in range(2):
        for c in range(4):
            expected[idx[r, c], c] += src[r, c]
    check(t.scatter_add(0, i, tw.tensor(src, device=device)), expected)
    check(t.index_select(1, tw.tensor([3, 0], device=device)), A[:, [3, 0]])


def test_neural(device):
    t = tw.tensor(A, device=device)
    e = np.exp(A - A.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    check(t.softmax(1), sm, rtol=1e-5)
    check(t.log_softmax(1), np.log(sm), rtol=1e-5, atol=1e-5)
    check(tw.softmax(t, 0), np.exp(A) / np.exp(A).sum(0), rtol=1e-5)
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    ref = np.zeros((1, 2, 2, 2), np.float32)
    for o in range(2):
        for i in range(2):
            for j in range(2):
                ref[0, o, i, j] = (x[0, 0, i:i + 3, j:j + 3] * w[o, 0]).sum()
    check(tw.conv2d(tw.tensor(x, device=device), tw.tensor(w, device=device)), ref, rtol=1e-4,
          atol=1e-5)
    xt = tw.tensor(x, device=device)
    check(tw.max_pool2d(xt, [2, 2]), x.reshape(1, 1, 2, 2, 2, 2).max((3, 5)))
    check(tw.avg_pool2d(xt, [2, 2]), x.reshape(1, 1, 2, 2, 2, 2).mean((3, 5)), rtol=1e-5)
    check(tw.adaptive_avg_pool2d(xt, [1, 1]), x.mean((2, 3), keepdims=True), rtol=1e-5)
    mu, var = A.mean(1, keepdims=True), A.var(1, keepdims=True)
    check(tw.layer_norm(t, [4]), (A - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_free_functions(device):
    a, b = tw.tensor(A, device=device), tw.tensor(B, device=device)
    check(tw.cat([a, b], 1), np.concatenate([A, B], 1))
    check(tw.stack([a, b]), np.stack([A, B]))
    labels = np.array([0, 3, 1], np.int64)
    check(tw.one_hot(tw.tensor(labels, device=device), 4), np.eye(4, dtype=np.int64)[labels])
    table = rng.standard_normal((5, 2)).astype(np.float32)
    check(tw.embedding(tw.tensor(table, device=device), tw.tensor(labels, device=device)),
          table[labels])


def test_casts(device):
    t = tw.tensor(np.array([1.7, -1.7, 0.0], np.float32), device=device)
    check(t.to(tw.int32), np.array([1, -1, 0], np.int32))
    check(t.to(tw.bool_), np.array([True, True, False]))
    check(t.to(tw.float16).to(tw.float32), np.array([1.7, -1.7, 0], np.float16).astype(np.float32))
    check(t.long(), np.array([1, -1, 0]))
    assert t.double().dtype == tw.float64


def test_factories(device):
    check(tw.zeros(2, 3, device=device), np.zeros((2, 3), np.float32))
    check(tw.ones((2,), dtype=tw.int64, device=device), np.ones(2, np.int64))
    check(tw.full([2], 7, dtype="i32", device=device), np.full(2, 7, np.int32))
    check(tw.arange(5, device=device), np.arange(5))
    check(tw.arange(1, 2, 0.25, device=device), np.arange(1, 2, 0.25, dtype=np.float32))
    check(tw.eye(3, device=device), np.eye(3, dtype=np.float32))
    t = tw.tensor([[1, 2], [3, 4]], device=device)
    assert t.dtype == tw.int64 and t.shape == (2, 2)
    assert tw.tensor([1.5, 2.5], device=device).dtype == tw.float32
    check(tw.zeros_like(t), np.zeros((2, 2), np.int64))
    check(tw.ones_like(t), np.ones((2, 2), np.int64))
    check(tw.full_like(t, 3), np.full((2, 2), 3))


def test_random_same_on_every_device(device):
    tw.manual_seed(5)
    a = tw.randn(3, 4, device=device).numpy()
    b = tw.rand(100, device=device).numpy()
    tw.manual_seed(5)
    np.testing.assert_array_equal(a, tw.randn(3, 4).numpy())
    np.testing.assert_array_equal(b, tw.rand(100).numpy())
    assert 0 <= b.min() and b.max() < 1
    u = tw.uniform([1000], 2, 3, device=device).numpy()
    assert 2 <= u.min() and u.max() < 3
    n = tw.normal([4000], 10, 0.5, device=device).numpy()
    assert abs(n.mean() - 10) < 0.1
    p = tw.bernoulli(tw.full([1000], 0.5, device=device)).numpy()
    assert 300 < p.sum() < 700


def test_metadata_and_values(device):
    t = tw.tensor(IA, device=device)
    assert t.shape == (3, 4) and t.size() == (3, 4) and t.size(1) == 4
    assert t.dim() == 2 and t.ndim == 2 and t.numel() == 12 and len(t) == 3
    assert t.dtype == tw.int64 and t.device == device
    assert t.tolist() == IA.tolist()
    assert t.to_bytes() == IA.tobytes()
    assert isinstance(t[0, 0].item(), int)
    assert isinstance(tw.tensor(A, device=device)[0, 0].item(), float)
    assert tw.tensor([True], device=device).item() is True
    assert float(tw.tensor([2.5], device=device)) == 2.5
    assert int(tw.tensor([3], device=device)) == 3
    np.testing.assert_array_equal(np.asarray(t), IA)
    assert "dtype=i64" in repr(t)
    moved = t.to(tw.Device.cpu())
    assert moved.device == tw.Device.cpu()
    np.testing.assert_array_equal(moved.numpy(), IA)


def test_torch_device_matches_numpy():
    if not tw.Device.torch_available():
        pytest.skip("this build has no torch backend")
    d = tw.Device.torch()
    assert d.kind == "torch"
    a, b = tw.tensor(A, device=d), tw.tensor(POS, device=d)
    check((a @ b.T).relu(), np.maximum(A @ POS.T, 0), rtol=1e-4)
    check(a.softmax(1).sum(1), np.ones(3, np.float32), rtol=1e-5)
    check(tw.tensor(IA, device=d) % tw.tensor(IB, device=d), np.mod(IA, IB))
    check(a.to(tw.Device.cpu()), A)
