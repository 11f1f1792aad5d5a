"""Definitions behind the optimizer statements of 004 (appendix B: momentum, Adadelta, Adam)
and 001 (sections 3.5-3.7: Algorithms 1 and 2, mixed precision), one scalar coordinate at a
time (every update here acts on each coordinate alone).

The sources' updates and the canonical ones they are compared with:

- 004's running average (B.18, Definition 7): ``M_0 = 0``, ``M_t = gamma M_{t-1} + (1 - gamma)
  g_t``, ``W_t = W_{t-1} - eta M_t``; 001's Algorithm 1 is the same with ``beta``, ``alpha_t``.
- PyTorch's ``torch.optim.SGD`` (documented algorithm): the buffer starts at ``b_1 = g_1`` and
  then ``b_t = mu b_{t-1} + (1 - dampening) g_t``, ``theta_t = theta_{t-1} - lr b_t``; its
  ``weight_decay`` adds ``lambda theta_{t-1}`` to the gradient first (coupled, L2).
- Loshchilov and Hutter's SGDW (2019, Algorithm 1): ``m_t = beta m_{t-1} + eta_t alpha g_t``,
  ``theta_t = theta_{t-1} - m_t - eta_t lambda theta_{t-1}`` (``eta_t`` the schedule
  multiplier: the learning rate sits inside the velocity).
- Zeiler's Adadelta (2012) as ``torch.optim.Adadelta``: ``v_t = rho v_{t-1} + (1 - rho)
  g_t^2``, ``Delta_t = sqrt(u_{t-1} + eps) / sqrt(v_t + eps) g_t``, ``u_t = rho u_{t-1} + (1 -
  rho) Delta_t^2``, ``theta_t = theta_{t-1} - lr Delta_t``.
- Adam (Kingma and Ba 2015, Algorithm 1) and ``torch.optim.Adam``: ``m_t``, ``v_t`` as
  B.28-B.29, ``theta_t = theta_{t-1} - lr m_hat_t / (sqrt(v_hat_t) + eps)``; AdamW
  (``torch.optim.AdamW``) first multiplies ``theta_{t-1}`` by ``1 - lr lambda``.
- IEEE 754 binary16 (half): 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits; field
  ``E = 0`` holds zero and the subnormals ``2^-14 F/1024``, ``E = 31`` infinity and NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import sympy as sp

from derive.definitions.theory import beta1, beta2

__all__ = [
    "adadelta_steps",
    "adam_moments",
    "beta1",
    "beta2",
    "binary16_value",
    "ema",
    "eq38_value",
    "rms_steps",
    "round_binary16",
    "torch_sgd_buffers",
]

#: 004's discount factor (001's beta of Algorithm 1), its step size, its eps.
gamma = sp.Symbol("gamma_d", positive=True)
eta = sp.Symbol("eta", positive=True)
eps = sp.Symbol("epsilon", positive=True)
#: 001's momentum (Algorithm 1), learning rate and weight decay.
beta = sp.Symbol("beta_m", positive=True)
alpha = sp.Symbol("alpha", positive=True)
lam = sp.Symbol("lambda_wd", nonnegative=True)
#: One step's previous state (a running average; Adam's m_{t-1}, v_{t-1}), gradient and
#: weight, and a step's direction (001's mu_t).
prev = sp.Symbol("M_prev", real=True)
m_prev = sp.Symbol("m_prev", real=True)
v_prev = sp.Symbol("v_prev", nonnegative=True)
mu = sp.Symbol("mu_t", real=True)
#: 004's G_{t,j} (Definition 11) and the point 001's line 3 takes the gradient at.
G_tj = sp.Symbol("G_tj", nonnegative=True)
w_t = sp.Symbol("w_t", real=True)
g = sp.Symbol("g", real=True)
w_prev = sp.Symbol("w_prev", real=True)
#: A heavy-ball velocity (Sutskever et al.'s v: w_t = w_{t-1} + v_t) and its momentum.
velocity = sp.Symbol("v_prev", real=True)
mu_m = sp.Symbol("mu_m", positive=True)
#: Nesterov's look-ahead point (Sutskever et al. 2013, Eq. 3-4): v_t = mu v_{t-1} - eps
#: grad f(w_{t-1} + mu v_{t-1}), w_t = w_{t-1} + v_t; heavy ball takes grad f(w_{t-1}).
NESTEROV_POINT = w_prev + mu_m * velocity

#: The number of steps, symbolic.
T = sp.Symbol("T", integer=True, positive=True)
t = sp.Symbol("t", integer=True, positive=True)
#: A gradient sequence g_1, g_2, ... of symbolic length.
G = sp.IndexedBase("g", real=True)

#: 004's running-average step (B.18) as an expression in the previous average and the new
#: gradient.
RUNNING_AVERAGE = gamma * prev + (1 - gamma) * g


def ema(values: Sequence, rate: sp.Expr = gamma, start: sp.Expr = sp.S.Zero) -> list:
    """``[A_1, .., A_t]`` of ``A_t = rate A_{t-1} + (1 - rate) x_t`` from ``A_0 = start``."""
    out, a = [], start
    for x in values:
        a = rate * a + (1 - rate) * x
        out.append(a)
    return out


def torch_sgd_buffers(gradients: Sequence, momentum: sp.Expr, dampening: sp.Expr) -> list:
    """PyTorch SGD's momentum buffers ``b_1 = g_1``, ``b_t = momentum b_{t-1} + (1 -
    dampening) g_t`` (the first step is not dampened)."""
    out: list = []
    for x in gradients:
        out.append(x if not out else momentum * out[-1] + (1 - dampening) * x)
    return out


def rms_steps(gradients: Sequence, rate: sp.Expr = gamma, epsilon: sp.Expr = eps) -> list:
    """004's Definition 11 step ``g_t / sqrt(G_t + eps)`` (times eta), ``G_t`` the running
    average of ``g^2`` from ``G_0 = 0``."""
    squares = ema([x**2 for x in gradients], rate)
    return [x / sp.sqrt(s + epsilon) for x, s in zip(gradients, squares, strict=True)]


def adadelta_steps(gradients: Sequence, rho: sp.Expr, epsilon: sp.Expr) -> list:
    """``torch.optim.Adadelta``'s ``Delta_t`` (times lr) from ``v_0 = u_0 = 0``."""
    v = u = sp.S.Zero
    out = []
    for x in gradients:
        v = rho * v + (1 - rho) * x**2
        delta = sp.sqrt(u + epsilon) / sp.sqrt(v + epsilon) * x
        u = rho * u + (1 - rho) * delta**2
        out.append(delta)
    return out


def adam_moments(
    gradients: Sequence, first: sp.Expr = beta1, second: sp.Expr = beta2, printed16: bool = False
) -> tuple[sp.Expr, sp.Expr]:
    """``(m_t, v_t)`` after ``gradients`` from zero; ``printed16``: with Definition 16's
    ``v_t = B_2 m_{t-1} + (1 - B_2) g_t^2`` as printed."""
    m = v = sp.S.Zero
    for x in gradients:
        v = second * (m if printed16 else v) + (1 - second) * x**2
        m = first * m + (1 - first) * x
    return m, v


def binary16_value(bits: int) -> Fraction | None:
    """The exact value of the binary16 bit pattern ``bits`` (IEEE 754: subnormals at ``E =
    0``); ``None`` for infinity and NaN (``E = 31``)."""
    sign, exponent, fraction = bits >> 15, (bits >> 10) & 31, bits & 1023
    if exponent == 31:
        return None
    if exponent == 0:
        magnitude = Fraction(fraction, 1024) * Fraction(1, 2**14)
    else:
        magnitude = (1 + Fraction(fraction, 1024)) * Fraction(2) ** (exponent - 15)
    return -magnitude if sign else magnitude


def round_binary16(x: Fraction) -> Fraction:
    """The binary16 value nearest a finite ``x`` (ties to even), exactly; ``x`` within the
    finite range (below 65520 in magnitude)."""
    magnitude = abs(x)
    if magnitude == 0:
        return Fraction(0)
    exponent = max(magnitude.numerator.bit_length() - magnitude.denominator.bit_length(), -14)
    while Fraction(2) ** exponent > magnitude and exponent > -14:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    quantum = Fraction(2) ** (exponent - 10)
    nearest = round(magnitude / quantum) * quantum  # round() on a Fraction: ties to even
    return nearest if x > 0 else -nearest


def eq38_value(bits: int) -> Fraction:
    """001's Eq. 38, ``(-1)^S 2^(E - 15) (1 + F/1024)``, for every bit pattern as printed."""
    sign, exponent, fraction = bits >> 15, (bits >> 10) & 31, bits & 1023
    magnitude = (1 + Fraction(fraction, 1024)) * Fraction(2) ** (exponent - 15)
    return -magnitude if sign else magnitude
