"""One optimizer step on flat arrays: Adam, AdamW (PyTorch's convention) and SGD with
momentum.

Adam (Kingma and Ba 2015, Algorithm 1; ``torch.optim.Adam``; 004_a581282367ea7257.txt
Definition 16 and 001_76ce3a8a4b6079c3.txt Algorithm 2 up to their eps and misprints, see
the report's ``adaptive`` section). For every element, with ``t = step`` (the count of
this step, from 1)::

    g' = g + weight_decay * p               (Adam: L2 decay, coupled; not for AdamW)
    m' = beta1 m + (1 - beta1) g'
    v' = beta2 v + (1 - beta2) g'^2
    p' = p * (1 - lr weight_decay)          (AdamW: decoupled decay; p' = p for Adam)
         - (lr / (1 - beta1^t)) m' / (sqrt(v') / sqrt(1 - beta2^t) + eps)

``adam(p, g, m, v, step=t, ...)`` returns ``(p', m', v')`` as new arrays of the input's
dtype; nothing is written into the inputs (call it as ``p, m, v = adam(p, g, m, v, ...)``).
``adamw`` is ``adam(..., decoupled=True)`` with PyTorch's default decay 0.01. The eps is
added to ``sqrt(v_hat)``, as PyTorch and Kingma and Ba do; 004 puts it under the root.

SGD (``torch.optim.SGD``): ``g' = g + weight_decay p``; the buffer ``b' = g'`` on the first
step (``first=True``: PyTorch's buffer starts undamped) and ``b' = momentum b + (1 -
dampening) g'`` after; ``p' = p - lr b'`` (``nesterov``: ``p' = p - lr (g' + momentum b')``).
004's momentum with step size eta and discount gamma is ``sgd(lr=eta (1 - gamma),
momentum=gamma, dampening=0)`` (claim ``momentum.definition_004``).

Arithmetic. Every element is computed in float64 from its inputs widened exactly, and each
output is rounded once to the input's dtype (round to nearest even; for float16 and
bfloat16 directly from float64, inf from 65520 and from 2^128 - 2^119 on, as
``kernels._f16`` and ``kernels._bf16``): float32, float16 and bfloat16 outputs are
the correct roundings of values within the float64 error below of the exact ones. float16
state is kept in float16 (PyTorch's AMP keeps float32 master weights and state: pass
float32 arrays for that); a float16 ``v'`` overflows exactly when its correctly rounded
value does (``(1 - beta2) g^2`` past 65504 with g = 8096 at beta2 = 0.999).

The scalars are computed once per call: ``1 - beta``, the powers ``beta^t`` by binary
exponentiation in float64 (``bit_length(t) - 1`` squarings and ``popcount(t) - 1`` further
products; each squaring doubles the relative error and adds one rounding), ``1 - beta^t``,
``lr / (1 - beta1^t)``, ``sqrt(1 - beta2^t)`` and ``1 - lr weight_decay``. The loop per
element performs, in this order: (Adam with decay) ``w p``, ``g + w p``; ``beta1 m``,
``c1 g'``, their sum; ``beta2 v``, ``(c2 g') g'``, their sum; ``sqrt(v')``, its quotient by
``sqrt(1 - beta2^t)``, ``+ eps``; ``s m'``, its quotient by the denominator; (AdamW)
``p d``; the difference. Each is one float64 rounding; ``tests/kernels/test_optim.py``
bounds the error from this count (a running bound on the magnitudes, no tuning) and checks
it against an exact reference per element.

The loops vectorize (checked in the assembly: packed ``sqrt`` and arithmetic; ``sqrt`` is
the only call in them); there is no reduction, so no ``fastmath``. float16 and bfloat16
input go through three vectorized passes: widen, the float64 loop, narrow. NaN and inf
propagate as IEEE arithmetic says: an infinite gradient makes ``m'`` and ``v'`` infinite
and ``p'`` NaN (``inf/inf``); a float64 gradient past about 4e155 makes ``v'`` itself
overflow (as in PyTorch), and then ``p' = p``; ``eps = 0`` with ``m' = v' = 0`` gives
``0/0``, NaN.

>>> import numpy as np
>>> p, m, v = adam(np.array([1.0]), np.array([0.5]), np.zeros(1), np.zeros(1), step=1, lr=0.1)
>>> [float(a[0]) for a in (p, m, v)]  # first step: p - lr sign(g), eps aside
[0.900000002, 0.04999999999999999, 0.0002500000000000002]
>>> sgd(np.array([1.0]), np.array([2.0]), np.zeros(1), lr=0.5, momentum=0.9, first=True)
(array([0.]), array([2.]))
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

from kernels._bf16 import BFLOAT16, to_bfloat16
from kernels._validate import flag, float_array, real, same_shape_and_dtype, whole
from kernels.cast import cast, widen

__all__ = ["adam", "adam_scalars", "adamw", "power", "sgd"]


def power(base: float, exponent: int) -> float:
    """``base ** exponent`` in float64 by binary exponentiation (square and multiply), with
    a rounding count fixed by ``exponent`` (no libm call): ``bit_length - 1`` squarings and
    ``popcount - 1`` products (``1.0 * x`` is exact)."""
    result, square = 1.0, float(base)
    while exponent:
        if exponent & 1:
            result *= square
        exponent >>= 1
        if exponent:
            square *= square
    return result


def adam_scalars(
    step: int, lr: float, beta1: float, beta2: float, weight_decay: float, decoupled: bool
) -> tuple[float, float, float, float, float, float]:
    """``(c1, c2, l2, decay, step_size, correction2)``: ``1 - beta1``, ``1 - beta2``, the
    coupled decay (0 for AdamW), the decoupled factor ``1 - lr weight_decay`` (1 for
    Adam), ``lr / (1 - beta1^t)`` and ``sqrt(1 - beta2^t)``, each as the loop uses it."""
    c1, c2 = 1.0 - beta1, 1.0 - beta2
    correction1 = 1.0 - power(beta1, step)
    correction2 = math.sqrt(1.0 - power(beta2, step))
    l2 = 0.0 if decoupled else weight_decay
    decay = 1.0 - lr * weight_decay if decoupled else 1.0
    return c1, c2, l2, decay, lr / correction1, correction2


@njit(cache=True, inline="always")
def _adam_element(p, g, m, v, beta1, beta2, c1, c2, l2, decay, step_size, correction2, eps):
    """One element's ``(p', m', v')`` in float64 (the module docstring's operations)."""
    gradient = g + l2 * p if l2 != 0.0 else g
    m_new = beta1 * m + c1 * gradient
    v_new = beta2 * v + c2 * gradient * gradient
    denominator = np.sqrt(v_new) / correction2 + eps
    p_new = p * decay - step_size * m_new / denominator
    return p_new, m_new, v_new


@njit(cache=True, error_model="numpy")
def _adam_loop(p, g, m, v, scalars, p_out, m_out, v_out):
    """float32 or float64 inputs, widened exactly; each output rounded once by its store
    (float64 outputs for float16 input, narrowed afterwards)."""
    beta1, beta2, c1, c2, l2, decay, step_size, correction2, eps = scalars
    for i in range(p.size):
        p_new, m_new, v_new = _adam_element(
            np.float64(p[i]),
            np.float64(g[i]),
            np.float64(m[i]),
            np.float64(v[i]),
            beta1,
            beta2,
            c1,
            c2,
            l2,
            decay,
            step_size,
            correction2,
            eps,
        )
        p_out[i] = p_new
        m_out[i] = m_new
        v_out[i] = v_new


def _arrays(param: ArrayLike, **others: ArrayLike) -> tuple[np.ndarray, ...]:
    """``param`` and the others checked (float dtype, param's shape and dtype), as C-ordered
    arrays of param's shape."""
    p = float_array(param, "param", bfloat16=True)
    checked = [p]
    for name, value in others.items():
        array = float_array(value, name, bfloat16=True)
        same_shape_and_dtype(p, array, name)
        checked.append(array)
    return tuple(np.ascontiguousarray(a) for a in checked)


def _run(loop, arrays: tuple[np.ndarray, ...], scalars: tuple, outputs: int):
    """Run ``loop`` over the flattened ``arrays`` into ``outputs`` new arrays of their shape
    and dtype. float16 and bfloat16 input is widened exactly to float64 first and each
    output rounded once to the input's format (``kernels.cast``, ``kernels._bf16``): three
    vectorized passes (a single loop over the half bits did not vectorize)."""
    shape, dtype = arrays[0].shape, arrays[0].dtype
    half, brain = dtype == np.float16, dtype == BFLOAT16
    flat = [a.reshape(-1) for a in arrays]
    if half:
        flat = [widen(a) for a in flat]
    elif brain:
        flat = [a.astype(np.float64) for a in flat]  # exact
    wide = half or brain
    out = [np.empty(flat[0].size, np.float64 if wide else dtype) for _ in range(outputs)]
    loop(*flat, np.array(scalars, np.float64), *out)
    if half:
        out = [cast(o, "float16") for o in out]
    elif brain:
        out = [to_bfloat16(o) for o in out]
    return tuple(o.reshape(shape) for o in out)


def adam(
    param: ArrayLike,
    grad: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    *,
    step: int,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam step (AdamW with ``decoupled=True``): ``(param', exp_avg', exp_avg_sq')``.

    ``step`` counts this step from 1 (PyTorch's ``state["step"]`` after its increment);
    ``exp_avg`` and ``exp_avg_sq`` are zero before the first step. ``lr``, ``eps`` and
    ``weight_decay`` are finite and >= 0, the betas in [0, 1). All four arrays share one
    shape and one dtype (float16, bfloat16, float32 or float64); see the module docstring.
    """
    arrays = _arrays(param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    t = whole(step, "step", low=1)
    lr = real(lr, "lr", low=0.0)
    beta1, beta2 = (real(b, name, low=0.0) for b, name in ((beta1, "beta1"), (beta2, "beta2")))
    for value, name in ((beta1, "beta1"), (beta2, "beta2")):
        if value >= 1.0:
            raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    eps = real(eps, "eps", low=0.0)
    weight_decay = real(weight_decay, "weight_decay", low=0.0)
    decoupled = flag(decoupled, "decoupled")
    scalars = (beta1, beta2, *adam_scalars(t, lr, beta1, beta2, weight_decay, decoupled), eps)
    return _run(_adam_loop, arrays, scalars, 3)


def adamw(
    param: ArrayLike,
    grad: ArrayLike,
    exp_avg: ArrayLike,
    exp_avg_sq: ArrayLike,
    *,
    step: int,
    lr: float = 1e-3,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One AdamW step (``torch.optim.AdamW``): :func:`adam` with ``decoupled=True``."""
    return adam(
        param,
        grad,
        exp_avg,
        exp_avg_sq,
        step=step,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        weight_decay=weight_decay,
        decoupled=True,
    )


@njit(cache=True, inline="always")
def _sgd_element(p, g, b, momentum, damped, l2, lr, first, nesterov):
    """One element's ``(p', b')`` in float64."""
    gradient = g + l2 * p if l2 != 0.0 else g
    b_new = gradient if first else momentum * b + damped * gradient
    direction = gradient + momentum * b_new if nesterov else b_new
    return p - lr * direction, b_new


@njit(cache=True, error_model="numpy")
def _sgd_loop(p, g, b, scalars, p_out, b_out):
    momentum, damped, l2, lr, first, nesterov = scalars
    for i in range(p.size):
        p_new, b_new = _sgd_element(
            np.float64(p[i]),
            np.float64(g[i]),
            np.float64(b[i]),
            momentum,
            damped,
            l2,
            lr,
            first != 0.0,
            nesterov != 0.0,
        )
        p_out[i] = p_new
        b_out[i] = b_new


def sgd(
    param: ArrayLike,
    grad: ArrayLike,
    momentum_buffer: ArrayLike,
    *,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    first: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """One SGD step (``torch.optim.SGD``): ``(param', momentum_buffer')``.

    ``first``: the buffer does not exist yet (PyTorch's first step with momentum), so
    ``b' = g'`` undamped and ``momentum_buffer`` is not read. With ``momentum = 0`` the
    buffer is the gradient itself. ``nesterov`` needs ``momentum > 0`` and ``dampening =
    0``, as PyTorch requires.
    """
    arrays = _arrays(param, grad=grad, momentum_buffer=momentum_buffer)
    lr = real(lr, "lr", low=0.0)
    momentum = real(momentum, "momentum", low=0.0)
    dampening = real(dampening, "dampening", low=0.0, high=1.0)
    weight_decay = real(weight_decay, "weight_decay", low=0.0)
    nesterov, first = flag(nesterov, "nesterov"), flag(first, "first")
    if nesterov and (momentum <= 0.0 or dampening != 0.0):
        raise ValueError("nesterov: needs momentum > 0 and dampening = 0")
    first = first or momentum == 0.0  # no momentum: the buffer is the gradient
    scalars = (momentum, 1.0 - dampening, weight_decay, lr, float(first), float(nesterov))
    return _run(_sgd_loop, arrays, scalars, 2)
