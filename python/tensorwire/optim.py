"""tw.optim: SGD, Adam and AdamW with PyTorch's update rules (tensorwire/optim.h). An update runs
as tensor ops on the parameters' device (nothing is read back) and rebinds each Parameter."""
from . import _tensorwire as _C

Optimizer = _C.optim.Optimizer


def _params(params):
    params = list(params)
    if any(isinstance(p, dict) for p in params):
        raise _C.Error("optim: parameter groups are not supported; pass the parameters")
    return params


class SGD(_C.optim.SGD):
    """torch.optim.SGD: momentum, dampening, weight_decay, nesterov."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        super().__init__(_params(params), lr, momentum, dampening, weight_decay, nesterov)


class Adam(_C.optim.Adam):
    """torch.optim.Adam (weight_decay is L2, added to the gradient)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(_params(params), lr, tuple(betas), eps, weight_decay)


class AdamW(_C.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay, default 1e-2)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(_params(params), lr, tuple(betas), eps, weight_decay)
