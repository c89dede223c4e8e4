"""tensorwire from Python: tensors on local and remote devices, autograd, nn and optim, in the
idiom of PyTorch.

    import tensorwire as tw
    with tw.serve() as server:                      # a compute server in this process
        dev = tw.Device.remote(server.url)
        x = tw.randn(64, 10, device=dev, requires_grad=True)
        loss = (x @ x.T).relu().sum()
        loss.backward()
        print(loss.item(), x.grad.shape)

The C++ API (include/tensorwire/) is bound in tensorwire._tensorwire; this package adds the
PyTorch-style conveniences (shapes as *size, dtype names, no_grad, Module subclassing); tw.graph
holds captures and traces, tw.dist the collectives.
"""
import builtins as _builtins
import functools as _functools

import os as _os

# oneDNN's kernels run on OpenMP threads, which by default spin for 300,000 pauses after each
# parallel region. In a Python process those spinning threads starve tensorwire's own intra-op pool
# and an in-process server (measured on 2 cores: the digits CNN step took 94 ms instead of 2.8 ms
# on the CPU device). So they sleep at once here. (The C++ library answers a short spin of 10,000
# to libgomp instead, src/core/wait_policy.cc, which is as fast as spinning on a quiet machine;
# a Python program usually hosts its server in the same process, where sleeping at once measured
# best: examples/train_digits.py --epochs 10 on a loaded 2-core machine took 1.25-1.93 s passive,
# 3.25-3.51 s with the short spin, 3.74-5.76 s with libgomp's default.) libgomp reads this when
# the extension loads it, so it is set first; a policy the user chose (either variable) is kept.
if "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as _np  # noqa: E402

from . import _tensorwire as _C  # noqa: E402
from . import _tensor_api as _api  # noqa: E402
from ._tensorwire import (  # noqa: F401,E402  (re-exported)
    Checkpoint, CheckpointInfo, Device, Error, RemoteDeviceInfo, RngState, rng_state,
    run_with_failover, set_rng_state, Server, Tensor, WireCounters, adaptive_avg_pool2d,
    autocast_dtype, avg_pool2d, backward, bernoulli, cat, conv2d, dtype, embedding, from_bytes,
    get_num_threads, is_grad_enabled, layer_norm, log_softmax, manual_seed, matmul, max_pool2d, one_hot,
    quantize, dequantize, pack_blocks, unpack_blocks, linear_blocks, linear_int8,
    quantize_weight_int8,
    remote_devices, scaled_dot_product_attention, set_grad_enabled,
    set_num_threads, softmax, stack, wire_counters,
)
from ._tensor_api import device  # noqa: E402,F401

__version__ = _C.__version__

float32 = dtype.f32
float64 = dtype.f64
int32 = dtype.i32
int64 = dtype.i64
uint8 = dtype.u8
int8 = dtype.i8
bool_ = dtype.bool
float16 = dtype.f16
bfloat16 = dtype.bf16
float = dtype.f32  # noqa: A001  (as torch.float)
double = dtype.f64
long = dtype.i64
int = dtype.i32  # noqa: A001
half = dtype.f16

_DTYPE_NAMES = {
    "f32": float32, "float32": float32, "float": float32, "f64": float64, "float64": float64,
    "double": float64, "i32": int32, "int32": int32, "int": int32, "i64": int64, "int64": int64,
    "long": int64, "u8": uint8, "uint8": uint8, "i8": int8, "int8": int8, "bool": bool_, "f16": float16, "float16": float16,
    "half": float16, "bf16": bfloat16, "bfloat16": bfloat16,
}


def as_dtype(d):
    """A tw.dtype from a tw.dtype, a name ("f32", "float32", ...) or a numpy dtype; None stays."""
    if d is None or isinstance(d, dtype):
        return d
    if isinstance(d, str):
        if d not in _DTYPE_NAMES:
            raise Error(f"unknown dtype '{d}'")
        return _DTYPE_NAMES[d]
    try:
        return _DTYPE_NAMES[_np.dtype(d).name]
    except (TypeError, KeyError):
        raise Error(f"no tensorwire dtype for {d!r}") from None


def _numpy_dtype(d):
    return None if d == bfloat16 else _np.dtype(
        {float32: "float32", float64: "float64", int32: "int32", int64: "int64",
         uint8: "uint8", int8: "int8", bool_: "bool", float16: "float16"}[d])


def _size(size):
    if len(size) == 1 and not isinstance(size[0], _builtins.int):
        return [*size[0]]
    return [*size]


def _device(d):
    return _api.device(d)


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad = True
    return t


# ---- factories ----

def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of zeros: tw.zeros(2, 3) or tw.zeros((2, 3)); dtype defaults to f32."""
    return _finish(_C.zeros(_size(size), as_dtype(dtype) or float32, _device(device)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    """A tensor of ones (see zeros)."""
    return _finish(_C.ones(_size(size), as_dtype(dtype) or float32, _device(device)), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    """A tensor of fill_value; dtype defaults as in torch.full: bool for a bool, i64 for an int,
    else f32."""
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, _builtins.bool) else int64 if isinstance(
            fill_value, (_builtins.int, _np.integer)) else float32
    return _finish(_C.full([*size], fill_value, as_dtype(dtype), _device(device)), requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False):
    """Uniform in [0, 1) from the global seeded generator (the same on every device)."""
    return _finish(_C.rand(_size(size), as_dtype(dtype) or float32, _device(device)), requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False):
    """Standard normal from the global seeded generator (the same on every device)."""
    return _finish(_C.randn(_size(size), as_dtype(dtype) or float32, _device(device)), requires_grad)


def uniform(size, low, high, dtype=None, device=None):
    return _C.uniform([*size], low, high, as_dtype(dtype) or float32, _device(device))


def normal(size, mean, std, dtype=None, device=None):
    return _C.normal([*size], mean, std, as_dtype(dtype) or float32, _device(device))


def arange(start, end=None, step=1, dtype=None, device=None):
    """[start, end) by step (tw.arange(5) is 0..4); i64 when all three are ints, else f32."""
    if end is None:
        start, end = 0, start
    return _C.arange(start, end, step, as_dtype(dtype), _device(device))


def eye(n, m=None, dtype=None, device=None):
    return _C.eye(n, m, as_dtype(dtype) or float32, _device(device))


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (a numpy array, nested lists, a number or a Tensor).

    As in torch.tensor, Python floats give f32 and Python ints i64 unless dtype is given; a numpy
    array keeps its dtype. Use tw.from_numpy to share an array's memory instead."""
    dt = as_dtype(dtype)
    dev = _device(device)
    if isinstance(data, Tensor):
        t = data.detach().to(dev)
        return _finish(t.to(dt) if dt is not None else t, requires_grad)
    arr = _np.asarray(data)
    if not isinstance(data, _np.ndarray) and dt is None:
        if arr.dtype == _np.float64:
            arr = arr.astype(_np.float32)
        elif arr.dtype.kind in "iu" and arr.dtype not in (_np.uint8, _np.int8):
            arr = arr.astype(_np.int64)
    if dt is not None:
        npd = _numpy_dtype(dt)
        t = _C._copy_from_numpy(arr.astype(npd if npd is not None else _np.float32, copy=False), dev)
        if npd is None:
            t = t.to(dt)
    else:
        if arr.dtype.kind in "iu" and arr.dtype not in (_np.int32, _np.int64, _np.uint8, _np.int8):
            arr = arr.astype(_np.int64)
        elif arr.dtype.kind == "f" and arr.dtype not in (_np.float16, _np.float32, _np.float64):
            arr = arr.astype(_np.float64)
        t = _C._copy_from_numpy(arr, dev)
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None):
    """Shares `data` when it is a C-contiguous numpy array of a tensorwire dtype and the device is
    the CPU device (tw.from_numpy); copies otherwise (tw.tensor)."""
    dev = _device(device)
    if isinstance(data, _np.ndarray) and data.flags.c_contiguous and dev.kind == "cpu" and (
            dtype is None or as_dtype(dtype) == as_dtype(data.dtype)):
        try:
            return from_numpy(data)
        except Error:
            pass
    return tensor(data, dtype=dtype, device=dev)


def zeros_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """Zeros of input's shape (and dtype and device unless given)."""
    return full_like(input, 0, dtype, device, requires_grad)


def ones_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """Ones of input's shape (and dtype and device unless given)."""
    return full_like(input, 1, dtype, device, requires_grad)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """fill_value in input's shape (and dtype and device unless given)."""
    return _finish(_C.full(list(input.shape), fill_value, as_dtype(dtype) or input.dtype,
                           input.device if device is None else _device(device)), requires_grad)


def rand_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return rand(*input.shape, dtype=dtype or input.dtype,
                device=input.device if device is None else device, requires_grad=requires_grad)


def randn_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return randn(*input.shape, dtype=dtype or input.dtype,
                 device=input.device if device is None else device, requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    """As torch.empty; the values are zeros (there is no uninitialised memory to hand out)."""
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(input, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return zeros_like(input, dtype, device, requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """steps values from start to end, evenly spaced (computed in f64, then cast)."""
    dt = as_dtype(dtype) or float32
    if steps == 1:
        return full([1], start, dtype=dt, device=device, requires_grad=requires_grad)
    i = _C.arange(0, steps, 1, float64, _device(device))
    out = (i * ((end - start) / (steps - 1)) + start).to(dt)
    return _finish(out, requires_grad)


def from_numpy(array, device=None):
    """A tensor over a C-contiguous numpy array. On the CPU device it shares the array's memory
    (writes to the array are seen by the tensor; the tensor keeps the array alive); on other
    devices it is an upload."""
    return _C.from_numpy(array, _device(device))


def from_dlpack(obj, device=None):
    """A tensor over the memory of an object with __dlpack__ (see _tensorwire.from_dlpack)."""
    return _C.from_dlpack(obj, _device(device))


def where(condition, input, other):  # noqa: A002
    """input where condition is true, else other (either may be a number), broadcast."""
    like = input if isinstance(input, Tensor) else other
    if not isinstance(input, Tensor):
        input = _api._operand(like, input)  # noqa: A001
    if not isinstance(other, Tensor):
        other = _api._operand(like, other)
    return _C.where(condition, input, other)


# ---- autograd ----

class no_grad:
    """Turns autograd recording off on this thread inside `with tw.no_grad():` (or a function
    decorated with @tw.no_grad())."""

    _enable = False

    def __enter__(self):
        self._previous = is_grad_enabled()
        set_grad_enabled(self._enable)
        return self

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Turns autograd recording back on inside a no_grad block."""

    _enable = True


class autocast:
    """Inside `with tw.autocast(tw.bfloat16):`, on this thread, matmul (and so nn.Linear) on two
    f32 operands computes in bf16: both rounded to bf16, products summed in f32, an f32 result;
    gradients reach the f32 tensors (master weights and optimizer stay f32). tw.float32 turns it
    off inside an enclosing block (docs/lowp.md)."""

    def __init__(self, dtype=None):
        self._scope = _C._AutocastScope(as_dtype(dtype) if dtype is not None else bfloat16)

    def __enter__(self):
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        self._scope.exit()
        return False


# ---- boolean-mask indexing ----
# The C++ API has no masked_select (a result whose shape depends on values), so t[mask] reads the
# mask (a round trip on a remote device), takes the rows it selects with index_select, and
# t[mask] = v writes them back with where(); the results equal numpy's.

_c_getitem = Tensor.__getitem__
_c_setitem = Tensor.__setitem__


def _bool_mask(index):
    """The mask as a bool ndarray when `index` is a boolean mask (alone), else None."""
    items = index if isinstance(index, tuple) else (index,)
    masks = [i for i in items if (isinstance(i, Tensor) and i.dtype == bool_) or isinstance(
        i, (_builtins.bool, _np.bool_)) or (isinstance(i, _np.ndarray) and i.dtype == _np.bool_)]
    if not masks:
        return None
    if len(items) != 1:
        raise Error("indexing: a boolean mask must be the only index (t[mask])")
    m = masks[0]
    return m.numpy() if isinstance(m, Tensor) else _np.asarray(m)


def _mask_rows(t, mask):
    """(rows of t flattened over the mask's dims, the selected row indices on t's device)."""
    k = mask.ndim
    if tuple(mask.shape) != tuple(t.shape[:k]):
        raise IndexError(f"boolean mask of shape {tuple(mask.shape)} does not match the tensor's "
                         f"leading dims {tuple(t.shape[:k])}")
    rows = t.reshape([-1, *t.shape[k:]])
    idx = _C._copy_from_numpy(_np.flatnonzero(mask).astype(_np.int64), t.device)
    return rows, idx


def _getitem(self, index):
    index, advanced = _api.normalize_index(self, index)
    mask = _bool_mask(index)
    if mask is None:
        if advanced:
            return _api.getitem_advanced(_c_getitem, self, index, advanced)
        return _c_getitem(self, index)
    if mask.ndim == 0:  # numpy: t[True] is t[None], t[False] an empty t[None]
        return self[None] if mask else self[None][0:0]
    rows, idx = _mask_rows(self, mask)
    return rows.index_select(0, idx)


def _setitem(self, index, value):
    index, advanced = _api.normalize_index(self, index)
    if advanced:
        # t[[i, j, ...]] = v: the rows i, j, ... of dim 0 (an integer index alone).
        if isinstance(index, tuple) or index.dim() != 1:
            raise IndexError("indexing: assignment takes an integer index only alone and 1-D "
                             "(t[[0, 2]] = v); for other forms assign a slice or a mask")
        picked = index.numpy().astype(_np.int64) % _builtins.max(self.shape[0], 1)
        if len(_np.unique(picked)) != len(picked):
            raise IndexError("indexing: an assignment's integer index repeats a row")
        return _assign_rows(self, picked, self, value)
    mask = _bool_mask(index)
    if mask is None:
        return _c_setitem(self, index, value)
    if mask.ndim == 0:
        if mask:
            _c_setitem(self, Ellipsis, value)
        return None
    rows, idx = _mask_rows(self, mask)
    return _assign_rows(self, _np.flatnonzero(mask), rows, value, mask)


def _assign_rows(self, picked, rows, value, mask=None):
    """self with rows[picked[r]] = value[r] (value broadcast to the picked rows); `rows` is self
    flattened over the mask's dims (dim 0 without a mask)."""
    count = len(picked)
    if count == 0:
        return None
    if mask is None:
        mask = _np.zeros(rows.shape[0], dtype=_np.bool_)
        mask[picked] = True
    rest = list(rows.shape[1:])
    if not isinstance(value, Tensor):
        value = tensor(value, dtype=self.dtype, device=self.device)
    # Row r of the result takes value row pos[r] where the mask is set, its own row elsewhere.
    src = value.to(self.dtype).expand([count, *rest])
    pos = _np.zeros(mask.size, dtype=_np.int64)
    pos[picked] = _np.arange(count)
    spread = src.index_select(0, _C._copy_from_numpy(pos, self.device))
    sel = _C._copy_from_numpy(mask.reshape(-1, *([1] * len(rest))), self.device)
    out = where(sel.expand(list(rows.shape)), spread, rows).reshape(list(self.shape))
    _c_setitem(self, (), out)
    return None


Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem


# ---- files and servers ----

def _named(tensors):
    if hasattr(tensors, "named_parameters"):
        return [(name, p.data) for name, p in tensors.named_parameters()]
    if isinstance(tensors, dict):
        return [*tensors.items()]
    return [*tensors]


def save_safetensors(path, tensors, metadata=None):
    """Writes tensors (a dict, (name, tensor) pairs, or a module's parameters) to `path` in the
    safetensors format, with optional string metadata."""
    _C.save_safetensors(path, _named(tensors), metadata or {})


def load_safetensors(path, device=None):
    """The tensors of a safetensors file (a dict name -> Tensor) on `device` (default cpu)."""
    return read_safetensors(path, device)[0]


def read_safetensors(path, device=None):
    """(tensors, metadata) of a safetensors file."""
    return _C.read_safetensors(path, _device(device))


def load_safetensors_into(path, module, strict=True):
    """Loads a file written by save_safetensors(path, module) into a module of the same shape."""
    module.load_state_dict(load_safetensors(path), strict=strict)
    return module


def serve(device=None, listen=None, *, tls=False, **options):
    """Starts a compute server in this process (tw::serve) and returns it: .urls, .url,
    .metrics_url, .tls_fingerprint, .stop(), .wait(), and it is a context manager that stops it on
    exit.

    listen: an address or a list (default "tcp://127.0.0.1:0", or "tls://127.0.0.1:0" with
    tls=True; port 0 picks a free port). device: its kind is the backend unless backend= is
    given ("cpu", "torch" or one per device, "cpu,torch"). The other keywords are the members of
    tw::ServerOptions (tensorwire/server.h, declared once there; tw.serve_options() lists them),
    durations in seconds: devices, backend, worker_threads, max_sessions, max_frame_bytes,
    session_memory_bytes, max_graph_ops, max_op_cost (seconds of estimated work one op may take;
    0: no limit), max_memory_bytes, handshake_timeout,
    session_queue_depth, credential (clients must present it: Device.remote(url,
    credential=...)), tls_cert_file and tls_key_file (PEM; without them a tls:// address gets a
    self-signed certificate, whose fingerprint clients pin: Device.remote(url,
    tls_fingerprint=server.tls_fingerprint)), insecure, metrics ("tcp://127.0.0.1:0": Prometheus
    text at .metrics_url + "/metrics"), capability_ttl, transfer_timeout, resume_grace,
    collective_host, spin_us, spin_threads."""
    if listen is None:
        listen = ["tls://127.0.0.1:0" if tls else "tcp://127.0.0.1:0"]
    elif isinstance(listen, str):
        listen = [listen]
    options["listen"] = list(listen)
    if "backend" not in options and device is not None:
        options["backend"] = _device(device).kind
    return _C._serve(None, options)


def serve_options():
    """The keywords tw.serve() takes besides device, listen and tls: tw::ServerOptions' members."""
    return list(_C._server_option_names())


from . import dist, graph, nn, onnx, optim  # noqa: E402,F401
from ._functions import *  # noqa: E402,F401,F403  (torch.X(tensor, ...) forms; last: they shadow builtins)

__all__ = [n for n in dir() if not n.startswith("_")]
