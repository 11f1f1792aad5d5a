"""Identities of sums over 1..D, checked for a symbolic D."""

from __future__ import annotations

import pytest
import sympy as sp

from derive.definitions.norms import paper_forward_entry, row_norm, symbolic_row_norm_checks
from proofs import norms as pn
from proofs.core import INDICES, SIZE, normal_form, sum_identity, total

i, j = INDICES
a, b = sp.IndexedBase("a", real=True), sp.IndexedBase("b", real=True)


def test_lagrange_identity_holds_for_every_size():
    lhs = total(a[i] ** 2, i) * total(b[j] ** 2, j) - total(a[i] * b[i], i) ** 2
    assert sum_identity(lhs, total(total((a[i] * b[j] - a[j] * b[i]) ** 2, j), i) / 2)()


def test_false_identities_are_not_proven():
    """Off by a factor, by a term, or true only at D = 1: not proven."""
    square = total(a[i], i) ** 2
    assert not sum_identity(square, 2 * total(total(a[i] * a[j], j), i))()
    assert not sum_identity(square, total(a[i] ** 2, i))()  # equal at D = 1 only
    assert not sum_identity(total(a[i] + 1, i), total(a[i], i) + 1)()


def test_constants_and_renaming():
    assert normal_form(total(3, i)) == 3 * SIZE
    assert normal_form(total(a[i] ** 2, i) - total(a[j] ** 2, j)) == 0
    assert sum_identity(total(2 * a[i] * b[j], i), 2 * b[j] * total(a[j], j))()


def test_nested_sums_that_would_capture_an_index_are_refused():
    inner = sp.Sum(sp.exp(a[i] * b[j]), (j, 1, SIZE))
    with pytest.raises(ValueError, match="depends on it"):
        normal_form(sp.Sum(inner, (i, 1, SIZE)))
    with pytest.raises(ValueError, match=r"1\.\.N for a symbolic size"):
        normal_form(sp.Sum(a[i], (i, 0, SIZE)))
    with pytest.raises(ValueError, match=r"1\.\.N for a symbolic size"):  # not a size
        normal_form(sp.Sum(a[i], (i, 1, sp.Symbol("t", real=True))))


def test_sums_over_two_sizes_stay_apart():
    """Sums over 1..O and over 1..D are different sums: the same terms over the other
    size are not identified (true only where O = D)."""
    outputs = sp.Symbol("O", integer=True, positive=True)
    assert sum_identity(total(a[i], i, outputs), total(a[j], j, outputs))()
    assert not sum_identity(total(a[i], i, outputs), total(a[i], i))()
    assert normal_form(total(1, i, outputs)) == outputs


def test_printed_norm_jacobians_hold_for_a_symbolic_size():
    """Table 2's LayerNorm (and Eq. 19), RMSNorm and CenterNorm Jacobians, entry (a, b) in
    the paper's denominator layout, for every D; the numerator layout (the transpose) is
    not the printed one where gamma enters, and a wrong factor is not proven."""
    for key in ("layernorm", "layernorm_z", "rmsnorm", "centernorm"):
        assert pn.symbolic_jacobian_matches(key), key
    a, b = sp.symbols("a b", integer=True, positive=True)
    printed = pn.printed_jacobian_entry("rmsnorm")
    transposed = printed.xreplace({a: b, b: a})
    derived = sp.diff(paper_forward_entry("rmsnorm", b), sp.IndexedBase("x", real=True)[a])
    assert sum_identity(printed, derived)()
    assert not sum_identity(transposed, derived)()
    assert not sum_identity(2 * printed, derived)()


def test_kernel_closed_forms_hold_for_a_symbolic_size_and_altered_ones_do_not():
    """The row norms' Jacobian, VJP and dgamma closed forms equal sympy.diff for every D,
    and so do the projector identities of the Lipschitz proof; the transposed Jacobian (gamma
    on the wrong index) and a VJP off by a factor are not proven."""
    for key in ("layernorm", "rmsnorm", "centernorm"):
        assert all(symbolic_row_norm_checks(key).values()), key
    for key in ("layernorm", "rmsnorm"):
        assert pn.symbolic_spectral_check(key), key
    a, b = sp.symbols("a b", integer=True, positive=True)
    x, g = sp.IndexedBase("x", real=True), sp.IndexedBase("g", real=True)
    forms = row_norm("layernorm").entry_forms(a, b)
    dx = sp.Sum(sp.diff(forms["y_b"], x[a]) * g[b], (b, 1, SIZE))
    assert sum_identity(forms["vjp"], dx)()
    assert not sum_identity(2 * forms["vjp"], dx)()
    assert sum_identity(forms["jacobian"], sp.diff(forms["y_a"], x[b]))()
    assert not sum_identity(forms["jacobian"], sp.diff(forms["y_b"], x[a]))()


def test_the_lipschitz_bounds_are_attained_for_every_size():
    """At a constant row LayerNorm's Jacobian is diag(gamma) P / sqrt(eps), and at x = 0
    RMSNorm's diag(gamma) / sqrt(eps), for every D; the Gram identity of diag(gamma) P too.
    The uncentered matrix is not LayerNorm's."""
    assert pn.symbolic_attained_check("layernorm") and pn.symbolic_attained_check("rmsnorm")
    assert pn.symbolic_gram_identity()
    a, b = sp.symbols("a b", integer=True, positive=True)
    x, gamma = sp.IndexedBase("x", real=True), sp.IndexedBase("gamma", real=True)
    forms = row_norm("layernorm").entry_forms(a, b)
    at_constant = sp.diff(forms["y_a"], x[b]).replace(
        lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: sp.Symbol("c", real=True)
    )
    wrong = gamma[a] * sp.KroneckerDelta(a, b) / sp.sqrt(pn.eps)
    assert not sum_identity(at_constant, wrong)()


def test_deltas_of_several_free_indices_are_decided_over_every_coincidence():
    """delta_ab delta_bc = delta_ac delta_ab for all a, b, c; delta_ab = delta_ac is false
    (a = b != c); with b and c declared distinct, delta_ab delta_ac = 0 holds."""
    a, b, c = sp.symbols("a b c", integer=True, positive=True)
    K = sp.KroneckerDelta
    assert sum_identity(K(a, b) * K(b, c), K(a, c) * K(a, b))()
    assert not sum_identity(K(a, b), K(a, c))()
    assert not sum_identity(K(a, b) * K(a, c), 0)()
    assert sum_identity(K(a, b) * K(a, c), 0, distinct=[(b, c)])()


def test_renaming_cannot_capture_a_free_index():
    """sum_l exp(x_l y_k), k a free entry index named like the renamed bound index, is not
    sum_l exp(x_l y_l): renaming l must not turn y_k into y_l."""
    k, l = sp.symbols("k l", integer=True, positive=True)  # noqa: E741
    x, y = sp.IndexedBase("x", real=True), sp.IndexedBase("y", real=True)
    free = total(sp.exp(x[l] * y[k]), l)
    assert sum_identity(free, total(sp.exp(x[k] * y[k]).xreplace({x[k]: x[l]}), l))()
    assert not sum_identity(free, total(sp.exp(x[l] * y[l]), l))()


def test_projector_eigenvector_and_weightnorm_rows_for_a_symbolic_d():
    """P^2 = P, the repeated-max eigenvector of diag(gamma^2) - gamma gamma^T/D and WeightNorm's
    row identities hold for a symbolic D; the same statements with the right-hand side
    doubled do not (the checks can fail)."""
    assert pn.symbolic_projector_identity()
    assert pn.symbolic_repeated_max_eigenvector()
    assert not pn.symbolic_repeated_max_eigenvector(factor=2)
    assert pn.symbolic_weightnorm_rows() == {"jacobian": True, "frobenius": True}
    assert pn.symbolic_weightnorm_rows(factor=2) == {"jacobian": False, "frobenius": False}
    a, b, l = sp.symbols("a b l", integer=True, positive=True)  # noqa: E741
    centering = pn.projector_entry
    # P^2 = 2P is false: the sums machinery behind the projector check can fail
    assert not sum_identity(total(centering(a, l) * centering(l, b), l), 2 * centering(a, b))()


@pytest.mark.parametrize("key", ["layernorm", "rmsnorm"])
def test_the_printed_row_norm_is_pytorchs_for_a_symbolic_d(key):
    """Table 2's forward with eps_p = D eps is PyTorch's for every D; with PyTorch's eps
    doubled it is not (so the check can fail)."""
    assert pn.symbolic_definition_matches(key)
    assert not pn.symbolic_definition_matches(key, eps_factor=2)
