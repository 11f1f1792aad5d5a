"""Writes ``kernels/_generated/{layernorm,rmsnorm,centernorm,weightnorm}.py``.

The per-element stages (scale, output, VJP, Jacobian entry, the summands of the row
reductions) are emitted from the closed forms of :mod:`derive.definitions.norms`, which
:func:`derive.definitions.norms.closed_form_proof` proves equal to ``sympy.diff`` of the forward.
The
loops around them are the templates below, filled in per module (centered or not, scaled
by the second moment or by a constant). Three arithmetic paths:

``f64``   float64 input. Every row reduction is a compensated (double-double) sum, so
          the mean is exact to ~2^-106 and ``x - mean`` keeps full relative accuracy on
          nearly constant rows; the stages run in float64. The row sums run in
          ``SUM_LANES`` = 64 lanes (:func:`lane_sums`, ``kernels._rownorm.add_to_lane``):
          lane k adds the entries k, k + 64, ... by TwoSum and keeps every rounding error,
          and the lanes are added in order, their errors too. The running sums are
          independent, so the loops vectorize, where one running sum (the earlier code)
          did not; the errors pass through at most D/64 + 65 plain additions where one
          running sum's passed through D, so the bound stays that of a compensated sum.
``wide``  float32 input, and float16 input widened exactly to float32 ("mixed" mode).
          Everything is float64: products of two float32 are exact there, sums vectorize
          (``fastmath`` reassociation, IEEE NaN/inf kept), and the mean is corrected by a
          second pass (the corrected two-pass algorithm), so D = 8192 rows of large or
          nearly constant values keep their accuracy. Results are rounded once. The VJP
          takes its two row sums (of gamma g and gamma g d) in the second pass too, about
          the first-pass center, and corrects them afterwards
          (:func:`single_pass_sums_hold`): three passes over the row where four were.
          The loops read every entry through ``kernels._rownorm.widen`` and store every
          result through ``narrow``: for float32 arrays a plain conversion, for float16
          arrays (passed as their ``uint16`` bits) the exact widening of a half and the
          single rounding of the float64 result to half, in the loop itself. Rows of
          halves are first widened, exactly and once, into a float32 scratch row
          (``read_row``); float rows are read in place.
``f16s``  strict half precision: every operation, each step of every sum included,
          rounded to binary16, as naive half arithmetic would do.
``bf16s`` strict bfloat16: the ``f16s`` loops, every step rounded to bfloat16 instead
          (:func:`derive.codegen.templates.strict_variants`).

Rows run in parallel (``prange``); the parameter gradients are summed per block of
:data:`BLOCK_ROWS` rows and the blocks combined in a fixed order, so results do not depend
on the number of threads.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import sympy as sp

from derive.codegen.emit import Constants
from derive.codegen.templates import (
    PATHS,
    REDUCE,
    STRICT,
    emit_stages,
    module_text,
    strict_variants,
)
from derive.definitions import norms
from derive.definitions.norms import ROW_NORMS, WEIGHTNORM, RowNorm

#: Rows per block of the parameter-gradient sums.
BLOCK_ROWS = 32

#: The summands of the VJP's row means m_a = mean(gamma g) and m_az = mean(gamma g z).
SUMMAND_A = norms.gamma_i * norms.g_i
SUMMAND_AZ = norms.gamma_i * norms.g_i * norms.d * norms.r


def single_pass_sums_hold() -> bool:
    """Whether the ``wide`` VJP may take m_az in the pass of the second moment: the summand
    about the corrected center, ``summand_az(d - c, r)``, must equal ``r (summand_az(d, 1)
    - c summand_a)`` (true because it is linear in d and in r), so that the sums about the
    first-pass center give the sum about the corrected one."""
    c = sp.Symbol("c", real=True)
    shifted = SUMMAND_AZ.subs(norms.d, norms.d - c)
    split = norms.r * (SUMMAND_AZ.subs(norms.r, 1) - c * SUMMAND_A)
    return sp.expand(shifted - split) == 0


#: The module constant of the row norms' files (before the body).
BLOCK_ROWS_DEFINITION = """
#: Rows per block of the parameter-gradient sums (fixed: results do not depend on threads).
BLOCK_ROWS = {block}
"""


def lane_sums(indent: str, prologue: str, terms: dict[str, str]) -> str:
    """Statements that sum each ``terms`` value (an expression in ``j``, after the
    statements ``prologue``) over ``j`` in ``range(size)`` by compensated lanes
    (``kernels._rownorm.add_to_lane``): lane k takes ``j = k, k + SUM_LANES, ...``, so the
    running sums are independent and the loop vectorizes; ``lanes_total(name)`` then gives
    the sum of ``terms[name]`` as a double-double (hi, lo)."""

    def body(pad: str, lane: str) -> list[str]:
        lines = [pad + line for line in prologue.splitlines()]
        adds = [f"{pad}add_to_lane({name}, {lane}, {value})" for name, value in terms.items()]
        return lines + adds

    lines = [f"{name} = np.zeros((2, SUM_LANES))" for name in terms]
    lines += [
        "full = size - size % SUM_LANES",
        "for start in range(0, full, SUM_LANES):",
        "    for k in range(SUM_LANES):",
        "        j = start + k",
        *body("        ", "k"),
        "for j in range(full, size):",
        *body("    ", "j - full"),
    ]
    return "".join(f"{indent}{line}\n" for line in lines)


ROW_STATISTICS = '''\
@njit(cache=True, error_model="numpy")
def statistics_f64(row):
    """(center hi, center lo, second moment) of a float64 row, in double-double."""
    size = row.size
    mh, ml = 0.0, 0.0
{center_dd}{second_dd}    hi, lo = lanes_total(squares)
    return mh, ml, (hi + lo) / size


@njit(cache=True, error_model="numpy", fastmath={reduce})
def _sum_wide(row):
    total = 0.0
    for j in range(row.size):
        total += widen(row[j])
    return total


@njit(cache=True, error_model="numpy", fastmath={reduce})
def _moments_wide(row, m):
    first, second = 0.0, 0.0
    for j in range(row.size):
        dj = widen(row[j]) - m
        first += dj
        second += dj * dj
    return first, second


@njit(cache=True, error_model="numpy")
def _corrected_wide(first, second, size):
    """(correction, second moment) from the sums of the deviations from the first-pass
    center and of their squares."""
    correction = first / size if {centered} else 0.0
    moment = second / size - correction * correction
    if moment < 0.0:
        moment = 0.0
    return correction, moment


@njit(cache=True, error_model="numpy")
def statistics_wide(row):
    """(center, correction, second moment) of a float32 row, in float64.

    Corrected two-pass: the deviations from the first-pass mean sum to ``size *
    correction``; ``x - center - correction`` is the deviation from the exact mean up to
    float64 rounding, and the second moment is taken about it.
    """
    size = row.size
    m = 0.0
{center_wide}    first, second = _moments_wide(row, m)
    correction, moment = _corrected_wide(first, second, size)
    return m, correction, moment


@njit(cache=True, error_model="numpy", fastmath={reduce})
def _moments_and_sums_wide(row, grow, gamma, m):
    first, second, sum_a, sum_az = 0.0, 0.0, 0.0, 0.0
    for j in range(row.size):
        dj = widen(row[j]) - m
        gamma_j, g_j = widen(gamma[j]), widen(grow[j])
        first += dj
        second += dj * dj
        sum_a += summand_a_f64(gamma_j, g_j)
        sum_az += summand_az_f64(dj, 1.0, gamma_j, g_j)
    return first, second, sum_a, sum_az


@njit(cache=True, error_model="numpy")
def vjp_statistics_wide(row, grow, gamma):
    """:func:`statistics_wide` of a float32 row and the VJP's two row sums, taken in the
    pass of the second moment: (center, correction, second moment, sum of the summands of
    m_a, sum of those of m_az at r = 1 about the first-pass center).

    The summands of m_az are linear in the deviation and in r (checked by the generator),
    so the sum about the corrected center at scale r is ``r (sum_az - correction sum_a)``.
    """
    size = row.size
    m = 0.0
{center_wide}    first, second, sum_a, sum_az = _moments_and_sums_wide(row, grow, gamma, m)
    correction, moment = _corrected_wide(first, second, size)
    return m, correction, moment, sum_a, sum_az
'''

STRICT_STATISTICS = '''\
@njit(cache=True, error_model="numpy")
def statistics_f16s(row):
    """(center, 0, second moment) of a row, every operation rounded to half."""
    size = round_to_half(np.float64(row.size))
    m = 0.0
{center}    acc = 0.0
    for j in range(row.size):
        dj = round_to_half(row[j] - m)
        acc = round_to_half(acc + round_to_half(dj * dj))
    return m, 0.0, round_to_half(acc / size)
'''

CENTER = {
    "dd": lane_sums("    ", "", {"values": "row[j]"})
    + """\
    hi, lo = lanes_total(values)
    mh, ml = dd_div(hi, lo, np.float64(size), 0.0)
""",
    "wide": """\
    m = _sum_wide(row) / size
""",
    "f16s": """\
    acc = 0.0
    for j in range(row.size):
        acc = round_to_half(acc + row[j])
    m = round_to_half(acc / size)
""",
}

ROW_LOOPS = '''\
@njit({jit})
def forward_{path}(x, gamma, beta, epsilon, out):
    """y = gamma z + beta for every row of x (rows in parallel)."""
    rows, size = x.shape
    n = {size_n}
    for i in {range}(rows):
        xi = read_row(x[i], row_buffer(x))
        mh, ml, s = statistics_{path}(xi)
        r = scale_{mode}(s, epsilon, n)
        for j in range(size):
            dj = {dev_ij}
            y = output_{mode}(dj, r, widen(gamma[j]), widen(beta[j]))
            out[i, j] = narrow(y, out)


@njit({jit})
def vjp_{path}(x, g, gamma, epsilon, dx, dgamma_blocks, dbeta_blocks):
    """dx for every row; per block of rows, the partial sums of dgamma and dbeta."""
    rows, size = x.shape
    n = {size_n}
    for b in {range}(dgamma_blocks.shape[0]):
        x_buffer, g_buffer = row_buffer(x), row_buffer(g)
        for i in range(b * BLOCK_ROWS, min(rows, (b + 1) * BLOCK_ROWS)):
            xi, gi = read_row(x[i], x_buffer), read_row(g[i], g_buffer)
{means}
            for j in range(size):
                dj = {dev_ij}
                gj = widen(gi[j])
                dx[i, j] = narrow(dx_{mode}(dj, r, widen(gamma[j]), gj, ma, maz), dx)
{accumulate}

@njit(cache=True, error_model="numpy")
def jacobian_{path}(x, gamma, epsilon, out):
    """J[i, j] = dy_i / dx_j for one sample x (numerator layout)."""
    size = x.size
    n = {size_n}
    mh, ml, s = statistics_{path}(x)
    r = scale_{mode}(s, epsilon, n)
    for i in range(size):
        di = {dev_i}
        for j in range(size):
            dj = {dev_j}
            kronecker = 1.0 if i == j else 0.0
            out[i, j] = entry_{mode}(di, dj, r, np.float64(gamma[i]), n, kronecker)
'''

#: The row statistics and the scale r, as the f64 and strict VJPs take them (the wide one
#: takes its row sums in the statistics' second pass).
SCALE = """\
            mh, ml, s = statistics_{path}(xi)
            r = scale_{mode}(s, epsilon, n)
"""

#: The VJP's statistics, scale r and row means m_a, m_az, per path.
MEANS = {
    "f64": SCALE.format(path="f64", mode="f64")
    + lane_sums(
        " " * 12,
        "dj = (x[i, j] - mh) - ml",
        {
            "terms_a": "summand_a_f64(gamma[j], g[i, j])",
            "terms_az": "summand_az_f64(dj, r, gamma[j], g[i, j])",
        },
    )
    + """\
            ah, al = lanes_total(terms_a)
            zh, zl = lanes_total(terms_az)
            ma = (ah + al) / n
            maz = (zh + zl) / n""",
    "wide": """\
            mh, ml, s, sum_a, sum_az = vjp_statistics_wide(xi, gi, gamma)
            r = scale_f64(s, epsilon, n)
            ma = sum_a / n
            maz = (sum_az - ml * sum_a) * r / n""",
    "f16s": SCALE.format(path="f16s", mode="f16s")
    + """\
            ma, maz = 0.0, 0.0
            for j in range(size):
                dj = round_to_half((x[i, j] - mh) - ml)
                ma = round_to_half(ma + summand_a_f16s(gamma[j], g[i, j]))
                maz = round_to_half(maz + summand_az_f16s(dj, r, gamma[j], g[i, j]))
            ma = round_to_half(ma / n)
            maz = round_to_half(maz / n)""",
}

MEANS |= strict_variants(MEANS["f16s"])

ACCUMULATE = {
    "f64": """\
                hi, e = two_sum(dgamma_blocks[b, 0, j], summand_gz_f64(dj, r, gj))
                dgamma_blocks[b, 0, j] = hi
                dgamma_blocks[b, 1, j] += e
                hi, e = two_sum(dbeta_blocks[b, 0, j], gj)
                dbeta_blocks[b, 0, j] = hi
                dbeta_blocks[b, 1, j] += e
""",
    "wide": """\
                dgamma_blocks[b, 0, j] += summand_gz_f64(dj, r, gj)
                dbeta_blocks[b, 0, j] += gj
""",
    "f16s": """\
                dgamma_blocks[b, 0, j] = round_to_half(
                    dgamma_blocks[b, 0, j] + summand_gz_f16s(dj, r, gj)
                )
                dbeta_blocks[b, 0, j] = round_to_half(dbeta_blocks[b, 0, j] + gj)
""",
}

ACCUMULATE |= strict_variants(ACCUMULATE["f16s"])

COMBINE = '''\
@njit(cache=True, error_model="numpy")
def combine_blocks_f64(blocks):
    """Sum of the (hi, lo) block partials, block by block, compensated."""
    size = blocks.shape[2]
    out = np.empty(size)
    for j in range(size):
        hi, lo = 0.0, 0.0
        for b in range(blocks.shape[0]):
            hi, e = two_sum(hi, blocks[b, 0, j])
            lo += e + blocks[b, 1, j]
        out[j] = hi + lo
    return out


@njit(cache=True, error_model="numpy")
def combine_blocks_wide(blocks):
    """Sum of the block partials, block by block, in float64."""
    out = np.zeros(blocks.shape[2])
    for b in range(blocks.shape[0]):
        for j in range(blocks.shape[2]):
            out[j] += blocks[b, 0, j]
    return out
'''

STRICT_COMBINE = '''\
@njit(cache=True, error_model="numpy")
def combine_blocks_f16s(blocks):
    """Sum of the block partials, every addition rounded to half."""
    out = np.zeros(blocks.shape[2])
    for b in range(blocks.shape[0]):
        for j in range(blocks.shape[2]):
            out[j] = round_to_half(out[j] + blocks[b, 0, j])
    return out
'''


def _stage_functions(module: RowNorm, constants: Constants) -> list[str]:
    """The emitted per-element functions of ``module``, in modes f64, f16s and bf16s."""
    stages = [
        ("scale", module.scale, (norms.s, norms.eps, norms.n), "the row's scale r"),
        ("output", module.output, (norms.d, norms.r, norms.gamma_i, norms.beta_i), "y_i"),
        (
            "dx",
            module.vjp,
            (norms.d, norms.r, norms.gamma_i, norms.g_i, norms.m_a, norms.m_az),
            "dL/dx_i from the row means m_a = mean(gamma g), m_az = mean(gamma g z)",
        ),
        (
            "entry",
            module.jacobian_entry,
            (norms.d, norms.d_j, norms.r, norms.gamma_i, norms.n, norms.delta),
            "J_ij (numerator layout); delta is 1 on the diagonal",
        ),
        ("summand_a", SUMMAND_A, (norms.gamma_i, norms.g_i), "a summand of m_a"),
        (
            "summand_az",
            SUMMAND_AZ,
            (norms.d, norms.r, norms.gamma_i, norms.g_i),
            "a summand of m_az",
        ),
        ("summand_gz", module.dgamma_term, (norms.d, norms.r, norms.g_i), "a summand of dgamma"),
    ]
    return emit_stages(module.title, stages, constants)


def row_norm_source(module: RowNorm) -> str:
    """The full text of ``kernels/_generated/<module.key>.py``."""
    if not single_pass_sums_hold():
        raise ValueError("the summand of m_az is not linear in d and r: no single-pass VJP sums")
    constants = Constants()
    functions = _stage_functions(module, constants)
    summary = (
        f"output y_i = {sp.sstr(module.output)}, scale r = {sp.sstr(module.scale)},\n"
        f"dx_i = {sp.sstr(module.vjp)}."
    )
    statistics = ROW_STATISTICS.format(
        reduce=REDUCE,
        centered=module.centered,
        center_dd=CENTER["dd"] if module.centered else "",
        second_dd=lane_sums("    ", "dj = (row[j] - mh) - ml", {"squares": "dj * dj"}),
        center_wide=CENTER["wide"] if module.centered else "",
    )
    strict_statistics = [
        strict_variants(STRICT_STATISTICS)[name].format(
            center=strict_variants(CENTER["f16s"])[name] if module.centered else ""
        )
        for name in STRICT
    ]
    loops = [
        ROW_LOOPS.format(
            path=path.name,
            mode=path.mode,
            range=path.range,
            jit=path.jit,
            size_n=path.rounded("np.float64(size)"),
            dev_ij=path.rounded("(widen(xi[j]) - mh) - ml"),
            dev_i=path.rounded("(np.float64(x[i]) - mh) - ml"),
            dev_j=path.rounded("(np.float64(x[j]) - mh) - ml"),
            means=MEANS[path.name],
            accumulate=ACCUMULATE[path.name],
        )
        for path in PATHS
    ]
    sections = [
        "\n".join(constants.lines),
        *functions,
        statistics.strip("\n"),
        *(text.strip("\n") for text in strict_statistics),
        *(loop.strip("\n") for loop in loops),
        COMBINE.strip("\n"),
        *(strict_variants(STRICT_COMBINE)[name].strip("\n") for name in STRICT),
    ]
    return module_text(
        definitions="norms.py",
        title=module.title,
        key=module.key,
        summary=summary,
        source=module.source,
        sections=sections,
        extra_imports=(
            "from kernels._rownorm import (\n"
            "    SUM_LANES,\n"
            "    add_to_lane,\n"
            "    lanes_total,\n"
            "    narrow,\n"
            "    read_row,\n"
            "    row_buffer,\n"
            "    widen,\n"
            ")",
        ),
        preamble=BLOCK_ROWS_DEFINITION.format(block=BLOCK_ROWS),
    )


WEIGHT_LOOPS = '''\
@njit({jit})
def weights_{path}(v, gamma, epsilon, out):
    """W_i = gamma_i v_i / sqrt(|v_i|^2 + eps), row by row (rows in parallel)."""
    for i in {range}(v.shape[0]):
        r = scale_{mode}(norm2_{path}(v[i]), epsilon)
        gamma_i = np.float64(gamma[i])
        for j in range(v.shape[1]):
            out[i, j] = weight_{mode}(gamma_i, np.float64(v[i, j]), r)


@njit({jit})
def parameter_gradients_{path}(v, gamma, epsilon, dw, dv, dgamma):
    """dv and dgamma from dW = g^T x (float64 or halves), row by row of v."""
    for i in {range}(v.shape[0]):
        r = scale_{mode}(norm2_{path}(v[i]), epsilon)
        gamma_i = np.float64(gamma[i])
        p = dot_{path}(dw[i], v[i])
        dgamma[i] = dgamma_{mode}(r, p)
        for j in range(v.shape[1]):
            dv[i, j] = dv_{mode}(gamma_i, r, dw[i, j], np.float64(v[i, j]), p)
'''

WEIGHT_REDUCTIONS = '''\
@njit(cache=True, error_model="numpy")
def norm2_f64(row):
    """|row|^2 of a float64 row, compensated."""
    hi, lo = 0.0, 0.0
    for j in range(row.size):
        hi, e = two_sum(hi, row[j] * row[j])
        lo += e
    return hi + lo


@njit(cache=True, error_model="numpy")
def dot_f64(a, b):
    """sum a_j b_j of float64 rows, compensated."""
    hi, lo = 0.0, 0.0
    for j in range(a.size):
        hi, e = two_sum(hi, a[j] * b[j])
        lo += e
    return hi + lo


@njit(cache=True, error_model="numpy", fastmath={reduce})
def norm2_wide(row):
    """|row|^2 of a float32 row in float64 (each square exact)."""
    total = 0.0
    for j in range(row.size):
        value = np.float64(row[j])
        total += value * value
    return total


@njit(cache=True, error_model="numpy", fastmath={reduce})
def dot_wide(a, b):
    """sum a_j b_j in float64."""
    total = 0.0
    for j in range(a.size):
        total += np.float64(a[j]) * np.float64(b[j])
    return total
'''

STRICT_REDUCTIONS = '''\
@njit(cache=True, error_model="numpy")
def norm2_f16s(row):
    """|row|^2, every product and partial sum rounded to half."""
    acc = 0.0
    for j in range(row.size):
        acc = round_to_half(acc + round_to_half(row[j] * row[j]))
    return acc


@njit(cache=True, error_model="numpy")
def dot_f16s(a, b):
    """sum a_j b_j, every product and partial sum rounded to half."""
    acc = 0.0
    for j in range(a.size):
        acc = round_to_half(acc + round_to_half(a[j] * b[j]))
    return acc


@njit(cache=True, error_model="numpy")
def matmul_nt_f16s(a, b, out):
    """out = a b^T for halves, every product and partial sum rounded to half."""
    for i in range(a.shape[0]):
        for k in range(b.shape[0]):
            out[i, k] = dot_f16s(a[i], b[k])
'''


def _weight_stage_functions(constants: Constants) -> list[str]:
    module = WEIGHTNORM
    stages = [
        ("scale", module.scale, (norms.q, norms.eps), "1/sqrt(|v_i|^2 + eps)"),
        ("weight", module.weight, (norms.gamma_o, norms.v_ij, norms.r), "W_ij"),
        (
            "dv",
            module.dv,
            (norms.gamma_o, norms.r, norms.dw, norms.v_ij, norms.p),
            "dL/dv_ij, with p = sum_j dW_ij v_ij",
        ),
        ("dgamma", module.dgamma, (norms.r, norms.p), "dL/dgamma_i"),
    ]
    return emit_stages(module.title, stages, constants)


def weightnorm_source() -> str:
    """The full text of ``kernels/_generated/weightnorm.py``."""
    constants = Constants()
    functions = _weight_stage_functions(constants)
    module = WEIGHTNORM
    summary = (
        f"W_ij = {sp.sstr(module.weight)} with r = {sp.sstr(module.scale)}, q = |v_i|^2;\n"
        f"dv_ij = {sp.sstr(module.dv)}, dgamma_i = {sp.sstr(module.dgamma)}, p = sum_j dW_ij "
        "v_ij.\nThe products x W^T, g W and g^T x are the caller's."
    )
    loops = [
        WEIGHT_LOOPS.format(path=path.name, mode=path.mode, range=path.range, jit=path.jit)
        for path in PATHS
    ]
    sections = [
        "\n".join(constants.lines),
        *functions,
        WEIGHT_REDUCTIONS.format(reduce=REDUCE).strip("\n"),
        *(strict_variants(STRICT_REDUCTIONS)[name].strip("\n") for name in STRICT),
        *(loop.strip("\n") for loop in loops),
    ]
    return module_text(
        definitions="norms.py",
        title=module.title,
        key=module.key,
        summary=summary,
        source=module.source,
        sections=sections,
        preamble=BLOCK_ROWS_DEFINITION.format(block=BLOCK_ROWS),
    )


def sources() -> dict[str, Callable[[], str]]:
    """File name -> the function that writes it, for every generated normalization file
    (the names without the seconds of generating the texts)."""
    files = {f"{m.key}.py": partial(row_norm_source, m) for m in ROW_NORMS}
    files["weightnorm.py"] = weightnorm_source
    return files


def generated_files() -> dict[str, str]:
    """File name -> text of every generated normalization file."""
    return {name: write() for name, write in sources().items()}
