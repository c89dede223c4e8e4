"""int8 as a dtype, the quantization ops and tw.nn.quantize (docs/ops.md, "Quantization"), on the
CPU device and on a remote one, which must give the same bytes."""
import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn


def test_int8_numpy_round_trip(device):
    a = np.array([[-128, -1, 0], [1, 5, 127]], dtype=np.int8)
    t = tw.tensor(a, device=device)
    assert t.dtype == tw.int8 and tw.as_dtype("i8") == tw.int8
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.numpy().dtype == np.int8
    assert (t + t).numpy()[1, 2] == -2  # wraps
    assert t[0, 0].item() == -128


def test_quantize_dequantize_per_channel(device):
    x = tw.tensor(np.array([[0.5, -1.0, 2.0], [0.25, 3.0, -4.0]], dtype=np.float32), device=device)
    scale = tw.tensor(np.array([0.5, 0.25], dtype=np.float32), device=device)
    q = tw.quantize(x, scale, dtype=tw.int8, axis=0)
    np.testing.assert_array_equal(q.numpy(), np.array([[1, -2, 4], [1, 12, -16]], dtype=np.int8))
    np.testing.assert_array_equal(tw.dequantize(q, scale, axis=0).numpy(), x.numpy())


def test_blocks_and_linear(device):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    for fmt, tol in (("q8", 0.02), ("q4", 0.3)):
        packed = tw.pack_blocks(tw.tensor(w, device=device), fmt)
        assert packed.dtype == tw.uint8 and packed.shape == (8, 2 * (34 if fmt == "q8" else 18))
        deq = tw.unpack_blocks(packed, fmt).numpy()
        assert np.abs(deq - w).max() < tol * np.abs(w).max()
        y = tw.linear_blocks(tw.tensor(x, device=device), packed, fmt).numpy()
        np.testing.assert_allclose(y, x @ deq.T, rtol=1e-4, atol=1e-4)
    wq, ws = tw.quantize_weight_int8(tw.tensor(w, device=device))
    assert wq.dtype == tw.int8
    y8 = tw.linear_int8(tw.tensor(x, device=device), wq, ws).numpy()
    assert np.abs(y8 - x @ w.T).max() < 0.05 * np.abs(x @ w.T).max()


def test_nn_quantize_same_bytes_local_and_remote(remote):
    tw.manual_seed(4)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    before = model(tw.tensor(x)).numpy()
    assert nn.quantize(model, "q8") == 2
    assert model[0].quantized == "q8_0"
    assert model.state_dict()["0.weight"].dtype == tw.uint8
    local = model(tw.tensor(x)).numpy()
    assert np.abs(local - before).max() < 0.05 * np.abs(before).max()
    model.to(remote)
    np.testing.assert_array_equal(model(tw.tensor(x, device=remote)).numpy(), local)
    with pytest.raises(tw.Error, match="q3"):
        nn.quantize(model, "q3")
