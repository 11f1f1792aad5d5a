"""Identities of sums over 1..D, checked for a symbolic D."""

from __future__ import annotations

import pytest
import sympy as sp

from proofs.sums import INDICES, SIZE, normal_form, sum_identity, total

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
    with pytest.raises(ValueError, match=r"1\.\.D"):
        normal_form(sp.Sum(a[i], (i, 0, SIZE)))
