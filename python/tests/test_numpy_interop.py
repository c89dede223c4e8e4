"""Zero-copy numpy interop on the CPU device; explicit copies for remote devices."""
import gc
import weakref

import numpy as np
import pytest

import tensorwire as tw


def test_from_numpy_shares_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tw.from_numpy(a)
    assert t.shape == (2, 3) and t.dtype == tw.float32
    a[0, 1] = 42
    assert t[0, 1].item() == 42  # the tensor sees the array's write
    assert (t + 1).numpy()[0, 1] == 43


def test_numpy_of_cpu_tensor_shares_memory():
    t = tw.arange(6).reshape([2, 3])
    v = t.numpy()
    v2 = t.numpy()
    assert np.shares_memory(v, v2)
    v[1, 2] = -7
    assert t[1, 2].item() == -7


def test_round_trip_is_the_same_memory():
    a = np.ones(16, dtype=np.int32)
    t = tw.from_numpy(a)
    assert np.shares_memory(t.numpy(), a)


def test_array_lives_while_the_tensor_does():
    a = np.arange(1000, dtype=np.float64)
    ref = weakref.ref(a)
    t = tw.from_numpy(a)
    del a
    gc.collect()
    assert t.sum().item() == sum(range(1000))
    del t
    gc.collect()
    assert ref() is None  # released once the tensor went


def test_tensor_lives_while_the_array_does():
    v = (tw.arange(5) * 2).numpy()
    gc.collect()
    np.testing.assert_array_equal(v, [0, 2, 4, 6, 8])


def test_from_numpy_refuses_what_it_cannot_share():
    with pytest.raises(tw.Error, match="not C-contiguous"):
        tw.from_numpy(np.zeros((4, 4), np.float32)[:, ::2])
    with pytest.raises(tw.Error, match="has no tensorwire dtype"):
        tw.from_numpy(np.zeros(3, np.int16))
    # tw.tensor copies instead
    a = np.zeros((4, 4), np.float32)[:, ::2]
    t = tw.tensor(a)
    a[0, 0] = 5
    assert t[0, 0].item() == 0


def test_tensor_copies():
    a = np.zeros(3, np.float32)
    t = tw.tensor(a)
    a[0] = 1
    assert t[0].item() == 0


def test_remote_is_an_upload_and_a_download(remote):
    a = np.arange(4, dtype=np.float32)
    t = tw.from_numpy(a, device=remote)
    a[0] = 100  # after the upload: the remote tensor keeps what was sent
    assert t.device == remote
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
    v = t.numpy()
    v[1] = 9  # a download: writing it changes nothing remotely
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])


def test_dtypes_round_trip(device):
    for dt in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16):
        a = (np.arange(6) % 3).astype(dt).reshape(3, 2)
        t = tw.tensor(a, device=device)
        got = t.numpy()
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)


def test_empty_and_scalar(device):
    assert tw.tensor(np.zeros((0, 3), np.float32), device=device).numpy().shape == (0, 3)
    s = tw.tensor(np.float32(2.5), device=device)
    assert s.shape == () and s.item() == 2.5
    with pytest.raises(tw.Error, match="numpy has no bf16"):
        tw.zeros(2, dtype=tw.bfloat16, device=device).numpy()


def test_as_tensor_shares_when_it_can():
    a = np.zeros(3, np.float32)
    t = tw.as_tensor(a)
    a[2] = 3
    assert t[2].item() == 3


def test_array_released_when_the_last_tensor_goes_without_the_gil():
    # backward() runs with the GIL released and frees the graph, whose saved tensor is the last
    # holder of the array: the release is handed to the interpreter (Py_AddPendingCall).
    a = np.arange(3, dtype=np.float32)
    ref = weakref.ref(a)
    x = tw.ones(3, requires_grad=True)
    loss = (x * tw.from_numpy(a)).sum()
    del a
    gc.collect()
    assert ref() is not None  # the graph holds it
    loss.backward()
    del loss
    for _ in range(1000):  # pending calls run between bytecodes
        if ref() is None:
            break
    assert ref() is None
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 2])
