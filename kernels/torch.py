"""PyTorch interop: liptable's kernels as ``torch.autograd.Function``s (CPU tensors).

``kernels.torch.<module>(x, *params, **options)`` runs ``kernels.<module>.forward`` on the
tensors' memory (zero-copy NumPy views; bfloat16 through its bits) and its ``vjp`` in the
backward pass, so a kernel drops into a model, into ``torch.autograd.gradcheck`` (in
float64), or into a test. Options are keywords (``eps=``, ``approximate=``, ``stride=``).
PyTorch is an optional extra (``pip install -e '.[torch]'``); importing this module without
it raises ImportError.

>>> import torch
>>> from kernels import torch as lt
>>> x = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64, requires_grad=True)
>>> y = lt.layernorm(x, torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
>>> y.sum().backward()
>>> bool(torch.allclose(x.grad, torch.zeros(3, dtype=torch.float64), atol=1e-12))
True
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np
import torch

import kernels
from kernels._validate import BFLOAT16

__all__ = [
    "apply",
    "avgpool",
    "batchnorm",
    "centernorm",
    "conv2d",
    "dp_attention",
    "gelu",
    "l2_attention",
    "layernorm",
    "linear",
    "maxpool",
    "relu",
    "rmsnorm",
    "scs_attention",
    "sigmoid",
    "softmax",
    "swish",
    "weightnorm",
]


def _array(tensor: torch.Tensor | None) -> np.ndarray | None:
    """A NumPy view of a CPU tensor's memory (made contiguous first if it is not)."""
    if tensor is None:
        return None
    tensor = tensor.detach().contiguous()
    if tensor.device.type != "cpu":
        raise ValueError(f"expected CPU tensors, got one on {tensor.device}")
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(BFLOAT16)
    return tensor.numpy()


def _tensor(array: np.ndarray | None) -> torch.Tensor | None:
    """A tensor sharing ``array``'s memory (bfloat16 through its bits)."""
    if array is None:
        return None
    if array.dtype == BFLOAT16:
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


class _Kernel(torch.autograd.Function):
    """forward: the kernel's forward; backward: its vjp, one gradient per tensor input."""

    @staticmethod
    def forward(ctx, kernel: ModuleType, options: dict, *tensors: torch.Tensor | None):
        arrays = [_array(t) for t in tensors]
        ctx.kernel, ctx.options = kernel, options
        ctx.save_for_backward(*(t for t in tensors if t is not None))
        ctx.present = [t is not None for t in tensors]
        return _tensor(kernel.forward(*arrays, **options))

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        saved = iter(ctx.saved_tensors)
        tensors = [next(saved) if present else None for present in ctx.present]
        arrays = [_array(t) for t in tensors]
        grads = ctx.kernel.vjp(arrays[0], _array(g), *arrays[1:], **ctx.options)
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = []
        for i, needed in enumerate(ctx.needs_input_grad[2:]):
            grad = grads[i] if i < len(grads) and needed else None
            out.append(_tensor(grad))
        return (None, None, *out)


def apply(kernel: ModuleType, *tensors: torch.Tensor | None, **options: Any) -> torch.Tensor:
    """``kernel.forward(*tensors, **options)`` as a differentiable PyTorch operation."""
    return _Kernel.apply(kernel, options, *tensors)


def _wrap(kernel: ModuleType, doc: str):
    @functools.wraps(kernel.forward)
    def function(*tensors: torch.Tensor | None, **options: Any) -> torch.Tensor:
        return apply(kernel, *tensors, **options)

    function.__doc__ = f"{doc} (``kernels.{kernel.__name__.split('.')[-1]}``), differentiable."
    return function


sigmoid = _wrap(kernels.sigmoid, "Sigmoid")
relu = _wrap(kernels.relu, "ReLU")
swish = _wrap(kernels.swish, "Swish")
gelu = _wrap(kernels.gelu, "GeLU; approximate= 'none', 'tanh' or 'sigmoid'")
softmax = _wrap(kernels.softmax, "Softmax over the last axis")
layernorm = _wrap(kernels.layernorm, "LayerNorm (x, gamma, beta; eps=)")
rmsnorm = _wrap(kernels.rmsnorm, "RMSNorm (x, gamma, beta or None; eps=)")
centernorm = _wrap(kernels.centernorm, "CenterNorm (x, gamma, beta)")
batchnorm = _wrap(kernels.batchnorm, "BatchNorm, training mode (x, gamma, beta; eps=)")
linear = _wrap(kernels.linear, "Linear (x, W, b or None)")
conv2d = _wrap(kernels.conv2d, "Conv2d, NCHW (x, W, b or None; stride=, padding=)")
maxpool = _wrap(kernels.maxpool, "Global max pooling over the last axis")
avgpool = _wrap(kernels.avgpool, "Global average pooling over the last axis")
weightnorm = _wrap(kernels.weightnorm, "WeightNorm linear layer (x, v, gamma; eps=)")
dp_attention = _wrap(kernels.dp_attention, "Dot-product attention (X, Wq, Wk, Wv)")
l2_attention = _wrap(kernels.l2_attention, "L2 attention (X, Wq, Wv)")
scs_attention = _wrap(
    kernels.scs_attention, "Scaled cosine similarity attention (X, Wq, Wk, Wv; nu=, tau=, eps=)"
)
