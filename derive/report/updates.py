"""The report's sections for the optimizer statements: the notations mapped, then the
claims."""

from __future__ import annotations

from derive.catalog import section_entry

#: 004's and 001's symbols against liptable's (derive/definitions/updates.py) and PyTorch's.
NOTATION = (
    "| 004 (appendix B) | 001 (Algorithms 1-2) | liptable | PyTorch |",
    "|---|---|---|---|",
    "| $\\eta$ | $\\alpha_t$ | eta, alpha | `lr` (SGD: `lr` = $\\eta (1 - \\gamma)$, "
    "`momentum.definition_004`) |",
    "| $\\gamma$ (momentum) | $\\beta$ | gamma_d, beta_m | SGD `momentum`, with `dampening=0` |",
    "| $\\gamma$ (Adadelta) | - | gamma_d | RMSprop `alpha` (Definition 11 is RMSProp) |",
    "| $B_1$, $B_2$ | $\\beta_1$, $\\beta_2$ | beta_1, beta_2 | Adam `betas` |",
    "| $\\varepsilon$ under the root: $\\sqrt{\\hat v + \\varepsilon}$ | none (line 8) | epsilon"
    " | `eps` added to $\\sqrt{\\hat v}$: no exact match for $\\varepsilon > 0$ |",
    "| - | $\\lambda$ (decoupled, times $\\alpha_t$) | lambda_wd | AdamW `weight_decay`; SGD's "
    "`weight_decay` is coupled (L2) |",
    "| $M_t$, $m_{t,j}$, $v_{t,j}$ | $\\mathbf v_t$, $\\mathbf m_t$, $\\mathbf v_t$ | M, m, v "
    "| SGD buffer $b_t = M_t/(1 - \\gamma)$; Adam `exp_avg`, `exp_avg_sq` |",
)


def updates_section(name: str) -> list[str]:
    """The section text of topic ``name`` (without its claims)."""
    topic = section_entry(name)
    lines = [f"### {topic.title}", "", f"Source: {topic.source}.", ""]
    if name == "mixed_precision":
        return [
            *lines,
            "IEEE 754 binary16 has a sign bit, a 5-bit exponent field E (bias 15) and a "
            "10-bit fraction F: $(-1)^S 2^{E-15}(1 + F/1024)$ for E = 1..30, $(-1)^S 2^{-14} "
            "F/1024$ for E = 0 (zero and the subnormals down to $2^{-24}$), infinity and NaN "
            "for E = 31. Every number below is checked exactly against that format (all "
            "65,536 patterns) and NumPy's.",
            "",
        ]
    if name == "momentum":
        lines += [
            "Both sources damp the gradient inside the average ($M_t = \\gamma M_{t-1} + (1 - "
            "\\gamma) g_t$) and keep the step size outside it; PyTorch's SGD sums undamped "
            "gradients (`dampening=0`, its first buffer is $g_1$), so 004's step $\\eta M_t$ "
            "is PyTorch's with `lr` $= \\eta (1 - \\gamma)$ at every step (proven below). "
            "Loshchilov and Hutter's SGDW puts the rate inside the velocity instead. The step "
            "is subtracted in every source. One coordinate at a time:",
        ]
    else:
        lines += [
            "004's Adam (Definition 16) and 001's AdamW (Algorithm 2) keep Kingma and Ba's "
            "moments and bias corrections; they differ from PyTorch in eps (004 adds it under "
            "the root, 001 has none) and, for 001, only in line 8's missing root "
            "(`optimizers.algorithm2_update`). The kernel `kernels.optim` runs one Adam or "
            "AdamW step in PyTorch's convention: $\\theta_t = \\theta_{t-1}(1 - lr\\,\\lambda) - "
            "lr\\, \\hat m_t / (\\sqrt{\\hat v_t} + \\epsilon)$ (AdamW; Adam adds "
            "$\\lambda \\theta_{t-1}$ to the gradient instead). One coordinate at a time:",
        ]
    return [*lines, "", *NOTATION, ""]
