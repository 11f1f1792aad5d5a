"""Writes ``kernels/_generated/batchnorm.py`` from the closed forms of :mod:`derive.batchnorm`.

The kernel works on features as rows: the caller lays x out as (features, batch) -- an
(N, D) input transposed, an (N, C, H, W) input as (C, N*H*W) -- so one row holds one
feature's batch, and every statistic is a row reduction. The row statistics are
LayerNorm's (``kernels/_generated/layernorm.py``: compensated for float64, corrected
two-pass float64 for float32/float16, rounded half steps in strict mode); the per-element
stages are emitted here for both denominators, and the loops are the templates below.
Paths and arithmetic are those of :mod:`derive.generate_norms`.
"""

from __future__ import annotations

import sympy as sp

from derive import batchnorm as bn
from derive import norms
from derive.emit import Constants
from derive.generate_norms import HEADER, REDUCE, _emit_stages, _serial_strict

#: denom -> the suffix of its stage functions and loops.
SUFFIX = {"sqrt_var_eps": "sqrt", "std_plus_eps": "std"}

STATISTICS_IMPORT = (
    "from kernels._generated.layernorm import statistics_f16s, statistics_f64, statistics_wide"
)

SUMS = {
    "f64": """\
        sa, la, sd, ld, sz, lz, sg, lg = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        for j in range(size):
            dj = (x[i, j] - mh) - ml
            sa, e = two_sum(sa, summand_a_f64(gamma_i, g[i, j]))
            la += e
            sd, e = two_sum(sd, summand_ad_f64(dj, gamma_i, g[i, j]))
            ld += e
            sz, e = two_sum(sz, summand_gz_f64(dj, r, g[i, j]))
            lz += e
            sg, e = two_sum(sg, g[i, j])
            lg += e
        sum_a, sum_ad, sum_gz, sum_g = sa + la, sd + ld, sz + lz, sg + lg""",
    "wide": """\
        sum_a, sum_ad, sum_gz, sum_g = _sums_wide(x[i], g[i], gamma_i, mh, ml, r)""",
    "f16s": """\
        sum_a, sum_ad, sum_gz, sum_g = 0.0, 0.0, 0.0, 0.0
        for j in range(size):
            dj = round_to_half((x[i, j] - mh) - ml)
            sum_a = round_to_half(sum_a + summand_a_f16s(gamma_i, g[i, j]))
            sum_ad = round_to_half(sum_ad + summand_ad_f16s(dj, gamma_i, g[i, j]))
            sum_gz = round_to_half(sum_gz + summand_gz_f16s(dj, r, g[i, j]))
            sum_g = round_to_half(sum_g + g[i, j])""",
}

WIDE_SUMS = '''\
@njit(cache=True, error_model="numpy", fastmath={reduce})
def _sums_wide(row, grow, gamma_i, m, correction, r):
    """The four row sums of the VJP, in float64."""
    sum_a, sum_ad, sum_gz, sum_g = 0.0, 0.0, 0.0, 0.0
    for j in range(row.size):
        dj = (np.float64(row[j]) - m) - correction
        g_j = np.float64(grow[j])
        sum_a += summand_a_f64(gamma_i, g_j)
        sum_ad += summand_ad_f64(dj, gamma_i, g_j)
        sum_gz += summand_gz_f64(dj, r, g_j)
        sum_g += g_j
    return sum_a, sum_ad, sum_gz, sum_g
'''

TRAINING_LOOPS = '''\
@njit(cache=True, parallel=True, error_model="numpy")
def forward_{path}_{denom}(x, gamma, beta, epsilon, out):
    """Training mode: each row (one feature's batch) normalized by its own statistics."""
    features, size = x.shape
    for i in {range}(features):
        mh, ml, s = statistics_{path}(x[i])
        r = scale_{denom}_{mode}(s, epsilon)
        gamma_i, beta_i = np.float64(gamma[i]), np.float64(beta[i])
        for j in range(size):
            dj = {dev_ij}
            out[i, j] = output_{mode}(dj, r, gamma_i, beta_i)


@njit(cache=True, parallel=True, error_model="numpy")
def vjp_{path}_{denom}(x, g, gamma, epsilon, dx, dgamma, dbeta):
    """Training mode: dx for every row, and each feature's dgamma and dbeta."""
    features, size = x.shape
    n = {size_n}
    for i in {range}(features):
        mh, ml, s = statistics_{path}(x[i])
        r = scale_{denom}_{mode}(s, epsilon)
        # The sigma path vanishes with the deviations: w = 0 at zero variance (its limit).
        w = weight_{denom}_{mode}(s, epsilon, r) if s > 0.0 else 0.0
        gamma_i = np.float64(gamma[i])
{sums}
        ma = {mean_a}
        mad = {mean_ad}
        for j in range(size):
            dj = {dev_ij}
            dx[i, j] = dx_{mode}(dj, r, gamma_i, np.float64(g[i, j]), ma, mad, w)
        dgamma[i] = sum_gz
        dbeta[i] = sum_g


@njit(cache=True, error_model="numpy")
def jacobian_{path}_{denom}(x, gamma_i, epsilon, out):
    """Training mode: the (M, M) block J[k, l] = dy_k / dx_l of one feature."""
    size = x.size
    n = {size_n}
    mh, ml, s = statistics_{path}(x)
    r = scale_{denom}_{mode}(s, epsilon)
    w = weight_{denom}_{mode}(s, epsilon, r) if s > 0.0 else 0.0
    for k in range(size):
        dk = {dev_k}
        for j in range(size):
            dj = {dev_j}
            kronecker = 1.0 if k == j else 0.0
            out[k, j] = entry_{mode}(dk, dj, r, np.float64(gamma_i), n, w, kronecker)


@njit(cache=True, parallel=True, error_model="numpy")
def forward_inference_{path}_{denom}(x, gamma, beta, mean, var, epsilon, out):
    """Inference mode: the affine map with the running statistics."""
    features, size = x.shape
    for i in {range}(features):
        r = scale_{denom}_{mode}(np.float64(var[i]), epsilon)
        m = np.float64(mean[i])
        gamma_i, beta_i = np.float64(gamma[i]), np.float64(beta[i])
        for j in range(size):
            dj = {dev_infer}
            out[i, j] = output_{mode}(dj, r, gamma_i, beta_i)


@njit(cache=True, parallel=True, error_model="numpy")
def vjp_inference_{path}_{denom}(x, g, gamma, mean, var, epsilon, dx, dgamma, dbeta):
    """Inference mode: dx = gamma r g, dgamma = sum g (x - mean) r, dbeta = sum g."""
    features, size = x.shape
    for i in {range}(features):
        r = scale_{denom}_{mode}(np.float64(var[i]), epsilon)
        m = np.float64(mean[i])
        gamma_i = np.float64(gamma[i])
        sum_gz, sum_g = 0.0, 0.0
        for j in range(size):
            dj = {dev_infer}
            gj = np.float64(g[i, j])
            dx[i, j] = dx_inference_{mode}(r, gamma_i, gj)
            sum_gz = {acc_gz}
            sum_g = {acc_g}
        dgamma[i] = sum_gz
        dbeta[i] = sum_g
'''


STATISTICS_LOOP = '''\
@njit(cache=True, parallel=True, error_model="numpy")
def statistics_rows_{path}(x, mean, var):
    """Each row's mean and biased variance (float64), for the running statistics."""
    for i in {range}(x.shape[0]):
        mh, ml, s = statistics_{path}(x[i])
        mean[i] = mh + ml
        var[i] = s
'''


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
        ("summand_a", norms.gamma_i * norms.g_i, (norms.gamma_i, norms.g_i), "a summand of m_a"),
        (
            "summand_ad",
            norms.gamma_i * norms.g_i * norms.d,
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
    return _emit_stages("BatchNorm", shared, constants)


def batchnorm_source() -> str:
    """The full text of ``kernels/_generated/batchnorm.py``."""
    constants = Constants()
    functions = _stages(constants)
    loops = []
    for path, mode, prange_, rounding in (
        ("f64", "f64", "prange", ""),
        ("wide", "f64", "prange", ""),
        ("f16s", "f16s", "range", "round_to_half"),
    ):

        def rounded(code: str, rounding: str = rounding) -> str:
            return f"{rounding}({code})" if rounding else code

        if path == "f16s":
            acc_gz = "round_to_half(sum_gz + summand_gz_f16s(dj, r, gj))"
            acc_g = "round_to_half(sum_g + gj)"
        else:
            acc_gz, acc_g = "sum_gz + summand_gz_f64(dj, r, gj)", "sum_g + gj"
        for denom in SUFFIX.values():
            loops.append(
                TRAINING_LOOPS.format(
                    path=path,
                    mode=mode,
                    denom=denom,
                    range=prange_,
                    size_n=rounded("np.float64(size)"),
                    dev_ij=rounded("(np.float64(x[i, j]) - mh) - ml"),
                    dev_k=rounded("(np.float64(x[k]) - mh) - ml"),
                    dev_j=rounded("(np.float64(x[j]) - mh) - ml"),
                    dev_infer=rounded("np.float64(x[i, j]) - m"),
                    sums=SUMS[path],
                    mean_a=rounded("sum_a / n"),
                    mean_ad=rounded("sum_ad / n"),
                    acc_gz=acc_gz,
                    acc_g=acc_g,
                )
            )
        loops.append(STATISTICS_LOOP.format(path=path, range=prange_))
    summary = (
        f"y = {sp.sstr(bn.SQRT_VAR_EPS.output)}, dx_k = {sp.sstr(bn.SQRT_VAR_EPS.vjp)};\n"
        "r and w per denominator: sqrt_var_eps r = 1/sqrt(s + eps), w = r**2;\n"
        "std_plus_eps r = 1/(sqrt(s) + eps), w = r/sqrt(s) (0 at s = 0)."
    )
    header = HEADER.format(
        title="BatchNorm",
        key="batchnorm",
        summary=summary,
        source="001_76ce3a8a4b6079c3.txt Eq. 15-17; 004_a581282367ea7257.txt Definition 17",
        block=0,
        imports="{imports}",
    )
    header = header.replace(
        "#: Rows per block of the parameter-gradient sums (fixed: results do not depend on "
        "threads).\nBLOCK_ROWS = 0\n",
        "",
    )
    header = header.replace(
        "from kernels._f16 import round_to_half",
        "from kernels._f16 import round_to_half\n" + STATISTICS_IMPORT,
    ).replace("from derive/norms.py.", "from derive/batchnorm.py.")
    header = header.rstrip("\n") + "\n"
    sections = [
        "\n".join(constants.lines),
        *functions,
        WIDE_SUMS.format(reduce=REDUCE).strip("\n"),
        *(loop.strip("\n") for loop in loops),
    ]
    return _serial_strict(header + "\n" + "\n\n\n".join(sections) + "\n")
