"""Writes ``kernels/_generated/batchnorm.py`` from the closed forms of
:mod:`derive.definitions.batchnorm`.

The kernel works on x laid out as (A, L, C), features last: an (N, D) input as (N, 1, D),
an (N, C, H, W) input as (N, H*W, C). Each feature's statistics run over (a, p); blocks of
features run in parallel, and the innermost loops run along the contiguous feature axis.
The statistics are LayerNorm's, per column (compensated for float64, corrected two-pass
float64 for float32/float16, rounded half steps in strict mode); the one-feature Jacobian
uses LayerNorm's row statistics (``kernels/_generated/layernorm.py``). The per-element
stages are emitted here for both denominators, and the loops are the templates below: one
loop per path and mode serves both denominators, picking the scale and the weight per
feature by its ``std`` argument.
Paths and arithmetic are those of :mod:`derive.codegen.norms`; as there, float16 in mixed
mode passes x, g and the outputs as the halves' bits (``uint16``), which the loops widen
exactly as they read them and round once, from float64, as they store them
(``kernels._rownorm.widen`` and ``narrow``; for float arrays a plain conversion and
store), so no widened copy of x or g and no float64 result buffer is made. The
float32/float16 path's
feature sums sweep four rows per pass over a block's features, the partial sums in
registers: each feature's sum still runs over (a, p) in order, so the bits are those of
one row at a time (tests/kernels/test_batchnorm.py compares them). Its VJP reads x and g
three times, not four: the second pass of the statistics also sums g and g d (d about the
first-pass mean), and every sum the VJP needs is a per-feature factor times one of those
two (:func:`feature_factor` derives each factor from its summand), the g d sum corrected
for the mean's correction.
"""

from __future__ import annotations

import sympy as sp

from derive.codegen.emit import Constants
from derive.codegen.templates import PATHS, emit_stages, module_text, strict_variants
from derive.definitions import batchnorm as bn
from derive.definitions import norms

#: The float32 loops' per-feature sums run down the rows, one accumulator per feature: they
#: vectorize across features without reassociation, and keep their order. Contraction
#: (a product and its sum as one FMA) is allowed, as it always was.
CONTRACT = '{"contract"}'

#: denom -> the suffix of its scale and weight stages (one loop serves both: DENOMINATOR).
SUFFIX = {"sqrt_var_eps": "sqrt", "std_plus_eps": "std"}

STATISTICS_IMPORT = (
    "from kernels._generated.layernorm import (\n"
    "    statistics_bf16s,\n"
    "    statistics_f16s,\n"
    "    statistics_f64,\n"
    "    statistics_wide,\n"
    ")"
)

JACOBIAN_LOOP = '''\
@njit(cache=True, error_model="numpy")
def jacobian_{path}(x, gamma_i, epsilon, std, out):
    """Training mode: the (M, M) block J[k, p] = dy_k / dx_l of one feature."""
    size = x.size
    n = {size_n}
    mh, ml, s = statistics_{path}(x)
    r = scale_{mode}(s, epsilon, std)
    w = weight_{mode}(s, epsilon, r, std) if s > 0.0 else 0.0 * r * r
    for k in range(size):
        dk = {dev_k}
        for j in range(size):
            dj = {dev_j}
            kronecker = 1.0 if k == j else 0.0
            out[k, j] = entry_{mode}(dk, dj, r, np.float64(gamma_i), n, w, kronecker)
'''

#: One loop serves both denominators: ``std`` (a bool argument) picks the scale and the
#: weight once per feature, so each path compiles once rather than once per denominator.
DENOMINATOR = '''\
@njit(cache=True, error_model="numpy")
def scale_{mode}(s, epsilon, std):
    """The scale r, mode {mode}: ``scale_std_{mode}`` (std_plus_eps) if ``std``, else
    ``scale_sqrt_{mode}`` (sqrt_var_eps)."""
    return scale_std_{mode}(s, epsilon) if std else scale_sqrt_{mode}(s, epsilon)


@njit(cache=True, error_model="numpy")
def weight_{mode}(s, epsilon, r, std):
    """The sigma-path weight w, mode {mode}: ``weight_std_{mode}`` if ``std``, else
    ``weight_sqrt_{mode}``."""
    return weight_std_{mode}(s, epsilon, r) if std else weight_sqrt_{mode}(s, epsilon, r)
'''

COLUMN_STATISTICS = {
    "f64": """\
@njit(cache=True, error_model="numpy")
def column_statistics_f64(x, c0, c1):
    \"\"\"(mean hi, mean lo, biased variance) of features c0..c1 of x (A, L, C), compensated:
    each row's slice of the block by the branch-free TwoSum, so the inner loop vectorizes.\"\"\"
    width, count = c1 - c0, x.shape[0] * x.shape[1]
    hi, lo = np.zeros(width), np.zeros(width)
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            xs = x[a, p, c0:c1]
            for k in range(width):
                t, e = two_sum_select(hi[k], xs[k])
                hi[k] = t
                lo[k] += e
    mh, ml = np.empty(width), np.empty(width)
    for k in range(width):
        mh[k], ml[k] = dd_div(hi[k], lo[k], np.float64(count), 0.0)
    hi[:] = 0.0
    lo[:] = 0.0
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            xs = x[a, p, c0:c1]
            for k in range(width):
                d = (xs[k] - mh[k]) - ml[k]
                t, e = two_sum_select(hi[k], d * d)
                hi[k] = t
                lo[k] += e
    return mh, ml, (hi + lo) / count
""",
    "wide": """\
@njit(cache=True, error_model="numpy", fastmath={contract})
def _column_means_wide(rows, c0, c1):
    \"\"\"The means of features c0..c1 of rows (M, C), float64, each feature's sum over the
    rows in order, SWEEP rows per sweep of the features, the partial sums in registers.\"\"\"
    width, count = c1 - c0, rows.shape[0]
    full = count - count % SWEEP
    first = np.zeros(width)
    for q in range(0, full, SWEEP):
        x0, x1, x2, x3 = rows[q, c0:c1], rows[q + 1, c0:c1], rows[q + 2, c0:c1], rows[q + 3, c0:c1]
        for k in range(width):
            s = first[k] + widen(x0[k])
            s += widen(x1[k])
            s += widen(x2[k])
            first[k] = s + widen(x3[k])
    for q in range(full, count):
        xs = rows[q, c0:c1]
        for k in range(width):
            first[k] += widen(xs[k])
    return first / count


@njit(cache=True, error_model="numpy")
def _corrected_wide(first, second, count):
    \"\"\"(correction, biased variance) per feature from the sums of the deviations from
    the first-pass mean and of their squares.\"\"\"
    correction = first / count
    moment = second / count - correction * correction
    for k in range(moment.size):
        if moment[k] < 0.0:
            moment[k] = 0.0
    return correction, moment


@njit(cache=True, error_model="numpy", fastmath={contract})
def column_statistics_wide(x, c0, c1):
    \"\"\"(mean, correction, biased variance) of features c0..c1 of x (A, L, C), float64,
    corrected two-pass. Each feature's sums run over the rows (a, p) in order; the loops
    sweep the features of SWEEP rows at a time, the partial sums in registers.\"\"\"
    rows = x.reshape((x.shape[0] * x.shape[1], x.shape[2]))
    width, count = c1 - c0, rows.shape[0]
    full = count - count % SWEEP
    m = _column_means_wide(rows, c0, c1)
    first, second = np.zeros(width), np.zeros(width)
    for q in range(0, full, SWEEP):
        x0, x1, x2, x3 = rows[q, c0:c1], rows[q + 1, c0:c1], rows[q + 2, c0:c1], rows[q + 3, c0:c1]
        for k in range(width):
            d0, d1 = widen(x0[k]) - m[k], widen(x1[k]) - m[k]
            d2, d3 = widen(x2[k]) - m[k], widen(x3[k]) - m[k]
            first[k] = (((first[k] + d0) + d1) + d2) + d3
            second[k] = (((second[k] + d0 * d0) + d1 * d1) + d2 * d2) + d3 * d3
    for q in range(full, count):
        xs = rows[q, c0:c1]
        for k in range(width):
            d = widen(xs[k]) - m[k]
            first[k] += d
            second[k] += d * d
    correction, moment = _corrected_wide(first, second, count)
    return m, correction, moment
""",
    "f16s": """\
@njit(cache=True, error_model="numpy")
def column_statistics_f16s(x, c0, c1):
    \"\"\"(mean, 0, biased variance) of features c0..c1, every operation rounded to half.\"\"\"
    width = c1 - c0
    count = round_to_half(np.float64(x.shape[0] * x.shape[1]))
    acc = np.zeros(width)
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            for c in range(c0, c1):
                acc[c - c0] = round_to_half(acc[c - c0] + x[a, p, c])
    m = np.empty(width)
    for k in range(width):
        m[k] = round_to_half(acc[k] / count)
    acc[:] = 0.0
    for a in range(x.shape[0]):
        for p in range(x.shape[1]):
            for c in range(c0, c1):
                d = round_to_half(x[a, p, c] - m[c - c0])
                acc[c - c0] = round_to_half(acc[c - c0] + round_to_half(d * d))
    moment = np.empty(width)
    for k in range(width):
        moment[k] = round_to_half(acc[k] / count)
    return m, np.zeros(width), moment
""",
}

COLUMN_STATISTICS |= strict_variants(COLUMN_STATISTICS["f16s"])

COLUMN_SUMS = {
    "f64": """\
        sums = np.zeros((8, width))
        for a in range(A):
            for p in range(L):
                xs, gs = x[a, p, c0:c1], g[a, p, c0:c1]
                for k in range(width):
                    dk = (xs[k] - mh[k]) - ml[k]
                    gk = gs[k]
                    t, e = two_sum_select(sums[0, k], summand_a_f64(gammas[k], gk))
                    sums[0, k] = t
                    sums[1, k] += e
                    t, e = two_sum_select(sums[2, k], summand_ad_f64(dk, gammas[k], gk))
                    sums[2, k] = t
                    sums[3, k] += e
                    t, e = two_sum_select(sums[4, k], summand_gz_f64(dk, r[k], gk))
                    sums[4, k] = t
                    sums[5, k] += e
                    t, e = two_sum_select(sums[6, k], gk)
                    sums[6, k] = t
                    sums[7, k] += e
        sum_a, sum_ad = np.empty(width), np.empty(width)
        sum_gz, sum_g = np.empty(width), np.empty(width)
        for k in range(width):  # a loop: an array expression here compiles a nested parfor
            sum_a[k], sum_ad[k] = sums[0, k] + sums[1, k], sums[2, k] + sums[3, k]
            sum_gz[k], sum_g[k] = sums[4, k] + sums[5, k], sums[6, k] + sums[7, k]""",
    "wide": """\
        sum_a, sum_ad, sum_gz = np.empty(width), np.empty(width), np.empty(width)
        for k in range(width):
            sum_gd = sum_gd_first[k] - ml[k] * sum_g[k]
            sum_a[k] = {factor_a} * sum_g[k]
            sum_ad[k] = {factor_ad} * sum_gd
            sum_gz[k] = {factor_gz} * sum_gd""",
    "f16s": """\
        sum_a, sum_ad = np.zeros(width), np.zeros(width)
        sum_gz, sum_g = np.zeros(width), np.zeros(width)
        for a in range(A):
            for p in range(L):
                for c in range(c0, c1):
                    k = c - c0
                    dk = round_to_half((x[a, p, c] - mh[k]) - ml[k])
                    gk = g[a, p, c]
                    sum_a[k] = round_to_half(sum_a[k] + summand_a_f16s(gammas[k], gk))
                    sum_ad[k] = round_to_half(sum_ad[k] + summand_ad_f16s(dk, gammas[k], gk))
                    sum_gz[k] = round_to_half(sum_gz[k] + summand_gz_f16s(dk, r[k], gk))
                    sum_g[k] = round_to_half(sum_g[k] + gk)""",
}

COLUMN_SUMS |= strict_variants(COLUMN_SUMS["f16s"])

#: The VJP's statistics of a block of features: the wide path takes its sums in the same
#: pass (:data:`WIDE_COLUMN_SUMS`), the others after it.
STATISTICS_CALL = "        mh, ml, s = column_statistics_{path}(x, c0, c1)"
WIDE_STATISTICS_CALL = (
    "        mh, ml, s, sum_g, sum_gd_first = column_moments_and_sums_wide(x, g, c0, c1)"
)

WIDE_COLUMN_SUMS = """\
#: Rows per sweep of the float32 loops over a block of features (see column_statistics_wide).
SWEEP = 4


@njit(cache=True, error_model="numpy", fastmath={contract})
def column_moments_and_sums_wide(x, g, c0, c1):
    \"\"\":func:`column_statistics_wide` of features c0..c1 and, in its second pass, the two
    sums every VJP sum is a multiple of: (mean, correction, biased variance, sum of g, sum
    of g (x - mean)), float64, each over the rows (a, p) in order, SWEEP rows per sweep of
    the features. The deviations are from the first-pass mean: the sum of g times the
    deviation from the corrected mean is the last minus the correction times the sum of g.\"\"\"
    rows = x.reshape((x.shape[0] * x.shape[1], x.shape[2]))
    grows = g.reshape(rows.shape)
    width, count = c1 - c0, rows.shape[0]
    full = count - count % SWEEP
    m = _column_means_wide(rows, c0, c1)
    first = np.zeros(width)
    second, sum_g, sum_gd = np.zeros(width), np.zeros(width), np.zeros(width)
    for q in range(0, full, SWEEP):
        x0, x1, x2, x3 = rows[q, c0:c1], rows[q + 1, c0:c1], rows[q + 2, c0:c1], rows[q + 3, c0:c1]
        g0, g1 = grows[q, c0:c1], grows[q + 1, c0:c1]
        g2, g3 = grows[q + 2, c0:c1], grows[q + 3, c0:c1]
        for k in range(width):
            d0, d1 = widen(x0[k]) - m[k], widen(x1[k]) - m[k]
            d2, d3 = widen(x2[k]) - m[k], widen(x3[k]) - m[k]
            e0, e1, e2, e3 = widen(g0[k]), widen(g1[k]), widen(g2[k]), widen(g3[k])
            first[k] = (((first[k] + d0) + d1) + d2) + d3
            second[k] = (((second[k] + d0 * d0) + d1 * d1) + d2 * d2) + d3 * d3
            sum_g[k] = (((sum_g[k] + e0) + e1) + e2) + e3
            sum_gd[k] = (((sum_gd[k] + e0 * d0) + e1 * d1) + e2 * d2) + e3 * d3
    for q in range(full, count):
        xs, gs = rows[q, c0:c1], grows[q, c0:c1]
        for k in range(width):
            d = widen(xs[k]) - m[k]
            e = widen(gs[k])
            first[k] += d
            second[k] += d * d
            sum_g[k] += e
            sum_gd[k] += e * d
    correction, moment = _corrected_wide(first, second, count)
    return m, correction, moment, sum_g, sum_gd
"""


COLUMN_LOOPS = '''\
@njit({jit})
def forward_{path}(x, gamma, beta, epsilon, std, block, out):
    """Training mode on x (A, L, C): features c (the last axis) normalized over (a, p).
    The statistics by blocks of features in parallel, then the outputs by rows (a, p) in
    parallel, each row's features in one contiguous loop."""
    C = x.shape[2]
    mh_all, ml_all, r_all = np.empty(C), np.empty(C), np.empty(C)
    for b in {range}((C + block - 1) // block):
        c0, c1 = b * block, min(C, (b + 1) * block)
        mh, ml, s = column_statistics_{path}(x, c0, c1)
        for k in range(c1 - c0):
            mh_all[c0 + k], ml_all[c0 + k] = mh[k], ml[k]
            r_all[c0 + k] = scale_{mode}(s[k], epsilon, std)
    rows = x.reshape((x.shape[0] * x.shape[1], C))
    out_rows = out.reshape(rows.shape)
    for q in {range}(rows.shape[0]):
        xs, ys = rows[q], out_rows[q]
        for k in range(C):
            dk = {dev_all}
            gamma_k, beta_k = np.float64(gamma[k]), np.float64(beta[k])
            ys[k] = narrow(output_{mode}(dk, r_all[k], gamma_k, beta_k), out)


@njit({jit})
def vjp_{path}(x, g, gamma, epsilon, std, block, dx, dgamma, dbeta):
    """Training mode on x (A, L, C): dx, and each feature's dgamma and dbeta. The
    statistics and the sums by blocks of features in parallel, then dx by rows."""
    A, L, C = x.shape
    n = {count}
    mh_all, ml_all, r_all, w_all = np.empty(C), np.empty(C), np.empty(C), np.empty(C)
    gamma_all, ma_all, mad_all = np.empty(C), np.empty(C), np.empty(C)
    for b in {range}((C + block - 1) // block):
        c0, c1 = b * block, min(C, (b + 1) * block)
        width = c1 - c0
{statistics}
        r, w, gammas = np.empty(width), np.empty(width), np.empty(width)
        for k in range(width):
            r[k] = scale_{mode}(s[k], epsilon, std)
            # The sigma path vanishes with the deviations: w = 0 at zero variance (its limit),
            # NaN when r is inf there (eps = 0: 0/0).
            w[k] = weight_{mode}(s[k], epsilon, r[k], std) if s[k] > 0.0 else 0.0 * r[k] * r[k]
            gammas[k] = np.float64(gamma[c0 + k])
{sums}
        for k in range(width):
            mh_all[c0 + k], ml_all[c0 + k] = mh[k], ml[k]
            r_all[c0 + k], w_all[c0 + k], gamma_all[c0 + k] = r[k], w[k], gammas[k]
            ma_all[c0 + k] = {mean_a}
            mad_all[c0 + k] = {mean_ad}
            dgamma[c0 + k] = sum_gz[k]
            dbeta[c0 + k] = sum_g[k]
    rows = x.reshape((A * L, C))
    g_rows, dx_rows = g.reshape(rows.shape), dx.reshape(rows.shape)
    for q in {range}(rows.shape[0]):
        xs, gs, dxs = rows[q], g_rows[q], dx_rows[q]
        for k in range(C):
            dk = {dev_all}
            gk = widen(gs[k])
            dx_k = dx_{mode}(dk, r_all[k], gamma_all[k], gk, ma_all[k], mad_all[k], w_all[k])
            dxs[k] = narrow(dx_k, dx)


@njit({jit})
def forward_inference_{path}(x, gamma, beta, mean, var, epsilon, std, block, out):
    """Inference mode: the affine map with the running statistics."""
    A, L, C = x.shape
    for b in {range}((C + block - 1) // block):
        c0, c1 = b * block, min(C, (b + 1) * block)
        r = np.empty(c1 - c0)
        for k in range(c1 - c0):
            r[k] = scale_{mode}(np.float64(var[c0 + k]), epsilon, std)
        for a in range(A):
            for p in range(L):
                for c in range(c0, c1):
                    dk = {dev_infer}
                    gamma_c, beta_c = np.float64(gamma[c]), np.float64(beta[c])
                    out[a, p, c] = narrow(output_{mode}(dk, r[c - c0], gamma_c, beta_c), out)


@njit({jit})
def vjp_inference_{path}(x, g, gamma, mean, var, epsilon, std, block, dx, dgamma, dbeta):
    """Inference mode: dx = gamma r g, dgamma = sum g (x - mean) r, dbeta = sum g."""
    A, L, C = x.shape
    for b in {range}((C + block - 1) // block):
        c0, c1 = b * block, min(C, (b + 1) * block)
        r = np.empty(c1 - c0)
        sum_gz, sum_g = np.zeros(c1 - c0), np.zeros(c1 - c0)
        for k in range(c1 - c0):
            r[k] = scale_{mode}(np.float64(var[c0 + k]), epsilon, std)
        for a in range(A):
            for p in range(L):
                for c in range(c0, c1):
                    k = c - c0
                    dk = {dev_infer}
                    gk = widen(g[a, p, c])
                    dx[a, p, c] = narrow(dx_inference_{mode}(r[k], np.float64(gamma[c]), gk), dx)
                    sum_gz[k] = {acc_gz}
                    sum_g[k] = {acc_g}
        for k in range(c1 - c0):
            dgamma[c0 + k] = sum_gz[k]
            dbeta[c0 + k] = sum_g[k]
'''


#: The per-element stages' summands of the VJP's feature sums, and what the wide path sums
#: instead: g for m_a, g d for m_ad and dgamma (each summand a per-feature factor times it).
SUMMAND_A = norms.gamma_i * norms.g_i
SUMMAND_AD = norms.gamma_i * norms.g_i * norms.d
SUMMED = {"a": norms.g_i, "ad": norms.g_i * norms.d, "gz": norms.g_i * norms.d}

#: The per-feature values a factor may be, as the wide VJP's loop names them.
FEATURE_VALUES = {norms.gamma_i: "gammas[k]", norms.r: "r[k]"}


def feature_factor(summand: sp.Expr, summed: sp.Expr) -> str:
    """The code of ``summand / summed`` if that is one per-feature value (gamma or r),
    so that the sum of ``summand`` over a feature's batch values is that value times the
    sum of ``summed``; a ValueError otherwise."""
    factor = sp.simplify(summand / summed)
    if factor not in FEATURE_VALUES:
        raise ValueError(
            f"{summand} is not a per-feature value times {summed} (the quotient is {factor}):"
            " the wide VJP cannot take its sum from the moments pass"
        )
    return FEATURE_VALUES[factor]


def wide_sums() -> str:
    """The wide VJP's three sums from the two of :func:`column_moments_and_sums_wide`, each
    factor derived from its summand (both denominators' dgamma summand must agree)."""
    dgamma = {bn.form(denom).dgamma_term for denom in SUFFIX}
    if len(dgamma) != 1:
        raise ValueError(f"the denominators' dgamma summands differ: {dgamma}")
    return COLUMN_SUMS["wide"].format(
        factor_a=feature_factor(SUMMAND_A, SUMMED["a"]),
        factor_ad=feature_factor(SUMMAND_AD, SUMMED["ad"]),
        factor_gz=feature_factor(dgamma.pop(), SUMMED["gz"]),
    )


def _stages(constants: Constants) -> list[str]:
    shared = [
        ("output", bn.SQRT_VAR_EPS.output, (norms.d, norms.r, norms.gamma_i, norms.beta_i), "y"),
        (
            "dx",
            bn.SQRT_VAR_EPS.vjp,
            (norms.d, norms.r, norms.gamma_i, norms.g_i, norms.m_a, bn.m_ad, bn.w),
            "dL/dx_k, m_a = mean(gamma g), m_ad = mean(gamma g d), w the sigma-path weight",
        ),
        (
            "entry",
            bn.SQRT_VAR_EPS.jacobian_entry,
            (norms.d, norms.d_j, norms.r, norms.gamma_i, bn.m, bn.w, norms.delta),
            "J_kl (one feature; delta is 1 on the diagonal)",
        ),
        ("summand_a", SUMMAND_A, (norms.gamma_i, norms.g_i), "a summand of m_a"),
        (
            "summand_ad",
            SUMMAND_AD,
            (norms.d, norms.gamma_i, norms.g_i),
            "a summand of m_ad",
        ),
        (
            "summand_gz",
            bn.SQRT_VAR_EPS.dgamma_term,
            (norms.d, norms.r, norms.g_i),
            "a summand of dgamma",
        ),
        (
            "dx_inference",
            norms.gamma_i * norms.r * norms.g_i,
            (norms.r, norms.gamma_i, norms.g_i),
            "dL/dx in inference mode",
        ),
    ]
    for denom, suffix in SUFFIX.items():
        f = bn.form(denom)
        shared.append((f"scale_{suffix}", f.scale, (norms.s, norms.eps), f"the scale r ({denom})"))
        shared.append(
            (
                f"weight_{suffix}",
                f.weight,
                (norms.s, norms.eps, norms.r),
                f"the sigma-path weight w ({denom}; the caller takes 0 at zero variance)",
            )
        )
    stages = emit_stages("BatchNorm", shared, constants)
    modes = dict.fromkeys(path.mode for path in PATHS)
    return stages + [DENOMINATOR.format(mode=mode).strip("\n") for mode in modes]


def batchnorm_source() -> str:
    """The full text of ``kernels/_generated/batchnorm.py``."""
    constants = Constants()
    functions = _stages(constants)
    loops = []
    for path in PATHS:
        if path.rounding:
            acc_gz = path.rounded(f"sum_gz[k] + summand_gz_{path.mode}(dk, r[k], gk)")
            acc_g = path.rounded("sum_g[k] + gk")
        else:
            acc_gz, acc_g = "sum_gz[k] + summand_gz_f64(dk, r[k], gk)", "sum_g[k] + gk"
        loops.append(COLUMN_STATISTICS[path.name].format(contract=CONTRACT))
        loops.append(
            COLUMN_LOOPS.format(
                path=path.name,
                mode=path.mode,
                range=path.range,
                jit=path.jit,
                count=path.rounded("np.float64(A * L)"),
                dev_all=path.rounded("(widen(xs[k]) - mh_all[k]) - ml_all[k]"),
                dev_infer=path.rounded("widen(x[a, p, c]) - np.float64(mean[c])"),
                statistics=(
                    WIDE_STATISTICS_CALL
                    if path.name == "wide"
                    else STATISTICS_CALL.format(path=path.name)
                ),
                sums=wide_sums() if path.name == "wide" else COLUMN_SUMS[path.name],
                mean_a=path.rounded("sum_a[k] / n"),
                mean_ad=path.rounded("sum_ad[k] / n"),
                acc_gz=acc_gz,
                acc_g=acc_g,
            )
        )
        loops.append(
            JACOBIAN_LOOP.format(
                path=path.name,
                mode=path.mode,
                size_n=path.rounded("np.float64(size)"),
                dev_k=path.rounded("(np.float64(x[k]) - mh) - ml"),
                dev_j=path.rounded("(np.float64(x[j]) - mh) - ml"),
            )
        )
    summary = (
        f"y = {sp.sstr(bn.SQRT_VAR_EPS.output)}, dx_k = {sp.sstr(bn.SQRT_VAR_EPS.vjp)};\n"
        "r and w per denominator: sqrt_var_eps r = 1/sqrt(s + eps), w = r**2;\n"
        "std_plus_eps r = 1/(sqrt(s) + eps), w = r/sqrt(s) (0 at s = 0)."
    )
    sections = [
        "\n".join(constants.lines),
        *functions,
        WIDE_COLUMN_SUMS.format(contract=CONTRACT).strip("\n"),
        *(loop.strip("\n") for loop in loops),
    ]
    return module_text(
        definitions="batchnorm.py",
        title="BatchNorm",
        key="batchnorm",
        summary=summary,
        source="001_76ce3a8a4b6079c3.txt Eq. 15-17; 004_a581282367ea7257.txt Definition 17",
        sections=sections,
        extra_imports=(
            STATISTICS_IMPORT,
            "from kernels._rownorm import narrow, two_sum_select, widen",
        ),
    )
