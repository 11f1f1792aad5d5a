"""The FFN of derive/definitions/rows.py uses the one ReLU of derive/definitions/activations.py
(relu'(0) = 0), so the activation patterns proofs/rows.py enumerates for Eq. 27 are the
regions of that ReLU, kinks included."""

from __future__ import annotations

import itertools

import sympy as sp

from derive.definitions import activations
from derive.definitions import rows as R
from proofs import rows as pr
from proofs.core import SIZE, sum_identity, total

W1 = sp.Matrix([[1, 2], [3, -1]])
B1 = sp.Matrix([1, -1])
W2 = sp.Matrix([[2, -1], [1, 1]])
B2 = sp.Matrix([0, 3])
#: Points in every activation region of W1 x + B1, and on each kink (z_1 = 0, z_2 = 0).
POINTS = [sp.Matrix([a, b]) for a, b in itertools.product((-3, -1, 0, 1, 3), repeat=2)] + [
    sp.Matrix([-1, 0]),  # z_1 = 0
    sp.Matrix([sp.Rational(1, 3), 0]),  # z_2 = 0
    sp.Matrix([sp.Rational(1, 7), sp.Rational(-4, 7)]),  # z_1 = z_2 = 0
]


def test_the_ffn_relu_is_the_activation_relu():
    z = sp.Symbol("z", real=True)
    assert R.relu(z) == activations.RELU.subs(activations.x, z)
    assert activations.elementwise("relu").forward is activations.RELU
    assert sp.diff(R.relu(z), z).subs(z, 0) == 0  # relu'(0) = 0, not Heaviside's 1/2
    assert [R.relu(sp.Integer(v)) for v in (-2, 0, 2)] == [0, 0, 2]


def test_ffn_is_the_pattern_map_of_its_region_kinks_included():
    x = R.vector("x", 2)
    y = R.ffn(x, W1, B1, W2, B2)
    J = R.jacobian(y, x)
    kinks = 0
    for point in POINTS:
        at = dict(zip(x, point, strict=True))
        z = W1 * point + B1
        kinks += any(v == 0 for v in z)
        pattern = tuple(bool(v > 0) for v in z)  # the indicator 1(z > 0): off on a kink
        on_pattern = R.ffn_on_pattern(x, W1, B1, W2, B2, pattern)
        assert y.subs(at) == on_pattern.subs(at), f"x = {list(point)}, pattern {pattern}"
        expected = R.jacobian(on_pattern, x)
        assert J.subs(at) == expected, f"x = {list(point)}: {J.subs(at)} != {expected}"
    assert kinks >= 3


def test_softmax_jacobian_and_vjp_forms_hold_for_a_symbolic_size():
    """The intended y_a (delta_ab - y_b) and the kernels' two VJP forms are proven for every
    D; the printed y_a (delta_ab - y_a) is not."""
    _, proof, _ = pr.softmax_jacobian("softmax.jacobian")
    general = [s for s in proof.steps if s.statement.startswith("every D")]
    assert len(general) == 1 and general[0].check()
    closed = pr.softmax_closed_forms()
    assert [s.check() for s in closed.steps if s.statement.startswith("every D")] == [True, True]
    x = sp.IndexedBase("x", real=True)
    a, b, k = sp.symbols("a b k", integer=True, positive=True)
    y = lambda t: sp.exp(x[t]) / total(sp.exp(x[k]), k)  # noqa: E731
    assert not sum_identity(y(a) * (sp.KroneckerDelta(a, b) - y(a)), sp.diff(y(b), x[a]))()


def test_average_pooling_is_proven_for_every_size():
    """The mean's gradient (1/D) 1 and its 2-norm 1/sqrt(D) for every D; the paper's 1/D as
    the norm is not (sum_a (1/D)^2 = 1/D, not 1/D^2)."""
    _, jacobian, _ = pr.avgpool_jacobian("avgpool.jacobian")
    lipschitz = pr.avgpool_lipschitz("avgpool.lipschitz")
    for proof in (jacobian, lipschitz):
        assert proof.steps[0].statement.startswith("every D") and proof.steps[0].check()
    x = sp.IndexedBase("x", real=True)
    a, k = sp.symbols("a k", integer=True, positive=True)
    gradient = sp.diff(total(x[k], k) / SIZE, x[a])
    assert not sum_identity(total(gradient**2, a), 1 / SIZE**2)()
