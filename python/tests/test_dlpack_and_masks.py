"""DLPack both ways (zero-copy on the CPU device, lifetimes), and numpy's boolean-mask indexing
against numpy on cpu and remote."""
import gc

import numpy as np
import pytest

import tensorwire as tw


def test_numpy_from_dlpack_shares_the_tensors_memory():
    t = tw.arange(0, 6, 1, dtype=tw.float32).reshape([2, 3]) + 0
    a = np.from_dlpack(t)
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert t.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(a, t.numpy())
    t.numpy()[0, 0] = 42.0  # numpy marks DLPack imports read-only; write through t's own view
    assert a[0, 0] == 42.0  # the same memory
    del t
    gc.collect()
    assert a[0, 0] == 42.0 and a.sum() == 42.0 + 1 + 2 + 3 + 4 + 5  # the array keeps it alive


def test_from_dlpack_shares_the_arrays_memory_and_outlives_it():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    t = tw.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype == tw.int64
    a[1, 2] = -7
    assert t.numpy()[1, 2] == -7  # no copy
    del a
    gc.collect()
    assert t.numpy().tolist()[1] == [4, 5, -7, 7]  # the tensor keeps the array's memory alive
    # Between tensorwire tensors, and every dtype numpy exports.
    for dt in (np.float32, np.float64, np.float16, np.int32, np.uint8):
        b = (np.arange(5) % 3).astype(dt)
        u = tw.from_dlpack(b)
        np.testing.assert_array_equal(u.numpy(), b)
        np.testing.assert_array_equal(tw.from_dlpack(u).numpy(), b)


def test_from_dlpack_refusals_and_uploads(remote):
    with pytest.raises(tw.Error, match="not contiguous"):
        tw.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2])
    with pytest.raises(tw.Error, match="__dlpack__"):
        tw.from_dlpack([1, 2, 3])
    a = np.arange(4, dtype=np.float32)
    r = tw.from_dlpack(a, device=remote)  # an upload
    a[0] = 9
    assert r.device == remote and r.numpy().tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.from_dlpack(r + 1), [1, 2, 3, 4])  # a download


def test_boolean_mask_get_and_set_match_numpy(device):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = tw.tensor(a, device=device)
    for mask in (a > 0, np.zeros((4, 5), bool), np.ones((4, 5), bool), (a > 0)[:, 0]):
        np.testing.assert_array_equal(t[mask].numpy(), a[mask])
        np.testing.assert_array_equal(t[tw.tensor(mask, device=device)].numpy(), a[mask])
    t2 = tw.tensor(a, device=device)
    t2[t2 < 0] = 0.0
    b = a.copy()
    b[b < 0] = 0
    np.testing.assert_array_equal(t2.numpy(), b)
    # A value per selected entry, and one broadcast over the rest of the dims.
    rows = (a[:, 0] > 0)
    t3 = tw.tensor(a, device=device)
    vals = np.arange(rows.sum() * 5, dtype=np.float32).reshape(-1, 5)
    t3[rows] = tw.tensor(vals, device=device)
    c = a.copy()
    c[rows] = vals
    np.testing.assert_array_equal(t3.numpy(), c)
    t4 = tw.tensor(a, device=device)
    t4[rows] = tw.tensor(np.full(5, 7, np.float32), device=device)
    d = a.copy()
    d[rows] = 7
    np.testing.assert_array_equal(t4.numpy(), d)
    ints = tw.tensor(np.arange(6, dtype=np.int64), device=device)
    np.testing.assert_array_equal(ints[ints % 2 == 0].numpy(), [0, 2, 4])


def test_boolean_mask_shape_errors(device):
    t = tw.zeros(3, 4, device=device)
    with pytest.raises(IndexError, match="boolean index of shape \\(4,\\)"):
        t[np.ones(4, bool)]
    with pytest.raises(IndexError):
        t[tw.ones(3, 4, 2, device=device) > 0]


def test_none_ellipsis_and_negative_indices_match_numpy(device):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = tw.tensor(a, device=device)
    for index in ((None,), (Ellipsis, 1), (0, Ellipsis, None), (-1, slice(None), -2),
                  (slice(1, None), None, 0), (Ellipsis,)):
        np.testing.assert_array_equal(t[index].numpy(), a[index], err_msg=str(index))
    with pytest.raises(ValueError, match="step must be positive"):
        t[:, ::-1]
