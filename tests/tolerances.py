"""Accuracy allowances, one table per dtype, in ULPs of the correctly rounded result.

A kernel result ``y`` at input ``x`` passes when

    |y - f(x)| <= (BASE + PER_CONDITION * kappa(x)) * ulp(f(x))

with ``kappa(x) = |x f'(x) / f(x)|`` the condition number of the computed function (for a
derivative, of f'). Where f is well conditioned the allowance is a few ULPs; where it is not,
it grows with kappa and no faster, as a backward-stable evaluation allows: rounding the
argument of ``exp``/``erfc``/``tanh`` by one ULP moves the result by kappa ULPs.

Where the numbers come from. float64/float32: each stable form is at most ~20 rounded
operations with libm functions accurate to ~1 ULP; the forms are chosen so that no
subtraction cancels except through the function's own conditioning (e.g. Swish's
derivative at its root near x = -1.28, where kappa is unbounded). A derivation of
``BASE = 4``: the largest chain of operations that can compound without cancellation is a
quotient of two short sums and one libm call (<= 4 half-ULP roundings + 1 libm ULP).
``PER_CONDITION = 2``: argument rounding of at most two rounded operations before the libm
call (e.g. ``-(c x)`` with ``c`` rounded, then 2u) each contributes kappa/2 ULPs, plus the
function's own input sensitivity. float16 (mixed mode): the work is done in float64 and
rounded once, so the result is within 1 ULP of the correctly rounded value (0.5 ULP for the
rounding plus a float64 error that is ~2^-42 half-ULPs), as SPEC requires.
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


TOLERANCE = {
    np.dtype(np.float64): Tolerance(base=4.0, per_condition=2.0),
    np.dtype(np.float32): Tolerance(base=4.0, per_condition=2.0),
}

#: float16 mixed mode against the correctly rounded value (SPEC: within 1 ULP).
FLOAT16_ULPS = 1.0

#: The VJP multiplies the derivative by g and rounds once more: half an ULP on top.
VJP_PRODUCT_ULPS = 0.5
