"""SymEngine's derivatives (proofs/derivatives.py) against SymPy's, and the attentions'
backward-pass proofs built on them: they hold for the kernels' closed forms and fail for
altered ones."""

from __future__ import annotations

import pytest
import sympy as sp

from derive.definitions import attention as A
from proofs.core import is_zero, same
from proofs.derivatives import directional, gradient

x, y = sp.symbols("x y", real=True)
eps = sp.Symbol("epsilon", positive=True)


@pytest.mark.parametrize(
    "expr",
    [
        sp.exp(x * y) / (1 + sp.exp(x)) ** 2,
        sp.sqrt(x**2 + y**2 + eps) * sp.tanh(x - y),
        x ** sp.Rational(3, 2) * sp.log(1 + y**2) + sp.erf(x * y),
        (x + y) ** 5 / (x - eps),
    ],
)
def test_gradient_and_directional_equal_sympy_diff(expr):
    for symbol, derivative in zip((x, y), gradient(expr, [x, y]), strict=True):
        assert is_zero(derivative - sp.diff(expr, symbol))
        assert derivative.free_symbols <= expr.free_symbols  # the caller's own symbols
    h = sp.Symbol("h", real=True)
    along = expr.subs({x: x + 2 * h, y: y - h})
    (derivative,) = directional([along], h)
    assert is_zero(derivative - sp.diff(along, h).subs(h, 0))


def test_symbols_sharing_a_name_are_refused():
    with pytest.raises(ValueError, match="two symbols named 'x'"):
        gradient(x + sp.Symbol("x", positive=True), [x])


@pytest.mark.parametrize("key", list(A.FORWARDS))
def test_the_gradient_of_the_loss_is_sympys(key):
    size = A.PROOF_SIZES[key][0]
    X, G, params = A._symbols(key, size)
    loss = sum(G.multiply_elementwise(A.FORWARDS[key](X, *params)))
    assert same(A._gradient(loss, X), X.applyfunc(lambda s: sp.diff(loss, s)))


def _without_softmax_correction(P: sp.Matrix, dP: sp.Matrix) -> sp.Matrix:
    return P.multiply_elementwise(dP)


@pytest.mark.parametrize("key", list(A.FORWARDS))
def test_backward_proofs_hold_and_catch_a_wrong_softmax_backward(key, monkeypatch):
    size = A.PROOF_SIZES[key][0]
    assert A.backward_matches(key, size)
    monkeypatch.setattr(A, "_softmax_backward", _without_softmax_correction)
    assert not A.backward_matches(key, size)


def test_dp_backward_with_exchanged_query_and_key_gradients_fails():
    def wrong(X, G, Wq, Wk, Wv):
        dX, dWq, dWk, dWv = A.dp_backward(X, G, Wq, Wk, Wv)
        return dX, dWk, dWq, dWv  # the query and key gradients exchanged

    assert not A.backward_matches("dp_attention", A.Size(2, 1, 1, 1), wrong)
