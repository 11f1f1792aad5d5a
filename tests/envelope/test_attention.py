"""FP16 envelopes of Conv2d and the attentions (``derive/envelope/attention.py``).

What is checked, per model:

* the witness (proof-level: exact arithmetic against the kernels): at ``g = inside * s``
  the float16 kernel (mixed mode) is finite everywhere and ``dx[index]`` lies within one
  ULP of the exact value ``inside * gain`` (an arb enclosure); at ``g = outside * s`` it is
  +inf at ``index``. The exact column gain is cross-checked against the mpmath references
  (``derive/reference/linear.py``, ``derive/reference/attention.py``, 50 digits), whose
  ``dx[index]`` at ``g = s`` must lie in the gain's enclosure (up to 1e-40 relative), so the
  exact ``dx`` at ``outside`` is >= 65520 by an independent computation;
* the max-norm gain (EVIDENCE, not proof -- the proofs are the derivations in the model
  docstrings): the column sums of the dense Jacobian never exceed the claimed gain on
  random and adversarially searched inputs and weights. Conv2d's Jacobian entries are
  single weights (dyadic here), so its float64 column sums are exact; the attention
  Jacobians are float64 kernel values, compared with a relative margin of 1e-9 (the
  float64 error of a column sum of N dv entries, each within ~1e-13 relative of the
  exact value for these well-conditioned inputs, is far below it; the bounds are rigorous
  rationals, so the margin only absorbs float64 rounding). Where the gain is attained
  (Conv2d, N = 1 attention), the witness reaches it exactly; where it is a bound not
  shown tight (L2, SCS), the witness must lie below it and above the X = 0 value;
* float32 kernels on the float32 witnesses;
* huge sizes (10^9 tokens, widths, channels or kernel sizes): the closed forms without
  loops (Conv2d's F(k, s) against its definition), and ``liptable envelope`` answering in a
  child process under a time and memory limit, the witness described but not built.
"""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb
from hypothesis import example, given, settings
from hypothesis import strategies as st

from derive.envelope.attention import (
    BB_TOLERANCE,
    conv_overlap_sum,
    dp_column,
    l2_constants,
    scs_column,
    scs_constant,
)
from derive.envelope.core import FORMATS, Format, overflowing_gradient, precision, safe_gradient
from derive.envelope.modules import Config, envelope, models
from derive.reference import attention as RA
from derive.reference import linear as RL
from proofs.spectral import conv_circular_lipschitz
from tests.helpers import cli_subprocess

F16, F32 = FORMATS["float16"], FORMATS["float32"]

#: Relative margin for float64 kernel column sums against a rigorous bound (see above).
FLOAT64_MARGIN = 1e-9
#: Relative agreement of the mpmath references (50 digits) with the arb enclosures.
REFERENCE_AGREEMENT = mpmath.mpf("1e-40")

#: Configurations whose witnesses are checked (the report's defaults first). SCS's eps is
#: dyadic (or the default 1e-6): with a decimal eps such as 0.01 the exact dx at the safe
#: size can lie within 1e-17 (relative) of 65520, closer than the kernels' float64
#: arithmetic resolves, and the float16 result may then round either way.
WITNESS_CASES = [
    ("conv2d", {"channels": 64, "kernel": 3}),
    ("conv2d", {"channels": 2, "out_dim": 3, "kernel": 3, "stride": 2, "weight_max": 0.75}),
    ("conv2d", {"channels": 1, "out_dim": 2, "kernel": 4, "stride": 3}),
    ("dp_attention", {"tokens": 8, "dim": 64}),
    ("dp_attention", {"tokens": 3, "dim": 4, "out_dim": 2, "weight_max": 0.5}),
    ("dp_attention", {"tokens": 2, "dim": 4, "weight_max": 0.125}),
    ("dp_attention", {"tokens": 2, "dim": 8, "weight_max": 0.01}),  # token 0 spread over D
    ("dp_attention", {"tokens": 1, "dim": 3}),
    ("l2_attention", {"tokens": 8, "dim": 64}),
    ("l2_attention", {"tokens": 3, "dim": 4, "out_dim": 2, "weight_max": 0.5}),
    ("l2_attention", {"tokens": 1, "dim": 3}),
    ("scs_attention", {"tokens": 8, "dim": 64}),
    (
        "scs_attention",
        {"tokens": 3, "dim": 4, "out_dim": 2, "weight_max": 0.5, "eps": 2**-10, "nu_max": 2.0},
    ),
    ("scs_attention", {"tokens": 3, "dim": 2, "eps": 2**-7}),
    ("scs_attention", {"tokens": 4, "dim": 1, "eps": 2**-7}),
    ("scs_attention", {"tokens": 1, "dim": 3, "eps": 2**-6}),
]


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _kernel(name: str):
    return importlib.import_module(f"kernels.{name}")


def _split(point) -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    names = list(point.arrays)
    return names[0], point.arrays[names[0]], {k: point.arrays[k] for k in names[1:]}


def kernel_dx(kernel: str, point, size: Fraction, dtype) -> np.ndarray:
    """The kernel's input gradient at ``g = size * signs`` (arrays cast to ``dtype``)."""
    _, first, rest = _split(point)
    g = (float(size) * point.signs).astype(dtype)
    with np.errstate(over="ignore"):
        out = _kernel(kernel).vjp(
            first.astype(dtype), g, **{k: v.astype(dtype) for k, v in rest.items()}, **point.options
        )
    return out[0] if isinstance(out, tuple) else out


def reference_dx(kernel: str, point) -> mpmath.mpf:
    """``dx[index]`` at ``g = signs`` from the mpmath reference (= the column gain)."""
    _, first, rest = _split(point)
    if kernel == "conv2d":
        dx, _, _ = RL.conv2d_vjp(first, point.signs, **rest, **point.options)
    else:
        vjp = getattr(RA, f"{kernel}_vjp")
        options = point.options
        scalars = [options[k] for k in ("nu", "tau", "eps") if k in options]
        dx = vjp(first, point.signs, *rest.values(), *scalars)[0]
    return dx[point.index]


def enclosure(point, size: Fraction) -> tuple[Fraction, Fraction]:
    """Rigorous rational bounds of ``size * gain``."""
    with precision(512):
        ball = point.gain.ball() * arb(size.numerator) / arb(size.denominator)
        lo, hi = ball.lower().man_exp(), ball.upper().man_exp()
    return tuple(Fraction(int(m)) * Fraction(2) ** int(e) for m, e in (lo, hi))  # type: ignore[return-value]


def assert_within_ulp(
    what: str, index, actual: float, lo: Fraction, hi: Fraction, fmt: Format
) -> None:
    """``actual`` within one ULP (of the format, at the exact value's binade) of every
    value in ``[lo, hi]``."""
    assert math.isfinite(actual), f"{what} at index {index}: got {actual!r}, expected {float(lo)!r}"
    ulp = fmt.quantum(hi) if hi > 0 else fmt.smallest_subnormal
    value = Fraction(actual)
    assert abs(value - lo) <= ulp and abs(value - hi) <= ulp, (
        f"{what} at index {index}: got {actual!r}, expected {float(lo)!r} "
        f"(within 1 ulp = {float(ulp)!r})"
    )


def column_sums(kernel: str, first: np.ndarray, rest: dict, options: dict) -> np.ndarray:
    """Absolute column sums of the float64 dense Jacobian of one sample."""
    if kernel == "conv2d":
        J = _kernel(kernel).jacobian(first[0], **rest, **options)
    else:
        J = _kernel(kernel).jacobian(first, **rest, **options)
    return np.abs(J).sum(axis=0)


# --------------------------------------------------------------------------------------------
# (i) The witnesses, in float16, against exact values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "config"), WITNESS_CASES)
def test_float16_witness(module: str, config: dict) -> None:
    e = envelope(module, "float16", **config)
    w = e.witness
    assert w is not None, f"{module} {config}: no witness"
    point, kernel = w.point, e.model.kernel
    dx_in = kernel_dx(kernel, point, w.inside, np.float16)
    bad = np.argwhere(~np.isfinite(dx_in))
    assert bad.size == 0, (
        f"{module} {config}: dx at the safe size {float(w.inside)} is not finite at index "
        f"{tuple(bad[0])}: got {dx_in[tuple(bad[0])]!r}, expected a finite value"
    )
    lo, hi = enclosure(point, w.inside)
    assert hi < F16.overflow, f"{module}: exact dx at the safe size is {float(hi)} >= 65520"
    assert_within_ulp(
        f"{module} {config} dx at the safe size",
        point.index,
        float(dx_in[point.index]),
        lo,
        hi,
        F16,
    )
    dx_out = kernel_dx(kernel, point, w.outside, np.float16)
    assert dx_out[point.index] == np.inf, (
        f"{module} {config}: dx at index {point.index} at size {float(w.outside)}: got "
        f"{dx_out[point.index]!r}, expected inf"
    )
    out_lo, _ = enclosure(point, w.outside)
    assert out_lo >= F16.overflow, (
        f"{module}: exact dx {float(out_lo)} at the outside size is < 65520"
    )
    if e.safe == 0:  # unbounded gain: the smallest overflowing size must be at most 1
        assert w.outside <= 1, (
            f"{module} {config}: the witness overflows only from g = {float(w.outside)}"
        )


@pytest.mark.parametrize(
    ("module", "config"),
    [case for case in WITNESS_CASES if case[0] == "conv2d" or case[1]["tokens"] == 1],
)
def test_attained_gains_are_reached(module: str, config: dict) -> None:
    """Where the max-norm gain is claimed attained, the witness's exact gain equals it (the
    weights are format values here) and the envelope is tight to one format step."""
    e = envelope(module, "float16", **config)
    claimed, reached = e.model.gain_max.value, e.witness.point.gain
    assert e.model.gain_max.reached.startswith("attained"), e.model.gain_max.reached
    exact = (claimed.exact, claimed.square), (reached.exact, reached.square)
    squares = [c[0] ** 2 if c[0] is not None else c[1] for c in exact]
    assert squares[0] == squares[1], (
        f"{module}: witness gain {float(reached)}, claimed {float(claimed)}"
    )
    assert e.witness.steps == 1, f"{module}: {e.witness.steps} steps between safe and overflow"


@pytest.mark.parametrize(("module", "config"), WITNESS_CASES)
def test_witness_gain_matches_the_reference(module: str, config: dict) -> None:
    """The exact column gain (closed form, arb) equals the mpmath reference's ``dx[index]``
    at ``g = signs`` and the float64 kernel Jacobian's column; by the reference alone, the
    exact dx is below 65520 at the safe size and at least 65520 at the outside size."""
    e = envelope(module, "float16", **config)
    point, kernel = e.witness.point, e.model.kernel
    reference = reference_dx(kernel, point)
    lo, hi = enclosure(point, Fraction(1))
    with mpmath.workdps(60):
        mid = (
            mpmath.mpf(lo.numerator) / lo.denominator + mpmath.mpf(hi.numerator) / hi.denominator
        ) / 2
        assert abs(reference - mid) / mid <= REFERENCE_AGREEMENT, (
            f"{module} {config}: reference dx at index {point.index}: got "
            f"{mpmath.nstr(reference, 30)}, expected {mpmath.nstr(mid, 30)} (the witness's gain)"
        )
        for size, below in ((e.witness.inside, True), (e.witness.outside, False)):
            value = reference * size.numerator / size.denominator
            assert (value < 65520) == below, (
                f"{module} {config}: reference dx at index {point.index} at size {float(size)}: "
                f"got {mpmath.nstr(value, 20)}, expected {'<' if below else '>='} 65520"
            )
    _, first, rest = _split(point)
    sums = column_sums(kernel, first, rest, point.options)
    sample_index = point.index[1:] if kernel == "conv2d" else point.index
    sample_shape = first.shape[1:] if kernel == "conv2d" else first.shape
    column = int(np.ravel_multi_index(sample_index, sample_shape))
    assert abs(sums[column] / float(mid) - 1) <= FLOAT64_MARGIN, (
        f"{module}: kernel column sum at column {column}: got {sums[column]!r}, "
        f"expected {float(mid)!r}"
    )


# --------------------------------------------------------------------------------------------
# (ii) The max-norm gains: proofs' numbers against Jacobians (evidence) and attainment
# --------------------------------------------------------------------------------------------


def _dyadic_weights(rng: np.random.Generator, shape, w: float) -> np.ndarray:
    """Weights in [-w, w] on a grid of w/64 (exact float sums)."""
    return w * rng.integers(-64, 65, size=shape) / 64


@pytest.mark.parametrize(
    ("k", "s"), [(1, 1), (2, 1), (3, 1), (3, 2), (4, 2), (5, 2), (3, 3), (2, 3), (5, 4)]
)
def test_conv2d_window_count(k: int, s: int) -> None:
    """An input pixel lies under at most ceil(k/s) windows per axis, whatever the image size
    and padding, and exactly that many at pixel (m-1) s of a k + (m-1) s image: the all-ones
    kernel's dense Jacobian (exact) has largest column sum C_out ceil(k/s)^2 from that size on."""
    m = -(-k // s)
    side = k + (m - 1) * s
    ones = np.ones((2, 1, k, k))
    for size in range(k, side + 4):
        for padding in range(0, k):
            J = _kernel("conv2d").jacobian(
                np.zeros((1, size, size)), ones, stride=s, padding=padding
            )
            top = np.abs(J).sum(axis=0).max()
            assert top <= 2 * m * m, (
                f"k={k} s={s} size={size} padding={padding}: column sum {top}, bound {2 * m * m}"
            )
            if size >= side and padding == 0:
                assert top == 2 * m * m, (
                    f"k={k} s={s} size={size}: column sum {top}, expected {2 * m * m}"
                )


def test_conv2d_random_kernels_evidence() -> None:
    """Evidence: random dyadic kernels with |W| <= w never exceed C_out w ceil(k/s)^2 (max
    norm) nor w sqrt(C_in C_out) F(k, s) (2-norm), over image sizes, strides and paddings."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        k, s = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        c_in, c_out, w = (
            int(rng.integers(1, 4)),
            int(rng.integers(1, 4)),
            float(rng.choice([0.5, 1.0, 3.0])),
        )
        size, padding = int(rng.integers(k, k + 6)), int(rng.integers(0, k))
        W = _dyadic_weights(rng, (c_out, c_in, k, k), w)
        model = models()["conv2d"](
            Config(channels=c_in, out_dim=c_out, kernel=k, stride=s, weight_max=w)
        )
        J = _kernel("conv2d").jacobian(np.zeros((c_in, size, size)), W, stride=s, padding=padding)
        top = np.abs(J).sum(axis=0).max()
        bound = float(model.gain_max.value)
        assert top <= bound, (
            f"trial {trial}: column sum {top} at column {np.abs(J).sum(axis=0).argmax()}, "
            f"bound {bound}"
        )
        sigma = np.linalg.norm(J, 2) if J.size else 0.0
        lip = float(model.gain_2.value)
        assert sigma <= lip * (1 + FLOAT64_MARGIN), f"trial {trial}: sigma_max {sigma}, bound {lip}"


@pytest.mark.parametrize(("k", "s"), [(3, 1), (3, 2), (4, 2)])
def test_conv2d_two_norm_supremum(k: int, s: int) -> None:
    """w sqrt(C_in C_out) F(k, s) is attained on a torus (certified, proofs/spectral.py) and
    approached with zero padding as the image grows."""
    F = conv_overlap_sum(k, s)
    grid = 6 * s
    r = conv_circular_lipschitz(np.ones((1, 1, k, k)), (grid, grid), stride=s)
    assert r.lo <= F <= r.hi, (
        f"k={k} s={s}: circular norm in [{float(r.lo)}, {float(r.hi)}], expected {F}"
    )
    J = _kernel("conv2d").jacobian(np.zeros((2, 24, 24)), np.ones((3, 2, k, k)), stride=s)
    sigma = np.linalg.norm(J, 2)
    target = math.sqrt(6) * F
    assert 0.98 * target <= sigma <= target, f"k={k} s={s}: sigma_max {sigma}, supremum {target}"


def test_dp_column_closed_form() -> None:
    """dp_column (all weights w, token 0 summing to sigma) equals the mpmath reference
    Jacobian's column (1, k) for several sigma, and grows like sigma^2 (the unbounded gain)."""
    n, dim, dv, w = 3, 2, 2, Fraction(1, 2)
    values = []
    for sigma in (Fraction(0), Fraction(1, 4), Fraction(3), Fraction(48)):
        X = np.zeros((n, dim))
        X[0] = float(sigma) / 2
        full = np.full((dim, dim), float(w))
        J = RA.dp_attention_jacobian(X, full, full, np.full((dv, dim), float(w)))
        with mpmath.workdps(50):
            column = mpmath.fsum(abs(v) for v in J[:, dim])  # column (1, 0)
        with precision(256):
            closed = dp_column(n, dv, dim, w, sigma).ball().mid()
        assert abs(float(column) / float(closed) - 1) < 1e-14, (
            f"sigma={sigma}: reference {column}, closed form {closed}"
        )
        values.append(float(closed))
    # Growth like sigma^2: (N-1)/N (1 + c sigma^2 / N) dv w, c = w^2 sqrt(d).
    assert values[-1] > 100 * values[0], f"the column gain does not grow: {values}"


def _attention_arrays(
    rng, module: str, n: int, dim: int, dv: int, w: float, scale: float, signs: bool
):
    X = scale * rng.standard_normal((n, dim))
    if signs:  # entries +-w: the extreme points of the weight box
        make = lambda rows: w * rng.choice([-1.0, 1.0], size=(rows, dim))  # noqa: E731
    else:
        make = lambda rows: rng.uniform(-w, w, size=(rows, dim))  # noqa: E731
    if module == "l2_attention":
        return X, {"Wq": make(dim), "Wv": make(dv)}
    return X, {"Wq": make(dim), "Wk": make(dim), "Wv": make(dv)}


@pytest.mark.parametrize(
    ("module", "config"),
    [
        ("l2_attention", {"tokens": 3, "dim": 2, "weight_max": 1.0}),
        ("l2_attention", {"tokens": 5, "dim": 3, "out_dim": 2, "weight_max": 0.5}),
        ("scs_attention", {"tokens": 3, "dim": 2, "eps": 0.5}),
        (
            "scs_attention",
            {"tokens": 4, "dim": 3, "out_dim": 2, "weight_max": 0.5, "eps": 2**-7, "nu_max": 1.5},
        ),
    ],
)
@settings(max_examples=80)
@given(
    seed=st.integers(0, 2**32 - 1),
    decades=st.floats(-4.0, 4.0),
    extreme=st.booleans(),
)
@example(seed=0, decades=-4.0, extreme=True)
@example(seed=1, decades=0.0, extreme=True)
def test_attention_bounds_random_evidence(
    module: str, config: dict, seed: int, decades: float, extreme: bool
) -> None:
    """Evidence: column sums (max-norm) and sigma_max (2-norm) of the kernel Jacobian stay
    below the proven bounds at random inputs of scale 10^decades, with uniform weights in
    [-w, w] or weights +-w (``extreme``: the corners of the weight box)."""
    cfg = Config(**config)
    model = models()[module](cfg)
    bound, lip = float(model.gain_max.value), float(model.gain_2.value)
    options = {"nu": cfg.nu_max, "tau": 1.0, "eps": cfg.eps} if module == "scs_attention" else {}
    rng = np.random.default_rng(seed)
    X, weights = _attention_arrays(
        rng, module, cfg.tokens, cfg.dim, cfg.outputs, cfg.weight_max, 10.0**decades, extreme
    )
    J = _kernel(module).jacobian(X, **weights, **options)
    sums = np.abs(J).sum(axis=0)
    assert sums.max() <= bound * (1 + FLOAT64_MARGIN), (
        f"{module} seed {seed}: column {sums.argmax()} sums to {sums.max()!r}, bound {bound!r}"
    )
    sigma = np.linalg.norm(J, 2)
    assert sigma <= lip * (1 + FLOAT64_MARGIN), (
        f"{module} seed {seed}: sigma_max {sigma!r}, bound {lip!r}"
    )


@pytest.mark.parametrize(
    ("module", "config"),
    [
        ("l2_attention", {"tokens": 3, "dim": 2}),
        ("scs_attention", {"tokens": 3, "dim": 3, "eps": 1.0}),
    ],
)
def test_attention_bounds_adversarial_evidence(module: str, config: dict) -> None:
    """Evidence: hill climbing on the largest column sum over X and the weights (clipped to
    |W| <= w), from random starts and from the witness, stays below the bound."""
    cfg = Config(**config)
    model = models()[module](cfg)
    bound = float(model.gain_max.value)
    options = {"nu": cfg.nu_max, "tau": 1.0, "eps": cfg.eps} if module == "scs_attention" else {}
    point = model.point(FORMATS["float32"])
    _, X0, W0 = _split(point)
    names = list(W0)
    rng = np.random.default_rng(3)

    def value(X, weights) -> float:
        return float(np.abs(_kernel(module).jacobian(X, **weights, **options)).sum(axis=0).max())

    best = value(X0, W0)
    starts = [(X0, W0)] + [
        _attention_arrays(rng, module, cfg.tokens, cfg.dim, cfg.outputs, 1.0, s, True)
        for s in (0.5, 2.0)
    ]
    for X, weights in starts:
        current, step = value(X, weights), 0.3
        for _ in range(250):
            Xn = X + step * rng.standard_normal(X.shape)
            Wn = {
                k: np.clip(v + step * rng.standard_normal(v.shape), -1.0, 1.0)
                for k, v in weights.items()
            }
            trial = value(Xn, Wn)
            if trial > current:
                X, weights, current, step = Xn, Wn, trial, step * 1.3
            else:
                step *= 0.97
        best = max(best, current)
        assert current <= bound * (1 + FLOAT64_MARGIN), (
            f"{module}: a search reached {current!r} > bound {bound!r} ({names})"
        )
    assert best <= bound


@pytest.mark.parametrize(
    ("module", "config", "baseline"),
    [
        ("l2_attention", {"tokens": 8, "dim": 64}, 64 * 64 * 8),  # dv D sqrt(d) w^3 at X = 0
        ("l2_attention", {"tokens": 2, "dim": 1}, 1),
        ("scs_attention", {"tokens": 8, "dim": 64}, 64 * 1000),  # nu dv w / sqrt(eps) at X = 0
        ("scs_attention", {"tokens": 2, "dim": 3, "eps": 1.0}, 3),
    ],
)
def test_bounds_not_shown_tight_bracket_the_witness(
    module: str, config: dict, baseline: float
) -> None:
    """Where the gain is an upper bound not shown tight, the witness (a lower bound of the
    supremum) lies strictly between the X = 0 value and the bound, and the Gain says so."""
    model = models()[module](Config(**config))
    point = model.point(F16)
    gain, bound = float(point.gain), float(model.gain_max.value)
    assert baseline < gain < bound, (
        f"{module} {config}: witness gain {gain}, X = 0 {baseline}, bound {bound}"
    )
    assert "upper bound, not shown tight" in model.gain_max.reached
    assert not model.gain_max.tight, f"{module}: Gain.tight is set on a bound not shown tight"


def _l2_grid(n: int):
    """Float64 grid values of the four L2 suprema (``l2_constants``)."""
    r = np.linspace(0, 6, 601)[:, None]
    rho = np.linspace(0, 6, 601)[None, :]
    a, b = np.exp(-r * r), np.exp(-rho * rho)
    z = 1 + a + (n - 2) * b
    P, S = a / z, (n - 2) * rho * b / z
    rr = r[:, 0]
    aa = np.exp(-rr * rr)
    return {
        "A": ((1 + 2 * (n - 1) * aa * rr * rr) / (1 + (n - 1) * aa)).max(),
        "e": ((n - 1) * aa * rr * rr / (1 + (n - 1) * aa)).max(),
        "psi": (P * (1 + 2 * r * ((1 - P) * r + S))).max(),
        "c1": (P * r * ((1 - P) * r + S)).max(),
    }


@pytest.mark.parametrize("n", [2, 3, 8])
def test_l2_constants_enclose_the_suprema(n: int) -> None:
    """The branch and bound's rationals lie above a fine float grid of each function and
    within the tolerance (plus grid resolution) of it."""
    consts, grid = l2_constants(n), _l2_grid(n)
    for key, value in consts.items():
        assert grid[key] <= float(value), (
            f"N={n} {key}: grid {grid[key]!r} > bound {float(value)!r}"
        )
        assert float(value) <= grid[key] * (1 + 2 * float(BB_TOLERANCE)) + 1e-12, (
            f"N={n} {key}: bound {float(value)!r} far above the grid maximum {grid[key]!r}"
        )


def test_scs_constant_encloses_the_supremum() -> None:
    """scs_constant lies above a float grid of its function and within tolerance of it."""
    n, tau, d, dv = 4, 1.0, 3, 2
    u = np.linspace(0, 1, 41)
    q, k, v = np.meshgrid(u, u, u, indexing="ij")
    rho = [2 * t / (1 + t * t) for t in (q, k, v)]
    root = [(1 - t * t) / (1 + t * t) for t in (q, k, v)]
    s = tau * math.sqrt(d * dv)
    a = s * root[1] * (1 + rho[2])
    b = dv * root[2]

    def best(a, b, cap):
        grid = np.linspace(0, 1, 201)[:, None, None, None] * cap
        return (grid * (a * (1 - grid) + b)).max(axis=0)

    cap_i = 1 / (1 + (n - 1) * np.exp(-tau * (1 + rho[1])))
    cap_m = 1 / (1 + (n - 1) * np.exp(-tau * rho[0] * (1 + rho[1])))
    values = (n - 1) * best(a, b, cap_i) + s * root[0] + best(rho[0] * a, b, cap_m)
    bound = float(scs_constant(n, Fraction(1), d, dv))
    assert values.max() <= bound, f"grid {values.max()!r} > bound {bound!r}"
    assert bound <= values.max() * (1 + 3 * float(BB_TOLERANCE)), (
        f"bound {bound!r} far above grid {values.max()!r}"
    )


def test_scs_column_matches_the_reference() -> None:
    """scs_column (the witness's closed form) against the mpmath reference Jacobian at a
    rank-one point with distinct values for token m and the others."""
    n, d, dv = 3, 3, 2
    a_q, a_k, a_v = np.ones(d), np.array([1.0, -1.0, 1.0]), np.array([1.0, 1.0, -1.0])
    X = np.array([[0.25, -0.5, 0.125], [1.5, 0.75, -2.0], [1.5, 0.75, -2.0]])
    w, nu, tau, eps = Fraction(1, 2), Fraction(3, 2), Fraction(2), Fraction(1, 8)
    Wq, Wk = float(w) * np.outer(np.ones(d), a_q), float(w) * np.outer(np.ones(d), a_k)
    Wv = float(w) * np.outer(np.ones(dv), a_v)
    J = RA.scs_attention_jacobian(X, Wq, Wk, Wv, float(nu), float(tau), float(eps))
    functionals = [tuple(Fraction(float(a @ row)) for a in (a_q, a_k, a_v)) for row in X[:2]]
    with precision(256):
        total, _, _ = scs_column(
            n, functionals[0], functionals[1], (1, 1, 1), w, d, dv, nu, tau, eps
        )
        closed = float(total.mid())
    with mpmath.workdps(50):
        column = float(mpmath.fsum(abs(v) for v in J[:, 0]))
    assert abs(column / closed - 1) < 1e-14, (
        f"reference column 0: {column!r}, closed form {closed!r}"
    )


# --------------------------------------------------------------------------------------------
# (iii) float32
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "config"),
    [
        ("conv2d", {"channels": 2, "out_dim": 3}),
        ("dp_attention", {"tokens": 3, "dim": 4, "out_dim": 2, "weight_max": 0.5}),
        ("l2_attention", {"tokens": 3, "dim": 4, "out_dim": 2, "weight_max": 0.5}),
        ("scs_attention", {"tokens": 3, "dim": 4, "out_dim": 2, "eps": 2**-10}),
    ],
)
def test_float32_witness(module: str, config: dict) -> None:
    """The float32 witness: finite and within 1 ULP at the safe size (0 for DP), +inf at the
    smallest size whose exact dx reaches float32's overflow threshold."""
    model = models()[module](Config(**config))
    point = model.point(F32)
    gain = model.gain_max.value
    inside = Fraction(0) if gain is None else safe_gradient(gain, F32)
    outside = overflowing_gradient(point.gain, F32)
    dx_in = kernel_dx(model.kernel, point, inside, np.float32)
    assert np.all(np.isfinite(dx_in)), f"{module}: float32 dx at the safe size is not finite"
    lo, hi = enclosure(point, inside)
    assert_within_ulp(f"{module} float32 dx", point.index, float(dx_in[point.index]), lo, hi, F32)
    dx_out = kernel_dx(model.kernel, point, outside, np.float32)
    assert dx_out[point.index] == np.inf, (
        f"{module}: float32 dx at index {point.index}, size {float(outside)!r}: got "
        f"{dx_out[point.index]!r}, expected inf"
    )
    if gain is None:
        assert outside <= 1
        _, first, rest = _split(point)
        Y = _kernel(model.kernel).forward(
            first.astype(np.float32), **{k: v.astype(np.float32) for k, v in rest.items()}
        )
        assert np.all(np.isfinite(Y)), "the DP witness's float32 forward overflows"


def test_dp_witness_spreads_and_gives_up_honestly() -> None:
    """DP's witness puts the token's size on one entry when the format holds it, else on
    all D entries; when even that cannot reach the threshold at g <= 1 (tiny weights, small
    D) there is no witness and the model's note says the claim holds over real inputs."""
    spread = models()["dp_attention"](Config(tokens=2, dim=8, weight_max=0.01)).point(F16)
    assert np.count_nonzero(spread.arrays["X"][0]) == 8, spread.description
    model = models()["dp_attention"](Config(tokens=2, dim=1, weight_max=0.01))
    assert model.point(F16) is None
    assert model.point(F32) is not None  # float32's range reaches it
    assert any("real inputs only" in note for note in model.notes)


# --------------------------------------------------------------------------------------------
# Huge sizes: closed forms without loops, witnesses too large to build
# --------------------------------------------------------------------------------------------


def _overlap_by_windows(k: int, s: int) -> int:
    """F(k, s) as its definition: the sum over integers |j| < k/s of (k - |j| s)."""
    return sum(k - abs(j) * s for j in range(-k, k + 1) if abs(j) * s < k)


@pytest.mark.parametrize("k", range(1, 41))
def test_conv_overlap_sum_closed_form(k: int) -> None:
    for s in range(1, 45):
        assert conv_overlap_sum(k, s) == _overlap_by_windows(k, s), f"k={k} s={s}"


def test_conv2d_gains_at_huge_sizes() -> None:
    """k = 10^9: the closed forms (no loop over the windows), safe size 0 in float16 (the
    max-norm gain C_out w ceil(k/s)^2 = 10^18 makes even the smallest subnormal overflow)."""
    k = 10**9
    e = envelope("conv2d", channels=2, out_dim=3, kernel=k, stride=3)
    m = -(-k // 3)
    assert e.model.gain_max.value.exact == 3 * m * m
    assert conv_overlap_sum(k, 3) == k + (m - 1) * (2 * k - 3 * m)
    assert e.safe == 0
    assert e.witness.point.arrays is None, "a 10^18-entry witness was built"
    assert e.witness.point.index == (0, 0, (m - 1) * 3, (m - 1) * 3)


#: The commands of the huge-size defects ("Unable to allocate 6.94 EiB").
HUGE = "1000000000"
HUGE_COMMANDS = [
    *(
        [module, option, HUGE]
        for module in ("dp_attention", "l2_attention", "scs_attention")
        for option in ("--dim", "--tokens")
    ),
    ["scs_attention", "--tokens", HUGE, "--dim", "2"],
    ["scs_attention", "--tokens", HUGE, "--dim", "1", "--dtype", "bfloat16"],
    ["dp_attention", "--tokens", "1", "--dim", HUGE],
    ["conv2d", "--channels", HUGE],
    ["conv2d", "--kernel", HUGE],
    ["conv2d", "--kernel", HUGE, "--stride", "7", "--json"],
    ["conv2d", "--out-dim", HUGE],
]


@pytest.mark.parametrize("argv", HUGE_COMMANDS, ids=" ".join)
def test_cli_answers_at_huge_sizes(argv: list[str]) -> None:
    """Within the time and memory limits of tests/helpers/cli_subprocess.py: the envelope,
    with the witness described but not built."""
    outcome = cli_subprocess.run(["envelope", *argv])
    cli_subprocess.assert_answers_or_refuses(outcome)
    assert outcome.status == 0, outcome.describe()
    assert "witness not built: " in outcome.out, outcome.describe()
