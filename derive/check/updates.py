"""Verdicts of the optimizer statements: 004's momentum, Adadelta and Adam (appendix B) and
001's Algorithms 1 and 2 and mixed-precision numbers (sections 3.5-3.7); topics
``momentum``, ``adaptive`` and ``mixed_precision``.

Every verdict follows from ``proofs/updates.py``: inductions whose step is an identity in a
symbolic previous state (every number of steps), geometric sums for a symbolic T, exact
witnesses, and the exhaustive enumeration of the 65,536 binary16 bit patterns. The printed
expression (``Claim.formal``) is what each decider evaluates; the canonical algorithm it is
compared with comes from ``derive/definitions/updates.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import sympy as sp

from derive.check.core import compared, result, same_value
from derive.claims import Claim
from derive.definitions import updates as up
from proofs import updates as pu
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero

#: "For every number of steps": the wording ``derive.check.core.sizes_checked`` reads as
#: every size.
EVERY_T = "for every size (every number of steps t"


def _running_average(c: Claim):
    old, new = pu.coefficients(c.formal)
    total = sp.simplify(old + new)
    steps = (
        Step(
            statement=rf"the weights of $M_{{t-1}}$ and $g_t$ are ${sp.latex(old)}$ and "
            rf"${sp.latex(new)}$, adding up to ${sp.latex(total)}$: a constant gradient stays "
            r"constant under the average (a running average)",
            method="symbolic identity",
            check=lambda: is_zero(total - 1),
        ),
        Step(
            statement=rf"PyTorch's SGD with momentum = ${sp.latex(old)}$, dampening = 0 keeps "
            rf"the buffer $b_t = M_t / ({sp.latex(new)})$ {EVERY_T}: $b_1 = g_1 = "
            r"M_1/(1 - \gamma)$ and the step $\gamma M_{t-1}/(1 - \gamma) + g_t = "
            r"M_t/(1 - \gamma)$ for a symbolic $M_{t-1}$), so 004's $W_t = W_{t-1} - \eta M_t$ "
            r"is torch.optim.SGD(lr = $\eta (1 - \gamma)$, momentum = $\gamma$, dampening = 0)",
            method="symbolic identity",
            check=lambda: pu.torch_momentum_induction(c.formal),
        ),
        Step(
            statement=r"with dampening = $\gamma$ instead PyTorch's first buffer is $b_1 = g_1$ "
            r"(not dampened) against $M_1 = (1 - \gamma) g_1$: that mapping is off",
            method="exact witness",
            check=lambda: (lambda b, m: not is_zero(b - m))(*pu.dampened_first_step()),
        ),
    )
    if not is_zero(total - 1):
        return result(
            c,
            Verdict.FAILS,
            sp.sstr(total),
            Proof(claim=c.statement_latex, steps=(_not_average(total),)),
            witness={"g": "1, 1, ...", "weights_total": sp.sstr(total)},
        )
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(new * up.eta),
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "value: the learning rate of torch.optim.SGD (momentum = gamma, dampening = 0) "
            "whose steps are 004's for every t. 004 (like 001's Algorithm 1) damps the "
            "gradient inside the average and keeps eta outside it; PyTorch's default "
            "dampening = 0 sums the gradients undamped, b_t = M_t/(1 - gamma).",
        ),
    )


def _not_average(total: sp.Expr) -> Step:
    return Step(
        statement=rf"the weights add up to ${sp.latex(total)} \neq 1$: a constant gradient is "
        "not kept, so this is not a running average",
        method="exact witness",
        check=lambda: not is_zero(total - 1),
    )


def _weights(c: Claim):
    old, new = pu.coefficients(up.RUNNING_AVERAGE)
    derived = sp.Tuple(new, old)
    witness_at = {up.gamma: sp.Rational(9, 10)}
    printed_at, derived_at = c.formal.subs(witness_at), derived.subs(witness_at)
    steps = (
        Step(
            statement=r"Definition 7's formula weighs the new gradient by $1 - \gamma_t$ and "
            r"$M_{t-1}$ by $\gamma_t$ (its partial derivatives); at $\gamma_t = 9/10$ the prose "
            rf"gives (new, old) = ${sp.latex(printed_at)}$, the formula "
            rf"${sp.latex(derived_at)}$",
            method="exact witness",
            check=lambda: printed_at != derived_at,
        ),
        Step(
            statement=r"as intended (new data $1 - \gamma_t$, old data $\gamma_t$) the prose "
            "agrees with the formula for every $\\gamma_t$",
            method="symbolic identity",
            check=lambda: all(is_zero(a - b) for a, b in zip(c.intended, derived, strict=True)),
        ),
    )
    if c.formal == derived:
        return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, steps[1:]))
    if printed_at == derived_at:
        raise UnprovenError(f"{c.id}: the witness does not separate printed and derived")
    return result(
        c,
        Verdict.MISPRINTED,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        witness={"gamma_t": "9/10", "printed": sp.sstr(printed_at), "derived": sp.sstr(derived_at)},
        notes=(
            "value: (weight of the new gradient, weight of M_{t-1}). The prose swaps the two "
            "weights of its own formula; intended: new data 1 - gamma_t, old data gamma_t.",
        ),
    )


def _example(c: Claim):
    derived = sp.Tuple(*up.ema([1, 1, 1], sp.Rational(1, 10)))
    corrected = [a / (1 - sp.Rational(1, 10) ** k) for k, a in enumerate(derived, start=1)]
    steps = (
        Step(
            statement=rf"$a_t = 0.1 a_{{t-1}} + 0.9 \cdot 1$ from $a_0 = 0$: "
            rf"${sp.latex(derived)}$ exactly; bias-corrected (B.35) every one is 1",
            method="exact witness",
            check=lambda: all(a == 1 for a in corrected),
        ),
    )
    return compared(c, derived, steps)


def _weights_sum(c: Claim):
    rate, gradients = sp.Rational(1, 2), [1, 1]
    last = len(gradients)  # T
    weight = sp.Lambda((up.T, up.t), c.formal)
    printed_value = sum(weight(last, k) * x for k, x in enumerate(gradients, start=1))
    _, average = pu.printed_b33(last, rate, gradients)
    printed_value = printed_value.subs(up.gamma, rate)
    total, start = pu.weights_total()
    printed_total = sp.factor(sum(weight(last, k) for k in range(last + 1)))
    point = ", ".join(map(str, gradients))
    steps = (
        Step(
            statement=rf"$T = {last}$, $\gamma = {sp.sstr(rate)}$, $A_0 = 0$, $g = ({point})$: "
            rf"as printed $A_{last} = "
            rf"{sp.latex(printed_value)}$, the running average $A_2 = {sp.latex(average)}$; the "
            rf"printed weights at $T = 2$ add up to ${sp.latex(printed_total)}$, not 1",
            method="exact witness",
            check=lambda: printed_value != average and not is_zero(printed_total - 1),
        ),
        Step(
            statement=r"as intended, $A_T = \gamma^T A_0 + \sum_{t=1}^T \gamma^{T-t} (1-\gamma) "
            rf"g_t$ {EVERY_T}: at T = 1 exactly, and the step $A_T = \gamma A_{{T-1}} + "
            r"(1 - \gamma) g_T$ for a symbolic T, the sum split at its last term and compared "
            r"summand by summand)",
            method="symbolic identity",
            check=pu.closed_form_recurs,
        ),
        Step(
            statement=rf"the intended weights add up to 1 {EVERY_T}): $\sum_{{t=1}}^T "
            rf"\gamma^{{T-t}}(1-\gamma) = {sp.latex(total)}$ (the geometric sum for a symbolic "
            r"T) plus $A_0$'s $\gamma^T$",
            method="symbolic identity",
            check=lambda: is_zero(total + start - 1),
        ),
    )
    if is_zero(c.formal - c.intended):
        return result(c, Verdict.HOLDS, sp.sstr(c.intended), Proof(c.statement_latex, steps[1:]))
    if printed_value == average:
        raise UnprovenError(f"{c.id}: the witness does not separate printed and intended")
    return result(
        c,
        Verdict.MISPRINTED,
        sp.sstr(c.intended),
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "T": str(last),
            "gamma": sp.sstr(rate),
            "g": f"(A_0, {', '.join(f'g_{k}' for k in range(1, last + 1))}) = (0, {point})",
            "printed": sp.sstr(printed_value),
            "derived": sp.sstr(average),
        },
        notes=(
            "value: the weight of g_t (t >= 1). The printed (1 - gamma)^t should be (1 - "
            "gamma); only the t = 0 term, A_0 gamma^T, has the exponent 0. The same holds "
            "for Concept 6's sum from t = 0, whose t = 0 term is A_0's, not a gradient's.",
        ),
    )


def _bias_correction(c: Claim):
    total, missing = pu.weights_total()
    derived = 1 / total
    constant = sp.Symbol("g_c", real=True)
    corrected = sp.simplify(total * constant * derived)
    steps = (
        Step(
            statement=rf"the gradients' weights add up to ${sp.latex(total)}$ and $A_0$'s is "
            rf"${sp.latex(missing)}$ {EVERY_T}: the geometric sum for a symbolic T)",
            method="symbolic identity",
            check=lambda: is_zero(total + missing - 1),
        ),
        Step(
            statement=rf"so desired/real total is ${sp.latex(derived)}$, and a constant "
            r"gradient $g_c$ gives $A_T = (1 - \gamma^T) g_c$, corrected exactly to $g_c$",
            method="symbolic identity",
            check=lambda: is_zero(corrected - constant),
        ),
    )
    return compared(c, derived, steps)


def _algorithm1(c: Claim):
    v_new, w_new = c.formal
    decay_in_v = sp.diff(v_new, up.lam)
    decay_in_w = sp.simplify(sp.diff(w_new, up.lam))
    ours, coupled = pu.coupled_decay_witness()
    steady, lh = pu.varying_schedule_witness()
    steps = (
        Step(
            statement=r"the decay is decoupled: $\partial \mathbf v_t / \partial \lambda = "
            rf"{sp.latex(decay_in_v)}$ and $\partial \mathbf w_t / \partial \lambda = "
            r"-\alpha_t \mathbf w_{t-1}$ (it never enters the average)",
            method="symbolic identity",
            check=lambda: decay_in_v == 0 and is_zero(decay_in_w + up.alpha * up.w_prev),
        ),
        Step(
            statement=rf"without decay, $\alpha_t \mathbf v_t$ is PyTorch's $lr_t b_t$ {EVERY_T} "
            r"and every schedule): SGD(lr = $\alpha_t (1 - \beta)$, momentum = $\beta$, "
            r"dampening = 0) keeps $b_t = \mathbf v_t/(1 - \beta)$ (induction as for 004)",
            method="symbolic identity",
            check=lambda: pu.torch_momentum_induction(v_new.subs(up.beta, up.gamma)),
        ),
        Step(
            statement=r"PyTorch's weight_decay is coupled (L2: $\lambda \mathbf w$ enters the "
            r"buffer): zero gradients, $\mathbf w_0 = 1$, $\alpha = 1$, $\beta = 1/2$, "
            rf"$\lambda = 1$: Algorithm 1 gives ${sp.latex(sp.Tuple(*ours))}$, PyTorch with "
            rf"the decay that matches step 1 ${sp.latex(sp.Tuple(*coupled))}$",
            method="exact witness",
            check=lambda: ours[0] == coupled[0] and ours[1] != coupled[1],
        ),
        Step(
            statement=r"Loshchilov and Hutter's SGDW keeps the rate inside the velocity "
            r"($m_t = \beta m_{t-1} + \eta_t \alpha g_t$): at $\beta = 1/2$, $g = (1, 0)$, rates "
            rf"$(1, 1/2)$ the steps are ${sp.latex(sp.Tuple(*lh))}$ against Algorithm 1's "
            rf"${sp.latex(sp.Tuple(*steady))}$ (with a constant rate $m_t$ is a constant "
            r"times PyTorch's buffer, by the induction above, and the two agree)",
            method="exact witness",
            check=lambda: steady[0] == lh[0] and steady[1] != lh[1],
        ),
    )
    if decay_in_v != 0:
        wrong = Step(
            statement=rf"$\partial \mathbf v_t / \partial \lambda = {sp.latex(decay_in_v)} "
            r"\neq 0$: the decay enters the average, it is not decoupled",
            method="symbolic identity",
            check=lambda: not is_zero(decay_in_v),
        )
        return result(
            c,
            Verdict.FAILS,
            sp.sstr(decay_in_v),
            Proof(claim=c.statement_latex, steps=(wrong,)),
            witness={"d v_t / d lambda": sp.sstr(decay_in_v)},
        )
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(up.alpha * (1 - up.beta)),
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "value: PyTorch's lr (momentum = beta, dampening = 0, weight_decay = 0) whose "
            "steps are Algorithm 1's without decay. With decay Algorithm 1 is SGDW in "
            "PyTorch's AdamW convention (the decay multiplied by the learning rate alpha_t); "
            "Loshchilov and Hutter multiply it by the schedule multiplier eta_t alone and "
            "put the rate inside the velocity, which differs once the rate varies. Section "
            "3.6 attributes momentum SGD to Nesterov (1983): see momentum.nesterov_001.",
        ),
    )


def _gradient_point(c: Claim):
    printed, intended = pu.step_at(c.formal), pu.step_at(c.intended)
    steps = (
        Step(
            statement=r"$L(w) = w^2/2$, $w_0 = 1$, $\alpha = 1$, $\beta = 0$, no decay: as "
            rf"printed $w_1 = w_0 - \nabla L(w_1)$, an implicit step, gives $w_1 = "
            rf"{sp.latex(printed)}$; with the gradient at $w_0$, $w_1 = {sp.latex(intended)}$",
            method="exact witness",
            check=lambda: printed != intended,
        ),
        Step(
            statement=r"as intended ($\nabla L(\mathbf w_{t-1})$, Loshchilov and Hutter's "
            r"$\nabla f_t(\theta_{t-1})$, PyTorch's gradient at the parameters before the "
            r"step) each step is explicit: $w_1$ is the formula's value",
            method="exact witness",
            check=lambda: intended == 1 - 1,
        ),
    )
    if c.formal == c.intended:
        return result(c, Verdict.HOLDS, sp.sstr(c.intended), Proof(c.statement_latex, steps[1:]))
    if printed == intended:
        raise UnprovenError(f"{c.id}: the witness does not separate printed and intended")
    return result(
        c,
        Verdict.MISPRINTED,
        sp.sstr(c.intended),
        Proof(claim=c.statement_latex, steps=steps),
        witness={"L": "w**2/2", "w_0": "1", "printed": sp.sstr(printed), "derived": "0"},
        notes=("Intended: g_t = grad L(w_{t-1}), which the algorithms then use as written.",),
    )


def _nesterov(c: Claim):
    ours, nesterov = pu.momentum_iterates(c.formal), pu.momentum_iterates(up.NESTEROV_POINT)
    gap = sp.factor(nesterov[1] - ours[1])
    steps = (
        Step(
            statement=r"$f(w) = w^2/2$, $w_0 = 1$, momentum 1/2, any step $\epsilon > 0$ "
            rf"(symbolic): both give $w_1 = {sp.latex(ours[0])}$; then Algorithm 1 (heavy "
            rf"ball, its lr mapped as in `momentum.algorithm1_001`) gives $w_2 = "
            rf"{sp.latex(ours[1])}$ and Nesterov's look-ahead gradient $w_2 = "
            rf"{sp.latex(nesterov[1])}$, apart by ${sp.latex(gap)} \neq 0$",
            method="symbolic identity",
            check=lambda: is_zero(ours[0] - nesterov[0]) and not is_zero(gap),
        ),
    )
    if is_zero(gap):
        same = Step(
            statement="the iterates agree for every step size",
            method="symbolic identity",
            check=lambda: is_zero(nesterov[1] - ours[1]),
        )
        return result(c, Verdict.HOLDS, sp.sstr(c.formal), Proof(c.statement_latex, (same,)))
    return result(
        c,
        Verdict.FAILS,
        sp.sstr(up.NESTEROV_POINT),
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "f": "w**2/2",
            "w_0": "1",
            "momentum": "1/2",
            "printed": sp.sstr(ours[1]),
            "derived": sp.sstr(nesterov[1]),
        },
        notes=(
            "value: the point Nesterov's method takes the gradient at. Algorithm 1 is "
            "Polyak's heavy ball (1964), PyTorch's SGD with nesterov=False; Nesterov's "
            "method is PyTorch's nesterov=True. They agree on a linear loss, not on a "
            "quadratic.",
        ),
    )


def _eq37(c: Claim):
    weight = sp.Symbol("W", real=True)
    regulariser = up.lam * weight**2  # one weight: ||W||_F^2 = W^2
    derived = (up.alpha * sp.diff(regulariser, weight)).subs(weight, up.w_prev)
    point = {up.alpha: 1, up.lam: 1, up.w_prev: 1}
    printed_step, derived_step = 1 - c.formal.subs(point), 1 - derived.subs(point)
    steps = (
        Step(
            statement=r"the gradient of $\lambda \|\mathbf W\|_F^2$ is $2 \lambda \mathbf W$: a "
            rf"gradient step of Eq. 36 decays by ${sp.latex(derived)}$ (sympy.diff)",
            method="symbolic identity",
            check=lambda: is_zero(derived - 2 * up.alpha * up.lam * up.w_prev),
        ),
        Step(
            statement=r"$\mathcal L = 0$, $W = 1$, $\alpha = \lambda = 1$: Eq. 37 gives "
            rf"$W_{{new}} = {printed_step}$, the gradient step of Eq. 36 ${derived_step}$",
            method="exact witness",
            check=lambda: printed_step != derived_step,
        ),
    )
    if is_zero(c.formal - derived):
        return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, steps[:1]))
    return result(
        c,
        Verdict.FAILS,
        sp.sstr(derived),
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "W": "1",
            "alpha": "1",
            "lambda": "1",
            "printed": str(printed_step),
            "derived": str(derived_step),
        },
        notes=(
            "value: the decay term of a gradient step of Eq. 36. Corrected: Eq. 37 is the "
            "gradient step of (lambda/2) sum_l ||W^l||_F^2, or Eq. 36's step decays by "
            "2 alpha lambda W. Read with the spectral norm ||W||_2 the regulariser's gradient "
            "is 2 lambda sigma_1 u_1 v_1^T, not a multiple of W at all.",
        ),
    )


def _step_cap(c: Claim):
    factor = 1 / (up.G_tj + up.eps)
    derived = sp.maximum(factor, up.G_tj, sp.Interval(0, sp.oo))
    steps = (
        Step(
            statement=r"$G_{t,j} \ge 0$ (an average of squares) and $1/(G + \varepsilon)$ "
            rf"decreases in $G$: its maximum over $G \ge 0$ is ${sp.latex(derived)}$, reached "
            r"at $G = 0$ (every gradient 0 so far)",
            method="symbolic identity",
            check=lambda: (
                is_zero(sp.maximum(factor, up.G_tj, sp.Interval(0, sp.oo)) - derived)
                and is_zero(factor.subs(up.G_tj, 0) - derived)
            ),
        ),
    )
    return compared(c, derived, steps)


def _square_root(c: Claim):
    before = up.eta / (up.G_tj + up.eps)
    degree, earlier = pu.scaling_degree(c.formal), pu.scaling_degree(before)
    printed = sp.Integer(c.printed_value)
    steps = (
        Step(
            statement=rf"$G_t(c g) = c^2 G_t(g)$ {EVERY_T}: $G_0 = 0$ and the step for a "
            r"symbolic $G_{t-1}$)",
            method="symbolic identity",
            check=pu.second_moment_scales,
        ),
        Step(
            statement=r"at $\varepsilon = 0$ the update $\eta_j g_{t,j}$ scales as $c^k$: "
            rf"$k = {sp.latex(earlier)}$ with B.23's $\eta/G$ (it shrinks as the gradients "
            rf"grow), $k = {sp.latex(degree)}$ with the square root",
            method="symbolic identity",
            check=lambda: pu.scaling_degree(c.formal) == degree and earlier == -1,
        ),
    )
    if degree is None:
        raise UnprovenError(f"{c.id}: the update is not homogeneous in the gradients")
    return compared(c, degree, steps, printed=printed)


def _adadelta(c: Claim):
    rate, eps, gradients = pu.ADADELTA_POINT
    ours = [
        c.formal.subs(up.G_tj, s) * x
        for x, s in zip(gradients, up.ema(list(gradients), rate), strict=True)
    ]
    ours = [s.subs({up.eps: eps, up.eta: 1}) for s in ours]
    point = f"({', '.join(map(str, gradients))})"
    ratio = sp.nsimplify(sp.radsimp(ours[1] / ours[0]))
    _, theirs = pu.adadelta_ratio()
    rms = up.eta * up.g / sp.sqrt(up.G_tj)  # torch.optim.RMSprop at eps = 0
    steps = (
        Step(
            statement=rf"$\gamma = \rho = {sp.sstr(rate)}$, $\varepsilon = {sp.sstr(eps)}$, "
            rf"$g = {point}$: the second step over the first is ${sp.latex(ratio)}$ here and "
            rf"${sp.latex(theirs)}$ for "
            r"torch.optim.Adadelta (Zeiler's $\Delta_t = \sqrt{u_{t-1} + \varepsilon}/"
            r"\sqrt{v_t + \varepsilon}\, g_t$); a step size scales both steps alike, so no "
            r"$\eta$ matches Adadelta",
            method="exact witness",
            check=lambda: ratio != theirs,
        ),
        Step(
            statement=r"corrected: it is RMSProp (Hinton), torch.optim.RMSprop(lr = $\eta$, "
            r"alpha = $\gamma$): the same average of $g^2$ and at $\varepsilon = 0$ the same "
            r"update $\eta g/\sqrt{G}$ for every t; PyTorch adds eps to $\sqrt{G}$, not to G",
            method="symbolic identity",
            check=lambda: is_zero(c.formal.subs(up.eps, 0) * up.g - rms),
        ),
    )
    if ratio == theirs:
        raise UnprovenError(f"{c.id}: the witness does not separate the two updates")
    return result(
        c,
        Verdict.FAILS,
        "sqrt(u_prev + epsilon)/sqrt(G_tj + epsilon)*g",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "gamma": sp.sstr(rate),
            "epsilon": sp.sstr(eps),
            "g": point,
            "printed": sp.sstr(ratio),
            "derived": sp.sstr(theirs),
        },
        notes=(
            "value: Adadelta's step (lr = 1), with u the running average of the squared "
            "steps. Definition 11 has no such numerator: it is RMSProp with eps under the "
            "root. Adagrad (B.1.3) sums the squared gradients, not the gradients.",
        ),
    )


def _adagrad(c: Claim):
    printed = pu.accumulated(c.formal, [1, -1])
    half = sp.Rational(1, 2)
    vanish, kept = pu.adagrad_step_limit(None), pu.adagrad_step_limit(half)
    grows = sp.diff(c.intended, up.prev) == 1 and (c.intended - up.prev).is_nonnegative is True
    steps = (
        Step(
            statement=r"as printed (a sum of the gradients) $g = (1, -1)$ gives $G = "
            rf"{sp.latex(sp.Tuple(*printed))}$: it does not grow, and $G_1 = -1$ at $g = -1$ "
            r"would put a negative number under the root",
            method="exact witness",
            check=lambda: printed[-1] == 0 and bool(pu.accumulated(c.formal, [-1])[0] < 0),
        ),
        Step(
            statement=r"as intended, $G_t = G_{t-1} + g_t^2 \ge G_{t-1}$ "
            rf"{EVERY_T}: the step adds $g_t^2 \ge 0$ to a symbolic $G_{{t-1}}$), so the step "
            rf"size never grows; for a constant $g \neq 0$ it tends to ${sp.latex(vanish)}$ "
            r"as $t \to \infty$ ($G_t = t g^2$), while with the running average ($G_t = "
            r"(1 - \gamma^t) g^2$, momentum.bias_correction_004; here $\gamma = 1/2$) it "
            rf"tends to ${sp.latex(kept)}$",
            method="symbolic limit",
            check=lambda: (
                grows
                and vanish == 0
                and is_zero(kept - up.eta / sp.sqrt(sp.Symbol("g", positive=True) ** 2 + up.eps))
            ),
        ),
    )
    if is_zero(c.formal - c.intended):
        return result(c, Verdict.HOLDS, sp.sstr(c.intended), Proof(c.statement_latex, steps[1:]))
    if printed[-1] != 0:
        raise UnprovenError(f"{c.id}: the witness does not show the printed sum cancelling")
    return result(
        c,
        Verdict.MISPRINTED,
        sp.sstr(c.intended),
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "g": "(1, -1)",
            "printed": sp.sstr(sp.Tuple(*printed)),
            "derived": sp.sstr(sp.Tuple(*pu.accumulated(c.intended, [1, -1]))),
        },
        notes=(
            "Intended: Adagrad sums the squared gradients (Duchi et al. 2011; "
            "torch.optim.Adagrad's state_sum); then the statement holds.",
        ),
    )


def _adam_bias(c: Claim):
    betas = (up.beta1, up.beta2)
    fractions = tuple(pu.expected_fraction(b) for b in betas)
    derived = sp.Tuple(*(1 / f for f in fractions))
    steps = (
        Step(
            statement=r"gradients with one mean: $E[m_t] = \sum_{i=1}^t (1 - \beta_1) "
            rf"\beta_1^{{t-i}} E[g] = ({sp.latex(fractions[0])}) E[g]$ {EVERY_T}, the "
            r"geometric sum); likewise $E[v_t] = (1 - \beta_2^t) E[g^2]$",
            method="symbolic identity",
            check=lambda: all(
                is_zero(f - (1 - b**up.T)) for f, b in zip(fractions, betas, strict=True)
            ),
        ),
        Step(
            statement=r"so the printed factors make the averages unbiased, $E[\hat m_t] = "
            r"E[g]$ and $E[\hat v_t] = E[g^2]$, exactly when they are these; they are Kingma "
            r"and Ba's and PyTorch's (bias_correction = $1 - \beta^{step}$)",
            method="symbolic identity",
            check=lambda: same_value(c.formal, derived),
        ),
    )
    return compared(c, derived, steps if same_value(c.formal, derived) else steps[:1])


def _definition16(c: Claim):
    betas = {up.beta1: sp.Rational(9, 10), up.beta2: sp.Rational(999, 1000)}

    def second(formal):
        m = v = sp.S.Zero
        for x in (1, 1):
            v = formal.subs({**betas, up.m_prev: m, up.v_prev: v, up.g: x})
            m = betas[up.beta1] * m + (1 - betas[up.beta1]) * x
        return v

    printed, intended = second(c.formal), second(c.intended)
    adam = up.adam_moments([1, 1], *betas.values())[1]
    steps = (
        Step(
            statement=r"PyTorch's betas (0.9, 0.999), $g = (1, 1)$: as printed $v_2 = "
            rf"{sp.latex(printed)}$, with $v_{{t-1}}$ (B.29, Kingma and Ba) $v_2 = "
            rf"{sp.latex(intended)}$",
            method="exact witness",
            check=lambda: printed != intended,
        ),
        Step(
            statement=r"as intended, $v_t = B_2 v_{t-1} + (1 - B_2) g_t^2$ is Adam's second "
            r"moment (torch.optim.Adam's exp_avg_sq), the same recurrence for symbolic betas",
            method="symbolic identity",
            check=lambda: (
                is_zero(intended - adam)
                and is_zero(c.intended - (up.beta2 * up.v_prev + (1 - up.beta2) * up.g**2))
            ),
        ),
    )
    if is_zero(c.formal - c.intended):
        return result(c, Verdict.HOLDS, sp.sstr(c.intended), Proof(c.statement_latex, steps[1:]))
    if printed == intended:
        raise UnprovenError(f"{c.id}: the witness does not separate printed and intended")
    return result(
        c,
        Verdict.MISPRINTED,
        sp.sstr(c.intended),
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "betas": "(9/10, 999/1000)",
            "g": "(1, 1)",
            "printed": sp.sstr(printed),
            "derived": sp.sstr(intended),
        },
        notes=(
            "Intended: v_{t-1}, as B.29. Definition 16's update eta m_hat/sqrt(v_hat + eps) "
            "puts eps under the root; Kingma and Ba and PyTorch add it to sqrt(v_hat). The "
            "two agree at eps = 0 only (at v_hat = 0: m_hat/sqrt(eps) against m_hat/eps).",
        ),
    )


def _adamw(c: Claim):
    torch = (up.w_prev * (1 - up.alpha * up.lam)) - up.alpha * up.mu
    steps = (
        Step(
            statement=r"torch.optim.AdamW multiplies $\mathbf w_{t-1}$ by $1 - lr \lambda$ and "
            r"then subtracts $lr\, \hat m_t/(\sqrt{\hat v_t} + \epsilon)$; with lr = $\alpha_t$ "
            r"and $\epsilon = 0$ that is line 10 for every $\mathbf w_{t-1}$, $\mu_t$",
            method="symbolic identity",
            check=lambda: is_zero(c.formal - torch),
        ),
    )
    point = {up.alpha: sp.Rational(1, 2), up.lam: 1, up.w_prev: 1, up.mu: 0}
    if not is_zero(c.formal - torch):
        printed, derived = c.formal.subs(point), torch.subs(point)
        wrong = Step(
            statement=rf"at $\alpha = 1/2$, $\lambda = 1$, $w = 1$, $\mu = 0$: "
            rf"{sp.latex(printed)} against PyTorch's {sp.latex(derived)}",
            method="exact witness",
            check=lambda: printed != derived,
        )
        return result(
            c,
            Verdict.FAILS,
            sp.sstr(torch),
            Proof(c.statement_latex, (wrong,)),
            witness={"printed": sp.sstr(printed), "derived": sp.sstr(derived)},
        )
    return result(
        c,
        Verdict.HOLDS,
        sp.sstr(torch),
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "Lines 4-7 are Adam's moments and corrections (Kingma and Ba; PyTorch). "
            "Loshchilov and Hutter's AdamW decays by eta_t lambda w (eta_t the schedule "
            "multiplier, not the learning rate): their lambda is 001's alpha lambda / eta_t. "
            "Line 8 is optimizers.algorithm2_update; line 3 momentum.gradient_point_001.",
        ),
    )


def _float_range(c: Claim):
    if c.id.endswith("fp32_range_001"):
        info = np.finfo(np.float32)
        exact = (Fraction(float(info.tiny)), Fraction(float(info.max)))
        what = "NumPy's finfo(float32) tiny and max"
    else:
        exact = (up.binary16_value(0x0400), up.binary16_value(0x7BFF))
        info = np.finfo(np.float16)
        if exact != (Fraction(float(info.tiny)), Fraction(float(info.max))):
            raise UnprovenError(f"{c.id}: the binary16 patterns are not NumPy's finfo")
        what = "the binary16 patterns 0x0400 and 0x7BFF (NumPy's finfo(float16) tiny and max)"
    derived = sp.Tuple(*(sp.Rational(v.numerator, v.denominator) for v in exact))
    printed = c.printed_value.strip("()").split(", ")
    rounded = all(pu.rounds_to(v, p) for v, p in zip(derived, printed, strict=True))
    extra = () if len(c.formal) == 2 else (c.formal[2],)
    steps = (
        Step(
            statement=rf"the printed powers of two are {what}: ${sp.latex(derived)}$",
            method="exact witness",
            check=lambda: (
                tuple(c.formal[:2]) == tuple(derived) and all(e == derived[1] for e in extra)
            ),
        ),
        Step(
            statement=rf"they round to the printed {', '.join(printed)}",
            method="exact witness",
            check=lambda: rounded,
        ),
    )
    equal = tuple(c.formal[:2]) == tuple(derived) and all(e == derived[1] for e in extra)
    if not (equal and rounded):
        bad = Step(
            statement=rf"the exact values ${sp.latex(derived)}$ are not the printed "
            rf"${sp.latex(c.formal)}$ ({', '.join(printed)})",
            method="exact witness",
            check=lambda: not (equal and rounded),
        )
        return result(
            c,
            Verdict.FAILS,
            sp.sstr(derived),
            Proof(c.statement_latex, (bad,)),
            witness={"printed": sp.sstr(c.formal), "derived": sp.sstr(derived)},
        )
    return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, steps))


def _eq38(c: Claim):
    cases = pu.eq38_cases()
    bits = 0x0000
    zero, value = up.eq38_value(bits), up.binary16_value(bits)
    steps = (
        Step(
            statement=r"all 65,536 bit patterns, exactly: Eq. 38 is the IEEE value for the "
            r"61,440 with exponent field 1..30; it is not for field 0 (zero and the "
            r"subnormals, $2^{-14} F/1024$) and 31 (infinity, NaN); the IEEE values agree "
            r"with NumPy's float16 on every pattern",
            method="exhaustive enumeration",
            check=lambda: (
                len(cases["agree"]) == 61440
                and all(0 < (b >> 10) & 31 < 31 for b in cases["agree"])
                and not cases["numpy"]
            ),
        ),
        Step(
            statement=rf"bits 0x{bits:04X}: Eq. 38 gives $2^{{-15}} = "
            rf"{sp.latex(sp.Rational(zero))}$, the pattern is {sp.sstr(sp.nsimplify(value))}",
            method="exact witness",
            check=lambda: zero == Fraction(1, 2**15) and value == 0,
        ),
    )
    return result(
        c,
        Verdict.FAILS,
        "2**(-14)*F/1024",
        Proof(claim=c.statement_latex, steps=steps),
        witness={
            "bits": f"0x{bits:04X}",
            "printed": sp.sstr(sp.Rational(zero)),
            "derived": sp.sstr(sp.nsimplify(value)),
        },
        notes=(
            "value: the pattern's value at exponent field 0. Corrected: Eq. 38 for exponent "
            "fields 1..30; (-1)^S 2^-14 (Fraction/1024) at field 0 (zero, and the subnormals "
            "down to 2^-24); infinity (Fraction 0) or NaN at field 31.",
        ),
    )


def _underflow(c: Claim):
    lr, weight = Fraction(1, 10**5), Fraction(1, 10**4)
    product = lr * weight
    halves = (up.round_binary16(lr), up.round_binary16(weight))
    rounded = up.round_binary16(product)
    of_halves = up.round_binary16(halves[0] * halves[1])
    ulp16, ulp32 = Fraction(1, 2**24), Fraction(1, 2**37)  # 1e-4 lies in [2^-14, 2^-13)
    steps = (
        Step(
            statement=r"$10^{-9} < 2^{-25}$, half the smallest subnormal $2^{-24}$: rounding to "
            r"nearest gives 0; so does the product of the FP16 values of $10^{-5}$ and "
            rf"$10^{{-4}}$ (${sp.latex(sp.Rational(halves[0]))}$ and "
            rf"${sp.latex(sp.Rational(halves[1]))}$), computed exactly and rounded",
            method="exact witness",
            check=lambda: product < Fraction(1, 2**25) and rounded == 0 == of_halves,
        ),
        Step(
            statement=r"the FP32 copy: $10^{-4}$ lies in $[2^{-14}, 2^{-13})$, whose spacing is "
            r"$2^{-24}$ in FP16 and $2^{-37}$ in FP32: a change of $10^{-9}$ is below half the "
            r"FP16 spacing (lost even when the product is not rounded) and above the FP32 one",
            method="exact witness",
            check=lambda: (
                Fraction(1, 2**14) <= weight < Fraction(1, 2**13)
                and product < ulp16 / 2
                and product > ulp32
            ),
        ),
    )
    return compared(c, sp.Rational(rounded.numerator, rounded.denominator), steps)


def _sparse(c: Claim):
    k = sp.Symbol("k", integer=True, positive=True)
    ratio = pu.sparse_ratio(k)
    checks = pu.sparse_ratio_checks()
    gamma = sp.Rational(9, 10)
    at_default = sp.sqrt(ratio.subs({up.gamma: gamma, k: 10}))
    steps = (
        Step(
            statement=r"after n periods of k steps (symbolic n and k), $G_{dense}/G_{sparse} "
            rf"= {sp.latex(ratio)} = \sum_{{i<k}} \gamma^i$ for every n: above 1 from "
            r"k = 2 on (the excess is $\gamma(1 - \gamma^{k-1})/(1 - \gamma) > 0$), and "
            r"below $1/(1 - \gamma)$ (geometric sums)",
            method="symbolic identity",
            check=lambda: checks["closed"] and checks["series"] and checks["above_one"],
        ),
        Step(
            statement=r"unrolled: the running averages of $(1, \ldots, 1)$ and $(0, 0, 1, 0, 0, "
            r"1)$ over 6 steps give the same ratio at k = 3",
            method="symbolic identity",
            check=lambda: checks["unrolled"],
        ),
    )
    if not all(checks.values()):
        raise UnprovenError(f"{c.id}: {checks}")
    return result(
        c,
        Verdict.HOLDS,
        "sqrt((1 - gamma_d**k)/(1 - gamma_d))",
        Proof(claim=c.statement_latex, steps=steps),
        notes=(
            "value: the sparse coordinate's step size over the dense one's (eps = 0). "
            "'Much larger' is bounded: at most 1/sqrt(1 - gamma) however rare the "
            f"coordinate, e.g. {sp.N(at_default, 4)} at gamma = 9/10 and k = 10 "
            f"({sp.N(1 / sp.sqrt(1 - gamma), 4)} in the limit); eps > 0 narrows the gap.",
        ),
    )


def _adam_combines(c: Claim):
    checks = pu.adam_combines_checks()
    steps = (
        Step(
            statement=r"one step from a symbolic previous state: B.28 is Definition 7's "
            r"running average with $\gamma = B_1$ and B.29 Definition 11's $G$ with $\gamma = "
            r"B_2$ (so for every t, from $m_0 = v_0 = 0$)",
            method="symbolic identity",
            check=lambda: checks["momentum"] and checks["squares"],
        ),
        Step(
            statement=r"so B.30's step $\eta m_t/\sqrt{v_t + \epsilon}$ is Definition 11's "
            r"step size $\eta/\sqrt{G_t + \epsilon}$ times momentum's average, checked "
            r"unrolled for symbolic gradients at t = 1..3",
            method="symbolic identity",
            check=lambda: checks["unrolled"],
        ),
    )
    derived = up.eta * up.m_prev / sp.sqrt(up.v_prev + up.eps)
    return compared(c, derived, steps)


DECIDERS: dict[str, Callable[[Claim], object]] = {
    "adaptive.sparse_004": _sparse,
    "adaptive.adam_combines_004": _adam_combines,
    "momentum.definition_004": _running_average,
    "momentum.weights_004": _weights,
    "momentum.example_004": _example,
    "momentum.weights_sum_004": _weights_sum,
    "momentum.bias_correction_004": _bias_correction,
    "momentum.algorithm1_001": _algorithm1,
    "momentum.gradient_point_001": _gradient_point,
    "momentum.nesterov_001": _nesterov,
    "momentum.eq37_001": _eq37,
    "adaptive.step_cap_004": _step_cap,
    "adaptive.square_root_004": _square_root,
    "adaptive.adadelta_004": _adadelta,
    "adaptive.adagrad_004": _adagrad,
    "adaptive.bias_correction_004": _adam_bias,
    "adaptive.definition16_004": _definition16,
    "adaptive.adamw_001": _adamw,
    "mixed_precision.fp32_range_001": _float_range,
    "mixed_precision.fp16_range_001": _float_range,
    "mixed_precision.eq38_001": _eq38,
    "mixed_precision.underflow_001": _underflow,
}


def check_updates(c: Claim):
    """The verdict of an optimizer statement."""
    return DECIDERS[c.id](c)
