"""Accuracy allowances, one table per dtype, in ULPs of the correctly rounded result.

A kernel result ``y`` at input ``x`` passes when

    |y - f(x)| <= (BASE + PER_CONDITION * kappa(x)) * ulp(f(x))

with ``kappa(x) = |x f'(x) / f(x)|`` the condition number of the computed function (for a
derivative, of f'). Where f is well conditioned the allowance is a few ULPs; where it is not,
it grows with kappa and no faster.

Where the numbers come from (derive/emit.py describes the arithmetic).

float64 kernels evaluate a stable form in plain float64 when none of its sums can add terms
of opposite sign (``StableForm.cancels``): every operation then keeps a small relative
error, and the only amplification is that of rounding the arguments of exp/erfc/tanh,
which the function's own kappa measures -- BASE covers the handful of roundings and the
libm error of the few operations, PER_CONDITION the argument rounding (measured: at most
5.0 ULPs, GeLU-tanh's forward at x = -1.35 with kappa = 1.44). Forms whose sums may cancel
are evaluated in double-double (~106 bits) and rounded once: what remains is the libm error
of each transcendental value (glibc's stated goal: "within a few ulp"; measured here up to
1.4 ULPs for tanh) amplified by the cancellation (at most
~3.2x in these forms, GeLU's derivative near x = -1.1), plus the final rounding. Near a
root of f' that amplification grows like kappa itself (both scale as 1/|f'|), and for
results in the subnormal range a product with a subnormal factor loses up to |x| subnormal
ULPs, which kappa also bounds. Hence ``BASE = 4``, ``PER_CONDITION = 2``; measured on
6,000 points in [-4, 4] per form, the largest error over the allowance is 0.73 of it.

float32 kernels evaluate the same forms in float64 and round once: 0.5 ULP for the final
rounding plus the float64 error, which is the float64 allowance scaled by 2^-29 (the ratio
of the two formats' ULPs), rounded up to 1 ULP for the base.

float16 (mixed mode) is float64 rounded once: within 1 ULP of the correctly rounded value,
as SPEC requires, with no condition-number term (the float64 error is ~2^-42 half-ULPs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    base: float
    per_condition: float

    def allowance(self, kappa: float) -> float:
        return self.base + self.per_condition * kappa


FLOAT64 = Tolerance(base=4.0, per_condition=2.0)

#: float32 ULPs per float64 ULP: 2^-52 / 2^-23.
FLOAT64_ULP_IN_FLOAT32 = 2.0**-29

TOLERANCE = {
    np.dtype(np.float64): FLOAT64,
    np.dtype(np.float32): Tolerance(
        base=1.0, per_condition=FLOAT64.per_condition * FLOAT64_ULP_IN_FLOAT32
    ),
}

#: float16 mixed mode against the correctly rounded value (SPEC: within 1 ULP).
FLOAT16_ULPS = 1.0

#: The VJP multiplies the derivative by g and rounds once more: half an ULP on top.
VJP_PRODUCT_ULPS = 0.5
