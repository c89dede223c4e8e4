"""Gradients from backward() against central finite differences, on cpu and remote."""
import numpy as np
import pytest

import tensorwire as tw

rng = np.random.default_rng(1)


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


CASES = {
    "mul_sum": lambda t, w: (t * t * w).sum(),
    "matmul_relu": lambda t, w: (t @ w.T).relu().sum(),
    "exp_mean": lambda t, w: (t.exp() * w).mean(),
    "tanh_div": lambda t, w: (t.tanh() / (w.abs() + 1)).sum(),
    "softmax": lambda t, w: (t.log_softmax(1) * w).sum(),
    "sigmoid_pow": lambda t, w: (t.sigmoid() ** 2 * w).sum(),
    "slice_cat": lambda t, w: (tw.cat([t[:, :2], t[:, 1:]], 1) * tw.cat([w, w[:, :1]], 1)).sum(),
    "reshape_permute": lambda t, w: (t.reshape([4, 3]).permute([1, 0]) * w.reshape([3, 4])).sum(),
    "max_reduce": lambda t, w: (t * w).max(1).values.sum(),
    "gelu_sqrt": lambda t, w: ((t.gelu() + 2).sqrt() * w).sum(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(device, name):
    f = CASES[name]
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((3, 4))
    t = tw.tensor(x, device=device, requires_grad=True)
    wt = tw.tensor(w, device=device)
    loss = f(t, wt)
    loss.backward()
    assert t.grad is not None and t.grad.device == device
    ref = numeric_grad(lambda v: f(tw.tensor(v), tw.tensor(w)).item(), x)
    np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_conv_and_cross_entropy_gradients(device):
    x = rng.standard_normal((2, 1, 5, 5))
    w = rng.standard_normal((3, 1, 3, 3))
    y = np.array([1, 2], np.int64)

    def f(wv, dev):
        out = tw.conv2d(tw.tensor(x, device=dev), wv, padding=[1, 1])
        return tw.nn.cross_entropy(tw.max_pool2d(out, [5, 5]).flatten(1), tw.tensor(y, device=dev))

    wt = tw.tensor(w, device=device, requires_grad=True)
    f(wt, device).backward()
    ref = numeric_grad(lambda v: f(tw.tensor(v), tw.Device.cpu()).item(), w)
    np.testing.assert_allclose(wt.grad.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_grad_state(device):
    t = tw.ones(3, device=device, requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad is None
    y = (t * 2).sum()
    assert y.requires_grad and not y.is_leaf
    y.backward()
    np.testing.assert_array_equal(t.grad.numpy(), [2, 2, 2])
    (t * 3).sum().backward()  # accumulates
    np.testing.assert_array_equal(t.grad.numpy(), [5, 5, 5])
    t.zero_grad()
    assert t.grad is None
    d = (t * 2).detach()
    assert not d.requires_grad and d.is_leaf
    z = tw.zeros(3, device=device)
    z.requires_grad_()
    assert z.requires_grad


def test_no_grad(device):
    t = tw.ones(2, device=device, requires_grad=True)
    with tw.no_grad():
        assert not tw.is_grad_enabled()
        y = t * 2
        with tw.enable_grad():
            assert tw.is_grad_enabled()
    assert tw.is_grad_enabled()
    assert not y.requires_grad

    @tw.no_grad()
    def f(x):
        return x * 3

    assert not f(t).requires_grad


def test_autocast_bf16(device):
    """matmul in bf16 inside tw.autocast: the product of the rounded operands, f32 gradients
    within bf16 rounding of f32's, the scope restored on exit (docs/lowp.md)."""
    a_np = rng.standard_normal((16, 40)).astype(np.float32)
    b_np = rng.standard_normal((40, 8)).astype(np.float32)
    a = tw.tensor(a_np, device=device, requires_grad=True)
    b = tw.tensor(b_np, device=device)
    assert tw.autocast_dtype() == tw.float32
    with tw.autocast(tw.bfloat16):
        assert tw.autocast_dtype() == tw.bfloat16
        y = a @ b
        with tw.autocast(tw.float32):
            assert tw.autocast_dtype() == tw.float32
    assert tw.autocast_dtype() == tw.float32
    assert y.dtype == tw.float32
    ar = a.detach().to(tw.bfloat16).to(tw.float32).numpy().astype(np.float64)
    br = b.to(tw.bfloat16).to(tw.float32).numpy().astype(np.float64)
    bound = 1.01 * 40 * 2.0 ** -24 * (np.abs(ar) @ np.abs(br))
    assert np.all(np.abs(y.numpy() - ar @ br) <= bound)
    assert not np.array_equal(y.numpy(), (a.detach() @ b).numpy())
    y.sum().backward()
    assert a.grad.dtype == tw.float32
    want = np.ones((16, 8)) @ b_np.T.astype(np.float64)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=0, atol=2.0 ** -7 * np.abs(want).max())
    with pytest.raises(tw.Error, match="autocast"):
        with tw.autocast(tw.float16):
            pass


def test_backward_with_gradient_and_multiple_roots(device):
    t = tw.tensor([1.0, 2.0], device=device, requires_grad=True)
    (t * t).backward(tw.tensor([1.0, 10.0], device=device))
    np.testing.assert_allclose(t.grad.numpy(), [2, 40])
    t.zero_grad()
    tw.backward([(t * 2).sum(), (t * 3).sum()])
    np.testing.assert_allclose(t.grad.numpy(), [5, 5])
