"""``proofs/softmax_bounds.py``: the exp error bound the softmax kernel relies on."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np

from kernels import _vmath, softmax
from proofs import softmax_bounds, vmath


def test_the_kernels_exp_bound_is_proven():
    bound = softmax_bounds.exp_relative_error()
    assert bound < softmax_bounds._arb(Fraction(softmax._EXP_REL_ERROR))


def test_the_sharper_bound_is_sharper_and_below_the_crude_one():
    """Eq. 5.2 charges fewer roundings than gamma_2n everywhere: a sanity check of the
    bookkeeping (the sharper bound is smaller, and not absurdly so)."""
    sharp, crude = softmax_bounds.exp_relative_error(), vmath.exp_relative_error()
    assert sharp < crude
    assert sharp > crude / 64


def test_exp_bounded_is_within_the_sharper_bound_on_a_sweep():
    """Measured, not proven: exp_bounded's relative error on 20,000 arguments stays within
    _EXP_REL_ERROR (the proof is the test above; this catches a wrong constant's sign)."""
    rng = np.random.default_rng(5)
    args = np.concatenate([rng.uniform(-708, 0, 10_000), rng.uniform(-1, 1, 10_000)])
    with mpmath.workdps(40):
        for a in args:
            v, _ = _vmath.exp_bounded(float(a), 0.0)
            exact = mpmath.exp(mpmath.mpf(float(a)))
            assert abs(mpmath.mpf(v) / exact - 1) <= softmax._EXP_REL_ERROR
