"""Report sections of the three attentions: the layouts, the proven backward passes, the
Lipschitz evidence in numbers (the unbounded DP family, the L2 witness and threshold, the
SCS bounds, the adversarial search) and a figure of the Jacobian norm against input scale."""

from __future__ import annotations

import numpy as np

from derive.catalog import CATALOG
from derive.check.attention import SEARCH_N, SEARCH_STARTS, SEARCH_STEPS, search_results
from derive.definitions.attention import PROOF_SIZES, closed_form_proof
from derive.report.figures import loglog_figure
from kernels import dp_attention
from proofs import attention as PA

#: The attentions, in the catalog's order.
ATTENTION_MODULES = tuple(m.key for m in CATALOG if m.family == "attention")

#: Input scales of the figure, multiples of a fixed input of three tokens whose middle token
#: is 0 (the token DP attention's unbounded family moves; its first D columns are used).
SCALES = tuple(10.0 ** (k / 4) for k in range(-8, 13))
X0 = np.array([[1.0, -0.5, 0.25, 0.5], [0.0, 0.0, 0.0, 0.0], [-1.0, 0.5, 0.75, -0.25]])

TITLES = {
    "dp_attention": "dot-product",
    "l2_attention": "L2 (tied)",
    "scs_attention": "scaled cosine",
}


def jacobian_figure() -> str:
    """|J(s X0)|_2 against s for the three attentions with identity weights."""
    series = {}
    for module in ATTENTION_MODULES:
        setting = next(s for s in PA.standard_settings(module) if s.name == "identity")
        width = setting.params[0].shape[1]  # D, the width of the tokens
        norms = PA.jacobian_norm_curve(module, setting.params, X0[:, :width], SCALES)
        series[TITLES[module]] = list(zip(SCALES, norms, strict=True))
    return loglog_figure(
        "|J(s X0)|_2 against the input scale s (identity weights, N = 3)",
        series,
        "input scale s",
        "|J(s X0)|_2",
    )


def _strict_overflow() -> str:
    """The smallest constant c (a half value) whose all-c rows overflow strict half DP
    attention (D = d = dv = 64, identity weights) while the mixed kernel stays finite."""
    eye = np.eye(64, dtype=np.float16)
    for c in (np.float16(v) for v in range(16, 64)):
        X = np.full((2, 64), c, dtype=np.float16)
        with np.errstate(all="ignore"):
            strict = dp_attention.forward(X, eye, eye, eye, strict_fp16=True)
            mixed = dp_attention.forward(X, eye, eye, eye)
        if not np.all(np.isfinite(strict)) and np.all(np.isfinite(mixed)):
            return (
                f"float16, strict: two equal rows of {float(c):g} (D = d = dv = 64, identity "
                f"weights) give a non-finite output -- q.k = 64 * {float(c):g}^2 = "
                f"{64 * float(c) ** 2:g} rounds past 65504 -- while the mixed kernel returns "
                f"{float(mixed[0, 0]):g}, the correctly rounded value."
            )
    return "float16, strict: no overflow for all-c rows up to c = 63."


def _search_table(module: str) -> list[str]:
    lines = [
        "| setting | N | largest |J|_2 found | printed constant | ratio |",
        "|---|---|---|---|---|",
    ]
    settings = [s.name for s in PA.standard_settings(module)]
    results = search_results(module)
    for k, r in enumerate(results):
        name = settings[k // len(SEARCH_N)]
        printed = r.bound.decimal(12)[1] if r.bound else "infinity"
        ratio = f"{r.ratio:.4f}" if r.ratio is not None else ""
        lines.append(f"| {name} | {r.n} | {r.norm_hp[:14]} | {printed} | {ratio} |")
    return [*lines, ""]


def attention_section(name: str, figure: str | None) -> list[str]:
    sizes = ", ".join(f"({s})" for s in PROOF_SIZES[name])
    backward = closed_form_proof(name)
    verification = backward.verify()
    if not verification.ok:
        raise RuntimeError(verification.summary())
    lines = [
        "Layout: rows are tokens (X of shape (N, D)), a row softmax; the paper writes tokens "
        "as columns with a column softmax, the same map with W^Q and W^K exchanged "
        "(proven below). Backward pass: the closed forms of "
        "`derive/definitions/attention.py`, proven "
        f"equal to `sympy.diff` of the forward at {sizes}. The kernels evaluate in float64 "
        "(float32 and float16 rounded once at the end); `strict_fp16=True` rounds every "
        "operation to half.",
        "",
        *(f"{i}. *[{step.method}]* {step.statement}" for i, step in enumerate(backward.steps, 1)),
        "",
    ]
    if name == "dp_attention":
        lines += [
            f"Not Lipschitz: with unit weights and X = (t, 0), "
            f"`{PA.DP_FAMILY['entry']}` is exactly `{PA.DP_FAMILY['value']}` "
            f"({PA.DP_FAMILY['growth']}).",
            "",
            _strict_overflow(),
            "",
        ]
    if name == "l2_attention":
        rows = ", ".join(
            f"N = {n}: c > {float(PA.l2_threshold(n)[1]):.6f}" for n in (2, 3, 4, 8, 64)
        )
        lines += [
            "The map scales like |W^Q|^2 (the value path carries A = W^Q^T W^Q / sqrt(d)); "
            "the printed constant like |W^Q|. With W^Q = c I and W^V = I the printed "
            f"constant fails for {rows}.",
            "",
        ]
    if name == "scs_attention":
        eye = np.eye(2)
        printed = PA.printed_scs_bound(4, eye, eye, eye, 1.0, 1.0, 1.0).decimal(12)[0]
        derived = PA.derived_scs_bound(4, eye, eye, eye, 1.0, 1.0, 1.0).decimal(12)[0]
        lines += [
            "Printed constant against the smaller bound derived step by step, "
            "`nu eps^(-1/2) ((N/2) tau (|W^Q| + |W^K|) + sqrt(N) |W^V|)`: at N = 4, identity "
            f"weights, nu = tau = eps = 1: {printed} against {derived}.",
            "",
        ]
    lines += [
        f"Adversarial search of `max |J(X)|_2` ({SEARCH_STARTS} starts of up to "
        f"{SEARCH_STEPS} ascent steps each; the best point re-evaluated at 50 digits; "
        "evidence, not proof; `proofs.attention.standard_settings` lists the weights):",
        "",
        *_search_table(name),
    ]
    if figure:
        lines += [f"![Jacobian norm against input scale]({figure})", ""]
    return lines
