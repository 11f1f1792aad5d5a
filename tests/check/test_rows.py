"""The claims of the rows Linear, Convolution, Softmax, the poolings and the residual blocks:
verdicts follow from the proofs, the checker answers differently when a printed statement
is changed, witnesses rerun in plain floating point, and the kernels never exceed (and
reach) the proven constants."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from derive.check import check
from derive.claims import ROW_CLAIMS
from derive.definitions import rows as R
from kernels import avgpool, compose, conv2d, maxpool, residual, softmax
from proofs import rows as pr
from proofs import spectral
from proofs.core import SIZE, same, sum_identity, total
from proofs.matrices import Case, decide


@pytest.fixture(scope="module")
def results():
    return {c.id: check(c) for c in ROW_CLAIMS}


def test_every_row_claim_is_proven(results):
    for claim_id, result in results.items():
        assert result.rigorous, f"{claim_id}: not rigorous ({result.method})"
        assert result.proof.verify().ok, claim_id
        assert result.verdict == "holds" or result.witness, f"{claim_id}: no witness"


def test_row_verdicts(results):
    """Facts known independently of the checker: Eq. 11's supremum keeps b; sigma_max is
    not max|eig| for a nilpotent W; Eq. 12's range has K + 2 taps; (W_D^O)^T is not W_D^O;
    Eq. 14's dX needs col2im; the convolution's constant exceeds sigma_max(W_D^O) (an
    all-ones kernel multiplies a constant image by 9, sigma_max = 3); softmax's Jacobian
    is y_i(delta_ij - y_j) with 2-norm at most 1/2; at a tie max is not differentiable;
    the mean's gradient has norm 1/sqrt(D); f = x + nu f is not a definition of the block;
    1 + max_D |nu_D| Lip(f), read with the bars the extraction lost, holds for every D."""
    expected = {
        "linear.definition": "holds",
        "linear.jacobian": "holds",
        "linear.lipschitz": "holds",
        "linear.eq11": "fails",
        "linear.eigenvalue": "fails",
        "linear.backprop": "holds",
        "conv2d.definition": "misprinted",
        "conv2d.jacobian": "misprinted",
        "conv2d.lipschitz": "fails",
        "conv2d.eq14": "misprinted",
        "softmax.definition": "holds",
        "softmax.jacobian": "misprinted",
        "softmax.lipschitz": "holds_loose",
        "maxpool.definition": "holds",
        "maxpool.jacobian": "misprinted",
        "maxpool.lipschitz": "holds",
        "avgpool.definition": "holds",
        "avgpool.jacobian": "holds",
        "avgpool.lipschitz": "fails",
        "residual.definition": "holds",
        "residual.jacobian": "holds",
        "residual.lipschitz": "holds",
        "residual.eq27": "holds",
        "residual.eq27_shortcut": "holds",
        "weighted_residual.definition": "misprinted",
        "weighted_residual.jacobian": "holds",
        "weighted_residual.lipschitz": "holds",
    }
    actual = {k: r.verdict for k, r in results.items()}
    wrong = {k: (actual.get(k), v) for k, v in expected.items() if actual.get(k) != v}
    assert not wrong, f"(actual, expected) per claim: {wrong}"


def test_values_parse(results):
    for claim_id, result in results.items():
        sp.sympify(result.value)  # raises on a value a program cannot read
        assert claim_id


def test_a_transposed_linear_jacobian_is_caught():
    """Printing W (numerator layout) where the paper's layout needs W^T fails, with the
    shapes (non-square) or an exact entry (square) as the witness."""
    x, W, b = R.vector("x", 2), R.matrix("W", 2, 2), R.vector("b", 2)
    point = {s: sp.Integer(k + 1) for k, s in enumerate([*x, *W, *b])}
    square = Case("O = D = 2", lambda: W, lambda: R.jacobian(R.linear(x, W, b), x).T, point)
    verdict, _, witness = decide("W", [square], "W equals the derivative")
    assert verdict == "fails"
    assert witness["entry"] in ([1, 2], [2, 1]), witness
    assert sp.sympify(witness["printed"]) != sp.sympify(witness["derived"])


def test_softmax_jacobian_as_intended_holds():
    d = 3
    x = R.vector("x", d)
    y = R.softmax(x)
    intended = sp.Matrix(d, d, lambda i, j: y[i] * ((1 if i == j else 0) - y[j]))
    assert same(intended, R.jacobian(y, x))
    literal = sp.Matrix(d, d, lambda i, j: y[i] * ((1 if i == j else 0) - y[i]))
    assert not same(literal, R.jacobian(y, x))


def test_softmax_witness_in_floating_point(results):
    """The witness D = 2, x = (0, log 2): y = (1/3, 2/3), dy_1/dx_2 = -y_1 y_2 = -2/9,
    the printed -y_1^2 = -1/9; recomputed by central differences in float64."""
    witness = results["softmax.jacobian"].witness
    x = np.array([0.0, np.log(2.0)])
    h = 1e-6

    def y1(x2: float) -> float:
        e = np.exp([x[0], x2])
        return e[0] / e.sum()

    slope = (y1(x[1] + h) - y1(x[1] - h)) / (2 * h)
    assert slope == pytest.approx(float(sp.sympify(witness["derived"])), abs=1e-9)
    assert slope != pytest.approx(float(sp.sympify(witness["printed"])), abs=1e-3)


def test_conv_witness_in_floating_point(results):
    """All-ones 3 x 3 kernel, 4 x 4 all-ones image, padding 1: circular output is 9 x,
    zero-padded output has |y| = 26 against |x| = 4; sigma_max(ones(1, 9)) = 3."""
    witness = results["conv2d.lipschitz"].witness
    x = np.ones((4, 4))
    for mode, key in (("wrap", "ratio"), ("constant", "zeros_ratio")):
        padded = np.pad(x, 1, mode=mode)
        y = sum(padded[a : a + 4, e : e + 4] for a in range(3) for e in range(3))
        ratio = np.linalg.norm(y) / np.linalg.norm(x)
        assert ratio == pytest.approx(float(sp.sympify(witness[key])), rel=1e-15), mode
        assert ratio > np.linalg.norm(np.ones((1, 9)), 2) == pytest.approx(3.0)


def test_avgpool_and_weighted_witnesses_in_floating_point(results):
    w = results["avgpool.lipschitz"].witness
    x = np.asarray(w["x"], dtype=float)
    assert abs(x.mean()) / np.linalg.norm(x) == pytest.approx(1 / np.sqrt(3), rel=1e-15)
    assert abs(x.mean()) / np.linalg.norm(x) > 1 / 3
    _, _, w = pr.weighted_lipschitz(results["weighted_residual.lipschitz"].claim.statement_latex)
    nu = float(w["nu"])
    y = lambda v: v + nu * v  # noqa: E731 - the witness block with f(x) = x
    assert abs(y(1.0) - y(0.0)) == float(w["lipschitz"]) > float(w["printed"])


def test_a_wrong_softmax_closed_form_is_rejected():
    """The kernels' VJP forms are proven; dropping the y_i factor is caught."""
    assert pr.softmax_closed_forms().verify().ok
    d = 3
    x, g = R.vector("x", d), R.vector("g", d)
    y = R.softmax(x)
    derived = sp.Matrix([sp.diff((g.T * y)[0], s) for s in x])
    inner = (g.T * y)[0]
    assert not same(sp.Matrix([g[i] - inner for i in range(d)]), derived)


def test_weighted_lipschitz_literal_reading_is_refuted(results):
    """Without the bars the statement fails (the notes say so); with them it holds."""
    result = results["weighted_residual.lipschitz"]
    literal, intended, witness = pr.weighted_lipschitz(result.claim.statement_latex)
    assert witness["printed"] == "-2" and witness["lipschitz"] == "2"
    (step,) = literal.steps
    assert step.method == "exact witness" and step.check()
    statements = [step.statement for step in result.proof.steps]
    assert statements == [step.statement for step in intended.steps]
    assert result.witness is None


# --- The kernels against the proven constants -------------------------------------------

#: float64 slack of a computed 2-norm against an exact bound: a few roundings of values <= 1.
NORM_SLACK = 1e-14


def test_softmax_jacobians_never_exceed_one_half_and_reach_it():
    """Sampled and adversarial rows (two equal leaders, the rest far below): |J|_2 <= 1/2,
    equal to it at x = (0, 0) and approaching it as the others go to -inf."""
    rng = np.random.default_rng(7)
    rows = [rng.normal(scale=s, size=d) for s in (0.1, 1, 5, 30) for d in (2, 3, 8, 64)]
    rows += [np.array([0.0, 0.0, *(-t * np.ones(k))]) for t in (1, 10, 40) for k in (1, 5)]
    for x in rows:
        norm = np.linalg.norm(softmax.jacobian(x), 2)
        assert norm <= 0.5 + NORM_SLACK, f"x = {x}: |J|_2 = {norm!r} > 1/2"
    assert np.linalg.norm(softmax.jacobian(np.zeros(2)), 2) == 0.5
    far = np.linalg.norm(softmax.jacobian(np.array([0.0, 0.0, -40.0, -40.0])), 2)
    assert 0.5 - far < 1e-16, far


def test_conv_operator_reaches_the_certified_constant():
    """kernels.conv2d as a linear operator: the all-ones kernel's constant 9 (circular) is
    reached by a constant image, and random images never exceed the certified bound."""
    weight = np.ones((1, 1, 3, 3))
    op = conv2d.linear_operator(weight, (1, 4, 4), 1, 1, padding_mode="circular")
    x = np.ones(16)
    assert np.linalg.norm(op.matvec(x)) / np.linalg.norm(x) == 9.0
    rng = np.random.default_rng(3)
    weight = rng.normal(size=(4, 3, 3, 3))
    for mode, bounds in (
        ("circular", spectral.conv_circular_lipschitz(weight, (8, 8), padding=1)),
        ("zeros", spectral.conv_zero_padding_bounds(weight, (8, 8), padding=1)),
    ):
        op = conv2d.linear_operator(weight, (3, 8, 8), 1, 1, padding_mode=mode)
        hi = float(bounds.hi)
        for _ in range(20):
            v = rng.normal(size=op.shape[1])
            ratio = np.linalg.norm(op.matvec(v)) / np.linalg.norm(v)
            assert ratio <= hi * (1 + NORM_SLACK), f"{mode}: ratio {ratio!r} > {hi!r}"
        dense = np.linalg.norm(op.to_dense(), 2)
        assert float(bounds.lo) * (1 - NORM_SLACK) <= dense <= hi * (1 + NORM_SLACK), (
            f"{mode}: dense SVD {dense!r} outside [{float(bounds.lo)!r}, {hi!r}]"
        )


def test_global_pooling_jacobians_have_the_derived_norms():
    for d in (1, 2, 5, 100):
        x = np.linspace(-1, 1, d)
        assert np.linalg.norm(avgpool.jacobian(x), 2) == pytest.approx(1 / np.sqrt(d), rel=1e-15)
        assert np.linalg.norm(maxpool.jacobian(x), 2) == 1.0


def test_residual_witness_reaches_one_plus_lip_f():
    """The FFN witness (W1 = I, W2 = 2I): the kernel's Jacobian at x > 0 has 2-norm 3; with
    W2 = -2I every pattern gives 1."""
    up = compose.ffn(np.eye(2), np.zeros(2), 2 * np.eye(2), np.zeros(2))
    down = compose.ffn(np.eye(2), np.zeros(2), -2 * np.eye(2), np.zeros(2))
    assert np.linalg.norm(residual.jacobian(np.array([1.0, 2.0]), up), 2) == 3.0
    for x in ([1.0, 2.0], [-1.0, 2.0], [1.0, -2.0], [-1.0, -2.0]):
        assert np.linalg.norm(residual.jacobian(np.array(x), down), 2) == 1.0, x


def test_weighted_residual_is_proven_for_every_size_and_notes_the_literal_reading(results):
    """Rigorous for every D: no step of the proof is checked at a fixed size; the literal
    reading without bars is refuted in the notes by an exact witness."""
    r = results["weighted_residual.lipschitz"]
    assert r.rigorous and all("D = 3" not in step.statement for step in r.proof.steps)
    assert any("every D" in step.statement for step in r.proof.steps)
    assert any("nu = -3" in note and "-2x" in note for note in r.notes)


def _at_size(expr: sp.Expr, sizes: dict, names: dict[str, str]) -> sp.Expr:
    """An entry form at concrete sizes: the sums written out, ``x[k]`` (``W[i, j]``) the
    symbol of :func:`R.vector` (:func:`R.matrix`) of the same name."""
    concrete = expr.subs(sizes).doit()

    def symbol(entry: sp.Indexed) -> sp.Symbol:
        name = names[str(entry.base)]
        indices = "_".join(str(k) for k in entry.indices)
        sep = "_" if len(entry.indices) > 1 or name[-1].isdigit() else ""
        return sp.Symbol(f"{name}{sep}{indices}", real=True)

    return concrete.replace(lambda e: isinstance(e, sp.Indexed), symbol)


@pytest.mark.parametrize(("o", "d"), [(1, 1), (2, 3), (3, 2), (4, 4)])
def test_entry_forms_are_the_forwards_at_every_checked_size(o, d):
    """The symbolic-size forms the proofs use are the concrete definitions, entry by entry:
    ``linear_entry`` is ``W x + b``, ``softmax_entry`` is ``softmax``, ``avg_pool_entry``
    is ``avg_pool``."""
    x, W, b = R.vector("x", d), R.matrix("W", o, d), R.vector("b", o)
    Wi, xi, bi = (sp.IndexedBase(n, real=True) for n in ("W", "x", "b"))
    j = sp.Symbol("j", integer=True, positive=True)
    names = {"W": "W", "x": "x", "b": "b"}
    sizes = {R.D: d, R.OUTPUTS: o}
    linear = R.linear(x, W, b)
    softmax_ = R.softmax(x)
    for a in range(1, o + 1):
        entry = _at_size(R.linear_entry(Wi, xi, bi, sp.Integer(a), j), sizes, names)
        assert sp.expand(entry - linear[a - 1]) == 0, (o, d, a)
    for a in range(1, d + 1):
        entry = _at_size(R.softmax_entry(xi, sp.Integer(a), j), sizes, names)
        assert sp.simplify(entry - softmax_[a - 1]) == 0, (d, a)
    mean = _at_size(R.avg_pool_entry(xi, j), sizes, names)
    assert sp.expand(mean - R.avg_pool(x)[0]) == 0, d


def test_the_size_symbols_are_the_proofs():
    """The entry forms' D is the symbolic size the sum identities normalise over."""
    assert R.D == SIZE and R.OUTPUTS != SIZE and R.OUTPUTS.is_integer and R.OUTPUTS.is_positive


@pytest.mark.parametrize(
    "claim_id",
    [
        "linear.definition",
        "linear.jacobian",
        "linear.lipschitz",
        "linear.backprop",
        "softmax.definition",
        "avgpool.definition",
    ],
)
def test_claims_proven_for_every_size(results, claim_id):
    """These hold for a symbolic size (no longer "at D = 1..4 only"): a step says so and
    the report's rule reads it as every size."""
    r = results[claim_id]
    assert r.verdict == "holds" and r.rigorous, claim_id
    assert r.proven_for == "every size", (claim_id, r.proven_for)
    assert any("symbolic D" in step.statement for step in r.proof.steps), claim_id


def test_a_backprop_summed_over_the_wrong_size_is_caught():
    """The symbolic-size steps tell the two sizes apart: W^T g summed over the D inputs
    instead of the O outputs is not the gradient (equal only where O = D), and g x^T read
    as x g^T is not either."""
    W, x, _, g, (r, c, i, _), y = pr.linear_entries()
    loss = total(g[i] * y.xreplace({r: i}), i, R.OUTPUTS)
    assert sum_identity(total(W[i, c] * g[i], i, R.OUTPUTS), sp.diff(loss, x[c]))()
    assert not sum_identity(total(W[i, c] * g[i], i), sp.diff(loss, x[c]))()
    assert sum_identity(g[r] * x[c], sp.diff(loss, W[r, c]))()
    assert not sum_identity(g[c] * x[r], sp.diff(loss, W[r, c]))()


@pytest.mark.parametrize("shortcut", [False, True])
def test_eq27_for_every_size_refuses_false_variants(shortcut):
    """Eq. 27's entry for symbolic D and H holds; a doubled chain and the other layout
    (W1 and W2 trading their free indices) are refused."""
    general = pr.ffn_general(shortcut)
    assert sum_identity(general.printed, general.derived)()
    assert not sum_identity(general.printed, pr.ffn_general(shortcut, factor=2).derived)()
    a, b = sp.symbols("a b", integer=True, positive=True)
    swapped = general.printed.xreplace({a: b, b: a})
    assert not sum_identity(swapped, general.derived)()
