"""PyTorch's tensor API forms over the C++ methods (imported by __init__.py, which re-exports the
public names): device strings, *size arguments, (values, indices) from max/min over a dim, list
indexing, in-place ops, and the methods composed from existing ops (std, var, norm, all, any,
allclose, //, ...). Nothing here adds an op: each is a few calls of the C++ API.

In-place ops (add_, mul_, zero_, ...): tensorwire's tensors are functional (no op writes into an
input), so `x.add_(y)` computes x + y and rebinds the Python object `x` to the result. Every
Python reference to that object sees the new value, as in PyTorch; a tensor made from x before
(a view x[0], a tensor captured by a C++ module) keeps the old values. As in PyTorch, a leaf that
requires grad refuses in-place ops while grad mode is on; under tw.no_grad() the new value keeps
requires_grad and the accumulated grad.
"""
import builtins as _b
import collections as _collections
import math as _math

import numpy as _np

from . import _tensorwire as _C
from ._tensorwire import Device, Error, Tensor, dtype

def _dname(d):
    return str(d).split(".")[-1]  # "f32" (str of the enum value is "dtype.f32")


_f32, _f64, _i32, _i64, _u8, _bool = (dtype.f32, dtype.f64, dtype.i32, dtype.i64, dtype.u8,
                                      dtype.bool)

# ---- devices: 'cpu', 'torch', 'tcp://host:port', 'unix:///path', 'tls://host:port' ----

_REMOTE_SCHEMES = ("tcp://", "tls://", "unix://")
_remotes = {}  # (url, index, credential, ca, fingerprint) -> Device: one session per spec


def device(spec=None, index=None, *, credential="", tls_ca_file="", tls_fingerprint=""):
    """A tw.Device from a Device or a string, as torch.device: 'cpu' (also 'cpu:0'), 'torch',
    another registered backend's spec ('vulkan:0'), or
    a server's URL ('tcp://host:port', 'tls://host:port', 'unix:///path', optionally with the
    device index after '#': 'tcp://host:7070#1'; also what str(device) prints,
    'remote(tcp://host:7070, 1)'). The same URL, index and options give the same Device (one
    session per process), so tensors made with `device='tcp://...'` in several calls can be used
    together. credential and tls_* are as for Device.remote. None gives the CPU device."""
    if spec is None:
        return Device.cpu()
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise Error(f"device: expected a tw.Device or a device string ('cpu', 'torch', "
                    f"'tcp://host:port', 'unix:///path'), got {type(spec).__name__} {spec!r}")
    s = spec.strip()
    if s.startswith("remote(") and s.endswith(")"):  # str(Device): remote(tcp://h:p, 1)
        url, _, idx = s[len("remote("):-1].rpartition(",")
        s = f"{url.strip()}#{idx.strip()}"
    if s.startswith(_REMOTE_SCHEMES):
        url, sep, idx = s.partition("#")
        if sep:
            if index is not None:
                raise Error(f"device: '{spec}' names index {idx} and index={index} is given too")
            try:
                index = _b.int(idx)
            except ValueError:
                raise Error(f"device: bad device index '{idx}' in '{spec}' "
                            f"(expected an int after '#')") from None
        key = (url, index or 0, credential, tls_ca_file, tls_fingerprint)
        if key not in _remotes:
            _remotes[key] = Device.remote(url, index or 0, credential=credential,
                                          tls_ca_file=tls_ca_file,
                                          tls_fingerprint=tls_fingerprint)
        return _remotes[key]
    name, _, idx = s.partition(":")
    if name == "cpu" and idx in ("", "0") and index in (None, 0):
        return Device.cpu()
    if name == "torch" and idx in ("", "0") and index in (None, 0):
        return Device.torch()
    if index is not None:
        if idx:
            raise Error(f"device: '{spec}' names ordinal {idx} and index={index} is given too")
        s = f"{name}:{index}"
    # Any other backend the registry knows ('vulkan:0', ...); its refusal names what is missing.
    return Device.local(s)


Device.type = property(lambda d: d.kind, doc="As torch.device.type: 'cpu', 'remote', ...")
_c_device_eq = Device.__eq__


def _device_eq(self, other):
    if isinstance(other, str):
        try:
            return _c_device_eq(self, device(other))
        except Error:
            return False
    return _c_device_eq(self, other) if isinstance(other, Device) else NotImplemented


Device.__eq__ = _device_eq


# ---- dtypes (as __init__.as_dtype, which it is) ----

def _as_dtype(d):
    from . import as_dtype
    return as_dtype(d)


def _is_dtype_like(v):
    if isinstance(v, dtype):
        return True
    if isinstance(v, str) and not v.startswith(_REMOTE_SCHEMES) and v not in ("cpu", "torch"):
        try:
            _as_dtype(v)
            return True
        except Error:
            return False
    return isinstance(v, type) or isinstance(v, _np.dtype)


# ---- shape arguments: x.reshape(4, 3) and x.reshape((4, 3)) ----

def _sizes(args, what):
    if len(args) == 1 and not isinstance(args[0], (_b.int, _np.integer)):
        if isinstance(args[0], dtype):
            raise Error(f"{what}(dtype): reinterpreting a tensor's bytes as another dtype is not "
                        f"supported; use .to(dtype) to convert the values")
        return [_b.int(v) for v in args[0]]
    return [_b.int(v) for v in args]


def _wrap_sizes(name):
    c = getattr(Tensor, name)

    def method(self, *sizes):
        return c(self, _sizes(sizes, name))
    method.__name__ = name
    method.__doc__ = (c.__doc__ or "") + f"\n\nSizes as separate ints or one sequence: " \
        f"x.{name}(2, 3) or x.{name}((2, 3))."
    setattr(Tensor, name, method)


for _n in ("reshape", "view", "permute", "expand", "repeat"):
    _wrap_sizes(_n)


_c_flip = Tensor.flip
Tensor.flip = lambda self, *dims: _c_flip(self, _sizes(dims, "flip"))

# ---- conversion: to(device), to('cpu'), to(dtype), to(other), to(device, dtype) ----

_c_to = Tensor.to


def _to(self, *args, **kwargs):
    """A copy on another device and/or in another dtype, as torch.Tensor.to: to(device),
    to('cpu'), to('tcp://host:port'), to(dtype), to(other_tensor), to(device, dtype),
    to(device=..., dtype=...). (non_blocking and copy are accepted and ignored: a copy is
    always made, and remote transfers never block the caller.)"""
    kwargs.pop("non_blocking", None)
    kwargs.pop("copy", None)
    dev, dt = kwargs.pop("device", None), kwargs.pop("dtype", None)
    if kwargs:
        raise Error(f"to: unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dev, dt = a.device, a.dtype
        elif _is_dtype_like(a):
            dt = a
        elif isinstance(a, (Device, str)):
            dev = a
        elif isinstance(a, _b.bool):
            pass  # torch's positional non_blocking
        else:
            raise Error(f"to: expected a device, a dtype or a tensor, got {type(a).__name__} {a!r}")
    out = self
    if dev is not None:
        d = device(dev)
        if d != out.device:
            out = _c_to(out, d)
    if dt is not None:
        out = _c_to(out, _as_dtype(dt))
    return out


Tensor.to = _to
Tensor.cpu = lambda self: _to(self, Device.cpu())
Tensor.half = lambda self: _c_to(self, dtype.f16)
Tensor.type_as = lambda self, other: _c_to(self, other.dtype)
Tensor.clone = lambda self: _c_to(self, self.dtype)
Tensor.clone.__doc__ = "A copy of the values (differentiable, as torch.Tensor.clone)."
Tensor.contiguous = lambda self: self
Tensor.contiguous.__doc__ = ("The tensor itself: a tensorwire tensor has no strides a user "
                             "sees (devices make views where they can).")
Tensor.is_contiguous = lambda self: True
Tensor.is_floating_point = lambda self: self.dtype.is_floating_point
Tensor.element_size = lambda self: self.dtype.itemsize
Tensor.nelement = Tensor.numel


def _type(self, dt=None):
    if dt is None:
        return f"tensorwire.{_dname(self.dtype)}"
    return _c_to(self, _as_dtype(dt))


Tensor.type = _type

# ---- max / min: values over everything, (values, indices) over a dim ----

max_result = _collections.namedtuple("max", ["values", "indices"])
min_result = _collections.namedtuple("min", ["values", "indices"])
_c_max, _c_min = Tensor.max, Tensor.min


def _extremum(c, arg, result, name):
    def method(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
            return self.maximum(dim) if name == "max" else self.minimum(dim)
        if dim is None:  # keepdim keeps every dim, as size 1 (docs/ops.md)
            return c(self, None, keepdim)
        return result(c(self, dim, keepdim), getattr(self, arg)(dim, keepdim))
    method.__name__ = name
    method.__doc__ = (f"{name} over all elements, or over dim: then a named tuple (values, "
                      f"indices), as torch.{name}(x, dim). x.{name}(other) is the elementwise "
                      f"{name}imum.\n\n" + (c.__doc__ or ""))
    return method


Tensor.max = _extremum(_c_max, "argmax", max_result, "max")
Tensor.min = _extremum(_c_min, "argmin", min_result, "min")
Tensor.amax = lambda self, dim=None, keepdim=False: _reduce_dims(self, _c_max, dim, keepdim)
Tensor.amin = lambda self, dim=None, keepdim=False: _reduce_dims(self, _c_min, dim, keepdim)


def _dim_list(dim):
    if dim is None:
        return None
    if isinstance(dim, (_b.int, _np.integer)):
        return [_b.int(dim)]
    return [_b.int(d) for d in dim]


def _reduce_dims(x, c, dim, keepdim):
    """A one-dim reduction c applied over several dims (from the last)."""
    dims = _dim_list(dim)
    if dims is None:
        return c(x)
    for d in sorted((d % x.dim() for d in dims), reverse=True):
        x = c(x, d, keepdim)
    return x


# ---- reductions composed from sum/mean ----

def _count(x, dims):
    if dims is None:
        return x.numel()
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def _float(x):
    return x if x.dtype.is_floating_point else _c_to(x, _f32)


def _var(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """Variance over all elements or over dim (an int or several), as torch.var: the divisor is
    n - correction (correction defaults to 1, or 0 with unbiased=False)."""
    if isinstance(dim, _b.bool):  # torch.var(x, False): unbiased given positionally
        dim, unbiased = None, dim
    x = _float(self)
    dims = _dim_list(dim)
    c = (1 if unbiased else 0) if correction is None else correction
    mean = x.mean(dims, keepdim=True) if dims is not None else x.mean()
    ss = (x - mean).square().sum(dims, keepdim=keepdim) if dims is not None else \
        (x - mean).square().sum()
    return ss / _b.max(_count(x, dims) - c, 0)


def _std(self, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """Standard deviation: the square root of var (same arguments)."""
    return _var(self, dim, unbiased, keepdim, correction=correction).sqrt()


Tensor.var = _var
Tensor.std = _std


def _sum_over(x, dims, keepdim):
    return x.sum(dims, keepdim=keepdim) if dims is not None else x.sum()


def _norm(self, p="fro", dim=None, keepdim=False):
    """The p-norm over all elements or over dim, as torch.norm: p 'fro' or 2, 1, inf, -inf, 0 or
    any other number ('nuc', the nuclear norm, needs an SVD and is not supported)."""
    x = _float(self)
    dims = _dim_list(dim)
    if p in ("fro", 2, 2.0):
        return _sum_over(x.square(), dims, keepdim).sqrt()
    if p == "nuc":
        raise Error("norm(p='nuc'): the nuclear norm needs an SVD, which tensorwire does not "
                    "have; use p='fro', 1, 2, inf or another number")
    if isinstance(p, str):
        raise Error(f"norm: unknown p '{p}' (expected 'fro' or a number)")
    if p == _math.inf:
        return _reduce_dims(x.abs(), _c_max, dims, keepdim)
    if p == -_math.inf:
        return _reduce_dims(x.abs(), _c_min, dims, keepdim)
    if p == 0:
        return _c_to(_sum_over(x != 0, dims, keepdim), x.dtype)
    if p == 1:
        return _sum_over(x.abs(), dims, keepdim)
    return _sum_over(x.abs().pow(float(p)), dims, keepdim).pow(1.0 / p)


Tensor.norm = _norm


def _bools(x):
    return x if x.dtype == _bool else x != 0


def _all(self, dim=None, keepdim=False):
    """Whether every element (over dim, if given) is nonzero: a bool tensor."""
    return _sum_over(_bools(self).logical_not(), _dim_list(dim), keepdim) == 0


def _any(self, dim=None, keepdim=False):
    """Whether any element (over dim, if given) is nonzero: a bool tensor."""
    return _sum_over(_bools(self), _dim_list(dim), keepdim) > 0


Tensor.all = _all
Tensor.any = _any


def _operand(x, other):
    if isinstance(other, Tensor):
        return other
    return _C.full([], other, x.dtype if isinstance(other, (_b.int, _b.bool)) or
                   x.dtype.is_floating_point else _f32, x.device)


def _isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Elementwise |self - other| <= atol + rtol * |other| (equal infinities are close; NaNs
    only with equal_nan), as torch.isclose."""
    other = _operand(self, other)
    a, b = _float(self), _float(other)
    close = ((a - b).abs() <= (b.abs() * rtol + atol)).logical_or(a == b)
    if equal_nan:
        close = close.logical_or((a != a).logical_and(b != b))
    return close


def _allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element is close (isclose): a Python bool (reads the values)."""
    return _b.bool(_isclose(self, other, rtol, atol, equal_nan).all().item())


Tensor.isclose = _isclose
Tensor.allclose = _allclose
Tensor.equal = lambda self, other: tuple(self.shape) == tuple(other.shape) and _b.bool(
    (self == other).all().item())
Tensor.isnan = lambda self: self != self
Tensor.isinf = lambda self: self.abs() == _math.inf
Tensor.isfinite = lambda self: (self == self).logical_and(self.abs() != _math.inf)

# ---- arithmetic composed from existing ops ----


def _floor_divide(self, other):
    """Division rounded down (Python's //, torch.floor_divide): for integers exact
    ((a - a % b) / b, computed in f64, so exact up to 2**53), for floats floor(a / b)."""
    if isinstance(other, Tensor):
        integral = not (self.dtype.is_floating_point or other.dtype.is_floating_point)
    else:
        integral = not self.dtype.is_floating_point and isinstance(other, (_b.int, _np.integer))
    if not integral:
        return (self / other).floor()
    q = (_c_to(self - self.remainder(other), _f64) / (
        _c_to(other, _f64) if isinstance(other, Tensor) else _b.float(other)))
    out = q.round()
    rt = self.dtype if not isinstance(other, Tensor) else (self + other).dtype
    return _c_to(out, rt)


def _rfloordiv(self, other):
    return _floor_divide(_operand(self, other), self)


def _rpow(self, base):
    """base ** tensor, for a number base (2 ** t)."""
    return _operand(self, base).pow(self)


def _rmod(self, other):
    return _operand(self, other).remainder(self)


Tensor.floor_divide = _floor_divide
Tensor.__floordiv__ = _floor_divide
Tensor.__rfloordiv__ = _rfloordiv
Tensor.__rpow__ = _rpow
Tensor.__rmod__ = _rmod
Tensor.__pos__ = lambda self: self
Tensor.__rmatmul__ = lambda self, other: other.matmul(self)
_c_add, _c_sub = Tensor.add, Tensor.sub


def _add(self, other, alpha=1):
    """self + alpha * other (tensor or number), as torch.add."""
    return _c_add(self, other if alpha == 1 else other * alpha)


def _sub(self, other, alpha=1):
    """self - alpha * other (tensor or number), as torch.sub."""
    return _c_sub(self, other if alpha == 1 else other * alpha)


_add.__doc__ += "\n\n" + (_c_add.__doc__ or "")
_sub.__doc__ += "\n\n" + (_c_sub.__doc__ or "")
Tensor.add = _add
Tensor.sub = _sub
Tensor.subtract = _sub
Tensor.multiply = Tensor.mul
_c_div = Tensor.div


def _div(self, other, rounding_mode=None):
    """True division; rounding_mode 'floor' or 'trunc' as torch.div."""
    if rounding_mode is None:
        return _c_div(self, other)
    if rounding_mode == "floor":
        return _floor_divide(self, other)
    if rounding_mode == "trunc":
        q = _c_div(self, other)
        q = q.sign() * q.abs().floor()
        integral = not self.dtype.is_floating_point and (
            not other.dtype.is_floating_point if isinstance(other, Tensor)
            else isinstance(other, _b.int))
        return _c_to(q, self.dtype if not isinstance(other, Tensor) else
                     (self + other).dtype) if integral else q
    raise Error(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


_div.__doc__ += "\n\n" + (_c_div.__doc__ or "")
Tensor.div = _div
Tensor.divide = _div
Tensor.true_divide = _c_div
Tensor.trunc = lambda self: self if not self.dtype.is_floating_point else \
    self.sign() * self.abs().floor()
Tensor.frac = lambda self: self - self.trunc()
Tensor.clip = Tensor.clamp
Tensor.clamp_min = lambda self, min: self.clamp(min, None)  # noqa: A002
Tensor.clamp_max = lambda self, max: self.clamp(None, max)  # noqa: A002
Tensor.mm = Tensor.matmul
Tensor.bmm = Tensor.matmul
Tensor.dot = lambda self, other: (self * other).sum()
Tensor.outer = lambda self, other: self.unsqueeze(1) * other.unsqueeze(0)
Tensor.lerp = lambda self, end, weight: self + (end - self) * weight
Tensor.exp2 = lambda self: _operand(_float(self), 2.0).pow(_float(self))
Tensor.log2 = lambda self: self.log() / _math.log(2.0)
Tensor.log10 = lambda self: self.log() / _math.log(10.0)
Tensor.expm1 = lambda self: self.exp() - 1
Tensor.tan = lambda self: self.sin() / self.cos()
Tensor.silu = lambda self: self * self.sigmoid()
Tensor.negative = Tensor.neg
Tensor.absolute = Tensor.abs
Tensor.greater = Tensor.gt
Tensor.less = Tensor.lt
Tensor.greater_equal = Tensor.ge
Tensor.less_equal = Tensor.le
Tensor.not_equal = Tensor.ne
Tensor.fmod = lambda self, other: self - _div(self, other, "trunc") * other


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    return self * beta + mat1.matmul(mat2) * alpha


Tensor.addmm = _addmm

# ---- movement composed from slice, cat and reshape ----


def _chunk(self, chunks, dim=0):
    size = self.shape[dim]
    step = -(-size // chunks)
    return tuple(self.narrow(dim, s, _b.min(step, size - s)) for s in range(0, size, step))


def _split(self, split_size_or_sections, dim=0):
    size = self.shape[dim]
    if isinstance(split_size_or_sections, (_b.int, _np.integer)):
        step = _b.int(split_size_or_sections)
        return tuple(self.narrow(dim, s, _b.min(step, size - s)) for s in range(0, size, step))
    out, s = [], 0
    for n in split_size_or_sections:
        out.append(self.narrow(dim, s, n))
        s += n
    if s != size:
        raise Error(f"split: sections {list(split_size_or_sections)} sum to {s}, not the size "
                    f"{size} of dim {dim}")
    return tuple(out)


def _roll(self, shifts, dims=None):
    if dims is None:
        return _roll(self.reshape([-1]), shifts, 0).reshape(list(self.shape))
    shifts = [shifts] if isinstance(shifts, (_b.int, _np.integer)) else list(shifts)
    dims = [dims] if isinstance(dims, (_b.int, _np.integer)) else list(dims)
    x = self
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = _C.cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
    return x


def _tri(self, diagonal, upper):
    rows, cols = self.shape[-2], self.shape[-1]
    r = _C.arange(0, rows, 1, _i64, self.device).unsqueeze(1)
    c = _C.arange(0, cols, 1, _i64, self.device).unsqueeze(0)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    return self.masked_fill(keep.logical_not(), 0)


Tensor.chunk = _chunk
Tensor.split = _split
Tensor.unbind = lambda self, dim=0: tuple(self.select(dim, i) for i in range(self.shape[dim]))
Tensor.select = lambda self, dim, index: self.narrow(dim, index % self.shape[dim], 1).squeeze(dim)
Tensor.roll = _roll
Tensor.tril = lambda self, diagonal=0: _tri(self, diagonal, False)
Tensor.triu = lambda self, diagonal=0: _tri(self, diagonal, True)
Tensor.swapaxes = Tensor.transpose
Tensor.swapdims = Tensor.transpose
Tensor.movedim = lambda self, source, destination: self.permute(
    _movedim_order(self.dim(), source, destination))
Tensor.view_as = lambda self, other: self.reshape(list(other.shape))
Tensor.reshape_as = Tensor.view_as
Tensor.unflatten = lambda self, dim, sizes: self.reshape(
    list(self.shape[:dim % self.dim()]) + list(sizes) + list(self.shape[dim % self.dim() + 1:]))
Tensor.mT = property(lambda self: self.transpose(-2, -1))


def _movedim_order(n, source, destination):
    order = [d for d in range(n) if d != source % n]
    order.insert(destination % n, source % n)
    return order


# ---- new tensors like this one ----

Tensor.new_zeros = lambda self, *size, dtype=None, device=None: _C.zeros(
    _sizes(size, "new_zeros"), _as_dtype(dtype) or self.dtype, _dev_or(device, self))
Tensor.new_ones = lambda self, *size, dtype=None, device=None: _C.ones(
    _sizes(size, "new_ones"), _as_dtype(dtype) or self.dtype, _dev_or(device, self))
Tensor.new_full = lambda self, size, fill_value, dtype=None, device=None: _C.full(
    [*size], fill_value, _as_dtype(dtype) or self.dtype, _dev_or(device, self))


def _dev_or(d, t):
    return t.device if d is None else device(d)


# ---- indexing: list and array indices, multi-dim index tensors, clear refusals ----

def _index_tensor(v, dev):
    arr = _np.asarray(v)
    if arr.dtype == _np.bool_:
        return None  # a mask: __init__'s mask path
    if arr.dtype.kind not in "iu" and arr.size:
        raise IndexError(f"indexing: a list or array index must hold ints or bools, got "
                         f"{arr.dtype} values")
    return _C._copy_from_numpy(arr.astype(_np.int64), dev)


def _is_int_index(v):
    return isinstance(v, Tensor) and not v.dtype.is_floating_point and v.dtype != _bool


def normalize_index(x, index):
    """index with list/array items as i64 tensors; (the index, the dims of the one advanced
    index tensor of rank != 1 or None). Raises IndexError naming an unsupported form."""
    items = index if isinstance(index, tuple) else (index,)
    out, advanced = [], []
    for it in items:
        if isinstance(it, (list, _np.ndarray)) and not (
                isinstance(it, _np.ndarray) and it.dtype == _np.bool_):
            t = _index_tensor(it, x.device)
            if t is None:
                out.append(_np.asarray(it))
                continue
            it = t
        if isinstance(it, Tensor):
            if it.dtype.is_floating_point:
                raise IndexError(f"indexing: tensors used as indices must be integer or bool, "
                                 f"got {_dname(it.dtype)}")
            if it.dtype != _bool:
                advanced.append(len(out))
        elif not (it is None or it is Ellipsis or isinstance(it, (slice, _b.int, _b.bool,
                                                                  _np.integer, _np.bool_,
                                                                  _np.ndarray))):
            raise IndexError(f"indexing: tensors take ints, slices, None, ..., lists or tensors "
                             f"of ints, and boolean masks; got {type(it).__name__} {it!r}")
        out.append(it)
    if len(advanced) > 1:
        raise IndexError(f"indexing: {len(advanced)} integer-array indices at once (advanced "
                         f"indexing such as x[[0, 1], [1, 2]]) is not supported; index one dim at "
                         f"a time (x[[0, 1]][:, [1, 2]]) or use gather")
    return tuple(out) if isinstance(index, tuple) or len(out) != 1 else out[0], advanced


def getitem_advanced(c_getitem, x, index, advanced):
    """x[index] where item `advanced` of the index is an integer tensor of any rank: the C++
    index takes a 1-D one (index_select), so a k-D one is flattened and the result's dim split
    back into the index's shape."""
    items = list(index) if isinstance(index, tuple) else [index]
    pos = advanced[0]
    idx = items[pos]
    if idx.dim() == 1:
        return c_getitem(x, index)
    items[pos] = idx.reshape([-1])
    out = c_getitem(x, tuple(items))
    consumed = _b.sum(1 for i in items if i is not None and i is not Ellipsis)
    d = 0
    for it in items[:pos]:
        if it is None or isinstance(it, slice):
            d += 1
        elif it is Ellipsis:
            d += x.dim() - consumed
    return out.reshape(list(out.shape[:d]) + list(idx.shape) + list(out.shape[d + 1:]))


# ---- in-place ops: the object rebound to the result ----

def _check_inplace(self, name):
    if self.requires_grad and self.is_leaf and _C.is_grad_enabled():
        raise Error(f"{name}: a leaf tensor that requires grad cannot be changed in place while "
                    f"grad mode is on (as in PyTorch); do it inside `with tw.no_grad():`, or "
                    f"write y = x.{name.rstrip('_')}(...) to make a new tensor")


def checked_result(self, out, name):
    """An in-place op's result `out` for tensor `self`: its shape, and its dtype cast to self's
    (refused where PyTorch refuses: a float result into an integer tensor)."""
    if tuple(out.shape) != tuple(self.shape):
        raise Error(f"{name}: the result's shape {tuple(out.shape)} differs from the tensor's "
                    f"{tuple(self.shape)} (an in-place op cannot broadcast the tensor itself)")
    if out.dtype != self.dtype:
        if out.dtype.is_floating_point and not self.dtype.is_floating_point:
            raise Error(f"{name}: the result's dtype {_dname(out.dtype)} cannot be written into "
                        f"a {_dname(self.dtype)} tensor in place (as in PyTorch); convert it "
                        f"first")
        out = _c_to(out, self.dtype)
    return out


def _rebind(self, out, name):
    out = checked_result(self, out, name)
    if self.requires_grad and self.is_leaf:  # under no_grad: keep the leaf's flag and grad
        grad = self.grad
        out = out.detach()
        out.requires_grad = True
        if grad is not None:
            out.grad = grad
    self._rebind(out)
    return self


def _inplace(name, fn):
    def method(self, *args, **kwargs):
        _check_inplace(self, name)
        return _rebind(self, fn(self, *args, **kwargs), name)
    method.__name__ = name
    method.__doc__ = (f"In place: the tensor becomes self.{name[:-1]}(...) (tensorwire's tensors "
                      f"are functional: this Python object is rebound to the result, see "
                      f"python/README.md).")
    return method


def _fill(self, value):
    if isinstance(value, Tensor):
        return value.to(self.dtype).expand(list(self.shape))
    return _C.full(list(self.shape), value, self.dtype, self.device)


def _uniform(self, a=0.0, b=1.0):
    return _C.uniform(list(self.shape), a, b, self.dtype, self.device)


def _normal(self, mean=0.0, std=1.0):
    return _C.normal(list(self.shape), mean, std, self.dtype, self.device)


INPLACE = {
    "add_": _add, "sub_": _sub, "mul_": Tensor.mul, "div_": _div, "pow_": Tensor.pow,
    "remainder_": Tensor.remainder, "floor_divide_": _floor_divide,
    "clamp_": Tensor.clamp, "clip_": Tensor.clamp, "clamp_min_": Tensor.clamp_min,
    "clamp_max_": Tensor.clamp_max, "masked_fill_": Tensor.masked_fill, "lerp_": Tensor.lerp,
    "maximum_": Tensor.maximum, "minimum_": Tensor.minimum,
    "zero_": lambda self: _C.zeros(list(self.shape), self.dtype, self.device),
    "fill_": _fill, "copy_": lambda self, src: _fill(self, src.to(self.device)),
    "uniform_": _uniform, "normal_": _normal,
}
for _n in ("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
           "relu", "gelu", "floor", "ceil", "round", "sign", "square", "reciprocal", "trunc",
           "frac", "expm1", "silu"):
    INPLACE[_n + "_"] = getattr(Tensor, _n)
for _n, _f in INPLACE.items():
    setattr(Tensor, _n, _inplace(_n, _f))
IOPS = (("add", "add_"), ("sub", "sub_"), ("mul", "mul_"), ("truediv", "div_"),
          ("floordiv", "floor_divide_"), ("mod", "remainder_"), ("pow", "pow_"))
for _op, _n in IOPS:
    setattr(Tensor, f"__i{_op}__", getattr(Tensor, _n))
