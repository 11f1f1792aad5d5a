"""Certified spectral norms (proofs/spectral.py) against dense matrices built here, from the
definitions, independently of the module: convolutions by direct index loops over padded
images, pooling by explicit windows, singular values by NumPy's SVD.

Tolerances (named below, derived here):

* ``FLOAT_SVD_FACTOR``: LAPACK's SVD is backward stable -- the computed singular values are
  exact for ``A + E`` with ``||E||_2 <= p(m, n) u ||A||_2`` -- and by Weyl's inequality
  ``|sigma_float - sigma| <= ||E||_2``. We take ``p(m, n) = 8 max(m, n)`` (LAPACK's usual
  modest polynomial), so a certified ``[lo, hi]`` must meet
  ``[s - tol, s + tol]`` with ``tol = 8 max(m, n) u s``.
* ``MAX_RELATIVE_WIDTH = 1e-25``: the task's requirement on ``(hi - lo) / hi`` (200-bit
  enclosures reach about 1e-58).
* ``WITNESS_RTOL = 1e-8``: a float witness ``v`` with angle ``theta`` to the top singular
  subspace has ``|A v| / |v| >= sigma (1 - sin^2 theta)`` up to the spread ``g`` of the
  nearly tied top singular values it mixes, and ``sin theta <~ c u / g`` (Davis--Kahan,
  ``c`` a few times the dimension): the loss is at most ``min(g, (c u / g)^2) <=
  (c u)^(2/3) < 1e-9`` for ``c <= 1e3``.
"""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp
from flint import arb_mat, fmpz_mat
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kernels.maxpool import lipschitz2d as maxpool_lipschitz2d
from proofs.arb import working_precision
from proofs.spectral import (
    EIG_LIMIT,
    Gram,
    avgpool2d_lipschitz,
    avgpool_lipschitz_limit,
    congruence_top,
    conv_circular_lipschitz,
    conv_zero_padding_bounds,
    dense_conv_matrix,
    eig_top,
    exact_lambda_max,
    float_eigh,
    maxpool2d_lipschitz,
    sigma_max,
)

FLOAT_SVD_FACTOR = 8
MAX_RELATIVE_WIDTH = 1e-25
WITNESS_RTOL = 1e-8
UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2


# --------------------------------------------------------------------------------------
# Independent references
# --------------------------------------------------------------------------------------


def top_singular_value(matrix: np.ndarray) -> float:
    return float(np.linalg.svd(matrix, compute_uv=False)[0])


def assert_encloses(what: str, bounds, value: float, size: int) -> None:
    """``bounds`` meets ``value`` within the SVD's float error, and is narrow."""
    tol = FLOAT_SVD_FACTOR * size * UNIT_ROUNDOFF * abs(value)
    lo, hi = float(bounds.lo), float(bounds.hi)
    assert lo - tol <= value <= hi + tol, (
        f"{what}: certified [{lo!r}, {hi!r}] misses the float SVD value {value!r} "
        f"(allowed float error {tol:.3g})"
    )
    assert bounds.relative_width < MAX_RELATIVE_WIDTH, (
        f"{what}: relative width {bounds.relative_width:.3g} >= {MAX_RELATIVE_WIDTH}"
    )


def assert_exact_value(text: str, bounds) -> None:
    """The SymPy closed form ``text``, evaluated to 100 digits, lies in ``[lo, hi]`` up to
    its own evaluation error (10^-95 relative; the enclosures are ~10^-58 wide)."""
    value = Fraction(str(sp.N(sp.sympify(text), 100)))
    slack = abs(value) * Fraction(1, 10**95)
    assert bounds.lo - slack <= value <= bounds.hi + slack, (
        f"{text} = {float(value)!r} outside [{float(bounds.lo)!r}, {float(bounds.hi)!r}]"
    )


def definition_conv(x: np.ndarray, weight: np.ndarray, stride, padding, mode: str) -> np.ndarray:
    """PyTorch's conv2d (cross-correlation) by loops: zeros/circular pad, or the torus."""
    (sh, sw), (ph, pw) = stride, padding
    o, c, kh, kw = weight.shape
    _, h, w = x.shape
    if mode == "periodic":
        oh, ow = h // sh, w // sw

        def pixel(ch: int, u: int, v: int) -> float:
            return x[ch, (u - ph) % h, (v - pw) % w]
    else:
        padded = np.pad(
            x, ((0, 0), (ph, ph), (pw, pw)), "wrap" if mode == "circular" else "constant"
        )
        oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1

        def pixel(ch: int, u: int, v: int) -> float:
            return padded[ch, u, v]

    y = np.zeros((o, oh, ow))
    for oo, i, j in itertools.product(range(o), range(oh), range(ow)):
        y[oo, i, j] = sum(
            weight[oo, ch, a, b] * pixel(ch, sh * i + a, sw * j + b)
            for ch, a, b in itertools.product(range(c), range(kh), range(kw))
        )
    return y


def definition_matrix(weight: np.ndarray, hw, stride, padding, mode: str) -> np.ndarray:
    """The conv's matrix, column j = the image of the j-th basis image."""
    c = weight.shape[1]
    size = c * hw[0] * hw[1]
    columns = []
    for j in range(size):
        basis = np.zeros(size)
        basis[j] = 1.0
        columns.append(
            definition_conv(basis.reshape(c, *hw), weight, stride, padding, mode).ravel()
        )
    return np.array(columns).T


def definition_avgpool(hw, kernel, stride, padding) -> np.ndarray:
    """AvgPool2d (count_include_pad, floor mode) as a matrix, window by window."""
    (h, w), (kh, kw), (sh, sw), (ph, pw) = hw, kernel, stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    matrix = np.zeros((oh * ow, h * w))
    for i, j in itertools.product(range(oh), range(ow)):
        for r, q in itertools.product(range(h), range(w)):
            if sh * i - ph <= r < sh * i - ph + kh and sw * j - pw <= q < sw * j - pw + kw:
                matrix[i * ow + j, r * w + q] = 1.0 / (kh * kw)
    return matrix


def window_coverage(n: int, k: int, s: int, p: int) -> np.ndarray:
    """How many windows of one axis contain each pixel, counted window by window."""
    counts = np.zeros(n, dtype=int)
    for i in range((n + 2 * p - k) // s + 1):
        for r in range(s * i - p, s * i - p + k):
            if 0 <= r < n:
                counts[r] += 1
    return counts


def weights(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# --------------------------------------------------------------------------------------
# sigma_max
# --------------------------------------------------------------------------------------


@settings(max_examples=25)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**32 - 1))
@example(1, 1, 0)
@example(12, 1, 1)
@example(1, 12, 2)
def test_sigma_max_random(rows: int, cols: int, seed: int) -> None:
    matrix = weights(seed, (rows, cols))
    before = matrix.copy()
    result = sigma_max(matrix)
    np.testing.assert_array_equal(matrix, before)  # never writes into its input
    value = top_singular_value(matrix)
    assert_encloses(f"sigma_max of a {rows}x{cols} matrix", result, value, max(rows, cols))
    assert result.method == "eig"
    assert result.witness_lo >= Fraction(value) * Fraction(1 - WITNESS_RTOL), (
        f"witness bound {float(result.witness_lo)!r} far below {value!r}"
    )
    ratio = np.linalg.norm(matrix @ result.witness) / np.linalg.norm(result.witness)
    assert abs(ratio - float(result.witness_lo)) <= 1e-12 * value


def test_sigma_max_closed_forms() -> None:
    golden = sigma_max([[1, 1], [0, 1]])
    with mpmath.workdps(60):
        phi = (1 + mpmath.sqrt(5)) / 2
        assert mpmath.mpf(golden.lo.numerator) / golden.lo.denominator <= phi
        assert phi <= mpmath.mpf(golden.hi.numerator) / golden.hi.denominator
    entries = [[Fraction(1, 3), Fraction(2, 7)], [1, Fraction(-1, 2)]]
    exact = sp.Matrix(entries).T * sp.Matrix(entries)
    value = sp.sqrt(max(exact.eigenvals(), key=lambda e: sp.N(e, 50)))
    result = sigma_max(entries)
    assert result.lo <= sp.Rational(str(sp.N(value, 60))) + sp.Rational(1, 10**55)
    assert sp.Rational(str(sp.N(value, 60))) - sp.Rational(1, 10**55) <= result.hi
    assert result.relative_width < MAX_RELATIVE_WIDTH


def test_sigma_max_exact_inputs() -> None:
    assert sigma_max(np.zeros((3, 4))).hi == 0
    integers = sigma_max(np.array([[3, 0], [0, 4]]))
    assert integers.lo <= 4 <= integers.hi
    single = sigma_max(np.array([[0.1, 0.2], [0.3, 0.4]], dtype=np.float32))
    exact = np.array([[0.1, 0.2], [0.3, 0.4]], dtype=np.float32).astype(np.float64)
    assert_encloses("float32 entries", single, top_singular_value(exact), 2)


@pytest.mark.parametrize("shape", [(100, 90), (70, 110)])
def test_sigma_max_congruence_certificate(shape) -> None:
    matrix = weights(7, shape)
    result = sigma_max(matrix)
    assert min(shape) > EIG_LIMIT and result.method == "congruence"
    assert_encloses(f"sigma_max {shape}", result, top_singular_value(matrix), max(shape))


def test_sigma_max_clustered_top() -> None:
    """A doubled top singular value: the certificate treats the cluster with acb eig."""
    block = weights(3, (40, 40))
    matrix = np.block([[block, np.zeros((40, 40))], [np.zeros((40, 40)), block]])
    result = sigma_max(matrix)
    assert result.method == "congruence"
    assert_encloses("block-diagonal", result, top_singular_value(block), 80)
    small = weights(4, (9, 6))
    by_eig, by_congruence = sigma_max(small, method="eig"), sigma_max(small, method="congruence")
    assert by_congruence.method == "congruence"
    assert by_eig.lo <= by_congruence.hi and by_congruence.lo <= by_eig.hi
    assert by_congruence.relative_width < MAX_RELATIVE_WIDTH


@pytest.mark.parametrize("noise", [0.0, 1e-9, 1e-6])
def test_congruence_certificate_with_poor_eigenvectors(noise: float) -> None:
    """The certificate's upper bound must stay above lambda_max however rough the float
    eigenvectors are (the Ritz value alone falls below it by ~noise^2)."""
    matrix = weights(8, (30, 20))
    gram = Gram(arb_mat(matrix.tolist()), matrix)
    values, vectors = float_eigh([gram])[0]
    rough = vectors + noise * np.random.default_rng(9).standard_normal(vectors.shape)
    with working_precision(200):
        lo, hi = congruence_top(gram, 200, (values, rough))
        exact_lo, exact_hi = eig_top(gram.ball(), 200)
    assert lo <= exact_hi and exact_lo <= hi, (  # both enclose lambda_max: they overlap
        f"noise {noise}: [{float(lo)!r}, {float(hi)!r}] misses eig's [{float(exact_lo)!r}, ...]"
    )
    assert float((hi - lo) / hi) < max(1e-50, 10 * noise**2)


def test_sigma_max_proof_and_a_wrong_bound() -> None:
    result = sigma_max(weights(5, (6, 4)))
    assert result.proof().verify().ok
    below_both = min(result.certificate_lo, result.witness_lo) * (1 - Fraction(1, 10**30))
    too_low = dataclasses.replace(result, hi=below_both)
    outcome = too_low.proof().verify()
    assert not outcome.ok and [o.index for o in outcome.failed] == [1, 2]
    boastful = dataclasses.replace(result, witness_lo=result.hi * (1 + Fraction(1, 10**40)))
    assert [o.index for o in boastful.proof().verify().failed] == [2]


@pytest.mark.parametrize(
    ("matrix", "error"),
    [
        (np.array([[np.nan, 1.0]]), ValueError),
        (np.array([[np.inf]]), ValueError),
        (np.array([[1 + 1j]]), TypeError),
        (np.zeros((0, 3)), ValueError),
        (np.zeros((2, 2, 2)), ValueError),
        ([[True, 1]], TypeError),
        ([[1, 2], [3]], ValueError),
        ([["1"]], TypeError),
    ],
)
def test_sigma_max_bad_input(matrix, error) -> None:
    with pytest.raises(error, match="W"):
        sigma_max(matrix)


def test_sigma_max_bad_method() -> None:
    with pytest.raises(ValueError, match="method"):
        sigma_max(np.eye(2), method="power")


# --------------------------------------------------------------------------------------
# Convolution matrices
# --------------------------------------------------------------------------------------

conv_shapes = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))


@settings(max_examples=20)
@given(
    conv_shapes,
    st.tuples(st.integers(3, 6), st.integers(3, 6)),
    st.tuples(st.integers(1, 2), st.integers(1, 2)),
    st.tuples(st.integers(0, 1), st.integers(0, 1)),
    st.sampled_from(["zeros", "circular"]),
    st.integers(0, 2**32 - 1),
)
@example((2, 3, 3, 2), (5, 4), (2, 1), (1, 0), "circular", 0)
def test_dense_conv_matrix_is_the_definition(shape, hw, stride, padding, mode, seed) -> None:
    weight = weights(seed, shape)
    dense = dense_conv_matrix(weight, (shape[1], *hw), stride, padding, mode)
    expected = definition_matrix(weight, hw, stride, padding, mode)
    np.testing.assert_allclose(
        dense, expected, rtol=0, atol=0, err_msg=f"{mode} {stride} {padding}"
    )


@pytest.mark.parametrize(
    ("kernel", "stride", "padding"),
    [
        ((3, 3), (1, 1), (1, 1)),
        ((2, 3), (2, 1), (0, 1)),
        ((4, 4), (2, 2), (1, 1)),
        ((3, 1), (2, 1), (1, 0)),
    ],
)
def test_pytorch_circular_is_the_torus_operator(kernel, stride, padding) -> None:
    """K - s <= 2p <= K - 1: PyTorch's circular output has n/s rows, the torus operator."""
    weight = weights(11, (2, 2, *kernel))
    hw = (6, 4)
    circular = definition_matrix(weight, hw, stride, padding, "circular")
    torus = dense_conv_matrix(weight, (2, *hw), stride, padding, "periodic")
    np.testing.assert_array_equal(circular, torus)


# --------------------------------------------------------------------------------------
# Circular convolution
# --------------------------------------------------------------------------------------


@settings(max_examples=15)
@given(
    conv_shapes,
    st.sampled_from([(1, 1), (2, 2), (2, 1), (1, 2), (3, 1), (1, 3)]),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.integers(0, 2**32 - 1),
)
@example((2, 3, 3, 2), (1, 1), (3, 2), (1, 0), 0)
@example((3, 2, 2, 3), (2, 1), (2, 3), (0, 1), 1)
@example((1, 1, 3, 3), (2, 2), (3, 3), (1, 1), 2)
@example((2, 1, 3, 2), (3, 1), (2, 2), (1, 0), 3)  # 2p not a multiple of s: offsets matter
def test_conv_circular_against_dense_svd(shape, stride, blocks, padding, seed) -> None:
    weight = weights(seed, shape)
    grid = (max(stride[0] * blocks[0], shape[2]), max(stride[1] * blocks[1], shape[3]))
    grid = (grid[0] + (-grid[0]) % stride[0], grid[1] + (-grid[1]) % stride[1])
    result = conv_circular_lipschitz(weight, grid, stride, padding)
    dense = definition_matrix(weight, grid, stride, padding, "periodic")
    value = top_singular_value(dense)
    what = f"circular conv {shape} on {grid}, stride {stride}"
    assert_encloses(what, result, value, max(dense.shape))
    image = definition_conv(result.witness, weight, stride, padding, "periodic")
    ratio = np.linalg.norm(image) / np.linalg.norm(result.witness)
    assert ratio >= value * (1 - WITNESS_RTOL), f"{what}: witness ratio {ratio!r} < {value!r}"
    assert abs(ratio - float(result.witness_lo)) <= 1e-12 * value
    assert len(result.frequencies) == len(
        {
            frozenset({f, ((-f[0]) % (grid[0] // stride[0]), (-f[1]) % (grid[1] // stride[1]))})
            for f in itertools.product(range(grid[0] // stride[0]), range(grid[1] // stride[1]))
        }
    )  # one per conjugate pair


def test_conv_circular_proof_steps() -> None:
    result = conv_circular_lipschitz(weights(21, (3, 2, 3, 2)), (4, 6), (2, 1), 1)
    assert result.proof().verify().ok
    wrong = dataclasses.replace(result, certificate_hi=result.frequency_lo * Fraction(99, 100))
    failed = [o.index for o in wrong.proof().verify().failed]
    assert failed == [2]


def test_all_ones_kernel_is_nine_not_three() -> None:
    """The paper's constant sigma_max(W_D^O) of the O x (C K K) weight matrix is 3 for the
    all-ones 3x3 kernel; the circular convolution's norm is 9 (frequency 0: the kernel's
    sum), so the printed constant is not a Lipschitz bound of the convolution."""
    weight = np.ones((1, 1, 3, 3))
    conv = conv_circular_lipschitz(weight, (8, 8), padding=1)
    assert conv.exact == "9" and conv.frequency == (0, 0)
    assert conv.lo == conv.hi == 9
    assert conv.proof().verify().ok
    printed = sigma_max(weight.reshape(1, -1))
    assert printed.lo <= 3 <= printed.hi and printed.relative_width < MAX_RELATIVE_WIDTH
    assert printed.hi < conv.lo
    zero = conv_zero_padding_bounds(weight, (8, 8), padding=1)
    assert zero.method == "dense" and printed.hi < zero.lo < zero.hi < conv.lo
    assert zero.proof().verify().ok
    assert_encloses(
        "all-ones, zero padding",
        zero,
        top_singular_value(definition_matrix(weight, (8, 8), (1, 1), (1, 1), "zeros")),
        64,
    )


def test_exact_forms_at_quarter_periods_and_ties() -> None:
    sobel = np.array([[[[1, 0, -1], [2, 0, -2], [1, 0, -1]]]], dtype=float)
    result = conv_circular_lipschitz(sobel, (8, 8), padding=1)
    assert result.exact == "8" and result.frequency[1] == 2 and result.lo == result.hi == 8
    assert result.proof().verify().ok
    # non-overlapping 2x2 windows at stride 2: every output frequency ties
    weight = np.arange(16, dtype=float).reshape(2, 2, 2, 2) - 7
    tied = conv_circular_lipschitz(weight, (4, 4), 2)
    assert tied.exact is not None
    assert_exact_value(tied.exact, tied)
    value = top_singular_value(definition_matrix(weight, (4, 4), (2, 2), (0, 0), "periodic"))
    assert_encloses("tied frequencies", tied, value, 16)
    assert tied.proof().verify().ok
    assert conv_circular_lipschitz(weights(1, (2, 2, 3, 3)), (4, 4)).exact is None  # floats


def test_exact_forms_with_complex_blocks() -> None:
    """At k = 1 on a 4-periodic axis the phases are 1, i, -1: What = 1 + 2i + 1."""
    row = np.array([[[[1.0, 2.0, -1.0]]]])
    result = conv_circular_lipschitz(row, (1, 4))
    assert result.exact == "2*sqrt(2)" and result.frequency == (0, 1)
    assert result.proof().verify().ok
    channels = np.array(
        [[[[1.0, 2.0, -1.0]], [[0.5, 0.0, 1.0]]], [[[0.0, 1.0, 1.0]], [[2.0, -1.0, 0.0]]]]
    )
    mixed = conv_circular_lipschitz(channels, (2, 4))
    assert mixed.exact is not None, "ties between k1 = 0 and 1 (K_h = 1) are resolved exactly"
    value = top_singular_value(definition_matrix(channels, (2, 4), (1, 1), (0, 0), "periodic"))
    assert_encloses("complex Gaussian block", mixed, value, 16)
    assert_exact_value(mixed.exact, mixed)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: conv_circular_lipschitz(np.ones((1, 1, 3, 3)), 7, stride=2), ValueError, "stride"),
        (lambda: conv_circular_lipschitz(np.ones((1, 1, 3)), 4), ValueError, "W"),
        (lambda: conv_circular_lipschitz(np.ones((1, 1, 3, 3)), 4, stride=0), ValueError, "stride"),
        (
            lambda: conv_circular_lipschitz(np.ones((1, 1, 3, 3)), 4, method="x"),
            ValueError,
            "method",
        ),
        (lambda: conv_circular_lipschitz(np.ones((1, 1, 3, 3)), 4.0), TypeError, "grid"),
        (lambda: dense_conv_matrix(np.ones((1, 2, 3, 3)), (3, 5, 5)), ValueError, "channels"),
        (
            lambda: dense_conv_matrix(np.ones((1, 1, 3, 3)), (5, 5), padding_mode="reflect"),
            ValueError,
            "padding_mode",
        ),
        (
            lambda: dense_conv_matrix(
                np.ones((1, 1, 3, 3)), (2, 2), padding=3, padding_mode="circular"
            ),
            ValueError,
            "circular",
        ),
        (lambda: conv_zero_padding_bounds(np.ones((1, 1, 5, 5)), (3, 3)), ValueError, "kernel"),
    ],
)
def test_conv_bad_input(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------------------
# Zero padding
# --------------------------------------------------------------------------------------


@settings(max_examples=10)
@given(
    conv_shapes,
    st.tuples(st.integers(3, 6), st.integers(3, 6)),
    st.tuples(st.integers(1, 2), st.integers(1, 2)),
    st.tuples(st.integers(0, 1), st.integers(0, 1)),
    st.integers(0, 2**32 - 1),
)
@example((2, 3, 3, 2), (5, 4), (2, 1), (1, 0), 0)
def test_conv_zero_padding_dense(shape, hw, stride, padding, seed) -> None:
    weight = weights(seed, shape)
    result = conv_zero_padding_bounds(weight, hw, stride, padding)
    assert result.method == "dense"
    dense = definition_matrix(weight, hw, stride, padding, "zeros")
    assert_encloses(
        f"zero padding {shape} on {hw}", result, top_singular_value(dense), max(dense.shape)
    )


@pytest.mark.parametrize(
    ("shape", "hw", "stride", "padding"),
    [((3, 2, 3, 3), (6, 6), (1, 1), (1, 1)), ((2, 3, 3, 2), (7, 6), (2, 1), (0, 1))],
)
def test_conv_zero_padding_by_circular_embedding(shape, hw, stride, padding) -> None:
    weight = weights(31, shape)
    result = conv_zero_padding_bounds(weight, hw, stride, padding, dense_limit=0)
    assert result.method == "circular embedding"
    assert all(
        g % s == 0 and g >= n + 2 * p
        for g, s, n, p in zip(result.grid, stride, hw, padding, strict=True)
    )
    value = top_singular_value(definition_matrix(weight, hw, stride, padding, "zeros"))
    tol = FLOAT_SVD_FACTOR * 64 * UNIT_ROUNDOFF * value
    assert float(result.lo) - tol <= value <= float(result.hi) + tol
    assert float(result.lo) >= value * (1 - WITNESS_RTOL), "the Lanczos witness is not converged"
    torus = top_singular_value(definition_matrix(weight, result.grid, stride, (0, 0), "periodic"))
    assert abs(float(result.hi) - torus) <= tol + 1e-12 * torus  # hi is the torus norm
    assert result.proof().verify().ok


# --------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------

POOL_CASES = [
    ((4, 4), 2, None, 0),
    ((3, 3), 2, 1, 0),
    ((6, 6), (2, 3), (2, 3), 0),
    ((7, 5), (3, 2), (2, 1), (1, 1)),
    ((9, 9), 3, 2, 1),
    ((12, 10), (3, 4), (1, 2), (1, 2)),
    ((5, 8), (1, 3), (1, 3), 0),
]


def _pair(value):
    return value if isinstance(value, tuple) else (value, value)


@pytest.mark.parametrize(("hw", "kernel", "stride", "padding"), POOL_CASES)
def test_avgpool_against_dense_svd(hw, kernel, stride, padding) -> None:
    result = avgpool2d_lipschitz(hw, kernel, stride, padding)
    kernel, padding = _pair(kernel), _pair(padding)
    stride = kernel if stride is None else _pair(stride)
    dense = definition_avgpool(hw, kernel, stride, padding)
    assert_encloses(
        f"avgpool {hw} {kernel} {stride} {padding}",
        result,
        top_singular_value(dense),
        max(dense.shape),
    )
    assert_exact_value(result.exact, result)
    assert result.proof().verify().ok


def test_avgpool_closed_forms_and_limits() -> None:
    assert avgpool2d_lipschitz((4, 4), 2).exact == "1/2"  # non-overlapping: 1/sqrt(k_h k_w)
    assert avgpool2d_lipschitz((8, 8), 4).exact == "1/4"
    assert avgpool2d_lipschitz((6, 6), (2, 3)).exact == "sqrt(6)/6"
    assert avgpool2d_lipschitz((3, 3), 2, 1).exact == "3/4"  # S S^T = [[2, 1], [1, 2]]
    assert avgpool_lipschitz_limit(3, 1) == 1 and avgpool_lipschitz_limit(2) == sp.Rational(1, 2)
    assert avgpool_lipschitz_limit(3, 2) == sp.Rational(5, 9)
    growing = [float(avgpool2d_lipschitz((n, n), 3, 1).lo) for n in (4, 8, 16, 32)]
    assert growing == sorted(growing) and 0.99 < growing[-1] < 1  # -> 1 from below
    large = avgpool2d_lipschitz((40, 40), 3, 2, 1)
    assert float(large.hi) < float(avgpool_lipschitz_limit(3, 2))


def test_avgpool_wrong_enclosure_fails() -> None:
    result = avgpool2d_lipschitz((7, 5), (3, 2), (2, 1), (1, 1))
    shifted = dataclasses.replace(result, hi=result.lo)  # the true value is irrational
    assert [o.index for o in shifted.proof().verify().failed] == [4]
    other = dataclasses.replace(result, exact="sqrt(3)/6")
    assert [o.index for o in other.proof().verify().failed] == [4]


@pytest.mark.parametrize(
    ("hw", "kernel", "stride", "padding"),
    [
        ((8, 8), 3, 1, 0),
        ((8, 8), 3, 2, 1),
        ((7, 9), (2, 3), (1, 2), (1, 1)),
        ((5, 5), 2, None, 0),
        ((9, 4), (4, 2), (1, 1), (2, 0)),
    ],
)
def test_maxpool(hw, kernel, stride, padding) -> None:
    result = maxpool2d_lipschitz(hw, kernel, stride, padding)
    kernel, padding = _pair(kernel), _pair(padding)
    stride = kernel if stride is None else _pair(stride)
    m = 1
    for n, k, s, p in zip(hw, kernel, stride, padding, strict=True):
        m *= int(window_coverage(n, k, s, p).max())
    assert sp.sympify(result.exact) == sp.sqrt(m)
    assert_exact_value(result.exact, result)
    assert result.proof().verify().ok
    # evidence: random pairs never beat sqrt(m) (max pooling from the definition)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.standard_normal(hw), rng.standard_normal(hw)
        gap = np.linalg.norm(
            _maxpool(x, kernel, stride, padding) - _maxpool(y, kernel, stride, padding)
        )
        assert gap <= np.sqrt(m) * np.linalg.norm(x - y) * (1 + 1e-12)


def _maxpool(x, kernel, stride, padding):
    padded = np.pad(x, ((padding[0],) * 2, (padding[1],) * 2), constant_values=-np.inf)
    oh = (x.shape[0] + 2 * padding[0] - kernel[0]) // stride[0] + 1
    ow = (x.shape[1] + 2 * padding[1] - kernel[1]) // stride[1] + 1
    return np.array(
        [
            [
                padded[
                    stride[0] * i : stride[0] * i + kernel[0],
                    stride[1] * j : stride[1] * j + kernel[1],
                ].max()
                for j in range(ow)
            ]
            for i in range(oh)
        ]
    )


#: One axis' geometries (size, kernel, stride, padding), valid and invalid (padding above
#: half the kernel, a kernel larger than the padded axis); the two axes of a grid case take
#: two different ones, so every geometry is met on both axes.
AXIS_GEOMETRIES = list(itertools.product((1, 2, 3, 5, 8), (1, 2, 3, 4), (1, 2, 3, 4), (0, 1, 2)))
MAXPOOL_GRID = [
    (AXIS_GEOMETRIES[i], AXIS_GEOMETRIES[(a * i + b) % len(AXIS_GEOMETRIES)])
    for a, b in ((7, 3), (11, 5), (1, 0))
    for i in range(len(AXIS_GEOMETRIES))
]


def _outcome(call):
    """``("value", result)`` or ``("error", exception type)``."""
    try:
        return "value", call()
    except (ValueError, TypeError) as error:
        return "error", type(error)


def test_maxpool_constant_of_the_kernel_agrees_with_the_proof() -> None:
    """kernels.maxpool.lipschitz2d (a difference array of window starts and ends) and
    proofs.spectral.maxpool2d_lipschitz (the window incidence matrix) compute the same
    sqrt(m) by two algorithms; both must agree with the window-by-window count here, and
    refuse the same geometries with the same error type."""
    checked = refused = 0
    for (h, kh, sh, ph), (w, kw, sw, pw) in MAXPOOL_GRID:
        args = ((h, w), (kh, kw), (sh, sw), (ph, pw))
        kernel_kind, kernel_value = _outcome(lambda args=args: maxpool_lipschitz2d(*args))
        proof_kind, proof_value = _outcome(lambda args=args: maxpool2d_lipschitz(*args))
        assert kernel_kind == proof_kind, f"{args}: kernel {kernel_value}, proof {proof_value}"
        if kernel_kind == "error":
            assert kernel_value is proof_value, f"{args}: {kernel_value} != {proof_value}"
            refused += 1
            continue
        m = int(window_coverage(h, kh, sh, ph).max() * window_coverage(w, kw, sw, pw).max())
        assert sp.sympify(proof_value.exact) == sp.sqrt(m), f"{args}: proof {proof_value.exact}"
        # IEEE sqrt is correctly rounded: the kernel's float is sqrt(m) rounded once
        assert kernel_value == np.sqrt(m), f"{args}: kernel {kernel_value!r}, sqrt({m})"
        checked += 1
    assert checked and refused, f"{checked} valid and {refused} refused geometries"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: avgpool2d_lipschitz((4, 4), 3, padding=2), "padding"),
        (lambda: maxpool2d_lipschitz((2, 2), 3), "kernel"),
        (lambda: avgpool2d_lipschitz((4, 4), 0), "kernel_size"),
    ],
)
def test_pool_bad_input(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_exact_lambda_max() -> None:
    cubic = exact_lambda_max(fmpz_mat([[2, 1, 0], [1, 2, 1], [0, 1, 2]]))  # 2 + sqrt(2)
    assert sp.simplify(sp.sympify(cubic.expression) - (2 + sp.sqrt(2))) == 0
    assert cubic.certify()
    with pytest.raises(ValueError, match="symmetric"):
        exact_lambda_max(fmpz_mat([[1, 2], [0, 1]]))
