"""C++ errors arrive as tw.Error (a RuntimeError) with the C++ message."""
import pytest

import tensorwire as tw


def test_error_is_a_runtime_error():
    assert issubclass(tw.Error, RuntimeError)


def test_shape_errors_carry_the_cpp_message(device):
    a, b = tw.zeros(2, 3, device=device), tw.zeros(4, 5, device=device)
    with pytest.raises(tw.Error) as e:
        a @ b
    assert str(e.value) == "matmul: inner dimensions differ: [2, 3] x [4, 5]"
    with pytest.raises(tw.Error, match=r"^reshape: cannot reshape \[2, 3\] \(6 elements\) into "
                                       r"\[4, 2\] \(8 elements\)$"):
        a.reshape([4, 2])
    with pytest.raises(tw.Error, match="^add: both operands are bool"):
        tw.ones(2, dtype=tw.bool_, device=device) + tw.ones(2, dtype=tw.bool_, device=device)
    with pytest.raises(tw.Error, match="^exp: dtype f16 is storage-only; cast to f32 first$"):
        tw.zeros(2, dtype=tw.float16, device=device).exp()


def test_data_dependent_errors_surface_on_read(device):
    x = tw.tensor([1, 2, 3], device=device)
    bad = x.index_select(0, tw.tensor([5], device=device))
    with pytest.raises(tw.Error, match="index_select"):
        bad.numpy()
    assert x.sum().item() == 6  # the session is still usable


def test_item_of_many_elements(device):
    with pytest.raises(tw.Error, match="^item: tensor has 3 elements, not 1$"):
        tw.zeros(3, device=device).item()


def test_unreachable_server():
    d = tw.Device.remote("tcp://127.0.0.1:1")
    with pytest.raises(tw.Error):
        d.connect()


def test_device_mismatch(remote):
    with pytest.raises(tw.Error):
        tw.zeros(2) + tw.zeros(2, device=remote)


def test_python_errors():
    with pytest.raises(tw.Error, match="unknown dtype"):
        tw.zeros(2, dtype="complex")
    with pytest.raises(TypeError):
        tw.zeros(2) + "x"
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        tw.zeros(4)[::0]
    with pytest.raises(tw.Error, match="slice step must be positive in an assignment"):
        t = tw.zeros(4)
        t[::-1] = 1.0
    with pytest.raises(TypeError):
        len(tw.zeros([]))
