"""Accuracy allowances, one table per dtype, in ULPs of the correctly rounded result.

A kernel result ``y`` at input ``x`` passes when

    |y - f(x)| <= (BASE + PER_CONDITION * kappa(x)) * ulp(f(x))

with ``kappa(x) = |x f'(x) / f(x)|`` the condition number of the computed function (for a
derivative, of f'). Where f is well conditioned the allowance is a few ULPs; where it is not,
it grows with kappa and no faster.

Where the numbers come from (derive/codegen/emit.py describes the arithmetic).

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

import mpmath
import numpy as np

from derive.reference.core import ulp


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

#: bfloat16 mixed mode, float64 rounded once as for float16: within 1 ULP.
BFLOAT16_ULPS = 1.0

#: The VJP multiplies the derivative by g and rounds once more: half an ULP on top.
VJP_PRODUCT_ULPS = 0.5


def vjp_allowance(dtype, kappa: float, slope, g: float, product) -> float:
    """ULPs of the VJP ``g f'`` allowed: the derivative's allowance, carried into ULPs of
    the product, plus :data:`VJP_PRODUCT_ULPS`.

    Where ``f'`` is a normal float64, ULPs are relative and the product keeps the
    derivative's relative error: its allowance carries over as it is. A subnormal float64
    ``f'`` (Swish's below x = -708, the GeLUs' further right) errs in absolute units of
    2^-1074, which the product scales by ``|g|`` while the result may be a normal number
    with a far finer relative spacing: one ULP of ``f'`` is then ``|g| 2^-1074 / ulp(g f')``
    ULPs of the product (Swish at x = -716, g = 9: 1457 ULPs of the product from about 324
    of the derivative).
    """
    allowance = TOLERANCE[np.dtype(dtype)].allowance(kappa)
    if np.dtype(dtype) == np.float64 and abs(slope) < 2.0**-1022:
        with mpmath.workdps(30):
            carried = float(abs(g) * ulp(slope, dtype) / ulp(product, dtype))
        allowance *= max(1.0, carried)
    return allowance + VJP_PRODUCT_ULPS


# --- normalizations (LayerNorm, RMSNorm, CenterNorm, WeightNorm) ------------------------
#
# A vector module's outputs are sums of terms that may cancel, so each output is judged by
# a derived error bound instead of a condition number:
#
#     |y - exact| <= NORM_ULPS[dtype] * ulp(exact) + (NORM_ROUNDINGS + n) * 2^-53 * S
#
# ``S`` is the sum of the magnitudes of the terms the output is made of (the "scale" of the
# output; ``tests/kernels/test_norms.py`` computes it per quantity, e.g. for LayerNorm's dx_i it is
# ``r (|a_i| + mean|a| + |z_i| mean|a z| + mean|z| (mean|a z| + |z_i| mean|a|))``, the last
# terms carrying the error of the row mean, which moves every z_j by up to n u mean|z|),
# and ``n`` is the length of the longest plain (uncompensated) float64 sum on the way: 0
# for float64 row statistics and row means (compensated, double-double), D for the
# float32/float16 paths' row sums, N + D for dgamma there (N rows of products whose z
# carries a length-D sum's error), N for dbeta, and D (or O) for a matrix product done by
# BLAS. Recursive summation of n terms errs by at most
# n * 2^-53 * (sum of their magnitudes) (Higham, Accuracy and Stability, Eq. 4.4).
#
# NORM_ROUNDINGS counts the other roundings, each of relative size 2^-53, in the longest
# chain: for LayerNorm's dx_i, a_i = gamma_i g_i (1), the scale r through var, +eps, sqrt
# and 1/. (3), z_i = d_i r (1 + d_i's 1 + r's 3), the products and differences of the closed
# form (4) and the final product by r (1 + 3): 16; BatchNorm's sigma-path term d_k w m_ad
# (w = r^2 or r/sigma, each carrying r's 3) reaches 19 to first order. 20 covers both with
# room for the second-order terms; the other quantities need fewer.
#
# float64 results carry that error only. float32 and float16 results are float64 values
# rounded once: half an ULP of the output format plus the float64 error (which can move the
# rounding to the other neighbour only by that much).

#: The roundings of relative size 2^-53 in the longest chain of a normalization output.
NORM_ROUNDINGS = 20

#: ULPs of the output format on top of the float64 error: the final rounding.
NORM_ULPS = {
    np.dtype(np.float64): 0.0,
    np.dtype(np.float32): 0.5,
    np.dtype(np.float16): 0.5,
}

#: The unit roundoff of the float64 arithmetic every path computes in.
UNIT_FLOAT64 = 2.0**-53
