"""tw.nn modules (C++ and Python subclasses), tw.optim, safetensors files and tw.serve."""
import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim


class TwoLayer(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.fc1 = nn.Linear(4, 8, device=device)
        self.scale = nn.Parameter(tw.ones(8, device=device))
        self.fc2 = nn.Linear(8, 3, device=device)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu() * self.scale)


def test_linear_matches_numpy(device):
    tw.manual_seed(0)
    lin = nn.Linear(4, 3, device=device)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    w, b = lin.weight.data.numpy(), lin.bias.data.numpy()
    np.testing.assert_allclose(lin(tw.tensor(x, device=device)).numpy(), x @ w.T + b, rtol=1e-5)
    assert abs(w).max() <= 0.5  # kaiming_uniform(a = sqrt(5)) bound 1 / sqrt(fan_in)


def test_python_module_tree(device):
    tw.manual_seed(1)
    m = TwoLayer(device)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert len(m.parameters()) == 5
    out = m(tw.randn(5, 4, device=device))
    assert out.shape == (5, 3) and out.device == device
    assert "fc1" in repr(m) and "Linear(in_features=4, out_features=8" in repr(m)
    m.eval()
    assert not m.training and not m.fc1.training
    m.train()
    assert m.fc1.training


def test_sequential_c_and_python_paths(device):
    tw.manual_seed(2)
    seq = nn.Sequential(nn.Linear(4, 5, device=device), nn.ReLU(), nn.Linear(5, 2, device=device))
    x = tw.randn(3, 4, device=device)
    fused = seq(x).numpy()
    manual = x
    for layer in seq:
        manual = layer(manual)
    np.testing.assert_allclose(fused, manual.numpy(), rtol=1e-6)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    mixed = nn.Sequential(TwoLayer(device), nn.ReLU())
    assert mixed(x).shape == (3, 3)


def test_layers(device):
    tw.manual_seed(3)
    x = tw.randn(2, 1, 8, 8, device=device)
    conv = nn.Conv2d(1, 4, 3, padding=1, device=device)
    assert conv(x).shape == (2, 4, 8, 8)
    assert nn.MaxPool2d(2)(x).shape == (2, 1, 4, 4)
    assert nn.AvgPool2d(2, stride=1)(x).shape == (2, 1, 7, 7)
    assert nn.Flatten()(x).shape == (2, 64)
    assert nn.GELU()(x).shape == x.shape
    ln = nn.LayerNorm(8, device=device)
    np.testing.assert_allclose(ln(x).mean(-1).numpy(), 0, atol=1e-5)
    emb = nn.Embedding(10, 3, device=device)
    assert emb(tw.tensor([[1, 2]], device=device)).shape == (1, 2, 3)
    drop = nn.Dropout(0.5)
    ones = tw.ones(1000, device=device)
    kept = (drop(ones) > 0).sum().item()
    assert 300 < kept < 700
    drop.eval()
    assert drop(ones).sum().item() == 1000


def test_losses(device):
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]], np.float32)
    target = np.array([0, 2], np.int64)
    e = np.exp(logits - logits.max(1, keepdims=True))
    ref = -np.log(e[np.arange(2), target] / e.sum(1)).mean()
    got = nn.CrossEntropyLoss()(tw.tensor(logits, device=device), tw.tensor(target, device=device))
    assert abs(got.item() - ref) < 1e-5
    a, b = np.ones((2, 2), np.float32), np.zeros((2, 2), np.float32)
    assert nn.MSELoss()(tw.tensor(a, device=device), tw.tensor(b, device=device)).item() == 1.0


def test_parameter_acts_as_its_value(device):
    p = nn.Parameter(tw.tensor([1.0, 2.0], device=device))
    assert p.requires_grad and p.shape == (2,)
    np.testing.assert_array_equal((p * 2).numpy(), [2, 4])
    np.testing.assert_array_equal(tw.matmul(p.reshape([1, 2]), p.reshape([2, 1])).numpy(), [[5]])
    np.testing.assert_array_equal((p + p).numpy(), [2, 4])


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1),
    lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: optim.Adam(ps, lr=0.1),
    lambda ps: optim.AdamW(ps, lr=0.1, weight_decay=0.01),
])
def test_optimizers_minimise(device, make):
    p = nn.Parameter(tw.tensor([3.0, -2.0], device=device))
    opt = make([p])
    first = None
    for _ in range(60):
        loss = (p * p).sum()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (p * p).sum().item() < 0.1 * first


def test_sgd_step_is_torchs_rule(device):
    p = nn.Parameter(tw.tensor([1.0, 2.0], device=device))
    opt = optim.SGD([p], lr=0.5, weight_decay=0.1)
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_allclose(p.data.numpy(), [1 - 0.5 * (2 + 0.1), 2 - 0.5 * (4 + 0.2)],
                               rtol=1e-6)
    assert opt.lr == 0.5
    opt.lr = 0.1
    assert opt.lr == 0.1


def test_module_to_device(remote):
    tw.manual_seed(4)
    m = TwoLayer()
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    local = m(tw.tensor(x)).numpy()
    m.to(remote)
    assert all(p.data.device == remote for p in m.parameters())
    np.testing.assert_array_equal(m(tw.tensor(x, device=remote)).numpy(), local)


def test_safetensors_round_trip(tmp_path, device):
    path = str(tmp_path / "t.safetensors")
    a = tw.arange(6, device=device).reshape([2, 3])
    b = tw.tensor([[0.5, 1.5]], device=device)
    tw.save_safetensors(path, {"a": a, "b": b}, metadata={"note": "hi"})
    tensors, meta = tw.read_safetensors(path)
    assert meta == {"note": "hi"}
    np.testing.assert_array_equal(tensors["a"].numpy(), a.numpy())
    np.testing.assert_array_equal(tensors["b"].numpy(), b.numpy())
    loaded = tw.load_safetensors(path, device)
    assert loaded["a"].device == device and loaded["a"].dtype == tw.int64


def test_safetensors_module(tmp_path, device):
    path = str(tmp_path / "m.safetensors")
    tw.manual_seed(5)
    m = TwoLayer(device)
    tw.save_safetensors(path, m)
    tw.manual_seed(6)
    other = TwoLayer(device)
    tw.load_safetensors_into(path, other)
    for (n1, p1), (n2, p2) in zip(m.named_parameters(), other.named_parameters()):
        assert n1 == n2
        np.testing.assert_array_equal(p1.data.numpy(), p2.data.numpy())
    with pytest.raises(tw.Error, match="missing keys"):
        other.load_state_dict({"scale": tw.ones(8)})


def test_safetensors_malformed(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"\x05\x00")
    with pytest.raises(tw.Error):
        tw.load_safetensors(str(path))


def test_serve_context_manager():
    with tw.serve(devices=2) as s:
        assert len(s.urls) == 1 and s.url.startswith("tcp://127.0.0.1:")
        assert [d.index for d in tw.remote_devices(s.url)] == [0, 1]
        d = tw.Device.remote(s.url, 1)
        assert (tw.ones(3, device=d) * 2).sum().item() == 6
        assert s.stats().sessions >= 1
        assert "max-sessions=" in s.limits_summary()
        c = tw.wire_counters(d)
        assert c.ops > 0 and c.round_trips > 0
        assert 0 <= c.spun_waits <= c.reading_waits
    with pytest.raises(tw.Error):
        tw.Device.remote(s.url).connect()  # stopped
    s.stop()  # idempotent


def test_serve_errors():
    with pytest.raises(tw.Error):
        tw.serve(listen=["tcp://256.0.0.1:0"])
