"""Regression tests for bugs reported with Python snippets (issue 52 §2), each the report's
snippet on the CPU device and on a remote one, with the result numpy/PyTorch give."""
import math

import pytest

import tensorwire as tw


def test_mean_of_a_0d_tensor_over_dim_0_crashed_autograd(device):
    x = tw.tensor(1.0, device=device, requires_grad=True)
    m = x.mean(0)
    assert m.shape == () and m.item() == 1.0
    (m + x.sum(-1, True) + x.prod(0)).backward()
    assert x.grad.item() == 3.0


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "max", "min", "argmax", "argmin"])
def test_keepdim_without_a_dim_was_ignored(device, op):
    x = tw.zeros(2, 3, device=device)
    assert getattr(x, op)(None, True).shape == (1, 1)
    assert getattr(x, op)(keepdim=True).shape == (1, 1)
    assert getattr(x, op)().shape == ()


def test_prod_gradient_was_nan_at_a_zero(device):
    x = tw.tensor([0., 2., 3.], device=device, requires_grad=True)
    x.prod().backward()
    assert x.grad.tolist() == [6.0, 0.0, 0.0]
    y = tw.tensor([0., 2., 0.], device=device, requires_grad=True)
    y.prod().backward()
    assert y.grad.tolist() == [0.0, 0.0, 0.0]


def test_min_gradient_spread_a_nan_upstream_gradient(device):
    x = tw.tensor([1., 2., -3.], device=device, requires_grad=True)
    x.min().sqrt().backward()
    g = x.grad.tolist()
    assert g[:2] == [0.0, 0.0] and math.isnan(g[2])


def test_attention_turned_nan_scores_into_zeros(device):
    out = tw.scaled_dot_product_attention(
        tw.tensor([[1.]], device=device), tw.tensor([[float('nan')], [.5]], device=device),
        tw.tensor([[2.], [3.]], device=device))
    assert math.isnan(out.tolist()[0][0])


def test_negative_index_tensors_were_refused(device):
    x = tw.tensor([[1., 2.], [3., 4.], [5., 6.]], device=device)
    assert x[tw.tensor([-1], device=device)].tolist() == [[5.0, 6.0]]
    assert x[tw.tensor([-3, 2], device=device)].tolist() == [[1.0, 2.0], [5.0, 6.0]]
    with pytest.raises(tw.Error, match=r"index -4 out of range for dim 0 of size 3"):
        x[tw.tensor([-4], device=device)].tolist()


# Found by the differential fuzzer (tests/difffuzz): gradients that hid a NaN PyTorch gives.
def test_relu_gradient_was_zero_at_a_nan_input(device):
    x = tw.tensor([float("nan"), -1.0, 2.0], device=device, requires_grad=True)
    x.relu().sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 1.0]  # torch: threshold_backward passes g at NaN


def test_pow_gradient_dropped_a_nan_upstream_gradient(device):
    y = tw.tensor([2.0], device=device, requires_grad=True)
    (tw.zeros(1, device=device).pow(y) * float("nan")).sum().backward()
    assert math.isnan(y.grad.tolist()[0])  # torch: [nan]
    b = tw.tensor([3.0], device=device, requires_grad=True)
    (b.pow(tw.zeros(1, device=device)) * float("nan")).sum().backward()
    assert math.isnan(b.grad.tolist()[0])


def test_prod_gradient_of_a_0d_inf_was_nan(device):
    x = tw.tensor(float("inf"), device=device, requires_grad=True)
    x.prod().backward()
    assert x.grad.item() == 1.0  # torch: prod of a 0-d tensor is the identity


def test_attention_backward_spread_a_nan_to_keys_not_attended(device):
    q = tw.tensor([[1.], [2.]], device=device, requires_grad=True)
    k = tw.tensor([[1.], [2.]], device=device, requires_grad=True)
    v = tw.tensor([[-1.], [2.]], device=device)
    tw.scaled_dot_product_attention(q, k, v, causal=True).sqrt().sum().backward()
    g = k.grad.tolist()
    assert math.isnan(g[0][0])
    assert g[1][0] == pytest.approx(0.2458, abs=1e-4)  # torch's masked_fill composition
