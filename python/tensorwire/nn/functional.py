"""tw.nn.functional, as torch.nn.functional (import tensorwire.nn.functional as F).

Each function is the C++ op where one exists (conv2d, pooling, layer_norm, softmax, attention,
cross_entropy) and otherwise a composition of existing ops, with torch's signature. Arguments
tensorwire cannot honour (a pooling dilation, ceil_mode, ...) raise tw.Error naming them.
"""
import math as _math

import numpy as _np

from .. import _tensorwire as _C
from .._tensorwire import Error

_cnn = _C.nn


def _pair(v, what):
    if isinstance(v, (int, _np.integer)):
        return [int(v), int(v)]
    v = [int(i) for i in v]
    if len(v) == 1:
        return v * 2
    if len(v) != 2:
        raise Error(f"{what}: expected an int or 2 ints, got {v}")
    return v


def _reduce(loss, reduction, what):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise Error(f"{what}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


# ---- activations ----

def relu(input, inplace=False):  # noqa: A002  (torch's argument names throughout)
    return input.relu()


def relu6(input, inplace=False):  # noqa: A002
    return input.clamp(0, 6)


def leaky_relu(input, negative_slope=0.01, inplace=False):  # noqa: A002
    return _C.where(input > 0, input, input * negative_slope)


def elu(input, alpha=1.0, inplace=False):  # noqa: A002
    return _C.where(input > 0, input, (input.exp() - 1) * alpha)


def gelu(input, approximate="none"):  # noqa: A002
    """The erf form, or with approximate='tanh' torch's tanh approximation."""
    if approximate == "none":
        return input.gelu()
    if approximate == "tanh":
        inner = (input + input.pow(3) * 0.044715) * _math.sqrt(2.0 / _math.pi)
        return input * 0.5 * (inner.tanh() + 1)
    raise Error(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input, inplace=False):  # noqa: A002
    return input * input.sigmoid()


def sigmoid(input):  # noqa: A002
    return input.sigmoid()


def tanh(input):  # noqa: A002
    return input.tanh()


def logsigmoid(input):  # noqa: A002
    return -softplus(-input)


def softplus(input, beta=1, threshold=20):  # noqa: A002
    """log(1 + exp(beta x)) / beta, linear where beta x > threshold (as torch)."""
    bx = input * beta
    return _C.where(bx > threshold, input, bx.exp().log1p() / beta)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):  # noqa: A002
    return input.clamp(min_val, max_val)


def _dim(dim, what):
    if dim is None:
        raise Error(f"{what}: give dim (PyTorch's implicit dim is deprecated and not supported)")
    return dim


def softmax(input, dim=None, dtype=None):  # noqa: A002
    x = input if dtype is None else input.to(dtype)
    return _C.softmax(x, _dim(dim, "softmax"))


def log_softmax(input, dim=None, dtype=None):  # noqa: A002
    x = input if dtype is None else input.to(dtype)
    return _C.log_softmax(x, _dim(dim, "log_softmax"))


def softmin(input, dim=None, dtype=None):  # noqa: A002
    return softmax(-input, dim, dtype)


def normalize(input, p=2.0, dim=1, eps=1e-12):  # noqa: A002
    return input / input.norm(p, dim, keepdim=True).clamp(eps, None)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    return (x1 * x2).sum(dim) / (x1.norm(2, dim) * x2.norm(2, dim)).clamp(eps, None)


# ---- losses ----

def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):  # noqa: A002
    """-input[n, target[n]] over the batch; weight scales each class (the mean divides by the
    summed weights, as torch)."""
    picked = -input.gather(1, target.unsqueeze(1)).squeeze(1)
    if weight is None:
        return _reduce(picked, reduction, "nll_loss")
    w = weight.index_select(0, target)
    if reduction == "mean":
        return (picked * w).sum() / w.sum()
    return _reduce(picked * w, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",  # noqa: A002
                  label_smoothing=0.0):
    """As torch: class-index targets [N] (i64) or class probabilities (input's shape), optional
    class weights and label smoothing. ignore_index is not supported for values that occur."""
    if (weight is None and label_smoothing == 0.0 and reduction == "mean" and input.dim() == 2
            and not target.dtype.is_floating_point):
        return _cnn.cross_entropy(input, target)  # the C++ loss (its own backward)
    logp = log_softmax(input, 1)
    if target.dtype.is_floating_point:  # probabilities
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / input.shape[1]
        per = -(target * logp if weight is None else target * logp * weight).sum(1)
        return _reduce(per, reduction, "cross_entropy")
    nll = nll_loss(logp, target, weight, ignore_index, "none")
    if label_smoothing:
        smooth = -(logp if weight is None else logp * weight).sum(1) / input.shape[1]
        per = nll * (1 - label_smoothing) + smooth * label_smoothing
    else:
        per = nll
    if reduction == "mean" and weight is not None:
        return per.sum() / weight.index_select(0, target).sum()
    return _reduce(per, reduction, "cross_entropy")


def mse_loss(input, target, reduction="mean"):  # noqa: A002
    if reduction == "mean":
        return _cnn.mse_loss(input, target)
    return _reduce((input - target).square(), reduction, "mse_loss")


def l1_loss(input, target, reduction="mean"):  # noqa: A002
    return _reduce((input - target).abs(), reduction, "l1_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):  # noqa: A002
    d = (input - target).abs()
    return _reduce(_C.where(d < beta, d.square() * (0.5 / beta), d - 0.5 * beta), reduction,
                   "smooth_l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0):  # noqa: A002
    d = (input - target).abs()
    return _reduce(_C.where(d < delta, d.square() * 0.5, (d - 0.5 * delta) * delta), reduction,
                   "huber_loss")


def binary_cross_entropy(input, target, weight=None, reduction="mean"):  # noqa: A002
    """-(t log p + (1 - t) log(1 - p)), each log clamped at -100 as torch does."""
    loss = -(target * input.log().clamp(-100, None) +
             (1 - target) * (1 - input).log().clamp(-100, None))
    return _reduce(loss if weight is None else loss * weight, reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",  # noqa: A002
                                     pos_weight=None):
    log_p, log_q = logsigmoid(input), logsigmoid(-input)
    pos = target * log_p if pos_weight is None else target * log_p * pos_weight
    loss = -(pos + (1 - target) * log_q)
    return _reduce(loss if weight is None else loss * weight, reduction,
                   "binary_cross_entropy_with_logits")


# ---- layers ----

def linear(input, weight, bias=None):  # noqa: A002
    out = input.matmul(weight.t())
    return out if bias is None else out + bias


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """stride, padding and dilation as an int or a pair; padding also 'valid' or 'same' (stride
    1, an even total padding)."""
    d = _pair(dilation, "conv2d")
    if padding == "valid":
        padding = 0
    elif padding == "same":
        totals = [d[i] * (weight.shape[2 + i] - 1) for i in range(2)]
        if any(t % 2 for t in totals):
            raise Error("conv2d: padding='same' with an even kernel needs asymmetric padding, "
                        "which is not supported; pad with F.pad and use padding=0")
        padding = [t // 2 for t in totals]
    return _C.conv2d(input, weight, bias, _pair(stride, "conv2d"), _pair(padding, "conv2d"), d,
                     groups)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa
               return_indices=False):
    if dilation not in (1, (1, 1), [1, 1]) or ceil_mode or return_indices:
        raise Error("max_pool2d: dilation, ceil_mode and return_indices are not supported")
    k = _pair(kernel_size, "max_pool2d")
    return _C.max_pool2d(input, k, _pair(stride, "max_pool2d") if stride else k,
                         _pair(padding, "max_pool2d"))


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
               count_include_pad=True, divisor_override=None):
    if ceil_mode or not count_include_pad or divisor_override:
        raise Error("avg_pool2d: ceil_mode, count_include_pad=False and divisor_override are not "
                    "supported")
    k = _pair(kernel_size, "avg_pool2d")
    return _C.avg_pool2d(input, k, _pair(stride, "avg_pool2d") if stride else k,
                         _pair(padding, "avg_pool2d"))


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    return _C.adaptive_avg_pool2d(input, _pair(output_size, "adaptive_avg_pool2d"))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return _C.layer_norm(input, shape, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None,  # noqa: A002
               training=False, momentum=0.1, eps=1e-5):
    """Normalised per channel (dim 1): by the running statistics, or with training=True by the
    batch's (the running statistics are then not updated: tensors are functional)."""
    shape = [1, -1] + [1] * (input.dim() - 2)
    if training:
        dims = [0] + list(range(2, input.dim()))
        mean = input.mean(dims, keepdim=True)
        var = input.var(dims, unbiased=False, keepdim=True)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    out = (input - mean) / (var + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p) (training);
    the identity when not training or p is 0."""
    if not 0.0 <= p <= 1.0:
        raise Error(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0
    keep = _C.bernoulli(_C.full(list(input.shape), 1.0 - p, input.dtype, input.device))
    return input * keep / (1.0 - p)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,  # noqa: A002
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise Error("embedding: max_norm (renormalising rows in place) is not supported")
    return _C.embedding(weight, input)


def one_hot(tensor, num_classes=-1):
    """i64 one-hot rows; num_classes=-1 reads the largest value (a round trip on a remote
    device)."""
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    return _C.one_hot(tensor, num_classes)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None):
    """softmax(q k^T * scale + mask) v, as torch 2's: a bool attn_mask (True attends) and
    is_causal run the fused C++ op; a float attn_mask (added to the scores) or dropout_p > 0
    compose it from matmul and softmax."""
    if dropout_p == 0.0 and (attn_mask is None or attn_mask.dtype == _C.dtype.bool):
        return _C.scaled_dot_product_attention(query, key, value, attn_mask, is_causal, scale)
    s = 1.0 / _math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * s
    if is_causal:
        tq, tk = scores.shape[-2], scores.shape[-1]
        causal = _C.ones([tq, tk], _C.dtype.bool, query.device).tril()
        scores = scores.masked_fill(causal.logical_not(), -_math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == _C.dtype.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), -_math.inf)
        else:
            scores = scores + attn_mask
    weights = dropout(_C.softmax(scores, -1), dropout_p, True)
    return weights.matmul(value)


def _pad_index(n, before, after, mode, device):
    """Indices along a dim of size n for reflect/replicate/circular padding."""
    i = _np.arange(-before, n + after)
    if mode == "replicate":
        i = _np.clip(i, 0, n - 1)
    elif mode == "circular":
        i = i % n
    else:  # reflect
        if before >= n or after >= n:
            raise Error(f"pad: reflect padding ({before}, {after}) must be less than the dim's "
                        f"size {n}")
        i = _np.abs(i)
        i = _np.where(i > n - 1, 2 * (n - 1) - i, i)
    return _C._copy_from_numpy(i.astype(_np.int64), device)


def pad(input, pad, mode="constant", value=None):  # noqa: A002
    """pad = (left, right) for the last dim, then (top, bottom) for the one before, ...;
    constant (value, default 0), reflect, replicate or circular. Negative pads crop."""
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise Error(f"pad: expected pairs for at most {input.dim()} dims, got {list(pad)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise Error(f"pad: unknown mode {mode!r}")
    x = input
    for k in range(len(pad) // 2):
        dim = x.dim() - 1 - k
        before, after = int(pad[2 * k]), int(pad[2 * k + 1])
        if before < 0:
            x = x.narrow(dim, -before, x.shape[dim] + before)
            before = 0
        if after < 0:
            x = x.narrow(dim, 0, x.shape[dim] + after)
            after = 0
        if before == 0 and after == 0:
            continue
        if mode != "constant":
            x = x.index_select(dim, _pad_index(x.shape[dim], before, after, mode, x.device))
            continue
        parts = []
        for n in (before, None, after):
            if n is None:
                parts.append(x)
            elif n:
                shape = list(x.shape)
                shape[dim] = n
                parts.append(_C.full(shape, 0 if value is None else value, x.dtype, x.device))
        x = _C.cat(parts, dim)
    return x


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "Error",)]
