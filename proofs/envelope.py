r"""Proofs of the max-norm gains of LayerNorm (and BatchNorm) and RMSNorm used by the envelopes.

The max-norm gain of a backward pass is ``sup_x max_j sum_i |J_ij|``: the largest factor
from ``max|g_i|`` to ``max|dx_j|``. For LayerNorm it is ``max|gamma| K(D)/sqrt(eps)`` and
for RMSNorm ``max|gamma| K_rms(D)/sqrt(eps)`` (derivations in
:func:`derive.envelope.modules.layernorm_k`
and :func:`derive.envelope.modules.rmsnorm_k`). The steps below check every algebraic reduction of
those derivations symbolically, the choice of ``k`` rigorously (arb, every k of the given D),
and the attainment at the constructed input (arb). The one inequality not re-derived by a
machine is the Cauchy-Schwarz bound itself; its Lagrange identity is checked at N = 4.
"""

from __future__ import annotations

from functools import cache

import sympy as sp
from flint import arb

from derive.envelope.core import precision
from derive.envelope.modules import (
    k_value,
    layernorm_candidates,
    layernorm_dip,
    layernorm_k,
    layernorm_p,
    rmsnorm_k,
)
from proofs.core import Proof, Step, identity

D, N, k, a, tau, theta, lam, A, B = sp.symbols("D N k a tau theta lambda A B", positive=True)


#: The number of minus signs off j (N = k + m entries off j, both positive here).
m = sp.symbols("m", positive=True)


def _ln_pieces():
    """With N = k + m, n_j = a = sin(theta) sqrt(N/D) and c = cos(theta) (0 < theta < pi/2):
    the two values of the maximizing rest ``r`` (k entries r_plus, m entries r_minus) for a
    sign vector with k plus signs, and the column's signed sum ``s . column``: the diagonal
    ``1 - 1/D - tau a^2`` plus ``s_i (1/D + tau a r_i)`` off it."""
    n = k + m
    dd = n + 1
    aa = sp.sin(theta) * sp.sqrt(n / dd)
    c = sp.cos(theta)
    norm = sp.sqrt(4 * k * m / n)
    r_plus = -aa / n + c * (2 * m / n) / norm
    r_minus = -aa / n - c * (2 * k / n) / norm
    value = (1 - 1 / dd - tau * aa**2) + k * (1 / dd + tau * aa * r_plus)
    value -= m * (1 / dd + tau * aa * r_minus)
    return aa, r_plus, r_minus, value


@cache
def _angle_substitution() -> bool:
    """1 - a^2 - a^2/N = cos(theta)^2 for a = sin(theta) sqrt(N/D): the rest has norm^2
    ``1 - a^2`` and mean ``-a/N``, so its centered part has length cos(theta)."""
    aa, _, _, _ = _ln_pieces()
    n = k + m
    return identity(1 - aa**2 - aa**2 / n, sp.cos(theta) ** 2)()


@cache
def _constraint_sum() -> bool:
    aa, r_plus, r_minus, _ = _ln_pieces()
    return identity(k * r_plus + m * r_minus, -aa)()


@cache
def _constraint_norm() -> bool:
    aa, r_plus, r_minus, _ = _ln_pieces()
    return identity(k * r_plus**2 + m * r_minus**2, 1 - aa**2)()


@cache
def _column_value() -> bool:
    """s . column = (2 - tau) k/D + tau ((k/D) cos 2theta + sqrt(k (N - k)/D) sin 2theta)."""
    _, _, _, value = _ln_pieces()
    dd = k + m + 1
    target = (2 - tau) * k / dd + tau * (
        k / dd * sp.cos(2 * theta) + sp.sqrt(k * m / dd) * sp.sin(2 * theta)
    )
    return identity(sp.expand_trig(value), sp.expand_trig(target))()


@cache
def _lagrange_identity() -> bool:
    """(|s|^2 |r|^2 - (s . r)^2) = sum_{i<j} (s_i r_j - s_j r_i)^2 at N = 4 (symbolic)."""
    s = sp.symbols("s0:4", real=True)
    r = sp.symbols("r0:4", real=True)
    dot = sum(u * v for u, v in zip(s, r, strict=True))
    lhs = sum(v**2 for v in s) * sum(v**2 for v in r) - dot**2
    rhs = sum((s[i] * r[j] - s[j] * r[i]) ** 2 for i in range(4) for j in range(i + 1, 4))
    return identity(lhs, rhs)()


@cache
def _amplitude() -> bool:
    """(k/D)^2 + k (N - k)/D = N k (D - k)/D^2 with D = N + 1."""
    dd = N + 1
    return identity((k / dd) ** 2 + k * (N - k) / dd, N * k * (dd - k) / dd**2)()


@cache
def _cubic_maximum() -> bool:
    """phi(lambda) = (A + B) lambda - (B - A) lambda^3 and lambda*^2 = (A + B)/(3 (B - A)):
    phi(lambda*) - phi(lambda) = (B - A) (lambda - lambda*)^2 (lambda + 2 lambda*), and
    phi(lambda*) = (2/3)(A + B) lambda*."""
    star = sp.sqrt((A + B) / (3 * (B - A)))

    def phi(v):
        return (A + B) * v - (B - A) * v**3

    first = identity(
        sp.expand(phi(star) - phi(lam) - (B - A) * (lam - star) ** 2 * (lam + 2 * star)), 0
    )
    second = identity(phi(star), sp.Rational(2, 3) * (A + B) * star)
    return first() and second()


@cache
def _lambda_form() -> bool:
    """lambda (A (1 + lambda^2) + B (1 - lambda^2)) = (A + B) lambda - (B - A) lambda^3, with
    tau = 1 - lambda^2, 2 - tau = 1 + lambda^2."""
    return identity(lam * (A * (1 + lam**2) + B * (1 - lam**2)), (A + B) * lam - (B - A) * lam**3)()


def _ln_candidate(size: int, kk: int) -> arb:
    n = size - 1
    aa, bb = arb(kk), arb(n * kk * (size - kk)).sqrt()
    if aa + bb >= 3 * (bb - aa):
        return 2 * aa / size
    lam_sq = (aa + bb) / (3 * (bb - aa))
    return 2 * (aa + bb) / 3 * lam_sq.sqrt() / size


def _best_k(size: int) -> bool:
    """Every other k gives at most the chosen one (arb enclosures, 128 bits)."""
    value, chosen, _ = layernorm_k(size)
    with precision(128):
        best = value.ball()
        return all(
            kk == chosen or _ln_candidate(size, kk) <= best + arb(10) ** -30
            for kk in range(1, size)
        )


def _ln_attained(size: int) -> bool:
    """The real input built from (k, theta, lambda) has column-0 sum K(D) sqrt(1/eps) at eps = 1
    (within 1e-30, arb)."""
    value, kk, lam_real = layernorm_k(size)
    n = size - 1
    with precision(200):
        if lam_real.exact == 1:
            # Constant row: column sum of I - 11^T/D is 2 (D - 1)/D.
            return abs(arb(2 * n) / size - value.ball()) < arb(10) ** -30
        cos2 = arb(kk) / arb(n * kk * (size - kk)).sqrt()  # cos(2 theta) = k / B
        sin_t, cos_t = ((1 - cos2) / 2).sqrt(), ((1 + cos2) / 2).sqrt()
        aj = sin_t * (arb(n) / size).sqrt()
        norm = (arb(4 * kk * (n - kk)) / n).sqrt()
        r_plus = -aj / n + cos_t * (arb(2 * (n - kk)) / n) / norm
        r_minus = -aj / n - cos_t * (arb(2 * kk) / n) / norm
        lam_v = lam_real.ball()
        t = 1 - lam_v * lam_v
        col = abs(1 - arb(1) / size - t * aj * aj)
        col += kk * abs(-arb(1) / size - t * aj * r_plus)
        col += (n - kk) * abs(-arb(1) / size - t * aj * r_minus)
        return abs(lam_v * col - value.ball()) < arb(10) ** -30


def layernorm_gain_proof(size: int) -> Proof:
    """``sup_x max_j sum_i |J_ij| = max|gamma| K(D)/sqrt(eps)`` for LayerNorm at ``D = size``."""
    value, chosen, _ = layernorm_k(size)
    steps = (
        Step(
            "Column j of the bracket is e_j - 1/D - tau n_j n; its absolute sum is the "
            "largest s . column over sign vectors s. Fix s with k plus signs among the N "
            "entries off j, m = N - k minus signs, and n_j = a = sin(theta) sqrt(N/D): the "
            "rest r has mean -a/N and a centered part of length sqrt(1 - a^2 - a^2/N) = "
            "cos(theta)",
            "symbolic identity",
            _angle_substitution,
        ),
        Step(
            "The two-valued rest r (k entries r_+, m entries r_-, along the centered s) has "
            "sum r = -a",
            "symbolic identity",
            _constraint_sum,
        ),
        Step("... and |r|^2 = 1 - a^2", "symbolic identity", _constraint_norm),
        Step(
            "By Cauchy-Schwarz it maximizes s . r among such rests; Lagrange's identity "
            "|s|^2|r|^2 - (s.r)^2 = sum_{i<j} (s_i r_j - s_j r_i)^2 (checked at N = 4)",
            "symbolic identity",
            _lagrange_identity,
        ),
        Step(
            "There s . column = (2 - tau) k/D + tau ((k/D) cos 2theta + sqrt(k(N-k)/D) sin 2theta)",
            "symbolic identity",
            _column_value,
        ),
        Step(
            "whose maximum over theta is (2 - tau) k/D + tau sqrt(N k (D - k))/D: "
            "(k/D)^2 + k(N-k)/D = N k (D-k)/D^2",
            "symbolic identity",
            _amplitude,
        ),
        Step(
            "Times lambda = sqrt(eps) r (tau = 1 - lambda^2): lambda (A(1+lambda^2) + "
            "B(1-lambda^2)) = (A+B) lambda - (B-A) lambda^3, A = k, B = sqrt(N k (D-k))",
            "symbolic identity",
            _lambda_form,
        ),
        Step(
            "Its maximum over lambda > 0 (B > A) is (2/3)(A+B) lambda* at lambda*^2 = "
            "(A+B)/(3(B-A)), else (lambda* >= 1) 2A at lambda = 1",
            "symbolic identity",
            _cubic_maximum,
        ),
        Step(
            f"At D = {size}, k = {chosen} gives the largest value, {value.decimal(20)}, over "
            f"k = 1..{size - 1}",
            "arb enclosure",
            lambda: _best_k(size),
        ),
        Step(
            f"Attained: the input built from k = {chosen}, theta and lambda has that column sum",
            "arb enclosure",
            lambda: _ln_attained(size),
        ),
    )
    return Proof(f"LayerNorm max-norm gain at D = {size}: max|gamma| K(D)/sqrt(eps)", steps)


def _peak_h() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """``(log h, B, chi)`` of :func:`derive.envelope.modules.layernorm_k` as functions of k
    (``D = N + 1``): ``h = (2/3)(A + B)^(3/2)/sqrt(3 (B - A))``, ``A = k``,
    ``B = sqrt(N k (D - k))``, ``chi = 2 N k + (N - 2k) B``."""
    bb = sp.sqrt(N * k * (N + 1 - k))
    log_h = sp.Rational(3, 2) * sp.log(k + bb) - sp.log(bb - k) / 2
    return log_h, bb, 2 * N * k + (N - 2 * k) * bb


@cache
def _peak_derivative() -> bool:
    """2 B (A + B)(B - A) d(log h)/dk = D chi."""
    log_h, bb, chi = _peak_h()
    lhs = 2 * bb * (k + bb) * (bb - k) * sp.diff(log_h, k)
    return identity(sp.expand(lhs), sp.expand((N + 1) * chi))()


@cache
def _peak_cubic() -> bool:
    """(2 N k)^2 - ((2k - N) B)^2 = N k p(k), p(k) = 4 N k - (2k - N)^2 (D - k)."""
    _, bb, _ = _peak_h()
    p = 4 * N * k - (2 * k - N) ** 2 * (N + 1 - k)
    return identity((2 * N * k) ** 2 - ((2 * k - N) * bb) ** 2, N * k * p)()


@cache
def _peak_ends() -> bool:
    """p(N/2) = 2 N^2 and p(N) = 3 N^2 (both > 0); the leading term of p is 4 k^3."""
    p = 4 * N * k - (2 * k - N) ** 2 * (N + 1 - k)
    ends = identity(p.subs(k, N / 2), 2 * N**2)() and identity(p.subs(k, N), 3 * N**2)()
    return ends and sp.Poly(p, k).LC() == 4


@cache
def _peak_edge() -> bool:
    """At the edge of the regime, B = 2A: (2/3)(A + B) sqrt((A + B)/(3 (B - A))) = 2A."""
    value = sp.Rational(2, 3) * (A + 2 * A) * sp.sqrt((A + 2 * A) / (3 * (2 * A - A)))
    return identity(value, 2 * A)()


def _peak_candidates(size: int) -> bool:
    """The bisection's bracket ``(low, high)`` is exact: ``high = low + 1``, ``low <= N/2``
    or ``p(low) >= 0``, ``N/2 < high <= j < N``, ``p(high) < 0`` and ``p(j) < 0`` with j
    inside the regime ``N (D - j) > 4 j``."""
    n = size - 1
    dip = layernorm_dip(size)
    if dip is None or not (n < 2 * dip < 2 * n and n * (size - dip) > 4 * dip):
        return False
    low, high = layernorm_candidates(size)
    return (
        layernorm_p(size, dip) < 0
        and high == low + 1
        and (2 * low <= n or layernorm_p(size, low) >= 0)
        and n < 2 * high <= 2 * dip
        and layernorm_p(size, high) < 0
    )


def _peak_best(size: int) -> bool:
    """The chosen k is the constant row's or a candidate, and its value is at least the
    other two's (arb, 128 bits)."""
    value, chosen, _ = layernorm_k(size)
    others = (*layernorm_candidates(size), size - 1)
    if chosen not in others:
        return False
    with precision(128):
        best = value.ball()
        return all(kk == chosen or k_value(size, kk)[0].ball() <= best for kk in others)


def layernorm_peak_proof(size: int) -> Proof:
    """LayerNorm's maximizing k at ``D = size`` found without comparing every k (the argument
    of :func:`derive.envelope.modules.layernorm_k`; sizes from
    :data:`derive.envelope.modules.LAYERNORM_DIP_FROM` on, where a dip of p is found)."""
    value, chosen, _ = layernorm_k(size)
    dip = layernorm_dip(size)
    low, high = layernorm_candidates(size) if dip is not None else (0, 0)
    steps = (
        Step(
            "In the regime B > 2A the inner maximum is h(k) = (2/3)(A+B)^(3/2)/sqrt(3(B-A)); "
            "2B(A+B)(B-A) d(log h)/dk = D chi, chi = 2Nk + (N-2k)B: h increases for k <= N/2",
            "symbolic identity",
            _peak_derivative,
        ),
        Step(
            "For k > N/2, chi has the sign of p(k) = 4Nk - (2k-N)^2(D-k): "
            "(2Nk)^2 - ((2k-N)B)^2 = N k p(k)",
            "symbolic identity",
            _peak_cubic,
        ),
        Step(
            "p(N/2) = 2N^2 > 0, p(N) = 3N^2 > 0 and p ~ 4k^3: one root below N/2, and two "
            "roots r1 < j < r2 in (N/2, N) once p(j) < 0",
            "symbolic identity",
            _peak_ends,
        ),
        Step(
            "At the regime's edge k_b (B = 2A) h = 2A = 2k_b < 2N, the constant row's value "
            "(outside the regime the value is 2k <= 2N): h increasing on (r2, k_b) stays below it",
            "symbolic identity",
            _peak_edge,
        ),
        Step(
            f"At D = {size}: p({dip}) < 0, and p changes sign between k = {low} and {high} "
            "(exact integer signs of p): r1 lies in [low, high), so h is largest over the "
            "integers of the regime at one of the two",
            "exact witness",
            lambda: _peak_candidates(size),
        ),
        Step(
            f"k = {chosen} gives {value.decimal(20)}, at least k = {low}, {high} and the "
            f"constant row k = {size - 1} give",
            "arb enclosure",
            lambda: _peak_best(size),
        ),
    )
    return Proof(f"LayerNorm's maximizing k at D = {size}, located by the signs of p", steps)


@cache
def _rms_angle() -> bool:
    """1 - tau a^2 + tau a sqrt(N (1 - a^2)) with a = sin(theta) (0 < theta < pi/2) is
    1 - tau/2 + (tau/2)(cos 2theta + sqrt(N) sin 2theta)."""
    expr = 1 - tau * sp.sin(theta) ** 2 + tau * sp.sin(theta) * sp.sqrt(N) * sp.cos(theta)
    target = 1 - tau / 2 + tau / 2 * (sp.cos(2 * theta) + sp.sqrt(N) * sp.sin(2 * theta))
    return identity(sp.expand_trig(expr), sp.expand_trig(target))()


@cache
def _rms_cubic() -> bool:
    """lambda (1 + c (1 - lambda^2)) is the cubic with A + B = 1 + c, B - A = c."""
    c = sp.symbols("c", positive=True)
    return identity(lam * (1 + c * (1 - lam**2)), (1 + c) * lam - c * lam**3)()


def _rms_attained(size: int) -> bool:
    value, lam_real = rmsnorm_k(size)
    n = size - 1
    with precision(200):
        if lam_real.exact == 1:
            return abs(value.ball() - 1) < arb(10) ** -30
        cos2 = 1 / arb(size).sqrt()
        sin_t, cos_t = ((1 - cos2) / 2).sqrt(), ((1 + cos2) / 2).sqrt()
        lam_v = lam_real.ball()
        t = 1 - lam_v * lam_v
        col = abs(1 - t * sin_t * sin_t) + n * abs(t * sin_t * cos_t / arb(n).sqrt())
        return abs(lam_v * col - value.ball()) < arb(10) ** -30


def rmsnorm_gain_proof(size: int) -> Proof:
    """``sup_x max_j sum_i |J_ij| = max|gamma| K_rms(D)/sqrt(eps)`` for RMSNorm at ``D = size``."""
    value, _ = rmsnorm_k(size)
    steps = (
        Step(
            "Cauchy-Schwarz on the N entries off j: sum |n_i| <= sqrt(N (1 - a^2)), equal when "
            "they are equal; Lagrange's identity at N = 4",
            "symbolic identity",
            _lagrange_identity,
        ),
        Step(
            "With a = sin(theta): 1 - tau a^2 + tau a sqrt(N(1-a^2)) = 1 - tau/2 + (tau/2)"
            "(cos 2theta + sqrt(N) sin 2theta), at most 1 + tau (sqrt(D) - 1)/2",
            "symbolic identity",
            _rms_angle,
        ),
        Step(
            "Times lambda: the cubic (1+c) lambda - c lambda^3, c = (sqrt(D)-1)/2, maximal at "
            "lambda*^2 = (1+c)/(3c) when that is < 1 (D > 4), else at lambda = 1",
            "symbolic identity",
            _rms_cubic,
        ),
        Step(
            f"The cubic's maximum identity (see LayerNorm): K_rms({size}) = {value.decimal(20)}",
            "symbolic identity",
            _cubic_maximum,
        ),
        Step(
            "Attained at the input built from theta and lambda",
            "arb enclosure",
            lambda: _rms_attained(size),
        ),
    )
    return Proof(f"RMSNorm max-norm gain at D = {size}: max|gamma| K_rms(D)/sqrt(eps)", steps)


@cache
def verified(kind: str, size: int) -> bool:
    """Whether the proof of ``kind`` ("layernorm" or "rmsnorm") at ``size`` verifies (cached)."""
    proof = layernorm_gain_proof(size) if kind == "layernorm" else rmsnorm_gain_proof(size)
    return proof.verify().ok
