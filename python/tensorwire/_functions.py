"""torch.X(tensor, ...) forms of the Tensor methods: tw.max(x, dim=1) is x.max(dim=1). Imported
last by __init__.py, since several names (max, min, sum, abs, all, any, round, pow) shadow
Python's builtins in the package's namespace."""
from ._tensorwire import Tensor as _Tensor

_METHODS = (
    "abs", "absolute", "neg", "negative", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10",
    "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "erf", "reciprocal", "floor",
    "ceil", "round", "trunc", "frac", "sign", "square", "logical_not", "add", "sub", "subtract",
    "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "pow", "maximum", "minimum",
    "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "logical_and",
    "logical_or", "logical_xor", "clamp", "clip", "sum", "mean", "prod", "max", "min", "amax",
    "amin", "argmax", "argmin", "std", "var", "norm", "all", "any", "allclose", "isclose", "equal",
    "isnan", "isinf", "isfinite", "cumsum", "mm", "bmm", "dot", "outer", "addmm", "reshape",
    "flatten", "permute", "transpose", "t", "squeeze", "unsqueeze", "flip", "roll", "narrow",
    "chunk", "split", "unbind", "select", "tril", "triu", "gather", "index_select", "scatter_add",
    "masked_fill", "lerp", "movedim", "swapaxes", "numel", "clone", "unflatten")


def _forward(name):
    def fn(input, *args, **kwargs):  # noqa: A002  (torch's name)
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"tw.{name}(x, ...) is x.{name}(...): " + (getattr(_Tensor, name).__doc__ or "")
    return fn


for _n in _METHODS:
    globals()[_n] = _forward(_n)


def is_tensor(obj):
    return isinstance(obj, _Tensor)


__all__ = list(_METHODS) + ["is_tensor"]
