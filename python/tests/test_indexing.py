"""Indexing as numpy: boolean masks (read and write), None, Ellipsis, negative indices and steps."""
import numpy as np
import pytest

import tensorwire as tw

A = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.mark.parametrize("index", [
    (None,), (Ellipsis,), (Ellipsis, 1), (1, Ellipsis), (None, 1, None), (-1,), (-1, -2, -3),
    (slice(None, None, -1),), (slice(None, None, -2),), (slice(1, None, -1), slice(-1, 0, -2)),
    (Ellipsis, slice(3, 0, -2)), (slice(10, -10, -3),), (slice(0, 3, -1),), (slice(5, 2, -1),),
    (slice(None), None, slice(None, None, -1)), (1, slice(None, None, 2), -1),
])
def test_basic_indexing_matches_numpy(device, index):
    t = tw.tensor(A, device=device)
    assert t[index].numpy().tolist() == A[index].tolist()


def test_boolean_masks_read(device):
    t = tw.tensor(A, device=device)
    for mask in (A > 30, (A % 7) == 0, A[:, :, 0] > 20, A[:, 0, 0] > 100, np.ones(3, bool)):
        want = A[mask]
        got = t[mask]
        assert got.shape == want.shape and got.numpy().tolist() == want.tolist()
        got_t = t[tw.tensor(mask, device=device)]  # a bool tensor as well as an ndarray
        assert got_t.numpy().tolist() == want.tolist()
    assert t[t > 50].numpy().tolist() == A[A > 50].tolist()
    for m in (True, False, np.bool_(True)):
        assert t[m].numpy().tolist() == A[m].tolist()


@pytest.mark.parametrize("value", [-1.0, 2, "row", "all"])
def test_boolean_masks_write(device, value):
    t = tw.tensor(A, device=device)
    a = A.copy()
    mask = A[:, :, 1] > 12
    if value == "row":
        v = np.arange(5, dtype=np.float32)
    elif value == "all":
        v = np.arange(mask.sum() * 5, dtype=np.float32).reshape(-1, 5)
    else:
        v = value
    a[mask] = v
    t[mask] = tw.tensor(v, device=device) if isinstance(v, np.ndarray) else v
    assert t.device == device and t.numpy().tolist() == a.tolist()
    full = A > 40
    a[full] = 0.5
    t[tw.tensor(full, device=device)] = 0.5
    assert t.numpy().tolist() == a.tolist()
    t[np.zeros((3, 4, 5), bool)] = 99.0  # selects nothing
    assert t.numpy().tolist() == a.tolist()


def test_ellipsis_assignment(device):
    t = tw.tensor(A, device=device)
    a = A.copy()
    a[..., 1] = 7.0
    t[..., 1] = 7.0
    a[0, ...] = -1.0
    t[0, ...] = -1.0
    assert t.numpy().tolist() == a.tolist()


def test_indexing_errors():
    t = tw.tensor(A)
    with pytest.raises(IndexError, match="does not match"):
        t[np.ones(4, bool)]
    with pytest.raises(tw.Error, match="only index"):
        t[np.ones(3, bool), 0]
    with pytest.raises(ValueError, match="cannot be zero"):
        t[::0]
    with pytest.raises(tw.Error, match="negative step|must be positive in an assignment"):
        t[::-1] = 0.0
    with pytest.raises(IndexError, match="out of bounds"):
        t[-4]
