"""tw.graph: capture -> save -> load -> replay equals eager bit for bit on cpu and remote; a
training step cached by tw.graph.Step; reads inside a capture and wrong inputs fail cleanly."""
import numpy as np
import pytest

import tensorwire as tw
from tensorwire import nn, optim


def f(x, w):
    return ((x @ w).relu() * 2.0 - x.sum()).tanh()


def test_capture_save_load_replay_is_bit_identical(device, tmp_path):
    tw.manual_seed(5)
    x, w = tw.randn(4, 6, device=device), tw.randn(6, 3, device=device)
    eager = f(x, w).to_bytes()
    cap = tw.graph.Capture(tw.Device.cpu())
    xc = cap.input(tw.zeros(4, 6))
    wc = cap.input(tw.zeros(6, 3))
    assert xc.device == cap.device and cap.device.kind == "capture"
    y = f(xc, wc)
    trace = cap.finish([y])
    assert trace.num_ops >= 5
    assert trace.inputs == [((4, 6), tw.float32), ((6, 3), tw.float32)]
    assert trace.outputs == [((4, 3), tw.float32)]
    path = str(tmp_path / "f.twtrace")
    trace.save(path)
    loaded = tw.graph.Trace.load(path)
    assert loaded.to_bytes() == trace.to_bytes()
    assert "matmul" in str(loaded)
    out = loaded.replay(device, [x, w])
    assert len(out) == 1 and out[0].device == device
    assert out[0].to_bytes() == eager
    again = loaded.replay(device, [x, w])[0]  # the registered graph, run by id
    assert again.to_bytes() == eager
    assert loaded.runs_as_graph(device)


def test_reads_inside_a_capture_and_wrong_inputs_raise():
    cap = tw.graph.Capture(tw.Device.cpu())
    x = cap.input(tw.ones(3))
    y = x * 2
    with pytest.raises(tw.Error, match="captur"):
        y.item()
    with pytest.raises(tw.Error, match="captur"):
        y.numpy()
    trace = cap.finish([y])
    with pytest.raises(tw.Error, match="input 0 is f32\\[4\\], the trace takes f32\\[3\\]"):
        trace.replay(tw.Device.cpu(), [tw.ones(4)])
    with pytest.raises(tw.Error):
        tw.graph.Trace.from_bytes(trace.to_bytes()[:-3])
    assert cap.release(y).numpy().tolist() == [2.0, 2.0, 2.0]


def test_a_corrupt_trace_file_is_refused(tmp_path):
    path = tmp_path / "bad.twtrace"
    path.write_bytes(b"not a trace file at all")
    with pytest.raises(tw.Error):
        tw.graph.Trace.load(str(path))
    with pytest.raises(tw.Error):
        tw.graph.Trace.load(str(tmp_path / "missing.twtrace"))


def test_step_caches_a_training_step_bit_for_bit(device):
    def setup():
        tw.manual_seed(7)
        model = nn.Sequential(nn.Linear(8, 16, device=device), nn.ReLU(),
                              nn.Linear(16, 4, device=device))
        return model, optim.Adam(model.parameters(), lr=1e-2)

    x = tw.randn(32, 8, device=device)
    y = (tw.rand(32, device=device) * 4).floor().to(tw.int64)

    def train(model, opt):
        def one(xb, yb):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return [loss.detach()]
        return one

    m1, o1 = setup()
    eager = [train(m1, o1)(x, y)[0].item() for _ in range(6)]
    m2, o2 = setup()
    step = tw.graph.Step(train(m2, o2), optimizer=o2)
    cached = [step(x, y)[0].item() for _ in range(6)]
    assert cached == eager
    assert step.recordings == 1 and step.replays == 3 and step.eager_calls == 2
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        assert p1.data.to_bytes() == p2.data.to_bytes()
