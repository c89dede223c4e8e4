"""tw.dist against two and three in-process servers (Gloo between them), two devices of one
server, and CPU devices: results equal numpy's, and every participant holds the same bytes."""
import numpy as np
import pytest

import tensorwire as tw
from tensorwire import dist


@pytest.fixture(scope="module")
def servers():
    started = [tw.serve() for _ in range(3)]
    yield started
    for s in started:
        s.stop()


def devices_of(servers, n):
    return [tw.Device.remote(s.url) for s in servers[:n]]


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_across_servers_equal_numpy(servers, n):
    devs = devices_of(servers, n)
    group = dist.Group(devs)
    rng = np.random.default_rng(n)
    # Integer values: any order of a sum gives numpy's floats exactly.
    xs = [rng.integers(-50, 50, size=(2 * n, 3)).astype(np.float32) for _ in range(n)]
    ts = [tw.tensor(x, device=d) for x, d in zip(xs, devs)]
    total = np.sum(xs, axis=0)
    for r in dist.all_reduce(ts, dist.ReduceOp.SUM, group):
        np.testing.assert_array_equal(r.numpy(), total)
    for r in dist.all_reduce(ts, dist.ReduceOp.MAX, group):
        np.testing.assert_array_equal(r.numpy(), np.max(xs, axis=0))
    for r, d in zip(dist.all_reduce(ts, dist.ReduceOp.MEAN, group), devs):
        assert r.device == d
        np.testing.assert_array_equal(r.numpy(), (total / np.float32(n)).astype(np.float32))
    for r in dist.broadcast(ts, n - 1, group):
        np.testing.assert_array_equal(r.numpy(), xs[n - 1])
    for r in dist.all_gather(ts, group):
        np.testing.assert_array_equal(r.numpy(), np.concatenate(xs))
    for i, r in enumerate(dist.reduce_scatter(ts, dist.ReduceOp.SUM, group)):
        np.testing.assert_array_equal(r.numpy(), total[2 * i:2 * i + 2])
    # The input list is left as it was.
    np.testing.assert_array_equal(ts[0].numpy(), xs[0])


def test_random_floats_give_the_same_bytes_everywhere(servers):
    devs = devices_of(servers, 3)
    ts = [tw.randn([1001], device=d) for d in devs]
    out = dist.all_reduce(ts)
    assert out[0].numpy().tobytes() == out[1].numpy().tobytes() == out[2].numpy().tobytes()


def test_one_server_and_cpu_devices(servers):
    s = servers[0]
    devs = [tw.Device.remote(s.url, 0), tw.Device.remote(s.url, 0)]  # two sessions of one server
    xs = [np.arange(6, dtype=np.int64), np.arange(6, dtype=np.int64) * 3]
    out = dist.all_reduce([tw.tensor(x, device=d) for x, d in zip(xs, devs)])
    for r in out:
        np.testing.assert_array_equal(r.numpy(), xs[0] + xs[1])
    cpu = dist.all_gather([tw.tensor(xs[0]), tw.tensor(xs[1])])
    np.testing.assert_array_equal(cpu[1].numpy(), np.concatenate(xs))


def test_bad_calls_raise_at_the_call(servers):
    devs = devices_of(servers, 2)
    with pytest.raises(tw.Error, match="does not split"):
        dist.reduce_scatter([tw.zeros([3], device=d) for d in devs])
    with pytest.raises(tw.Error, match="mean needs a floating-point"):
        dist.all_reduce([tw.zeros([3], dtype=tw.int32, device=d) for d in devs], dist.ReduceOp.MEAN)
