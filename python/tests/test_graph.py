"""tw.graph: capture -> save -> load -> replay equals eager bit for bit, on cpu and remote."""
import numpy as np
import pytest

import tensorwire as tw


def program(x, w):
    return ((x @ w).relu() * 0.5 + 1.0).softmax(1)


def inputs(device):
    tw.manual_seed(7)
    return tw.randn(4, 3).to(device), tw.randn(3, 5).to(device)


def test_capture_save_load_replay_equals_eager(device, tmp_path):
    x, w = inputs(device)
    eager = program(x, w).numpy()

    cap = tw.graph.Capture(device)
    assert cap.device.kind == "capture" and tw.Device.capture(device).kind == "capture"
    y = program(cap.input(x), cap.input(w))
    trace = cap.finish([y])
    assert [s.shape for s in trace.inputs] == [(4, 3), (3, 5)]
    assert str(trace.outputs[0]) == "f32[4, 5]" and trace.num_ops() >= 4
    # The recorded run computed the values on the inner device too.
    assert np.array_equal(y.numpy(), eager)
    assert np.array_equal(cap.release(y).numpy(), eager)

    path = str(tmp_path / "program.twtrace")
    trace.save(path)
    loaded = tw.graph.Trace.load(path)
    assert loaded.to_bytes() == trace.to_bytes()
    for _ in range(2):  # the first replay registers the graph, the second runs it by id
        out, = loaded.replay(device, [x, w])
        assert out.device == device
        assert out.numpy().tobytes() == eager.tobytes()
    assert loaded.runs_as_graph(device)


def test_replay_on_another_device(remote):
    x, w = inputs(tw.Device.cpu())
    cap = tw.graph.Capture(tw.Device.cpu())
    y = program(cap.input(x), cap.input(w))  # held: the trace's output
    trace = tw.graph.Trace.from_bytes(cap.finish().to_bytes())
    assert len(trace.outputs) == 1 and y.shape == (4, 5)
    out, = trace.replay(remote, [x.to(remote), w.to(remote)])
    assert out.numpy().tobytes() == program(x, w).numpy().tobytes()


def test_reads_inside_a_capture_raise(device):
    cap = tw.graph.Capture(device)
    y = cap.input(tw.ones(2).to(device)) * 3
    other = tw.Device.remote("tcp://127.0.0.1:1") if device.kind == "cpu" else tw.Device.cpu()
    for read in (y.numpy, y.item, y.tolist, lambda: repr(y), lambda: y.to(other)):
        with pytest.raises(tw.Error, match="trace output and read it after Capture::finish"):
            read()
    cap.finish()
    assert y.numpy().tolist() == [3.0, 3.0]


def test_load_errors(tmp_path):
    bad = tmp_path / "bad.twtrace"
    bad.write_bytes(b"not a trace")
    with pytest.raises(tw.Error):
        tw.graph.Trace.load(str(bad))
    with pytest.raises(tw.Error):
        tw.graph.Trace.load(str(tmp_path / "missing"))
    x = tw.ones(2)
    cap = tw.graph.Capture(tw.Device.cpu())
    y = cap.input(x) + 1
    trace = cap.finish([y])
    with pytest.raises(tw.Error):
        trace.replay(tw.Device.cpu(), [tw.ones(3)])


def test_step_caches_a_training_step(device):
    tw.manual_seed(3)
    model = tw.nn.Linear(3, 2).to(device)
    opt = tw.optim.SGD(model.parameters(), lr=0.1)
    x = tw.randn(8, 3).to(device)
    target = tw.randn(8, 2).to(device)

    def step(args):
        opt.zero_grad()
        loss = tw.nn.functional.mse_loss(model(args[0]), args[1])
        loss.backward()
        opt.step()
        return [loss]

    # The same loop eagerly, from the same start, for the reference values.
    tw.manual_seed(3)
    ref_model = tw.nn.Linear(3, 2).to(device)
    ref_opt = tw.optim.SGD(ref_model.parameters(), lr=0.1)
    ref = []
    for _ in range(4):
        ref_opt.zero_grad()
        loss = tw.nn.functional.mse_loss(ref_model(x), target)
        loss.backward()
        ref_opt.step()
        ref.append(loss.numpy().tobytes())

    cached = tw.graph.compile(step, tw.graph.state_slots(opt))
    got = [cached([x, target])[0].numpy().tobytes() for _ in range(4)]
    assert got == ref
    assert (cached.eager_calls, cached.recordings, cached.replays) == (1, 1, 2)


def test_step_returns_a_tensor_and_passes_exceptions_through():
    calls = []

    def double(args):
        calls.append(1)
        return args[0] * 2

    s = tw.graph.Step(double)
    x = tw.arange(4, dtype=tw.float32)
    for _ in range(3):
        assert s([x])[0].numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert len(calls) == 2 and s.replays == 1  # eager, recording, then a replay without Python

    def broken(args):
        raise KeyError("inside the step")

    with pytest.raises(KeyError, match="inside the step"):
        tw.graph.Step(broken)([x])
