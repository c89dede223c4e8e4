"""DLPack both ways: zero-copy for CPU tensors, and the memory outlives its producer."""
import gc

import numpy as np
import pytest

import tensorwire as tw


def test_numpy_from_tensor_shares_memory():
    t = tw.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)  # read-only in numpy 1.24
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert np.shares_memory(a, t.numpy())  # the tensor's own storage
    del t
    gc.collect()
    junk = [tw.full([2, 3], 7.0) for _ in range(50)]  # would reuse freed memory
    assert a.ravel().tolist() == [0, 1, 2, 3, 4, 5]  # the capsule kept the Buffer
    assert len(junk) == 50


def test_writes_through_the_producer_are_seen():
    base = np.zeros(4, dtype=np.float32)
    t = tw.from_numpy(base)
    a = np.from_dlpack(t)
    base[2] = 9.0
    assert a.tolist() == [0.0, 0.0, 9.0, 0.0]


def test_tensor_from_numpy_shares_memory_and_outlives_it():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = tw.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype == tw.int64
    a[0, 0] = -5
    assert t.numpy()[0, 0] == -5
    assert np.shares_memory(t.numpy(), a)
    del a
    gc.collect()
    assert t.numpy().ravel().tolist() == [-5] + list(range(1, 12))
    assert (t + 1).numpy()[2, 3] == 12


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64,
                                   np.uint8])
def test_round_trip_dtypes(dtype):
    a = (np.arange(5) * 3).astype(dtype)
    t = tw.from_dlpack(a)
    assert t.dtype == tw.as_dtype(dtype)
    b = np.from_dlpack(t)
    assert b.dtype == dtype and np.shares_memory(a, b)


def test_capsule_is_consumed_once():
    t = tw.ones(3)
    cap = t.__dlpack__()
    holder = type("Holder", (), {"__dlpack__": lambda self, stream=None: cap})()
    u = tw.from_dlpack(holder)
    assert u.numpy().tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(tw.Error, match="unconsumed 'dltensor'"):
        tw.from_dlpack(holder)  # renamed used_dltensor by the first consumer
    del t, cap, holder
    gc.collect()
    assert u.sum().item() == 3.0


def test_an_unconsumed_capsule_frees_its_export():
    t = tw.ones(1000)
    for _ in range(100):
        t.__dlpack__()  # the capsule's destructor runs the deleter
    assert t.sum().item() == 1000.0


def test_from_dlpack_errors_and_other_devices(remote):
    with pytest.raises(tw.Error, match="not C-contiguous"):
        tw.from_dlpack(np.arange(8.0)[::2])
    with pytest.raises(tw.Error, match="has no __dlpack__"):
        tw.from_dlpack([1, 2])
    r = tw.from_dlpack(np.arange(4, dtype=np.float32), device=remote)  # an upload
    assert r.device == remote
    assert np.from_dlpack(r * 2).tolist() == [0.0, 2.0, 4.0, 6.0]  # a download
    assert np.from_dlpack(tw.from_dlpack(tw.arange(3))).tolist() == [0, 1, 2]


def test_zero_d_empty_and_bool():
    assert np.from_dlpack(tw.tensor(3.5)).tolist() == 3.5
    assert np.from_dlpack(tw.zeros(0, 3)).shape == (0, 3)
    assert tw.from_dlpack(np.ones((), np.float32)).numpy().tolist() == 1.0
    assert tw.from_dlpack(np.zeros((0, 3))).shape == (0, 3)
    b = tw.tensor([True, False])  # numpy 1.24 has no DLPack bool; tensorwire's own round trip
    assert tw.from_dlpack(b).dtype == tw.bool_ and tw.from_dlpack(b).numpy().tolist() == [True, False]
