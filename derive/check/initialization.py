"""Verdicts of the statements on backpropagation through ``W = X Y``, the activations of 003
(topic ``backprop``) and weight initialization (topic ``initialization``).

Every verdict compares the printed expression with one derived here from the definitions
(``derive/definitions/initialization.py``): SymPy's matrix derivative and index sums for
symbolic n, k, m; ``sympy.diff`` of the activations; the Xavier double sum for a symbolic
D_in; exact Gaussian and uniform integrals with symbolic variance and slope; and for Figure
3 an exact witness. A comparison that does not come out as the verdict needs raises
:class:`proofs.core.UnprovenError` (in :func:`derive.check.core.result`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sympy as sp

from derive.check.core import Result, approx_verdict, compared, decimal, result
from derive.claims import E_Z2, VAR_Z, VAR_Z2, Claim
from derive.definitions import initialization as d
from derive.definitions.activations import x
from proofs import identities
from proofs import initialization as pi
from proofs.core import Proof, Step, UnprovenError, Verdict, is_zero, total


def _gradient(c: Claim) -> Result:
    wrt = d.X if c.id == "backprop.dX_003" else d.Y
    name = "X" if wrt == d.X else "Y"
    derived = pi.matrix_gradient(wrt)
    if name == "X":
        entry = total(d.Ge[d.p_, d.b_] * d.Ye[d.q_, d.b_], d.b_, d.m)
        entry_text = r"\sum_{b=1}^{m} G_{pb} Y_{qb} = (G Y^T)_{pq}"
    else:
        entry = total(d.Xe[d.a_, d.p_] * d.Ge[d.a_, d.q_], d.a_, d.n)
        entry_text = r"\sum_{a=1}^{n} X_{ap} G_{aq} = (X^T G)_{pq}"
    steps = (
        Step(
            statement=r"to first order $dW = dX\,Y + X\,dY$: $(X + dX)(Y + dY) - XY - dX\,Y - "
            r"X\,dY = dX\,dY$ for every size (symbolic n, k, m), so $d\mathcal{L} = \langle G, "
            r"dW \rangle = \mathrm{tr}(G^T dW)$ with $G = \partial \mathcal{L}/\partial W$",
            method="symbolic identity",
            check=pi.product_rule_remainder,
        ),
        Step(
            statement=rf"$\partial\, \mathrm{{tr}}(G^T X Y) / \partial {name} = "
            rf"{sp.latex(derived)}$ by SymPy's matrix calculus for every size (symbolic n, k, m)",
            method="symbolic identity",
            check=lambda: pi.matrix_gradient(wrt) == derived,
        ),
        Step(
            statement=rf"check of the matrix formula: at (n, k, m) = {pi.WITNESS_SIZES} with "
            rf"integer X, Y, G, ${sp.latex(derived)}$ equals sympy.diff of the explicit "
            r"$\mathrm{tr}(G^T X Y)$ entry by entry",
            method="exact witness",
            check=lambda: (
                pi.concrete(derived, pi.WITNESS_SIZES)
                == pi.concrete_gradient(wrt, pi.WITNESS_SIZES)
            ),
        ),
        Step(
            statement=rf"entrywise, $\partial / \partial {name}_{{pq}}$ of $\sum_{{a=1}}^{{n}} "
            r"\sum_{b=1}^{m} G_{ab} \sum_{c=1}^{k} X_{ac} Y_{cb}$ (sympy.diff, Kronecker "
            rf"deltas summed out) is ${entry_text}$ for every size (symbolic n, k, m)",
            method="symbolic identity",
            check=lambda: pi.entry_identity(name, entry),
        ),
    )
    value = _parsable(entry)
    notes = (f"value: entry (p, q) of the derived gradient {sp.sstr(derived)}.",)
    printed = c.formal
    if printed.shape == derived.shape and sp.simplify(printed - derived) in (
        0,
        sp.ZeroMatrix(*derived.shape),
    ):
        same = Step(
            statement=rf"the printed ${sp.latex(printed)}$ is that matrix expression, for every "
            "size (symbolic n, k, m)",
            method="symbolic identity",
            check=lambda: sp.simplify(printed - derived) in (0, sp.ZeroMatrix(*derived.shape)),
        )
        return result(
            c, Verdict.HOLDS, value, Proof(c.statement_latex, (*steps, same)), notes=notes
        )
    at_sizes = pi.concrete(printed, pi.WITNESS_SIZES)
    true = pi.concrete_gradient(wrt, pi.WITNESS_SIZES)
    wrong = Step(
        statement=rf"at n, k, m = {pi.WITNESS_SIZES} with integer X, Y, G the printed "
        rf"${sp.latex(printed)}$ is "
        + (
            "undefined (its factors' shapes do not chain)"
            if at_sizes is None
            else f"${sp.latex(at_sizes)}$"
        )
        + rf" while sympy.diff of $\mathrm{{tr}}(G^T X Y)$ gives ${sp.latex(true)}$",
        method="exact witness",
        check=lambda: at_sizes is None or at_sizes.shape != true.shape or at_sizes != true,
    )
    return result(
        c,
        Verdict.FAILS,
        value,
        Proof(c.statement_latex, (*steps, wrong)),
        notes=notes,
        witness={
            "n, k, m": str(pi.WITNESS_SIZES),
            "printed": "undefined" if at_sizes is None else sp.sstr(at_sizes),
            "derived": sp.sstr(true),
        },
    )


def _parsable(entry: sp.Expr) -> str:
    """``entry`` as a string ``sympify`` reads back: ``G[p, b]`` written ``Indexed('G', p,
    b)``."""
    return re.sub(r"(\w+)\[([^\]]+)\]", r"Indexed('\1', \2)", sp.sstr(entry))


def _activation(c: Claim) -> Result:
    """tanh as 003 defines it, and its derivative."""
    if c.id == "backprop.tanh_definition_003":
        derived, what = sp.tanh(d.z), "tanh"
        text = r"$\frac{e^z - e^{-z}}{e^z + e^{-z}} - \tanh z = 0$ for every real z"
    else:
        derived = sp.simplify(sp.diff(d.TANH_003, d.z).rewrite(sp.tanh))
        what = "derivative of 003's tanh"
        text = (
            r"$\frac{d}{dz} \frac{e^z - e^{-z}}{e^z + e^{-z}}$ (sympy.diff) minus the printed "
            r"expression is 0 for every real z"
        )
    printed, derived_x = sp.sympify(c.formal).subs(d.z, x), derived.subs(d.z, x)
    if identities.equal(printed, derived_x):
        steps = (Step(text, "symbolic identity", lambda: identities.equal(printed, derived_x)),)
        return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, steps))
    found = identities.counterexample(printed, derived_x)
    if found is None:
        raise UnprovenError(f"{c.id}: neither an identity nor a counterexample")
    proof = identities.counterexample_proof(c.statement_latex, printed, derived_x, what, found)
    return result(
        c,
        Verdict.FAILS,
        sp.sstr(derived),
        proof,
        witness={"z": found["x"], "printed": found["printed"], "derived": found["derived"]},
    )


def _is_odd(f: sp.Expr) -> tuple[bool, Step]:
    """Whether ``f`` is odd, with the step that shows it: the identity ``f(-z) + f(z) = 0``,
    or the exact point z = 1 where ``f(-1) + f(1)`` is not 0."""
    total_ = f.subs(d.z, -d.z) + f
    if is_zero(total_):
        return True, Step(
            rf"${sp.latex(f)}$: $f(-z) + f(z) = 0$ for every real z (odd)",
            "symbolic identity",
            lambda: is_zero(total_),
        )
    at_one = sp.simplify(total_.subs(d.z, 1))
    if at_one.is_zero is False:
        return False, Step(
            rf"${sp.latex(f)}$: $f(-1) + f(1) = {sp.latex(at_one)} \neq 0$ (not odd)",
            "exact witness",
            lambda: sp.simplify(total_.subs(d.z, 1)).is_zero is False,
        )
    raise UnprovenError(f"cannot decide whether {f} is odd")


def _zero_centered(c: Claim) -> Result:
    decided = [_is_odd(f) for _, f in d.ACTIVATIONS_003]
    derived = sp.Tuple(*(sp.true if odd else sp.false for odd, _ in decided))
    ranges = Step(
        r"the other reading, the range: $\sigma(z) > 0$ and $\max(0, z) \ge 0$ for every z "
        r"(no negative output), while $\tanh$ takes every value in (-1, 1)",
        "symbolic sign",
        lambda: (
            bool(d.SIGMOID.is_positive)
            and bool(d.RELU.is_nonnegative)
            and sp.limit(sp.tanh(d.z), d.z, -sp.oo) == -1
            and sp.limit(sp.tanh(d.z), d.z, sp.oo) == 1
        ),
    )
    equal = derived == c.formal
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        sp.sstr(derived),
        Proof(c.statement_latex, (*(step for _, step in decided), ranges)),
        witness=None if equal else {"printed": sp.sstr(c.formal), "derived": sp.sstr(derived)},
        notes=(
            "value: (sigmoid, tanh, ReLU) is odd. Their means under N(0, 1) are 1/2, 0 and "
            "1/sqrt(2 pi): the same answer.",
        ),
    )


# --- Xavier (003) -----------------------------------------------------------------------------


def _xavier_mean(c: Claim) -> Result:
    derived = d.output_mean(0).doit()
    m1, m2 = sp.symbols("m1 m2", real=True)
    steps = (
        Step(
            r"independence: $\iint x w\, p(x) p(w)\, dx\, dw = E[x] E[w]$ (Fubini, taken as "
            r"given); checked exactly for Gaussian densities of symbolic means $m_1, m_2$ and "
            r"variances: the double integral is $m_1 m_2$",
            "exact witness",
            lambda: is_zero(pi.product_density_mean() - m1 * m2),
        ),
        Step(
            r"$E[y] = \sum_{i=1}^{D_{in}} E[w_i] E[x_i]$ (w independent of x) $= \sum_i 0 "
            r"\cdot E[x_i] = 0$ for every size (symbolic D_in), whatever the $E[x_i]$",
            "symbolic identity",
            pi.mean_vanishes,
        ),
    )
    return compared(c, derived, steps)


def _xavier_variance(c: Claim) -> Result:
    derived = sp.Sum(d.weight_moment(d.i_, d.i_, 0) * d.V, (d.i_, 1, d.D_in)).doit()
    steps = (
        Step(
            r"$E[y^2] = \sum_{i=1}^{D_{in}} \sum_{j=1}^{D_{in}} E[w_i w_j] E[x_i x_j]$ with "
            r"$E[w_i w_j] = \sigma^2 \delta_{ij}$ ($E[w_i w_j] = E[w_i] E[w_j] = 0$ for "
            r"$i \ne j$): the cross terms vanish and $E[y^2] = \sigma^2 \sum_i E[x_i^2]$ "
            r"for every size (symbolic D_in), whatever $E[x_i x_j]$ is for $i \ne j$",
            "symbolic identity",
            pi.diagonal_only,
        ),
        Step(
            r"the zero mean of the weights is what removes them: with mean $\mu$ the cross "
            r"terms are $\mu^2 \sum_{i,j} E[x_i x_j]$ (written out at D_in = 2), zero for "
            r"every choice of the x's moments only if $\mu = 0$",
            "exact witness",
            lambda: not is_zero(pi.cross_terms(2)) and pi.cross_terms(2, 0) == 0,
        ),
        Step(
            r"$E[y] = 0$ (initialization.xavier_mean_003), so $\mathrm{Var}[y] = E[y^2]$; with "
            r"$E[x_i^2] = \mathrm{Var}[x_i] = V$: $\sigma^2 \sum_{i=1}^{D_{in}} V = \sigma^2 V "
            r"D_{in}$ for every size (symbolic D_in)",
            "symbolic identity",
            lambda: is_zero(derived - d.sigma_w**2 * d.V * d.D_in),
        ),
    )
    return compared(c, derived, steps)


def _xavier_monotone(c: Claim) -> Result:
    weight_variance = sp.Symbol("sigma_w2", positive=True)
    variance_y = (d.sigma_w**2 * d.V * d.D_in).subs(d.sigma_w**2, weight_variance)
    slope = sp.diff(variance_y, weight_variance)
    derived = sp.sign(slope)
    steps = (
        Step(
            rf"$\partial\, \mathrm{{Var}}(y) / \partial \sigma^2 = {sp.latex(slope)} > 0$ "
            r"for every $V > 0$ and every size (symbolic D_in): Var(y) = $\sigma^2 V D_{in}$ "
            r"rises and falls with $\sigma^2$",
            "symbolic sign",
            lambda: slope.is_positive is True,
        ),
    )
    return compared(c, derived, steps, notes=(f"value: the sign of {sp.sstr(slope)}.",))


def _xavier_sigma(c: Claim) -> Result:
    (derived,) = sp.solve(sp.Eq(d.sigma_w**2 * d.V * d.D_in, d.V), d.sigma_w)
    steps = (
        Step(
            r"$\sigma^2 V D_{in} = V$ with $\sigma > 0$ has the one solution "
            rf"$\sigma = {sp.latex(derived)}$, for every size (symbolic D_in)",
            "symbolic solution set",
            lambda: sp.solve(sp.Eq(d.sigma_w**2 * d.V * d.D_in, d.V), d.sigma_w) == [derived],
        ),
    )
    return compared(c, derived, steps)


# --- Kaiming (003) ----------------------------------------------------------------------------

_GAUSS = r"z \sim N(0, \sigma)"


def _moments() -> dict[sp.Symbol, sp.Expr]:
    """003's named moments of z ~ N(0, s), by exact integrals."""
    second = d.expectation(d.z**2)
    return {
        E_Z2: second,
        VAR_Z: second - d.expectation(d.z) ** 2,
        VAR_Z2: d.expectation(d.z**4) - second**2,
    }


def _kaiming_mean(c: Claim) -> Result:
    derived = d.expectation(d.RELU)
    # 003's integrand after the substitution, as printed
    substituted = d.s * sp.exp(-d.u) / sp.sqrt(2 * sp.pi * d.s)
    steps = (
        Step(
            rf"$E[\max(0, z)]$ for ${_GAUSS}$ (the integral over each half line, symbolic "
            rf"variance $\sigma > 0$) is ${sp.latex(derived)}$, which is $\int_0^\infty z "
            r"p(z) dz$: the negative half contributes 0",
            "symbolic identity",
            lambda: is_zero(sp.integrate(d.z * d.density(), (d.z, 0, sp.oo)) - derived),
        ),
        Step(
            r"003's substitution $u = z^2/(2\sigma)$, $dz = (\sigma/z) du$: the integrand "
            r"becomes $\sigma e^{-u}/\sqrt{2\pi\sigma}$, as printed, and its integral over "
            r"$(0, \infty)$ is $\sqrt{\sigma/(2\pi)}$",
            "symbolic identity",
            lambda: (
                is_zero(pi.substitution_integrand() - substituted)
                and is_zero(sp.integrate(substituted, (d.u, 0, sp.oo)) - derived)
            ),
        ),
    )
    return compared(c, derived, steps)


def _kaiming_second_moment(c: Claim) -> Result:
    moments = _moments()
    derived = d.expectation(d.RELU**2)
    printed = [sp.simplify(term.subs(moments)) for term in c.formal]
    intended = [sp.simplify(term.subs(moments)) for term in c.intended]
    printed_ok = [is_zero(p - derived) for p in printed]
    intended_ok = all(is_zero(p - derived) for p in intended)
    steps = [
        Step(
            rf"$E[h^2] = \int_0^\infty z^2 p(z) dz = {sp.latex(derived)}$ and "
            rf"$\int_{{-\infty}}^0 z^2 p(z) dz$ is the same (exact integrals, symbolic "
            r"variance $\sigma$): $E[h^2] = \frac12 E[z^2]$",
            "symbolic identity",
            lambda: is_zero(sp.integrate(d.z**2 * d.density(), (d.z, -sp.oo, 0)) - derived),
        ),
        Step(
            rf"$E[z^2] = {sp.latex(moments[E_Z2])} = \mathrm{{Var}}[z]$ and "
            rf"$\mathrm{{Var}}[z^2] = E[z^4] - E[z^2]^2 = {sp.latex(moments[VAR_Z2])}$",
            "symbolic identity",
            lambda: is_zero(moments[VAR_Z2] - 2 * d.s**2) and is_zero(moments[E_Z2] - d.s),
        ),
    ]
    if all(printed_ok):
        return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, tuple(steps)))
    wrong = [i for i, ok in enumerate(printed_ok) if not ok]
    at_one = [p.subs(d.s, 1) for p in printed]
    listed = ", ".join(f"${sp.latex(v)}$" for v in at_one)
    steps.append(
        Step(
            rf"at $\sigma = 1$ the printed terms are {listed} "
            rf"against $E[h^2] = {sp.latex(derived.subs(d.s, 1))}$",
            "exact witness",
            lambda: any(at_one[i] != derived.subs(d.s, 1) for i in wrong),
        )
    )
    verdict = Verdict.MISPRINTED if intended_ok else Verdict.FAILS
    if intended_ok:
        steps.append(
            Step(
                r"as intended, with $\mathrm{Var}[z]$: every term equals $E[h^2] = \sigma/2$ "
                r"for every $\sigma > 0$",
                "symbolic identity",
                lambda: all(is_zero(p - derived) for p in intended),
            )
        )
    return result(
        c,
        verdict,
        sp.sstr(derived),
        Proof(c.statement_latex, tuple(steps)),
        witness={
            "sigma (variance of z)": "1",
            "printed": ", ".join(sp.sstr(v) for v in at_one),
            "derived": sp.sstr(derived.subs(d.s, 1)),
        },
        notes=(
            "The chain's middle term (1/2) Var[z^2] is sigma^2, not sigma/2; with Var[z] "
            "(= E[z^2], z centered) the chain holds, and so does its end, E[h^2] = sigma/2.",
        )
        if intended_ok
        else (),
    )


def _kaiming_variance(c: Claim) -> Result:
    derived = sp.simplify(d.expectation(d.RELU**2) - d.expectation(d.RELU) ** 2)
    steps = (
        Step(
            rf"$\mathrm{{Var}}[h] = E[h^2] - E[h]^2 = \frac{{\sigma}}{{2}} - "
            rf"\frac{{\sigma}}{{2\pi}} = {sp.latex(derived)}$ (exact integrals, symbolic "
            r"variance $\sigma$)",
            "symbolic identity",
            lambda: is_zero(derived - (d.s / 2 - d.s / (2 * sp.pi))),
        ),
    )
    return compared(c, derived, steps)


def _kaiming_variance_approx(c: Claim) -> Result:
    exact = sp.simplify(d.expectation(d.RELU**2) - d.expectation(d.RELU) ** 2)
    printed = sp.sympify(c.formal)
    gap = sp.simplify(sp.Abs(printed - exact))
    error = sp.simplify(gap / exact)
    if error.free_symbols:
        raise UnprovenError(f"{c.id}: the relative error {error} depends on {error.free_symbols}")
    at_one = {d.s: 1}
    steps = (
        Step(
            rf"$\mathrm{{Var}}[h] = E[h^2] - E[h]^2 = {sp.latex(exact)}$ exactly (symbolic "
            rf"variance $\sigma$); the printed ${sp.latex(printed)}$ is off by "
            rf"${sp.latex(gap)}$, a relative error ${sp.latex(error)} \approx "
            rf"{sp.N(error, 6)}$ for every $\sigma > 0$ (it does not depend on $\sigma$)",
            "symbolic identity",
            lambda: (
                is_zero(exact - d.expectation(d.RELU**2) + d.expectation(d.RELU) ** 2)
                and not error.free_symbols
            ),
        ),
        Step(
            rf"at $\sigma = 1$: printed ${sp.latex(printed.subs(at_one))}$, exact "
            rf"${sp.latex(exact.subs(at_one))}$",
            "exact witness",
            lambda: is_zero(
                sp.Abs(printed.subs(at_one) - exact.subs(at_one)) / exact.subs(at_one) - error
            ),
        ),
    )
    return result(
        c,
        approx_verdict(error),
        sp.sstr(exact),
        Proof(c.statement_latex, steps),
        witness={
            "sigma (variance of z)": "1",
            "printed": sp.sstr(printed.subs(at_one)),
            "derived": sp.sstr(exact.subs(at_one)),
            "relative_error": sp.sstr(error),
        },
        relative_error=decimal(error),
        notes=(
            f"value: Var[h] exactly. The worst relative error is {sp.sstr(error)} = "
            f"{sp.N(error, 6)}, the same at every sigma; Var[h] / Var[z] = (pi - 1)/(2 pi) "
            f"= {sp.N((sp.pi - 1) / (2 * sp.pi), 4)}.",
        ),
    )


def _kaiming_sigma(c: Claim) -> Result:
    second = d.expectation(d.RELU**2)
    nxt = d.sigma_w**2 * d.D_in * second
    (derived,) = sp.solve(sp.Eq(nxt, d.s), d.sigma_w)
    variance_h = sp.simplify(d.expectation(d.RELU**2) - d.expectation(d.RELU) ** 2)
    first_layer = sp.solve(sp.Eq(d.sigma_w**2 * d.D_in * d.V * variance_h / d.s, d.V), d.sigma_w)
    steps = (
        Step(
            r"the next layer's pre-activation $z' = \sum_{i=1}^{D_{in}} w_i h_i$: with "
            r"$E[w] = 0$ the cross terms vanish and $\mathrm{Var}[z'] = E[z'^2] = \sigma^2 "
            r"\sum_i E[h_i^2]$ for every size (symbolic D_in); this does not need $E[h_i] = "
            r"0$, which fails after a ReLU",
            "symbolic identity",
            pi.diagonal_only,
        ),
        Step(
            rf"$E[h_i^2] = {sp.latex(second)}$ for $z \sim N(0, s)$ (exact integral, symbolic "
            r"variance s), so $\mathrm{Var}[z'] = \sigma^2 D_{in} s / 2$",
            "symbolic identity",
            lambda: is_zero(d.expectation(d.RELU**2) - d.s / 2),
        ),
        Step(
            rf"$\mathrm{{Var}}[z'] = s$ (the variance kept from layer to layer) has the one "
            rf"positive solution $\sigma = {sp.latex(derived)}$, for every size (symbolic "
            r"D_in); then $\mathrm{Var}[h]$, a fixed multiple of $\mathrm{Var}[z]$, is kept "
            r"too: the notes' goal $\mathrm{Var}(h) = \mathrm{Var}(x)$ for inputs x that are "
            r"the previous layer's h",
            "symbolic solution set",
            lambda: sp.solve(sp.Eq(nxt, d.s), d.sigma_w) == [derived],
        ),
    )
    return compared(
        c,
        derived,
        steps,
        notes=(
            "Holds as He et al. (2015) derive it: from E[h^2] = Var[z]/2, exactly. The "
            "notes' own route, Var[h] ≈ (1/2) Var[z], is off by the factor (pi - 1)/pi "
            "(initialization.kaiming_variance_approx_003) and gives the printed sigma only "
            "through that error. On a first layer, whose inputs have E[x_i] = 0 and Var = V, "
            "Var[h] = V would need sigma = "
            f"{sp.sstr(first_layer[0])} instead.",
        ),
    )


# --- 001 --------------------------------------------------------------------------------------


def _xavier_uniform(c: Claim) -> Result:
    half, variance = c.formal
    derived = d.uniform_variance(half)
    forward, backward = 1 / d.n_in, 1 / d.n_out
    steps = (
        Step(
            rf"$\mathrm{{Var}}\, U(-a, a) = \int_{{-a}}^{{a}} \frac{{w^2}}{{2a}} dw = "
            rf"\frac{{a^2}}{{3}}$; at $a = {sp.latex(half)}$ it is ${sp.latex(derived)}$, for "
            r"symbolic $n_{in}, n_{out}$",
            "symbolic identity",
            lambda: is_zero(d.uniform_variance(half) - derived),
        ),
        Step(
            r"Glorot and Bengio's compromise: keeping the variance forward needs "
            r"$n_{in} \mathrm{Var}(W) = 1$, backward $n_{out} \mathrm{Var}(W) = 1$; "
            r"$\frac{2}{n_{in} + n_{out}}$ is the harmonic mean of $1/n_{in}$ and $1/n_{out}$, "
            r"between the two (symbolic $n_{in}, n_{out}$)",
            "symbolic identity",
            lambda: is_zero(2 * forward * backward / (forward + backward) - d.XAVIER_VARIANCE),
        ),
    )
    equal = is_zero(derived - variance)
    if equal:
        return result(c, Verdict.HOLDS, sp.sstr(derived), Proof(c.statement_latex, steps))
    point = {d.n_in: 1, d.n_out: 1}
    wrong = Step(
        rf"at $n_{{in}} = n_{{out}} = 1$ the uniform's variance is "
        rf"${sp.latex(derived.subs(point))}$, the Gaussian's ${sp.latex(variance.subs(point))}$",
        "exact witness",
        lambda: derived.subs(point) != variance.subs(point),
    )
    return result(
        c,
        Verdict.FAILS,
        sp.sstr(derived),
        Proof(c.statement_latex, (*steps, wrong)),
        witness={
            "n_in": "1",
            "n_out": "1",
            "printed": sp.sstr(variance.subs(point)),
            "derived": sp.sstr(derived.subs(point)),
        },
    )


def _figure3(c: Claim) -> Result:
    bound = sp.sympify(c.formal)
    certificate = pi.figure3_witness()
    lower = sp.Rational(
        certificate["squared_lower_bound"].numerator, certificate["squared_lower_bound"].denominator
    )
    margins = [pi.uniform_support_witness(*shape) for shape in pi.XAVIER_SHAPES]
    edges = [sp.simplify(pi.edge(*shape)) for shape in pi.XAVIER_SHAPES]
    square = sp.Symbol("n", positive=True)
    steps = (
        Step(
            r"Eq. 34 (uniform): the constant matrix $A = (a/2) \mathbf{1}\mathbf{1}^T$ has "
            r"$\sigma_{max}(A) = (a/2)\sqrt{n_{in} n_{out}}$; every matrix within Frobenius "
            r"distance $a/2$ of it has entries in $(0, a)$ and (Weyl) $\sigma_{max} > "
            r"(a/2)(\sqrt{n_{in} n_{out}} - 1)$, which is "
            + ", ".join(f"{sp.N(v, 5)}" for v in margins)
            + r" $> 2$ at the three shapes: an open set of positive probability. Eq. 35 "
            r"(Gaussian) gives every open set positive probability. Either way "
            r"$P(\sigma_{max} > 2) > 0$",
            "exact witness",
            lambda: all(v > bound for v in margins),
        ),
        Step(
            rf"a typical sample: Eq. 35 at (1024, 1024), $W = Z/32$ with $Z$ NumPy's "
            rf"default_rng({certificate['seed']}).standard_normal((1024, 1024)) (sha256 "
            rf"{certificate['sha256'][:16]}...); for the float64 top right singular vector "
            r"v of NumPy's SVD, the exact Rayleigh quotient of the stored entries gives "
            rf"$\sigma_{{max}}(W)^2 \ge |Wv|^2/|v|^2 = {sp.N(lower, 12)} > {sp.latex(bound**2)}$",
            "exact witness",
            lambda: pi.figure3_witness()["squared_lower_bound"] > bound**2,
        ),
        Step(
            r"the largest singular value of an $n_{out} \times n_{in}$ matrix of i.i.d. "
            r"entries of variance $\frac{2}{n_{in} + n_{out}}$ tends to $\sqrt{\frac{2}{n_{in} "
            r"+ n_{out}}}(\sqrt{n_{in}} + \sqrt{n_{out}})$ (Bai and Yin 1993, taken as given), "
            r"which is exactly 2 for every square shape and "
            rf"${sp.latex(edges[1])} \approx {sp.N(edges[1], 6)}$ at (1024, 2048): the "
            r"printed 2.0 is the square shapes' limit itself, about which a finite sample's "
            r"largest singular value fluctuates on the scale $n^{-2/3}$ (Tracy-Widom; "
            r"Johnstone 2001, taken as given)",
            "symbolic identity",
            lambda: (
                is_zero(pi.edge(square, square) - 2)
                and is_zero(edges[1] - 2 * (1 + sp.sqrt(2)) / sp.sqrt(6))
            ),
        ),
    )
    if not lower > bound**2:
        raise UnprovenError(f"{c.id}: the sampled matrix does not exceed the printed bound")
    return result(
        c,
        Verdict.FAILS,
        sp.sstr(pi.edge()),
        Proof(c.statement_latex, steps),
        witness={
            "n_in, n_out": "(1024, 1024)",
            "W": f"numpy.random.default_rng({certificate['seed']}).standard_normal((1024, "
            "1024)) / 32",
            "sha256 of Z": certificate["sha256"],
            "sigma_max(W)^2 >=": decimal(lower),
            "printed": "2.0",
        },
        notes=(
            "value: the limit of the largest singular value at (n_in, n_out), 2 for square "
            "shapes. 'Always' fails: exceeding 2 has positive probability at every shape, and "
            "is common at the square ones. As eigenvalues of the square matrices (complex), "
            "the spectral radius tends to sqrt(n) sqrt(2/(2n)) = 1 (circular law), far below 2.",
        ),
    )


def _kaiming_leaky(c: Claim) -> Result:
    second = pi.leaky_second_moment()
    (derived,) = sp.solve(sp.Eq(d.n_in * d.sigma_w**2 * second, d.s), d.sigma_w**2)
    steps = (
        Step(
            rf"$E[\mathrm{{LeakyReLU}}_a(z)^2] = {sp.latex(second)}$ for $z \sim N(0, s)$: the "
            r"exact integrals of $z^2$ and $a^2 z^2$ over each half line (symbolic a, s)",
            "symbolic identity",
            lambda: is_zero(pi.leaky_second_moment() - (1 + d.a**2) * d.s / 2),
        ),
        Step(
            r"with zero-mean weights the cross terms vanish: $\mathrm{Var}[z'] = n_{in} "
            r"\mathrm{Var}(W) E[h^2]$ for every size (symbolic D_in, the fan-in)",
            "symbolic identity",
            pi.diagonal_only,
        ),
        Step(
            rf"$\mathrm{{Var}}[z'] = s$ gives $\mathrm{{Var}}(W) = {sp.latex(derived)}$; at "
            r"$a = 0$ He et al.'s $2/n_{in}$. PyTorch's kaiming_normal_ uses std = gain / "
            r"sqrt(fan_in) with calculate_gain('leaky_relu', a) = $\sqrt{2/(1 + a^2)}$: the "
            r"same variance",
            "symbolic solution set",
            lambda: sp.solve(sp.Eq(d.n_in * d.sigma_w**2 * second, d.s), d.sigma_w**2) == [derived],
        ),
    )
    return compared(c, derived, steps)


_SHAPES = tuple((rows, cols) for rows in range(1, 5) for cols in range(1, 5))


def _orthogonal(c: Claim) -> Result:
    found = set().union(*(pi.orthogonal_singular_values(r, q) for r, q in _SHAPES))
    if len(found) != 1:
        raise UnprovenError(f"{c.id}: the singular values are {found}, not one value")
    (derived,) = found
    steps = (
        Step(
            r"for $E = \mathrm{eye}(M, N)$ with $M \le N$: $(E E^T)_{ij} = \sum_{b=1}^{N} "
            r"\delta_{ib} \delta_{jb} = \delta_{ij}$ for every size (symbolic N), so $E E^T = "
            r"I_M$ and $W W^T = U E V^T V E^T U^T = U U^T = I_M$ (U, V orthogonal, as the "
            r"full SVD gives them): every singular value of W is 1 (for $M > N$ the same with "
            r"$W^T W$)",
            "symbolic identity",
            pi.eye_gram_identity,
        ),
        Step(
            r"exactly, for exact rational orthogonal U, V (Cayley transforms) at every shape "
            r"M = 1..4, N = 1..4: the eigenvalues of the smaller Gram matrix of "
            rf"$U\,\mathrm{{eye}}(M, N)\,V^T$ are all 1, so its singular values are "
            rf"$\{{{sp.latex(derived)}\}}$",
            "exhaustive enumeration",
            lambda: all(pi.orthogonal_singular_values(r, q) == {derived} for r, q in _SHAPES),
        ),
    )
    return compared(c, derived, steps)


#: Spectral initialization's example W1, with S[0] the golden ratio.
_GOLDEN = sp.Matrix([[1, 1], [0, 1]])


def _largest_singular_value(matrix: sp.Matrix) -> sp.Expr:
    """The largest singular value of an exact matrix: the square root of the largest
    eigenvalue of its Gram matrix."""
    values = sp.Matrix(matrix.T * matrix).eigenvals()
    return sp.sqrt(max(values, key=lambda e: sp.N(e, 30)))


def _spectral(c: Claim) -> Result:
    s0 = _largest_singular_value(_GOLDEN)
    derived = sp.nsimplify(sp.simplify(_largest_singular_value(_GOLDEN / s0)))
    steps = (
        Step(
            r"$\|W_1 / S[0]\|_2 = \|W_1\|_2 / S[0] = 1$ for every shape: the 2-norm is "
            r"homogeneous and $S[0] = \sigma_{max}(W_1) = \|W_1\|_2 > 0$ ($W_1 = 0$ has "
            r"probability 0; taken as given)",
            "symbolic identity",
            lambda: is_zero(sp.Symbol("S_0", positive=True) / sp.Symbol("S_0", positive=True) - 1),
        ),
        Step(
            r"example: $W_1 = \begin{pmatrix} 1 & 1 \\ 0 & 1 \end{pmatrix}$ has $S[0] = "
            rf"{sp.latex(sp.simplify(s0))}$, and $W = W_1 / S[0]$ has largest singular value "
            rf"${sp.latex(derived)}$ exactly",
            "exact witness",
            lambda: (
                is_zero(s0 - (1 + sp.sqrt(5)) / 2)
                and is_zero(_largest_singular_value(_GOLDEN / s0) - derived)
            ),
        ),
    )
    return compared(c, derived, steps)


def _depth_aware(c: Claim) -> Result:
    half, variance = c.formal
    derived = d.uniform_variance(half)
    depth = d.L
    norm = sp.Symbol("S", positive=True)
    steps = (
        Step(
            rf"$\mathrm{{Var}}\, U(-a, a) = a^2/3$ at $a = {sp.latex(half)}$ is "
            rf"${sp.latex(derived)} = \mathrm{{Var}}(W_1)/L$ (symbolic $n_{{in}}, n_{{out}}, "
            r"L$): both printed distributions are those of $W_1/\sqrt{L}$",
            "symbolic identity",
            lambda: is_zero(derived - d.XAVIER_VARIANCE / depth),
        ),
        Step(
            r"$\|W_1/\sqrt{L}\|_2 = \|W_1\|_2/\sqrt{L}$, so the product of the L layers' "
            r"norms, which bounds a plain stack's Lipschitz constant, shrinks by "
            r"$L^{-L/2}$: $\prod_{l=1}^{L} S/\sqrt{L} = S^L L^{-L/2}$ (symbolic L, S)",
            "symbolic identity",
            lambda: is_zero(
                sp.product(norm / sp.sqrt(depth), (sp.Symbol("l", integer=True), 1, depth))
                - norm**depth * depth ** (-depth / 2)
            ),
        ),
    )
    equal = is_zero(derived - variance)
    return result(
        c,
        Verdict.HOLDS if equal else Verdict.FAILS,
        sp.sstr(derived),
        Proof(c.statement_latex, steps),
        witness=None if equal else {"printed": sp.sstr(variance), "derived": sp.sstr(derived)},
    )


DECIDERS: dict[str, Callable[[Claim], Result]] = {
    "backprop.dX_003": _gradient,
    "backprop.dY_003": _gradient,
    "backprop.tanh_definition_003": _activation,
    "backprop.tanh_derivative_003": _activation,
    "backprop.zero_centered_003": _zero_centered,
    "initialization.xavier_mean_003": _xavier_mean,
    "initialization.xavier_variance_003": _xavier_variance,
    "initialization.xavier_monotone_003": _xavier_monotone,
    "initialization.xavier_sigma_003": _xavier_sigma,
    "initialization.kaiming_mean_003": _kaiming_mean,
    "initialization.kaiming_second_moment_003": _kaiming_second_moment,
    "initialization.kaiming_variance_003": _kaiming_variance,
    "initialization.kaiming_variance_approx_003": _kaiming_variance_approx,
    "initialization.kaiming_sigma_003": _kaiming_sigma,
    "initialization.xavier_uniform_001": _xavier_uniform,
    "initialization.figure3_001": _figure3,
    "initialization.kaiming_leaky_001": _kaiming_leaky,
    "initialization.orthogonal_001": _orthogonal,
    "initialization.spectral_001": _spectral,
    "initialization.depth_aware_001": _depth_aware,
}


def check_initialization(c: Claim) -> Result:
    """The verdict of a claim on backpropagation through a product, 003's activations or
    initialization."""
    return DECIDERS[c.id](c)
