"""tw.nn.RNN, LSTM and GRU against torch.nn's (Debian's python3-torch): the same state_dict gives
the same outputs, final states and input gradients, on cpu and remote; and torch.onnx.export's
recurrent ops (ONNX LSTM, GRU, RNN) load and give torch's outputs."""
import warnings

import numpy as np
import pytest

import tensorwire as tw

torch = pytest.importorskip("torch")

CASES = [
    ("LSTM", dict(num_layers=2, bidirectional=True)),
    ("GRU", dict(batch_first=True)),
    ("GRU", dict(num_layers=2, bidirectional=True, bias=False)),
    ("RNN", dict(nonlinearity="relu", bidirectional=True)),
    ("RNN", dict()),
]


def _pair(kind, opts, seed=0):
    torch.manual_seed(seed)
    ref = getattr(torch.nn, kind)(4, 5, **opts).double()
    mod = getattr(tw.nn, kind)(4, 5, dtype=tw.float64, **opts)
    state = {k: tw.from_numpy(v.detach().numpy().copy()) for k, v in ref.state_dict().items()}
    mod.load_state_dict(state)
    return ref, mod


@pytest.mark.parametrize("kind,opts", CASES)
def test_matches_torch(kind, opts, device):
    ref, mod = _pair(kind, opts)
    mod.to(device)
    rng = np.random.default_rng(1)
    batch_first = opts.get("batch_first", False)
    dirs = 2 if opts.get("bidirectional") else 1
    layers = opts.get("num_layers", 1)
    x = rng.standard_normal((2, 3, 4) if batch_first else (3, 2, 4))
    h0 = rng.standard_normal((layers * dirs, 2, 5))
    c0 = rng.standard_normal((layers * dirs, 2, 5))
    tx = torch.tensor(x, requires_grad=True)
    hx_t = (torch.tensor(h0), torch.tensor(c0)) if kind == "LSTM" else torch.tensor(h0)
    out_t, state_t = ref(tx, hx_t)
    r = rng.standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(r)).sum().backward()

    wx = tw.from_numpy(x).to(device).requires_grad_()
    hx = ((tw.from_numpy(h0).to(device), tw.from_numpy(c0).to(device)) if kind == "LSTM"
          else tw.from_numpy(h0).to(device))
    out, state = mod(wx, hx)
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-9, atol=1e-12)
    if kind == "LSTM":
        np.testing.assert_allclose(state[0].numpy(), state_t[0].detach().numpy(), atol=1e-12)
        np.testing.assert_allclose(state[1].numpy(), state_t[1].detach().numpy(), atol=1e-12)
    else:
        np.testing.assert_allclose(state.numpy(), state_t.detach().numpy(), atol=1e-12)
    (out * tw.from_numpy(r).to(device)).sum().backward()
    np.testing.assert_allclose(wx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    w = dict(mod.named_parameters())["weight_hh_l0"]
    np.testing.assert_allclose(w.grad.numpy(), ref.weight_hh_l0.grad.numpy(), rtol=1e-9,
                               atol=1e-12)


def test_unbatched_and_default_state():
    ref, mod = _pair("LSTM", {})
    x = np.random.default_rng(2).standard_normal((6, 4))
    out_t, (h_t, c_t) = ref(torch.tensor(x))
    out, (h, c) = mod(tw.from_numpy(x))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), atol=1e-12)
    assert tuple(h.shape) == (1, 5) and tuple(c.shape) == (1, 5)
    assert "LSTM(4, 5)" in repr(mod)
    with pytest.raises(tw.Error, match="dropout"):
        tw.nn.GRU(4, 5, dropout=0.5)


@pytest.mark.parametrize("kind,opts", [CASES[0], CASES[1], CASES[3]])
def test_torch_onnx_export_loads(kind, opts, tmp_path):
    ref, _ = _pair(kind, opts)
    ref = ref.float()
    batch_first = opts.get("batch_first", False)
    x = torch.randn((2, 3, 4) if batch_first else (3, 2, 4))
    path = str(tmp_path / "rnn.onnx")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(ref, (x,), path, opset_version=14, input_names=["x"],
                          output_names=["y", "h"] if kind != "LSTM" else ["y", "h", "c"])
        want, _ = ref(x)
    m = tw.onnx.load(path)
    got = m.run(tw.Device.cpu(), [tw.from_numpy(x.numpy())])
    np.testing.assert_allclose(got[0].numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
