"""The vectorized windowed-pooling loops give the bits of the general loops.

``maxpool.forward2d`` scans rows of windows side by side (2 x 2 windows at stride 2, and rows
without NaN, by one pass each), ``maxpool.vjp2d`` and ``avgpool.vjp2d`` have a loop for
windows that share no pixel and one for windows that overlap (float32 and mixed float16:
max pooling's argmaxes by selects, average pooling's pixels gathering their windows), and
``avgpool.forward2d`` sums rows of windows side by
side: float32 (and mixed float16) input in float64 with an exact check, any ``kh kw``,
float64 input, for ``kh kw`` a power of two, in double-double by the operations of
``kernels._dd.dd_add``. Each must return exactly what the general loops return
(the per-window scan :func:`kernels.maxpool._argmax`, the double-double scatter
``maxpool._vjp2d`` and ``avgpool._forward2d`` / ``avgpool._vjp2d`` on float64 planes, the
loops every other case still runs): same bits, NaN payloads and signed zeros included, for
varied shapes, strides, paddings, dtypes and layouts, and for values that make the float64
sums inexact or non-finite.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kernels.avgpool as avgpool
import kernels.maxpool as maxpool
from kernels._dd import dd_div
from kernels._pool import WindowGeometry, finish

DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64))
KINDS = ("spread", "ties", "non-finite", "zeros", "cancelling", "extreme")

#: (kernel, stride, padding) per axis pair; 2x2 stride 2 is the vectorized special case.
GEOMETRIES = [
    ((2, 2), (2, 2), (0, 0)),
    ((2, 2), (2, 2), (1, 1)),
    ((2, 2), (3, 3), (0, 1)),
    ((2, 2), (1, 2), (0, 0)),
    ((4, 2), (4, 2), (2, 0)),
    ((1, 4), (1, 4), (0, 2)),
    ((3, 3), (3, 3), (1, 0)),
    ((2, 4), (2, 5), (1, 1)),
    ((3, 2), (2, 2), (1, 1)),
    ((1, 1), (1, 1), (0, 0)),
    ((1, 2), (3, 2), (0, 1)),
    ((3, 3), (2, 2), (1, 1)),
    ((2, 3), (1, 1), (1, 1)),
]
#: (6, 70): rows of 35 2x2 windows, long enough for the vectorized body of the 2x2 loops.
PLANES = [(1, 1), (2, 2), (3, 5), (7, 4), (8, 8), (9, 13), (16, 33), (6, 70)]


def _values(rng: np.random.Generator, shape: tuple[int, ...], kind: str, dtype) -> np.ndarray:
    """Values of one of KINDS in ``dtype``: magnitudes over many binades (inexact float64
    sums of float32), integers (ties), NaN and infinities, signed zeros, pairs that
    cancel, or float64 magnitudes from the subnormals to 2^1024 (sums that overflow, planes
    the sums must scale, tiny sums; in float32 and float16 these become 0 and inf)."""
    magnitude = 10.0 ** rng.integers(-30, 30, size=shape)
    values = rng.standard_normal(shape) * magnitude
    if kind == "ties":
        values = np.round(rng.standard_normal(shape))
    elif kind == "non-finite":
        values.flat[rng.integers(0, values.size, 4)] = [np.nan, np.inf, -np.inf, np.nan]
    elif kind == "zeros":
        values = np.where(rng.random(shape) < 0.5, 0.0, -0.0)
    elif kind == "cancelling":
        values = np.round(rng.standard_normal(shape) * 4) * 2.0**20 + rng.random(shape)
    elif kind == "extreme":
        exponents = rng.choice([-1074, -1060, -1022, -960, -900, -500, 0, 500, 960, 1023], shape)
        values = rng.uniform(1, 2, shape) * 2.0 ** exponents.astype(float)
        values *= rng.choice((-1.0, 1.0), shape)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def _same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(
        actual.view(f"u{actual.itemsize}"), expected.view(f"u{expected.itemsize}")
    )


def _general_max_forward(x: np.ndarray, geometry: WindowGeometry) -> np.ndarray:
    planes = np.ascontiguousarray(x, dtype=np.float64).reshape(-1, *x.shape[-2:])
    g = geometry
    out = np.empty((planes.shape[0], g.out_height, g.out_width))
    for p, oh, ow in np.ndindex(out.shape):
        out[p, oh, ow] = maxpool._argmax(planes[p], oh * g.sh - g.ph, ow * g.sw - g.pw, g.kh, g.kw)[
            0
        ]
    return finish(out, x.dtype, (*x.shape[:-2], g.out_height, g.out_width))


def _general(module, name: str, x: np.ndarray, g: np.ndarray | None, geometry) -> np.ndarray:
    """The general loop ``name`` of ``module`` on float64 planes, non-strict."""
    planes = np.ascontiguousarray(x, dtype=np.float64).reshape(-1, *x.shape[-2:])
    geo = geometry
    if name == "forward":
        out = np.empty((planes.shape[0], geo.out_height, geo.out_width))
        module._forward2d(planes, *geo.loop_args, False, out)
        return finish(out, x.dtype, (*x.shape[:-2], geo.out_height, geo.out_width))
    gplanes = np.ascontiguousarray(g, dtype=np.float64).reshape(-1, geo.out_height, geo.out_width)
    dx = np.empty(planes.shape)
    if module is maxpool:
        maxpool._vjp2d(planes, gplanes, *geo.loop_args, False, dx)
    else:
        avgpool._vjp2d(gplanes, *geo.loop_args, False, dx)
    return finish(dx, x.dtype, x.shape)


CASES = list(itertools.product(GEOMETRIES, DTYPES))


@pytest.mark.parametrize(("geometry", "dtype"), CASES, ids=lambda v: str(v))
def test_vectorized_pooling_loops_give_the_general_loops_bits(geometry, dtype):
    kernel, stride, padding = geometry
    rng = np.random.default_rng(abs(hash((geometry, dtype.name))) % 2**32)
    for plane, kind in itertools.product(PLANES, KINDS):
        if plane[0] + 2 * padding[0] < kernel[0] or plane[1] + 2 * padding[1] < kernel[1]:
            continue
        geo = WindowGeometry.of(plane, kernel, stride, padding)
        shape = (2, 3, *plane)
        x = _values(rng, shape, kind, dtype)
        g = _values(rng, (2, 3, geo.out_height, geo.out_width), KINDS[rng.integers(5)], dtype)
        if kind == "ties":  # a non-contiguous x as well
            x = np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
        args = (kernel, stride, padding)
        _same_bits(maxpool.forward2d(x, *args), _general_max_forward(x, geo))
        _same_bits(maxpool.vjp2d(x, g, *args), _general(maxpool, "vjp", x, g, geo))
        _same_bits(avgpool.forward2d(x, *args), _general(avgpool, "forward", x, None, geo))
        _same_bits(avgpool.vjp2d(x, g, *args), _general(avgpool, "vjp", x, g, geo))


@pytest.mark.parametrize("count", [3, 6, 9, 25, 49, 4, 1])
def test_the_quotient_is_the_double_double_quotients_high_part(count):
    """``avgpool._quotient(s, count)`` is ``dd_div(s, 0, count, 0)[0]``, the general
    loop's mean of a window whose sum is exact, for the sums of float32 windows: 200,000
    float64 values of 53 significant bits from 2^-160 to 2^140 (where ``s * (1 / count)``
    differs from the quotient in its last bit: 13% to 51% of them for the counts here that
    are not powers of two), and 0. (Beyond 2^996 ``dd_div``'s products are not exact and its
    high part can differ.)"""
    rng = np.random.default_rng(count)
    sums = rng.uniform(1, 2, 200_000) * 2.0 ** rng.integers(-160, 140, 200_000)
    sums = np.concatenate([sums, -sums[:1000], [0.0, -0.0]])
    quotients = np.array([avgpool._quotient(s, count) for s in sums])
    expected = np.array([dd_div(s, 0.0, float(count), 0.0)[0] for s in sums])
    _same_bits(quotients, expected)
    if count & (count - 1):
        assert np.any(sums * (1.0 / count) != expected)  # the product would not do


def test_float32_window_sums_that_round_in_float64_take_the_double_double_loop():
    """The window ``[[1, 2^-24], [2^-53, 2^-53]]``: left to right in float64 both 2^-53 are
    lost to ties, and ``(1 + 2^-24) / 4`` is a float32 midpoint that rounds to even, 1/4;
    its exact sum ``1 + 2^-24 + 2^-52`` (the double-double sum) rounds up, to
    ``(1 + 2^-23) / 4``. The TwoSum check sends such a window to the double-double loop."""
    window = np.array([[1.0, 2.0**-24], [2.0**-53, 2.0**-53]], np.float32)
    x = np.tile(window, (2, 8))[None, None]  # interior and border windows alike
    expected = np.float32((1 + 2.0**-23) / 4)
    for padding in (0, 1):
        geo = WindowGeometry.of(x.shape[-2:], 2, 2, padding)
        y = avgpool.forward2d(x, 2, 2, padding)
        _same_bits(y, _general(avgpool, "forward", x, None, geo))
        if padding == 0:
            assert np.all(y == expected)


def test_float64_sums_whose_quotient_is_a_subnormal_tie_take_the_double_double_loop():
    """A 2 x 4 window holding ``a = 1.5 2^-1020 + 2^-1072`` and ``2^-1074``: the sum's high
    part is ``a`` (the low part is 2^-1074), and ``a / 8`` lies exactly halfway between two
    subnormals, a tie that goes to even; the low part lifts the exact mean above the tie,
    so the double-double quotient rounds up. The vectorized loop must not take ``a / 8``
    there (``avgpool._QUOTIENT_EXACT``)."""
    a = 1.5 * 2.0**-1020 + 2.0**-1072
    window = np.zeros((2, 4))
    window[0, :2] = a, 2.0**-1074
    x = np.tile(window, (1, 3))[None]
    geo = WindowGeometry.of(x.shape[-2:], (2, 4), (2, 4), (0, 0))
    y = avgpool.forward2d(x, (2, 4))
    _same_bits(y, _general(avgpool, "forward", x, None, geo))
    assert np.all(y == a / 8 + 2.0**-1074) and a / 8 != y[0, 0, 0]


@pytest.mark.parametrize("kernel", [(2, 2), (1, 2), (4, 4)])
def test_float16_average_pool_shares_of_every_half_round_once(kernel):
    """Disjoint windows of a power-of-two count hold each half ``g`` divided exactly in
    float32; ``dx`` must be that quotient rounded once to half, here from float64 by NumPy,
    for every half value of ``g`` (NaN compared as NaN). The share is the window's sum
    ``0 + g`` divided, as in the general loop, so ``g = -0`` gives +0."""
    kh, kw = kernel
    g = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(4, 128, 128)
    x = np.zeros((4, 128 * kh, 128 * kw), np.float16)
    dx = avgpool.vjp2d(x, g, kernel)
    with np.errstate(invalid="ignore"):
        share = ((0.0 + g.astype(np.float64)) / (kh * kw)).astype(np.float16)
    expected = np.repeat(np.repeat(share, kh, axis=1), kw, axis=2)
    nan = np.isnan(expected)
    assert np.isnan(dx[nan]).all()
    assert np.array_equal(dx[~nan].view(np.uint16), expected[~nan].view(np.uint16))
