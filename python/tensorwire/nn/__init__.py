"""tw.nn: modules and losses (tensorwire/nn.h), as torch.nn.

The layers (Linear, Conv2d, ...) are the C++ modules; subclass tw.nn.Module to write your own, as
in PyTorch (assign Parameters and modules as attributes, define forward). Parameters are
initialised as PyTorch does from the global seeded generator (tw.manual_seed).
"""
from collections import OrderedDict as _OrderedDict

from .. import _tensor_api as _api
from .. import _tensorwire as _C

_cnn = _C.nn
Parameter = _cnn.Parameter
Linear = _cnn.Linear
Conv2d = _cnn.Conv2d
MaxPool2d = _cnn.MaxPool2d
AvgPool2d = _cnn.AvgPool2d
ReLU = _cnn.ReLU
GELU = _cnn.GELU
Dropout = _cnn.Dropout
LayerNorm = _cnn.LayerNorm
Embedding = _cnn.Embedding
Flatten = _cnn.Flatten
RNN = _cnn.RNN
LSTM = _cnn.LSTM
GRU = _cnn.GRU
MultiheadAttention = _cnn.MultiheadAttention
TransformerBlock = _cnn.TransformerBlock
GPT = _cnn.GPT
Generator = _cnn.Generator
# One model over several devices (tensorwire/split.h).
LayerPlan = _cnn.LayerPlan
place = _cnn.place
free_memory = _cnn.free_memory
Pipeline = _cnn.Pipeline
PipelineGenerator = _cnn.PipelineGenerator
TensorParallelGPT = _cnn.TensorParallelGPT
cross_entropy = _cnn.cross_entropy
mse_loss = _cnn.mse_loss


# A Parameter behaves as its current value: attributes and operators go to .data.
def _param_getattr(self, name):
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(self.data, name)


Parameter.__getattr__ = _param_getattr
for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__matmul__", "__neg__", "__pow__", "__getitem__", "__lt__", "__le__",
            "__gt__", "__ge__", "__len__", "__array__"):
    setattr(Parameter, _op, (lambda n: lambda self, *a: getattr(self.data, n)(*a))(_op))
Parameter.__repr__ = lambda self: "Parameter containing:\n" + repr(self.data)


def _param_inplace(name, fn):
    """p.add_(...) and the other in-place ops on a Parameter: allowed under tw.no_grad() (as in
    PyTorch), where p is rebound to the result (p.set keeps requires_grad and the grad)."""
    def method(self, *args, **kwargs):
        if _C.is_grad_enabled():
            raise _C.Error(f"{name}: a Parameter (a leaf that requires grad) cannot be changed in "
                           f"place while grad mode is on (as in PyTorch); do it inside "
                           f"`with tw.no_grad():`")
        value = self.data
        self.set(_api.checked_result(value, fn(value.detach(), *args, **kwargs), name))
        return self
    method.__name__ = name
    return method


for _n, _f in _api.INPLACE.items():
    setattr(Parameter, _n, _param_inplace(_n, _f))
for _op, _n in _api.IOPS:
    setattr(Parameter, f"__i{_op}__", getattr(Parameter, _n))


def _is_module(v):
    return isinstance(v, (Module, _cnn._CModule))


class Module:
    """Base class of Python modules: assign Parameters and modules as attributes, define
    forward(). parameters(), named_parameters(), train()/eval(), to(device), zero_grad(),
    state_dict() and load_state_dict() work over the whole tree, C++ children included."""

    def __init__(self):
        object.__setattr__(self, "_parameters", _OrderedDict())
        object.__setattr__(self, "_modules", _OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning module attributes")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif _is_module(value):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_parameter(self, name, value):
        setattr(self, name, value if isinstance(value, Parameter) else Parameter(value))
        return self._parameters[name]

    def add_module(self, name, module):
        setattr(self, name, module)
        return module

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def children(self):
        return list(self._modules.values())

    def named_parameters(self, prefix=""):
        out, seen = [], set()
        for name, p in self._parameters.items():
            if id(p) not in seen:
                seen.add(id(p))
                out.append((prefix + name, p))
        for cname, child in self._modules.items():
            if isinstance(child, Module):
                items = child.named_parameters(prefix + cname + ".")
            else:
                items = [(prefix + cname + "." + n, p) for n, p in child.named_parameters()]
            for name, p in items:
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append((name, p))
        return out

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def train(self, mode=True):
        object.__setattr__(self, "training", mode)
        for child in self._modules.values():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, device):
        for p in self._parameters.values():
            p.set(p.data.to(device))
        for child in self._modules.values():
            child.to(device)
        return self

    def zero_grad(self):
        for p in self.parameters():
            p.zero_grad()

    def state_dict(self):
        return _OrderedDict((name, p.data) for name, p in self.named_parameters())

    def load_state_dict(self, state, strict=True):
        params = dict(self.named_parameters())
        if strict:
            missing = sorted(set(params) - set(state))
            unexpected = sorted(set(state) - set(params))
            if missing or unexpected:
                raise _C.Error(f"load_state_dict: missing keys {missing}, unexpected keys "
                               f"{unexpected}")
        for name, value in state.items():
            if name in params:
                p = params[name]
                p.set(value.to(p.data.device))

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")


class Sequential(Module):
    """Applies its modules in order (named "0", "1", ...). When every module is a C++ one, the
    whole forward pass is one C++ call."""

    def __init__(self, *modules):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module):
        if not _is_module(module):
            raise TypeError(f"Sequential takes modules, not {type(module).__name__}")
        setattr(self, str(len(self._modules)), module)
        object.__setattr__(self, "_fused", None)
        return self

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        fused = self.__dict__.get("_fused")
        if fused is None and all(isinstance(m, _cnn._CModule) for m in self._modules.values()):
            fused = _cnn._CSequential(list(self._modules.values()))
            object.__setattr__(self, "_fused", fused)
        if fused is not None:
            return fused(x)
        for m in self._modules.values():
            x = m(x)
        return x


class CrossEntropyLoss(Module):
    """Mean over the batch of -log softmax(logits)[target]."""

    def forward(self, logits, target):
        return cross_entropy(logits, target)


class MSELoss(Module):
    """Mean of (input - target)^2."""

    def forward(self, input, target):  # noqa: A002  (torch's name)
        return mse_loss(input, target)


class Identity(Module):
    def forward(self, x):
        return x


from . import functional  # noqa: E402  (tw.nn.functional: import tensorwire.nn.functional as F)


class init:  # noqa: N801
    """Initialisers (tensorwire/nn.h's nn::init)."""

    kaiming_uniform = staticmethod(_cnn.kaiming_uniform)


def quantize(model, scheme):
    """Weight-only quantization for inference, in place: every Linear of `model` whose in_features
    is a multiple of 32 gets "q8" (ggml Q8_0 blocks) or "q4" (Q4_0) weights, packed (its "weight"
    parameter then holds the u8 bytes, which state_dict and checkpoints carry packed) and
    dequantized inside the kernel. Returns how many Linears were packed."""
    if scheme not in ("q8", "q4"):
        raise _C.Error(f"quantize: unknown scheme '{scheme}' (expected \"q8\" or \"q4\")")
    if isinstance(model, _cnn._CModule):
        return _cnn._quantize(model, scheme)
    return sum(quantize(child, scheme) for child in model.children())
