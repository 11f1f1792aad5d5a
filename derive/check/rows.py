"""Verdicts of the rows Linear, Convolution, Softmax, MaxPooling, AveragePooling, Residual and
Weighted Residual (and Eq. 9-14, 22-23, 26-27), from the proofs in :mod:`proofs.rows` and
:mod:`proofs.spectral`.

Printed matrices are decided by :func:`proofs.matrices.decide` (an identity at every size,
else an exact witness; ``misprinted`` when the evident intent is proven instead). Printed
constants are decided by :func:`derive.check.norms.bound_verdict` against the constant the
proof derives. Values are SymPy-parsable strings: ``D`` (input length), ``sigma_max_W``
(the largest singular value of the printed matrix), ``Lip_f`` (the branch's constant),
``nu_abs_max = max_D |nu_D|``, ``sigma_max_hat`` (the convolution's exact constant, see
:data:`CONV_NOTE`).
"""

from __future__ import annotations

import sympy as sp

from derive.check.core import bound_verdict, result, run
from derive.claims import Claim
from proofs import rows as pr
from proofs.core import Proof, UnprovenError, Verdict

D = sp.Symbol("D", positive=True, integer=True)
SIGMA_W = sp.Symbol("sigma_max_W", nonnegative=True)
LIP_F = sp.Symbol("Lip_f", nonnegative=True)

CONV_NOTE = (
    "sigma_max_hat: for circular padding and stride 1 on an n1 x n2 grid the convolution is "
    "block-circulant, so its 2-norm is the largest over the DFT frequencies k of "
    "sigma_max(What(k)), What(k) = sum_{a,e} W[:, :, a, e] exp(2 pi i (a k1/n1 + e k2/n2)) "
    "(an O x C matrix); for zero padding it is at most that of the circular convolution on "
    "any grid of at least H + 2p by W + 2p. In terms of the printed matrix, at stride 1 "
    "on images of at least K x K: sigma_max(W_D^O) <= Lip <= K sigma_max(W_D^O) (a patch "
    "placed alone reaches the lower bound; every pixel lies in at most K^2 patches)."
)


def _matrix(c: Claim, decision, value: str, notes: tuple[str, ...] = ()):
    verdict, proof, witness = decision
    return result(c, verdict, value, proof, witness=witness, notes=notes)


def _lipschitz(c: Claim, proof: Proof, attained: sp.Expr, tight: sp.Expr, value: str, **extra):
    verdict, reason = bound_verdict(c.formal, attained, tight)
    return result(c, verdict, value, proof, reason=reason, **extra)


DECIDERS = {
    "linear.definition": lambda c: _matrix(c, pr.linear_definition(c.statement_latex), "W*x + b"),
    "linear.jacobian": lambda c: _matrix(
        c, pr.linear_jacobian(c.statement_latex), "W", ("value: numerator layout, J = W.",)
    ),
    "linear.lipschitz": lambda c: _lipschitz(
        c,
        pr.linear_lipschitz(c.statement_latex),
        SIGMA_W,
        SIGMA_W,
        "sigma_max_W",
        witness=pr.linear_lipschitz_witness(),
    ),
    "linear.backprop": lambda c: _matrix(
        c, pr.linear_backprop(c.statement_latex), "(W_T*g, g*x_T, g)"
    ),
    "linear.eigenvalue": lambda c: _matrix(
        c,
        pr.linear_eigenvalue(c.statement_latex),
        "sqrt(lambda_max_WTW)",
        (
            "Corrected: sigma_max(W) = sqrt(lambda_max(W^T W)); it equals the largest "
            "|eigenvalue| when W is normal (e.g. symmetric) and is at least it always.",
        ),
    ),
    "conv2d.definition": lambda c: _matrix(
        c,
        pr.conv_definition(c.statement_latex),
        "K",
        (
            "value: the number of taps per axis. The printed range -(K+1)/2 .. (K+1)/2 has "
            "K + 2 values (a slip for -(K-1)/2 .. (K-1)/2, with W indexed from the kernel's "
            "center); so read, Eq. 12 is PyTorch's cross-correlation with padding (K-1)/2. "
            "Its output range i = 0 .. W - K belongs to the uncentered form (no padding).",
        ),
    ),
    "conv2d.jacobian": lambda c: _matrix(
        c,
        pr.conv_jacobian(c.statement_latex),
        "W_DO",
        (
            "value: numerator layout at one output location. The convolution's full Jacobian "
            "(image to image) is the block-Toeplitz operator of kernels.conv2d.jacobian, "
            "with W_D^O in every row block.",
        ),
    ),
    "conv2d.eq14": lambda c: _matrix(
        c,
        pr.conv_eq14(c.statement_latex),
        "(dY*X_KKC_T, col2im(W_DO_T*dY))",
        (
            "dL/dW holds. (W^O_{K,K,C})^T Y' is the gradient with respect to the im2col "
            "matrix X^{K,K,C}, one column per output location; the gradient with respect "
            "to the image X adds each column back onto the pixels its patch was read from "
            "(col2im), summing where patches overlap.",
        ),
    ),
    "softmax.definition": lambda c: _matrix(c, pr.softmax_definition(c.statement_latex), "y"),
    "softmax.jacobian": lambda c: _matrix(
        c,
        pr.softmax_jacobian(c.statement_latex),
        "y_i*(KroneckerDelta(i, j) - y_j)",
        (
            "The diagonal y_i(1 - y_i) is right; off the diagonal the printed -y_i^2 should "
            "be -y_i y_j (the second y carries the column index j).",
        ),
    ),
    "softmax.lipschitz": lambda c: _lipschitz(
        c,
        pr.softmax_lipschitz(c.statement_latex),
        sp.Rational(1, 2),
        sp.Rational(1, 2),
        "1/2",
        witness={"D": 2, "x": [0, 0], "v": "[1, -1]/sqrt(2)", "J_v": "v/2"},
        notes=(
            "For D >= 2 (D = 1: softmax is the constant 1, constant 0). Attained at D = 2, "
            "x1 = x2; approached for D >= 3 as all but two inputs go to -infinity.",
        ),
    ),
    "maxpool.definition": lambda c: _matrix(
        c, pr.printed_definition(c.statement_latex, "max"), "x_max"
    ),
    "maxpool.jacobian": lambda c: _matrix(
        c,
        pr.maxpool_jacobian(c.statement_latex),
        "e_argmax",
        (
            "At a tie max is not differentiable; its generalized (Clarke) gradients are the "
            "convex combinations of the tied e_i. kernels.maxpool splits the gradient evenly "
            "over the ties (as torch.amax does); forward2d's windows give it to the first "
            "maximum in row-major order (as PyTorch's max_pool2d does on the CPU).",
        ),
    ),
    "maxpool.lipschitz": lambda c: _lipschitz(
        c,
        pr.maxpool_lipschitz(c.statement_latex),
        sp.Integer(1),
        sp.Integer(1),
        "1",
        witness={"x": [1, 0], "x_prime": "[1 + t, 0]", "ratio": "1"},
    ),
    "avgpool.definition": lambda c: _matrix(
        c, pr.printed_definition(c.statement_latex, "avg"), "sum_x/D"
    ),
    "avgpool.jacobian": lambda c: _matrix(c, pr.avgpool_jacobian(c.statement_latex), "1/D"),
    "avgpool.lipschitz": lambda c: _lipschitz(
        c,
        pr.avgpool_lipschitz(c.statement_latex),
        1 / sp.sqrt(D),
        1 / sp.sqrt(D),
        "1/sqrt(D)",
        witness={"D": 3, "x": [1, 1, 1], "x_prime": [0, 0, 0], "ratio": "1/sqrt(3)"},
    ),
    "residual.definition": lambda c: _matrix(
        c, pr.printed_definition(c.statement_latex, "residual"), "x + f(x)"
    ),
    "residual.jacobian": lambda c: _matrix(
        c,
        pr.residual_jacobian(c.statement_latex, weighted=False),
        "I_D + J_f",
        ("value: numerator layout; the printed I + df/dx is its transpose.",),
    ),
    "residual.eq27": lambda c: _matrix(
        c, pr.ffn_jacobian(c.statement_latex, shortcut=False), "W2*D_relu*W1"
    ),
    "residual.eq27_shortcut": lambda c: _matrix(
        c,
        pr.ffn_jacobian(c.statement_latex, shortcut=True),
        "I_D + W2*D_relu*W1",
    ),
    "residual.lipschitz": lambda c: _lipschitz(
        c,
        pr.residual_lipschitz(c.statement_latex),
        1 + LIP_F,
        1 + LIP_F,
        "1 + Lip_f",
        witness={
            "W1": "eye(2)",
            "b1": [0, 0],
            "W2": "2*eye(2)",
            "b2": [0, 0],
            "x": [1, 2],
            "x_prime": [3, 5],
            "ratio": "3",
            "Lip_f": "2",
        },
    ),
    "weighted_residual.definition": lambda c: _matrix(
        c,
        pr.weighted_definition(c.statement_latex),
        "x + nu*f(x)",
        (
            "A typing slip: the left side should be y (the block's output), not f; as "
            "printed the equation constrains f itself.",
        ),
    ),
    "weighted_residual.jacobian": lambda c: _matrix(
        c,
        pr.residual_jacobian(c.statement_latex, weighted=True),
        "I_D + diag_nu*J_f",
        ("value: numerator layout; the printed I + (df/dx) diag(nu) is its transpose.",),
    ),
}


def _refuted(printed: str, derived: str, relation: str) -> str:
    """``fails`` if the witness's exact printed value stands in ``relation`` to the derived
    one (``!=``: not equal; ``<``: a bound below an attained ratio)."""
    a, b = sp.sympify(printed), sp.sympify(derived)
    if (a != b) if relation == "!=" else bool(a < b):
        return Verdict.FAILS
    raise UnprovenError(f"the witness does not refute the printed value ({a} vs {b})")


def _eq11(c: Claim):
    proof, witness = pr.linear_eq11()
    verdict = _refuted(witness["printed_sup"], witness["lipschitz"], "!=")
    return result(
        c,
        verdict,
        "sigma_max_W",
        proof,
        witness=witness,
        reason="the printed supremum is not the Lipschitz constant at the exact witness",
        notes=("Corrected: Lip_p = sup_{|x|_p = 1} |W x|_p (sigma_max(W) for p = 2).",),
    )


def _conv_lipschitz(c: Claim):
    proof, witness = pr.conv_lipschitz(c.statement_latex)
    verdict = _refuted(witness["printed_sigma_max"], witness["ratio"], "<")
    return result(
        c,
        verdict,
        "sigma_max_hat",
        proof,
        witness=witness,
        reason="the all-ones witness exceeds the printed constant exactly",
        notes=(CONV_NOTE,),
    )


def _weighted_lipschitz(c: Claim):
    """Read with the bars restored (:data:`derive.claims.LOST_BARS`): proven and attained.
    The literal reading without them is refuted by an exact witness, reported in the notes."""
    literal, intended, witness = pr.weighted_lipschitz(c.statement_latex)
    run(literal)
    printed_at, true_at = sp.Integer(witness["printed"]), sp.Integer(witness["lipschitz"])
    if not printed_at < true_at:
        raise UnprovenError(f"{c.id}: the witness does not refute the literal reading")
    return result(
        c,
        Verdict.HOLDS,
        "1 + nu_abs_max*Lip_f",
        intended,
        notes=(
            "Proven for any f and attained (nu = c 1 with c > 0, f = identity). Read "
            f"literally, without the bars, it would fail: D = 1, nu = {witness['nu']}, "
            f"f(x) = x give y = x + nu x = {1 + sp.Integer(witness['nu'])}x, Lipschitz "
            f"constant {true_at}, above 1 + max_D(nu_D) Lip(f) = {printed_at} (an exact "
            "witness, checked).",
        ),
    )


DECIDERS |= {
    "linear.eq11": _eq11,
    "conv2d.lipschitz": _conv_lipschitz,
    "weighted_residual.lipschitz": _weighted_lipschitz,
}


def check_row(c: Claim):
    """The verdict of a claim about a module of the rows family (:mod:`derive.catalog`)."""
    return DECIDERS[c.id](c)
