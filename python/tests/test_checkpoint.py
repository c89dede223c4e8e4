"""tw.Checkpoint (tensorwire/checkpoint.h) from Python: a Python module and its optimizer saved,
loaded back bit for bit on the CPU and on a remote device, and training resumed from it equal to
an uninterrupted run; tw.run_with_failover moves to the next server."""
import numpy as np

import tensorwire as tw
from tensorwire import nn, optim


class TwoLayer(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.fc1 = nn.Linear(4, 8, device=device)
        self.fc2 = nn.Linear(8, 3, device=device)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def steps(model, opt, x, n):
    for _ in range(n):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


def values(model):
    return [p.data.numpy().tobytes() for _, p in model.named_parameters()]


def fresh(device, seed):
    """A seeded input, TwoLayer model and Adam optimizer on `device`."""
    tw.manual_seed(seed)
    x = tw.randn(6, 4, device=device)
    model = TwoLayer(device)
    return x, model, optim.Adam(model.parameters(), lr=1e-2)


def test_round_trip_and_resume(device, tmp_path):
    x, model, opt = fresh(device, 4)
    steps(model, opt, x, 5)
    expected = values(model)

    x, model, opt = fresh(device, 4)
    steps(model, opt, x, 2)
    ckpt = tw.Checkpoint(str(tmp_path))
    info = ckpt.save(2, model, opt, {"run": "a"})
    assert info.step == 2 and info.bytes > 0

    tw.manual_seed(99)  # another model, then the checkpoint over it
    other = TwoLayer(device)
    other_opt = optim.Adam(other.parameters(), lr=1e-2)
    got = ckpt.restore(other, other_opt)
    assert got.step == 2 and got.extra == {"run": "a"}
    steps(other, other_opt, x, 3)
    assert values(other) == expected
    assert [i.step for i in ckpt.list()] == [2]


def test_save_async_saves_the_tensors_of_its_call(device, tmp_path):
    x, model, opt = fresh(device, 5)
    steps(model, opt, x, 2)
    at_save = values(model)
    ckpt = tw.Checkpoint(str(tmp_path))
    ckpt.save_async(2, model, opt, {"run": "b"})
    steps(model, opt, x, 3)  # training goes on while it writes
    info = ckpt.wait()
    assert info.step == 2 and info.extra == {"run": "b"}
    assert not ckpt.saving and ckpt.wait() is None
    assert values(model) != at_save
    ckpt.restore(model, opt)
    assert values(model) == at_save


def test_empty_directory_restores_nothing(tmp_path):
    model = TwoLayer()
    assert tw.Checkpoint(str(tmp_path)).restore(model) is None


def test_rng_state_round_trip():
    tw.manual_seed(1)
    s = tw.rng_state()
    a = tw.rand(4).numpy()
    tw.set_rng_state(s)
    np.testing.assert_array_equal(tw.rand(4).numpy(), a)


def test_failover_moves_to_the_next_server():
    with tw.serve() as a, tw.serve() as b:
        seen = []

        def work(device):
            seen.append(device)
            if len(seen) == 1:
                a.stop()  # the first server goes away under the work
            tw.ones(3, device=device).numpy()

        assert tw.run_with_failover([a.url, b.url], work) == 1
        assert len(seen) == 2
