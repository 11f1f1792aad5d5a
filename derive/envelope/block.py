r"""Envelopes of whole blocks: catalog modules in sequence, with residual connections.

Overflows are compositional: an activation that grows through a Linear feeds a residual add,
and a gradient is amplified by every stage it passes on its way back. For a block given as a
sequence of stages (a *spec*, below) and either bounds on its parameters or the parameters
themselves (a ``.npz`` or ``.safetensors`` file), :func:`block_envelope` gives, stage by stage:

* **forward**: a bound on ``max|y|`` at the stage's output for inputs with
  ``max|x| <= input_max`` (the paper's Principle 1, 001_76ce3a8a4b6079c3.txt section 4.2),
  and whether the format can overflow there;
* **backward**: the max-norm gain from the block's output gradient to the gradient at the
  stage's input, ``sup max_j |dx_j| / max_i |g_i|`` (Principle 2), hence the largest safe
  output gradient (the loss scale at which nothing in the block can overflow) and the stage
  that binds it;
* the 2-norm product of Lemma 3 (the Lipschitz constant of a composition is at most the
  product of its layers', ``1 + Lip(f)`` for ``x + f(x)``), beside the max-norm chain that
  decides overflow.

Proof of the composition (each step an inequality, so the bounds are proven whenever the
per-module ones are; those come from :mod:`derive.envelope.modules`, machine-checked in
``proofs/envelope.py``):

* ``dx = J^T g`` gives ``max_j |dx_j| <= ||J||_1 max_i |g_i|`` with ``||J||_1`` the largest
  column sum of ``|J|``, the per-module max-norm gain (a supremum over all inputs, so it holds
  at whatever point the stage is evaluated); induced norms are submultiplicative:
  ``||J_2 J_1||_1 <= ||J_2||_1 ||J_1||_1``;
* a residual ``y = x + f(x)`` has ``J = I + J_f``, so ``||J||_1 <= 1 + ||J_f||_1``, and its
  branch receives the block gradient unchanged;
* the kernels run in mixed mode: each stage's result (forward value, input gradient, the
  residual sum) is the exact value of its inputs rounded once to the format, which can grow
  it by the factor ``1 + 2^-p`` (p: the format's significand bits); every bound carries one
  such factor per rounding on its path (the stage's own result is compared exactly: it
  overflows when its exact value reaches the threshold);
* a second chain multiplies the stages' 2-norm gains with the same roundings. Where every
  stage is token-wise or DP attention, each stage's Jacobian acts on the block's output of
  n entries (N tokens x width with attention, one token's width without), and
  ``max|dx| <= |dx|_2 <= G_2 |g|_2 <= G_2 sqrt(n) max|g|``: the max-norm gain is the
  smaller of its own chain and ``sqrt(n) G_2``, and the smaller goes on down the walk
  (with GPT-2's small Gaussian weights the 2-norm route wins by orders of magnitude at the
  attention: the max-norm chain pays the sums of ``|W|`` at every factor).

Parameters: with bounds only, each stage uses its module's worst case over all parameters
within them (``|W_ij| <= weight_max``, ``|gamma_i| <= gamma_max``, ...). From a file, a
Linear's gains are the column and row sums of ``|W|`` (summed with ``math.fsum`` and
rounded up: upper bounds within one float64 step), its 2-norm the smaller of
``sqrt(||W||_1 ||W||_inf)`` (Hoelder) and a rigorous bound from powers of the Gram matrix
(:func:`_spectral_square_up`, within a few percent of ``||W||_2``), a convolution's the
per-channel sums of ``|W|`` (an upper bound for every stride and padding: each tap meets
an input pixel at most once per output pixel), and a normalization's ``max|gamma|`` and
``max|beta|``.

DP attention (``dp_attention``, N tokens of ``tokens``, head width ``head``) is not
Lipschitz, but its gains are bounded for bounded inputs: the walk carries a bound on the
entries and one on the 2-norm of each token's row (a LayerNorm output row has 2-norm at most
``sqrt(D) (max|gamma| + max|beta|)``, far below ``sqrt(D)`` times its largest entry), and
:func:`_attention_bounds` derives the attention's gains from both: the max-norm one from
the sums of ``|W|`` and the entry bounds, the 2-norm one (:func:`_attention_gain_2`) from
the weights' 2-norms and ``||X||_F^2 <= N rho^2``.

The witness (evidence, not proof), for blocks of LayerNorm, RMSNorm, Linear, the
activations and DP attention, at searched inputs and parameters in float64: up to
:data:`WITNESS_WIDTH` values per activation it evaluates the block's exact chain of
Jacobians (the kernels' Jacobians, on token matrices) and takes the largest column sum of
``|J|`` from each stage's input to the block's output; above it (GPT-2's 8 tokens of 768
are 6144) it runs the kernels' VJPs at output gradients of max-norm 1 whose signs follow a
column of the block Jacobian (:func:`_realized_by_passes`), a smaller realized gain. Blocks
with convolutions and BatchNorm get the matrix-free witness on an (N, C, s, s) batch with
N s^2 = ``batch`` (:func:`_image_shape`; the convolutions padded to keep the size), and on
(batch, C, 1, 1) for near-constant inputs (a padded convolution of 1 x 1 maps keeps a
channel constant, where BatchNorm's gain peaks), up to :data:`WITNESS_IMAGE` values.
Either is set against the proven gain. :func:`kernel_check` runs the block at the witness
point through the kernels in the format (``liptable envelope --block ... --check``).

Spec: stages separated by commas; ``res(...)`` is a residual connection around its stages;
a stage is ``[name=]module[:width]`` with ``module`` one of :data:`STAGE_MODULES`, ``width``
a Linear's output width (a convolution's output channels) and ``name`` the prefix of its
parameters in a weights file (``name.weight``, ``name.bias``). Presets: :data:`PRESETS`.

>>> e = block_envelope("pre-ln-mlp", "float16", dim=8, hidden=32, weight_max=0.25, eps=1.0)
>>> [s.label for s in e.stages][2:4]
['ln = layernorm (8)', 'fc1 = linear (8 -> 32)']
>>> e.binding.label, float(e.safe)
('block input', 2004.0)
"""

from __future__ import annotations

import hashlib
import math
import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from derive.envelope.core import (
    FORMATS,
    PRECISIONS,
    Config,
    Format,
    Real,
    as_arb,
    precision,
    safe_gradient,
)
from derive.envelope.modules import ELEMENTWISE_KEYS, models

__all__ = [
    "PRESETS",
    "STAGE_MODULES",
    "BlockConfig",
    "BlockEnvelope",
    "Residual",
    "Stage",
    "StageBound",
    "block_envelope",
    "kernel_check",
    "load_weights",
    "parse",
]

#: The modules a block's stages may be.
STAGE_MODULES = (
    "dp_attention",
    "layernorm",
    "rmsnorm",
    "batchnorm",
    "linear",
    "conv2d",
    *ELEMENTWISE_KEYS,
)

#: Named blocks: ``{dim}`` and ``{hidden}`` are filled in from the configuration.
PRESETS = {
    "pre-ln-transformer": (
        "res(ln1=layernorm, attn=dp_attention), "
        "res(ln2=layernorm, fc1=linear:{hidden}, act=gelu, fc2=linear:{dim})"
    ),
    "post-ln-transformer": (
        "res(attn=dp_attention), ln1=layernorm, "
        "res(fc1=linear:{hidden}, act=gelu, fc2=linear:{dim}), ln2=layernorm"
    ),
    "pre-ln-mlp": "res(ln=layernorm, fc1=linear:{hidden}, act=gelu, fc2=linear:{dim})",
    "post-ln-mlp": "res(fc1=linear:{hidden}, act=gelu, fc2=linear:{dim}), ln=layernorm",
    "resnet-basic": (
        "res(conv1=conv2d, bn1=batchnorm, act1=relu, conv2=conv2d, bn2=batchnorm), act2=relu"
    ),
}
#: Short names of the presets.
PRESETS["pre-ln"] = PRESETS["pre-ln-transformer"]
PRESETS["post-ln"] = PRESETS["post-ln-transformer"]

#: The row-wise modules the witness can chain (one token's Jacobian each).
_ROW_WISE = ("layernorm", "rmsnorm", "linear", *ELEMENTWISE_KEYS)
#: What the witness chains: the row-wise modules and the attention (over token matrices).
_WITNESS_MODULES = (*_ROW_WISE, "dp_attention")

#: The largest tokens x width the witness builds dense Jacobians for.
WITNESS_WIDTH = 4096
#: What the matrix-free witness also runs: the image stages, on (N, C, s, s) batches.
_IMAGE_MODULES = ("conv2d", "batchnorm")
#: The largest image batch (N C s s values) the witness runs.
WITNESS_IMAGE = 1 << 20


@dataclass(frozen=True)
class Stage:
    """One module of a block: ``module`` (a key of :data:`STAGE_MODULES`), its ``name`` (the
    prefix of its parameters in a weights file) and its output ``width`` (None: unchanged)."""

    module: str
    name: str
    width: int | None = None


@dataclass(frozen=True)
class Residual:
    """``x + branch(x)``."""

    branch: tuple[Stage | Residual, ...]


Node = Stage | Residual

_TOKEN = re.compile(r"^(?:(?P<name>[A-Za-z_][\w.]*)=)?(?P<module>[a-z_0-9]+)(?::(?P<width>\d+))?$")


def parse(spec: str, dim: int = 768, hidden: int | None = None) -> tuple[Node, ...]:
    """The stages of ``spec`` (a preset's name or a spec, module docstring).

    >>> residual, last = parse("res(layernorm, linear:16), relu", dim=8)
    >>> [(s.module, s.name, s.width) for s in residual.branch], last
    ([('layernorm', 's1', None), ('linear', 's2', 16)], Stage(module='relu', name='s3', width=None))
    """
    text = PRESETS.get(spec, spec).format(dim=dim, hidden=4 * dim if hidden is None else hidden)
    counter = iter(range(1, 1 << 30))
    nodes, rest = _sequence(text.replace(" ", ""), counter)
    if rest:
        raise ValueError(f"block: unexpected {rest!r} in {spec!r}")
    if not nodes:
        raise ValueError(f"block: no stages in {spec!r}")
    return nodes


def _sequence(text: str, counter) -> tuple[tuple[Node, ...], str]:
    nodes: list[Node] = []
    while text and not text.startswith(")"):
        if text.startswith("res("):
            branch, text = _sequence(text[4:], counter)
            if not text.startswith(")"):
                raise ValueError("block: res( without its closing parenthesis")
            if not branch:
                raise ValueError("block: an empty res()")
            nodes.append(Residual(branch))
            text = text[1:]
        else:
            end = min((i for i in (text.find(","), text.find(")")) if i >= 0), default=len(text))
            token, text = text[:end], text[end:]
            match = _TOKEN.match(token)
            if not match or match["module"] not in STAGE_MODULES:
                known = ", ".join(STAGE_MODULES)
                raise ValueError(f"block: {token!r} is not [name=]module[:width] ({known})")
            module = match["module"]
            if match["width"] and module not in ("linear", "conv2d"):
                raise ValueError(f"block: {token!r}: only linear and conv2d take a width")
            width = int(match["width"]) if match["width"] else None
            if width == 0:
                raise ValueError(f"block: {token!r}: the width must be positive")
            nodes.append(Stage(module, match["name"] or f"s{next(counter)}", width))
        if text.startswith(","):
            text = text[1:]
    return tuple(nodes), text


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def load_weights(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` or ``.safetensors`` file, by name, as float64."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        arrays = load_file(str(path))
    elif path.suffix == ".npz":
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    else:
        raise ValueError(f"weights: expected a .npz or .safetensors file, got {path.name!r}")
    return {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def _up(value: float) -> Fraction:
    """A float64 upper bound of the exact value ``value`` approximates to within 1/2 ulp."""
    return Fraction(float(np.nextafter(value, np.inf))) if value > 0 else Fraction(0)


#: What was computed from a weight array, by (what, its shape and a digest of its bytes): a
#: report asks for the same arrays in every format.
_OF_WEIGHTS: dict[tuple, Any] = {}
#: The digests of the arrays :func:`frozen_weights` made, by ``id`` (an entry leaves with its
#: array, so a later array at the same address never finds it).
_DIGESTS: dict[int, bytes] = {}


def frozen_weights(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Read-only float64 copies of ``arrays`` whose digests are taken once, here.

    The envelopes compute what they need of a weight array once per content, keyed by its
    SHA-256 (13 ms for a 768 x 3072 array); a caller that passes the same arrays again (the
    report: every block in every format) hashes each only once this way. The copies own
    their memory and cannot be written, so their content stays that of the digest.
    """
    frozen = {}
    for name, array in arrays.items():
        copy = np.array(array, dtype=np.float64, order="C", copy=True)
        copy.flags.writeable = False
        _DIGESTS[id(copy)] = hashlib.sha256(copy.data).digest()
        weakref.finalize(copy, _DIGESTS.pop, id(copy), None)
        frozen[name] = copy
    return frozen


def _digest(W: np.ndarray) -> bytes:
    """The SHA-256 of a C-contiguous float64 array's bytes (taken once for frozen arrays)."""
    if not W.flags.writeable and id(W) in _DIGESTS:
        return _DIGESTS[id(W)]
    return hashlib.sha256(W.data).digest()


def _of_weights(what: str, W: np.ndarray, compute: Callable[[np.ndarray], Any]) -> Any:
    """``compute(W)``, once per content of ``W`` (keyed by its SHA-256: with the processor's
    SHA instructions about three times as fast as BLAKE2b here)."""
    W = np.ascontiguousarray(W, dtype=np.float64)
    key = (what, W.shape, _digest(W))
    if key not in _OF_WEIGHTS:
        _OF_WEIGHTS[key] = compute(W)
    return _OF_WEIGHTS[key]


def _abs_sums(W: np.ndarray, axis: int) -> float:
    """The largest sum of ``|W|`` over ``axis`` (every other axis kept), each by math.fsum.

    Rounding to nearest is monotone, so the largest correctly rounded sum is that of the
    largest exact sum: NumPy's float64 sums, each within ``2 n u`` of its exact value
    (n terms, all >= 0), leave as candidates the sums that may be the largest, and only
    those go through math.fsum (the same value, for a fraction of the work).
    """

    def compute(W: np.ndarray) -> float:
        moved = np.moveaxis(np.abs(W), axis, -1)
        flat = moved.reshape(-1, moved.shape[-1])
        if not flat.size:
            return 0.0
        rough = flat.sum(axis=1)
        slack = rough * (2.0 * flat.shape[1] * _U) + _TINY
        candidates = np.flatnonzero(rough + slack >= np.max(rough - slack))
        return max(math.fsum(flat[i]) for i in candidates)

    return _of_weights(f"abs sums {axis}", W, compute)


#: The unit roundoff of float64 and a floor below every product's underflow error.
_U = 2.0**-53
_TINY = 2.0**-1000
#: The Gram matrix's squarings in :func:`_spectral_square_up`: ``k = 2^6`` overestimates the
#: largest eigenvalue by at most ``n^(1/(2k))`` (1.053 at n = 768; 1.015 seen on GPT-2-sized
#: Gaussian weights), at about 0.15 s for 768 x 3072.
_SQUARINGS = 6


def _grow(k: int) -> float:
    """An upper bound of ``(1 + u)^k`` (k u small): the growth of k roundings to nearest."""
    return 1.0 + 2.0 * k * _U


def _norm_up(A: np.ndarray) -> Fraction:
    """An upper bound of ``||A||_inf``, the largest row sum of ``|A|``, from float64 sums (a
    sum of k non-negative terms is within ``(1 + u)^k`` of the exact one): for the Gram
    powers, each used once, where :func:`_abs_sums`' exact sums and cache would cost more."""
    sums = np.sum(np.abs(A), axis=1)
    top = float(np.max(sums)) if sums.size else 0.0
    return _up(float(Fraction(top) * Fraction(_grow(A.shape[1] + 4))))


def _spectral_square_up(W: np.ndarray) -> Fraction:
    """A rational upper bound of ``||W||_2^2``, the largest eigenvalue of the Gram matrix
    ``G = W^T W`` (of the smaller side), within a few percent.

    Proof. ``G`` is symmetric, so ``lambda_max(G)^k = rho(G^k) <= ||G^k||_inf`` for every
    ``k``. Each float64 product carries a bound ``e`` on the infinity norm of its error
    ``E = A_true - A``: a computed product of ``n``-vectors is within ``gamma_n = n u/(1 - n
    u)`` times the product of their absolute values (Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed., eq. 3.13; any order of summation, with or without FMA),
    and ``|| |A| |B| ||_inf <= ||A||_inf ||B||_inf``. So the Gram matrix of the (m, n) W
    gets ``e = gamma_m ||W||_1 ||W||_inf``, and each squaring, ``A_true^2 = A^2 + A E + E A
    + E^2``, gets ``e' = 2 a e + e^2 + gamma_n a^2`` with ``a >= ||A||_inf``; every product
    and every rescaling adds ``n 2^-1000`` for underflow (the powers are rescaled to a
    largest row sum near 1, and a rescaled entry that goes subnormal is off by less than
    2^-1074).
    The norms are float64 sums grown by :func:`_grow`, the bookkeeping is exact in
    rationals, rounded up to float64 by :func:`_up`. After ``j`` squarings (``k = 2^j``,
    powers of two scaled out exactly), ``lambda_max <= ((a + e) 2^E)^(1/k)``, taken in arb
    and rounded up; the smallest over ``j = 0 .. _SQUARINGS`` is returned. One matrix
    product per squaring (entrywise bounds took five, for the same bound to 1e-6). Evaluated
    once per array (cached by its bytes)."""
    if not np.all(np.isfinite(W)):
        raise ValueError("weights: every entry must be finite")
    return _of_weights("spectral", W, _gram_powers)


def _gram_powers(W: np.ndarray) -> Fraction:
    """:func:`_spectral_square_up`'s computation."""
    norms = _up(_abs_sums(W, 0)) * _up(_abs_sums(W, 1))  # ||W||_1 ||W||_inf, either side
    m, n = W.shape
    if m < n:
        W, (m, n) = W.T, (n, m)
    gamma_m, gamma_n = Fraction(m, 2**53 - m), Fraction(n, 2**53 - n)
    underflow = Fraction(n) * Fraction(_TINY)
    A = W.T @ W
    error = _up(float(gamma_m * norms + underflow))
    exponent, power, best = 0, 1, None
    for j in range(_SQUARINGS + 1):
        top = float(np.max(np.sum(np.abs(A), axis=1)))
        scale = -math.frexp(top)[1] if top > 0 else 0
        A, exponent = np.ldexp(A, scale), exponent - scale  # exact but for subnormals:
        error = error * Fraction(2) ** scale + underflow  # each is off by < 2^-1074
        norm = _norm_up(A)
        with precision(PRECISIONS[0]):
            rows = (norm + error) * Fraction(2) ** exponent
            upper = (as_arb(rows).root(power)).upper()
        bound = Fraction(float(np.nextafter(float(upper), np.inf)))
        best = bound if best is None else min(best, bound)
        if j == _SQUARINGS:
            break
        A = A @ A
        error = _up(float(2 * norm * error + error * error + gamma_n * norm * norm + underflow))
        exponent, power = 2 * exponent, 2 * power
    return best


# --------------------------------------------------------------------------------------------
# Reals: products and sums of proven numbers
# --------------------------------------------------------------------------------------------


def _times(a: Real, b: Real) -> Real:
    if a.exact is not None and b.exact is not None:
        return Real.rational(a.exact * b.exact, f"{a.formula} * {b.formula}")
    sa = a.square if a.square is not None else None if a.exact is None else a.exact**2
    sb = b.square if b.square is not None else None if b.exact is None else b.exact**2
    if sa is not None and sb is not None:
        return Real.sqrt_of(sa * sb, f"{a.formula} * {b.formula}")
    return Real(f"{a.formula} * {b.formula}", lambda: a.ball() * b.ball())


def _plus(a: Real, b: Real) -> Real:
    if a.exact is not None and b.exact is not None:
        return Real.rational(a.exact + b.exact, f"{a.formula} + {b.formula}")
    return Real(f"{a.formula} + {b.formula}", lambda: a.ball() + b.ball())


def _rational(value: Fraction, formula: str | None = None) -> Real:
    return Real.rational(Fraction(value), formula)


# --------------------------------------------------------------------------------------------
# The bounds of one stage
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bounds:
    """What the envelope needs of one stage: ``forward_sup`` (|y| bounded whatever the
    input) or ``slope``/``offset``; the max-norm and 2-norm gains; where the parameters
    came from (``source``)."""

    forward_sup: Real | None
    slope: Real | None
    offset: Fraction
    gain_max: Real | None
    gain_2: Real | None
    source: str
    #: A bound on the 2-norm of one output row (token), whatever the input (``row2_sup``),
    #: or ``row2_slope`` times the input row's bound plus ``row2_offset``: the attention's
    #: gains need it (a LayerNorm output row has 2-norm at most sqrt(D) max|gamma| + ...,
    #: far below sqrt(D) times the bound on its largest entry).
    row2_sup: Fraction | None = None
    row2_slope: Fraction | None = None
    row2_offset: Fraction = Fraction(0)


@dataclass(frozen=True)
class BlockConfig:
    """The block's sizes and parameter bounds (one value for every stage), and the weights
    (by name) that replace the bounds where given."""

    dim: int = 768
    hidden: int | None = None
    eps: float | None = None
    gamma_max: float = 1.0
    beta_max: float = 0.0
    weight_max: float = 1.0
    #: A bound on the 2-norm of every Linear and attention weight matrix not given by
    #: ``weights`` (None: only ``weight_max``, entrywise); both hold where both are set.
    weight_norm: float | None = None
    bias_max: float = 0.0
    batch: int = 32
    kernel: int = 3
    tokens: int = 8
    head: int | None = None
    input_max: float = 1.0
    weights: dict[str, np.ndarray] | None = field(default=None, repr=False)


def _stage_bounds(
    stage: Stage, width_in: int, cfg: BlockConfig, bound_in: Real | None, row2_in: Fraction | None
) -> tuple[_Bounds, int]:
    """The stage's :class:`_Bounds` and its output width (``bound_in``, ``row2_in``: the
    bounds on the input's entries and rows, which the attention's gains depend on)."""
    width_out = stage.width or width_in
    weights = cfg.weights or {}
    weight, bias = weights.get(f"{stage.name}.weight"), weights.get(f"{stage.name}.bias")
    base = Config(
        dim=width_in,
        eps=cfg.eps,
        gamma_max=cfg.gamma_max,
        beta_max=cfg.beta_max,
        weight_max=cfg.weight_max,
        bias_max=cfg.bias_max,
    )
    if stage.module in ("layernorm", "rmsnorm", "batchnorm"):
        if stage.width not in (None, width_in):
            raise ValueError(f"{stage.name}: a normalization keeps the width {width_in}")
        source = "bounds"
        if weight is not None:
            _check_shape(stage, weight, (width_in,), "weight (gamma)")
            base = replace(base, gamma_max=float(np.max(np.abs(weight))))
            source = "weights"
        if bias is not None:
            _check_shape(stage, bias, (width_in,), "bias (beta)")
            base = replace(base, beta_max=float(np.max(np.abs(bias))))
        if stage.module == "batchnorm":  # per feature, over M = batch values (N H W in 2d)
            return _from_model(stage.module, replace(base, dim=cfg.batch), source), width_out
        # |gamma * z + beta|_2 <= max|gamma| |z|_2 + |beta|_2 with |z|_2 <= sqrt(D)
        row2 = (_frac(base.gamma_max) + _frac(base.beta_max)) * _sqrt_up(width_in)
        return replace(_from_model(stage.module, base, source), row2_sup=row2), width_out
    if stage.module == "dp_attention":
        return _attention_bounds(stage, width_in, cfg, bound_in, row2_in), width_out
    if stage.module == "linear":
        if weight is None:
            model = _from_model("linear", replace(base, out_dim=width_out), "bounds")
            if cfg.weight_norm is not None:
                model = _normed(model, _frac(cfg.weight_norm), width_in, width_out)
            slope = _fraction_up(model.gain_2)  # the 2-norm of W
            offset = _frac(cfg.bias_max) * _sqrt_up(width_out)
            return replace(model, row2_slope=slope, row2_offset=offset), width_out
        _check_shape(stage, weight, (width_out, width_in), "weight")
        offset, offset2 = Fraction(0), Fraction(0)
        if bias is not None:
            _check_shape(stage, bias, (width_out,), "bias")
            offset = Fraction(float(np.max(np.abs(bias))))
            offset2 = _up(math.sqrt(math.fsum(bias * bias)) * (1 + 2.0**-50))
        rows, columns = _abs_sums(weight, 1), _abs_sums(weight, 0)
        bounds = _from_sums(rows, columns, offset, "row", "column")
        square = _spectral_square_up(weight)
        if square < bounds.gain_2.square:
            bounds = replace(bounds, gain_2=Real.sqrt_of(square, "||W||_2 (Gram powers)"))
        slope = _fraction_up(bounds.gain_2)
        return replace(bounds, row2_slope=slope, row2_offset=offset2), width_out
    if stage.module == "conv2d":
        if weight is None:
            model_cfg = replace(base, channels=width_in, out_dim=width_out, kernel=cfg.kernel)
            return _from_model("conv2d", model_cfg, "bounds"), width_out
        if weight.ndim != 4 or weight.shape[:2] != (width_out, width_in):
            raise ValueError(
                f"{stage.name}.weight: expected shape ({width_out}, {width_in}, k, k), got "
                f"{weight.shape}"
            )
        offset = Fraction(float(np.max(np.abs(bias)))) if bias is not None else Fraction(0)
        per_output = _abs_sums(weight.reshape(width_out, -1), 1)
        per_input = _abs_sums(np.moveaxis(weight, 1, 0).reshape(width_in, -1), 1)
        return _from_sums(per_output, per_input, offset, "output", "input"), width_out
    model = _from_model(stage.module, base, "elementwise")
    if model.forward_sup is not None:  # sigmoid: every entry below 1
        return replace(model, row2_sup=_sqrt_up(width_in)), width_out
    return replace(model, row2_slope=Fraction(1)), width_out  # |f(x)| <= |x| entrywise


def _smaller(a: Real | None, b: Real) -> Real:
    """The smaller of two upper bounds (by their rational upper bounds)."""
    return b if a is None or _fraction_up(b) < _fraction_up(a) else a


def _normed(model: _Bounds, s: Fraction, width_in: int, width_out: int) -> _Bounds:
    """A Linear's bounds where also ``||W||_2 <= s``: its 2-norm gain ``s``, its max-norm
    gain (the largest column sum of ``|W|``) at most ``sqrt(O) s`` and its forward slope
    (the largest row sum) at most ``sqrt(D) s``, since ``||W||_1 <= sqrt(rows) ||W||_2``
    and ``||W||_inf <= sqrt(columns) ||W||_2``."""
    return replace(
        model,
        slope=_smaller(model.slope, Real.sqrt_of(width_in * s * s, "sqrt(D) s")),
        gain_max=_smaller(model.gain_max, Real.sqrt_of(width_out * s * s, "sqrt(O) s")),
        gain_2=_smaller(model.gain_2, _rational(s, "s")),
    )


def _frac(value: float) -> Fraction:
    return Fraction(float(value))


def _sqrt_up(n: int) -> Fraction:
    """A rational upper bound of sqrt(n)."""
    return Fraction(float(np.nextafter(math.sqrt(n), np.inf)))


def _attention_bounds(
    stage: Stage, width: int, cfg: BlockConfig, bound_in: Real | None, row2_in: Fraction | None
) -> _Bounds:
    """DP attention ``Y = softmax(Q K^T / sqrt(d)) V`` over N tokens, ``Q = X Wq^T`` (d x D
    weights, likewise K, and V with Wv of D x D so that the width is kept), for inputs whose
    entries are at most R and whose rows have 2-norm at most rho. Per weight matrix: ``r``
    its largest row sum of ``|W|``, ``c`` its largest column sum, ``r2`` its largest row
    2-norm, ``s2`` the sum of its row 2-norms; then ``|Q_ic| <= min(r_q R, r2_q rho) =: Q``
    (likewise K), ``|V_kc| <= min(r_v R, r2_v rho)`` and ``|V_k|_1 <= min(A_v R, s2_v rho)
    =: M`` (``A_v`` the sum of all ``|Wv|``).

    Forward: each row of Y is a convex combination of rows of V, so ``max|Y| <= max|V|``, and
    its 2-norm is at most ``sigma(Wv) rho``. Backward, per unit of ``max|G|``:

    * ``dV = P^T G``: ``|dV| <= N`` (a column of P sums to at most N);
    * ``dP = G V^T``: ``|dP_ik| <= |V_k|_1 <= M``; ``dS = P (dP - rowsum(dP P))``:
      ``sum_k |dS_ik| <= 2 M`` and ``sum_i |dS_ik| <= 2 M N``;
    * ``dQ = dS K / sqrt(d)``: ``|dQ| <= 2 M K / sqrt(d)``; ``dK = dS^T Q / sqrt(d)``:
      ``|dK| <= 2 M N Q / sqrt(d)``;
    * ``dX = dQ Wq + dK Wk + dV Wv``: ``max|dX| <= |dQ| c_q + |dK| c_k + |dV| c_v``.

    The 2-norm: the smaller of :func:`_attention_gain_2` (the weights' 2-norms: the given
    weights' from :func:`_spectral_square_up`, bounds' ``w sqrt(rows cols)``) and
    ``sqrt(N D) ||J||_1`` (J has N D rows). Unbounded
    inputs (``R`` unknown) leave the gains unbounded: DP attention is not Lipschitz."""
    weights = cfg.weights or {}
    head = cfg.head or width
    shapes = {"wq": (head, width), "wk": (head, width), "wv": (width, width)}
    norms: dict[str, tuple[Fraction, ...]] = {}
    spectral: dict[str, Fraction] = {}  # upper bounds of ||W||_2^2
    source = "bounds"
    for key, (rows, cols) in shapes.items():
        W = weights.get(f"{stage.name}.{key}")
        if W is None:
            w = _frac(cfg.weight_max)
            row2 = w * _sqrt_up(cols)
            norms[key] = (cols * w, rows * w, rows * cols * w, row2, rows * row2)
            spectral[key] = w * w * rows * cols  # ||W||_2 <= ||W||_F
            if cfg.weight_norm is not None:  # ||W||_2 <= s: see _normed; |W|_F <= sqrt(r) s
                s, r = _frac(cfg.weight_norm), min(rows, cols)
                normed = (
                    _sqrt_up(cols) * s,
                    _sqrt_up(rows) * s,
                    _sqrt_up(rows * cols * r) * s,
                    s,
                    _sqrt_up(rows * r) * s,
                )
                norms[key] = tuple(map(min, norms[key], normed))
                spectral[key] = min(spectral[key], s * s)
            continue
        _check_shape(stage, W, (rows, cols), key)
        source = "weights"
        norms[key] = _of_weights("attention norms", W, _attention_norms)
        spectral[key] = min(norms[key][0] * norms[key][1], _spectral_square_up(W))
    (rq, cq, _, rq2, _), (rk, ck, _, rk2, _) = norms["wq"], norms["wk"]
    rv, cv, av, rv2, sv2 = norms["wv"]
    n = cfg.tokens
    if bound_in is None:
        return _Bounds(None, None, Fraction(0), None, None, source)
    R = bound_in.exact if bound_in.exact is not None else _fraction_up(bound_in)
    rho = row2_in if row2_in is not None else R * _sqrt_up(width)

    q, k = min(rq * R, rq2 * rho), min(rk * R, rk2 * rho)
    m, v = min(av * R, sv2 * rho), min(rv * R, rv2 * rho)
    inv_root = 1 / Fraction(float(np.nextafter(math.sqrt(head), 0)))  # >= 1/sqrt(d)
    gain = n * cv + 2 * m * inv_root * (k * cq + n * q * ck)
    # The 2-norm (see _attention_gain_2), against sqrt(N D) times the max-norm gain.
    sigma = {key: _fraction_up(Real.sqrt_of(square, key)) for key, square in spectral.items()}
    gain_2 = _attention_gain_2(n, sigma["wq"], sigma["wk"], sigma["wv"], n * rho * rho, inv_root)
    if gain_2 * gain_2 < gain * gain * n * width:
        gain_2_real = _rational(gain_2, "sqrt(N) s_v + s_q s_k s_v ||X||_F^2/sqrt(d)")
    else:
        gain_2_real = Real.sqrt_of(gain * gain * n * width, "sqrt(N D) * gain")
    return _Bounds(
        _rational(v, "max|V|"),
        None,
        Fraction(0),
        _rational(gain, "N c_v + 2 M (K c_q + N Q c_k)/sqrt(d)"),
        gain_2_real,
        source,
        row2_slope=min(sigma["wv"], _fraction_up(Real.sqrt_of(rv * cv, "sigma(Wv)"))),
    )


def _attention_norms(W: np.ndarray) -> tuple[Fraction, ...]:
    """Rounded up: the largest row and column sums of ``|W|``, the sum of all ``|W|``, the
    largest row 2-norm and the sum of the row 2-norms (see :func:`_attention_bounds`)."""
    lengths = [math.sqrt(math.fsum(r * r)) * (1 + 2.0**-50) for r in W]
    return (
        _up(_abs_sums(W, 1)),
        _up(_abs_sums(W, 0)),
        _up(math.fsum(np.abs(W).ravel())),
        _up(max(lengths)),
        _up(math.fsum(lengths) * (1 + 2.0**-50)),
    )


def _attention_gain_2(
    n: int, s_q: Fraction, s_k: Fraction, s_v: Fraction, x_square: Fraction, inv_root: Fraction
) -> Fraction:
    """A bound on the 2-norm of DP attention's Jacobian (over the N x D token matrix) for
    inputs with ``||X||_F^2 <= x_square``, from upper bounds ``s_*`` of the weights' 2-norms
    and ``inv_root >= 1/sqrt(d)``: ``sqrt(N) s_v + s_q s_k s_v x_square inv_root``.

    Proof, per unit of ``||G||_F`` (the Frobenius norm of the output gradient):

    * ``dV = P^T G``: ``||P||_2 <= sqrt(||P||_1 ||P||_inf) <= sqrt(N)`` (P's rows sum to 1,
      its columns to at most N), and ``dX`` gets ``dV Wv``: at most ``sqrt(N) s_v``;
    * ``dP = G V^T`` with ``||V||_2 <= s_v ||X||_2``; each row of ``dS`` is the softmax
      Jacobian ``diag(p) - p p^T`` of that row times the row of ``dP``, and that Jacobian
      is symmetric with ``v^T J v = Var_p(v) <= (max v - min v)^2/4 <= |v|^2/2``
      (Popoviciu), so ``||dS||_F <= ||dP||_F / 2``;
    * ``dQ = dS K/sqrt(d)`` and ``dK = dS^T Q/sqrt(d)`` with ``||K||_2 <= s_k ||X||_2``
      and ``||Q||_2 <= s_q ||X||_2``; ``dX`` gets ``dQ Wq + dK Wk``: at most
      ``2 (1/2) s_v s_k s_q ||X||_2^2/sqrt(d)``, and ``||X||_2^2 <= ||X||_F^2``."""
    root_n = _sqrt_up(n)
    return root_n * s_v + s_q * s_k * s_v * x_square * inv_root


def _fraction_up(r: Real) -> Fraction:
    """A rational upper bound of ``r`` (from its ball)."""
    with precision(PRECISIONS[0]):
        upper = r.ball().upper()
    return Fraction(float(np.nextafter(float(upper), np.inf)))


def _from_sums(forward: float, backward: float, offset: Fraction, out: str, into: str) -> _Bounds:
    """The bounds of a linear map from the largest sums of ``|W|`` per output (``forward``:
    ``max|y| <= forward max|x| + offset``) and per input (``backward``: the max-norm gain),
    both rounded up; the 2-norm by Hoelder, ``sqrt(|W|_1 |W|_inf)``."""
    forward_up, backward_up = _up(forward), _up(backward)
    return _Bounds(
        None,
        _rational(forward_up, f"max {out} sum |W|"),
        offset,
        _rational(backward_up, f"max {into} sum |W|"),
        Real.sqrt_of(forward_up * backward_up, "sqrt(|W|_1 |W|_inf)"),
        "weights",
    )


def _check_shape(stage: Stage, array: np.ndarray, shape: tuple[int, ...], what: str) -> None:
    if array.shape != shape:
        raise ValueError(f"{stage.name}.{what}: expected shape {shape}, got {array.shape}")


def _from_model(module: str, cfg: Config, source: str) -> _Bounds:
    model = models()[module](cfg)
    f = model.forward
    return _Bounds(
        f.sup,
        f.slope,
        Fraction(f.offset),
        model.gain_max.value,
        model.gain_2.value,
        source,
    )


# --------------------------------------------------------------------------------------------
# Composition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageBound:
    """One row of the envelope: ``label``; ``forward`` bounds ``max|y|`` at its output (None:
    unbounded); ``gain`` bounds the max-norm gain from the block's output gradient to the
    gradient at its input (None: unbounded); ``lemma3`` is the 2-norm product over the same
    path; ``safe`` the largest safe block output gradient for this stage alone."""

    label: str
    depth: int
    forward: Real | None
    forward_overflows: bool
    gain: Real | None
    lemma3: Real | None
    safe: Fraction | None
    source: str = ""
    witness_gain: float | None = None


@dataclass(frozen=True)
class BlockEnvelope:
    spec: str
    nodes: tuple[Node, ...]
    config: BlockConfig
    format: Format
    stages: tuple[StageBound, ...]
    witness_note: str = ""
    #: The witness point of the block input's row: input, parameters, and the sign pattern
    #: of the output gradient that realizes its gain (None without a witness).
    witness_point: tuple[np.ndarray, dict, np.ndarray] | None = field(default=None, repr=False)

    @property
    def binding(self) -> StageBound:
        """The stage with the smallest safe gradient (the first such, from the input)."""
        return min(self.stages, key=lambda s: math.inf if s.safe is None else s.safe)

    @property
    def safe(self) -> Fraction | None:
        return self.binding.safe

    def lines(self) -> list[str]:
        fmt, cfg = self.format, self.config
        given = (
            "parameters from the weights where named, within the bounds elsewhere"
            if cfg.weights
            else "parameters within the bounds"
        )
        out = [
            f"block {self.spec!r}; {fmt.name}: largest finite {_num(fmt.max_finite)}, "
            f"{fmt.overflow_rule}; inputs max|x| <= {cfg.input_max:g}; {given}.",
            "stage | forward: max|y| at its output (bound) | backward: max-norm gain from the "
            "block's output gradient to the gradient at its input (bound) | the same in the "
            "2-norm, Lemma 3's product | safe max|g| | witness gain (evidence)",
        ]
        for s in self.stages:
            witness = "" if s.witness_gain is None else f"{s.witness_gain:.6g}"
            ratio = ""
            if s.witness_gain and s.gain is not None:
                ratio = f" (bound / witness {float(s.gain) / s.witness_gain:.3g})"
            out.append(
                f"{'  ' * s.depth}{s.label} | {_short(s.forward)}"
                f"{' OVERFLOWS' if s.forward_overflows else ''} | {_short(s.gain)} | "
                f"{_short(s.lemma3)} | {'any' if s.safe is None else _num(s.safe)} | "
                f"{witness}{ratio}"
            )
        b = self.binding
        if b.safe == 0:
            hint = (
                ""
                if cfg.weights or cfg.weight_norm is not None
                else "; entrywise weight bounds allow rank-one matrices of 2-norm "
                "weight_max sqrt(rows columns): a bound on their 2-norm (--weight-norm) or "
                "the weights themselves (--weights) can prove one"
            )
            out.append(
                f"safe block output gradient: none proven; the bound on the gain at {b.label} "
                f"times the smallest positive {fmt.name} value already reaches the threshold "
                f"(the composition is an upper bound: see the witness for how far it is off)"
                f"{hint}."
            )
        elif b.safe is None:
            out.append(
                f"safe block output gradient: every finite {fmt.name} g; no stage's gradient "
                "can overflow."
            )
        else:
            out.append(
                f"safe block output gradient (loss scale): max|g| <= {_num(b.safe)}, bound by "
                f"{b.label} (proven: the composition of the per-module envelopes)."
            )
        overflowing = [s.label for s in self.stages if s.forward_overflows]
        out.append(
            "forward: "
            + (
                f"can overflow at {', '.join(overflowing)} for inputs within the bound."
                if overflowing
                else "no stage can overflow for inputs within the bound."
            )
        )
        if self.witness_note:
            out.append(self.witness_note)
        return out

    def as_dict(self) -> dict[str, Any]:
        def real(r: Real | None) -> dict[str, Any] | None:
            if r is None:
                return None
            lo, hi = r.enclosure()
            return {"value": r.decimal(), "enclosure": [lo, hi]}

        return {
            "spec": self.spec,
            "format": self.format.name,
            "input_max": self.config.input_max,
            "safe_output_gradient": None if self.safe is None else float(self.safe),
            "binding_stage": self.binding.label,
            "stages": [
                {
                    "label": s.label,
                    "forward_bound": real(s.forward),
                    "forward_overflows": s.forward_overflows,
                    "gain_max_norm": real(s.gain),
                    "lemma3_2_norm": real(s.lemma3),
                    "safe_output_gradient": None if s.safe is None else float(s.safe),
                    "witness_gain": s.witness_gain,
                    "parameters": s.source,
                }
                for s in self.stages
            ],
        }


def _num(value: Fraction) -> str:
    return f"{float(value):.6g}"


def _short(r: Real | None) -> str:
    return "unbounded" if r is None else f"{float(r):.6g}"


@dataclass
class _Walk:
    """The state of one pass over the nodes."""

    cfg: BlockConfig
    growth: Real  # 1 + 2^-p: one rounding to the format
    #: sqrt of the number of entries every stage's Jacobian maps onto (None: the 2-norm
    #: gains do not bound the max-norm ones; see _backward)
    root_out: Fraction | None = None


def _label(stage: Stage, width_in: int, width_out: int) -> str:
    size = f"{width_in} -> {width_out}" if width_out != width_in else f"{width_in}"
    return f"{stage.name} = {stage.module} ({size})"


def _forward(
    nodes: Sequence[Node],
    bound: Real | None,
    row2: Fraction | None,
    width: int,
    walk: _Walk,
    depth: int,
) -> tuple[Real | None, Fraction | None, int, list]:
    """Forward bounds after each node: on the entries (``bound``) and on the 2-norm of a
    row (``row2``); returns those at the output, the width, and the rows
    ``(label, depth, forward bound, stage bounds, node)`` in order."""
    rows = []
    growth = walk.growth.exact
    for node in nodes:
        if isinstance(node, Residual):
            inner_bound, inner_row2, inner_width, inner = _forward(
                node.branch, bound, row2, width, walk, depth + 1
            )
            if inner_width != width:
                raise ValueError(
                    f"block: a residual branch must keep the width {width}, its output is "
                    f"{inner_width} wide"
                )
            out = None if bound is None or inner_bound is None else _plus(bound, inner_bound)
            out = None if out is None else _times(out, walk.growth)
            both = None if row2 is None or inner_row2 is None else (row2 + inner_row2) * growth
            rows.append(("res", depth, out, None, node))
            rows.extend(inner)
            bound, row2 = out, _row2(both, out, width)
            continue
        b, width_out = _stage_bounds(node, width, walk.cfg, bound, row2)
        if b.forward_sup is not None:
            out = b.forward_sup
        elif bound is None or b.slope is None:
            out = None
        else:
            out = _plus(_times(b.slope, bound), _rational(b.offset))
        out = None if out is None else _times(out, walk.growth)
        if b.row2_sup is not None:
            row2 = b.row2_sup * growth
        elif row2 is not None and b.row2_slope is not None:
            row2 = (b.row2_slope * row2 + b.row2_offset) * growth
        else:
            row2 = None
        rows.append((_label(node, width, width_out), depth, out, b, node))
        bound, row2, width = out, _row2(row2, out, width_out), width_out
    return bound, row2, width, rows


def _row2(row2: Fraction | None, bound: Real | None, width: int) -> Fraction | None:
    """The tighter of a row 2-norm bound and sqrt(width) times the entry bound."""
    from_entries = None if bound is None else _fraction_up(bound) * _sqrt_up(width)
    if row2 is None or from_entries is None:
        return row2 if from_entries is None else from_entries
    return min(row2, from_entries)


def _backward(
    nodes: Sequence[Node],
    gains: tuple[Real | None, Real | None, Real | None],
    walk: _Walk,
    out: dict,
) -> tuple[Real | None, Real | None, Real | None]:
    """Gains from the block output to the input of each node (``out[id(node)]``), walking
    backwards; returns those at the input of ``nodes``. ``gains``: the max-norm gain, Lemma
    3's 2-norm product, and the 2-norm gain with the roundings' growth; where
    ``walk.root_out`` is set (every stage's Jacobian acts on the whole output, of at most
    ``root_out^2`` entries), the max-norm gain is also at most ``root_out`` times the
    2-norm one (``max|dx| <= |dx|_2 <= G_2 |g|_2 <= G_2 sqrt(n) max|g|``), and the smaller
    goes on."""
    gain, lemma, gain_2 = gains
    for node in reversed(nodes):
        if isinstance(node, Residual):
            # the branch's output gradient is the residual's: the walk continues into it
            branch = _backward(node.branch, (gain, lemma, gain_2), walk, out)
            gain = _residual(gain, branch[0], walk.growth)
            lemma = None if lemma is None or branch[1] is None else _plus(lemma, branch[1])
            gain_2 = _residual(gain_2, branch[2], walk.growth)
        else:
            b = out[id(node)][1]
            gain = _through(gain, b.gain_max, walk.growth)
            lemma = None if lemma is None or b.gain_2 is None else _times(lemma, b.gain_2)
            gain_2 = _through(gain_2, b.gain_2, walk.growth)
        if walk.root_out is not None and gain_2 is not None:
            via_2 = _times(gain_2, _rational(walk.root_out, "sqrt(n)"))
            if gain is None or _fraction_up(via_2) < _fraction_up(gain):
                gain = via_2
        out[id(node)] = (gain, out.get(id(node), (None, None))[1], lemma)
    return gain, lemma, gain_2


def _residual(gain: Real | None, branch: Real | None, growth: Real) -> Real | None:
    """The gain at a residual's input: ``(1 + branch) growth`` on the walk's scale."""
    return None if gain is None or branch is None else _times(_plus(gain, branch), growth)


def _through(gain: Real | None, stage: Real | None, growth: Real) -> Real | None:
    """The gain at a stage's input: the gain at its output times the stage's, rounded."""
    return None if gain is None or stage is None else _times(_times(gain, stage), growth)


_ONE = Real.rational(Fraction(1), "1")


def block_envelope(
    spec: str,
    dtype: str = "float16",
    *,
    witness: bool = True,
    witness_rounds: int | None = None,
    weights: str | Path | dict[str, np.ndarray] | None = None,
    **config: Any,
) -> BlockEnvelope:
    """The envelope of the block ``spec`` (a preset or a spec) in ``dtype`` for the
    configuration ``config`` (the fields of :class:`BlockConfig`); ``weights``: a file or a
    dict of arrays named ``<stage>.weight``/``<stage>.bias``. ``witness_rounds``: the
    witness search's parameter draws, four input spreads each (default 12 for dense
    Jacobians, 4 above :data:`WITNESS_WIDTH`)."""
    try:
        fmt = FORMATS[dtype]
    except KeyError:
        raise ValueError(f"dtype: expected one of {', '.join(FORMATS)}, got {dtype!r}") from None
    arrays = load_weights(weights) if isinstance(weights, str | Path) else weights
    cfg = BlockConfig(**config, weights=arrays)
    sizes = {"dim": cfg.dim, "batch": cfg.batch, "tokens": cfg.tokens, "kernel": cfg.kernel}
    sizes |= {k: v for k, v in (("hidden", cfg.hidden), ("head", cfg.head)) if v is not None}
    for name, value in sizes.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    bounds = ("input_max", "weight_max", "bias_max", "gamma_max", "beta_max", "weight_norm")
    for name in bounds:
        value = getattr(cfg, name)
        if name == "weight_norm" and value is None:
            continue
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    nodes = parse(spec, cfg.dim, cfg.hidden)
    growth = Real.rational(1 + Fraction(1, 2**fmt.precision), f"(1 + 2^-{fmt.precision})")
    walk = _Walk(cfg, growth)
    input_bound = Real.rational(Fraction(float(cfg.input_max)), f"{cfg.input_max:g}")
    row2 = _frac(cfg.input_max) * _sqrt_up(cfg.dim)
    _, _, width_out, rows = _forward(nodes, input_bound, row2, cfg.dim, walk, 0)
    found: dict[int, tuple] = {id(node): (None, bounds) for *_, bounds, node in rows}
    modules = {stage.module for stage in _flatten(nodes)}
    if modules <= set(_WITNESS_MODULES):  # token-wise stages and attention over the tokens
        entries = width_out * (cfg.tokens if "dp_attention" in modules else 1)
        walk = replace(walk, root_out=_sqrt_up(entries))
    block_gain, block_lemma, _ = _backward(nodes, (_ONE, _ONE, _ONE), walk, found)
    stages = [
        StageBound(
            "block input",
            0,
            input_bound,
            fmt.overflows(input_bound, Fraction(1)),
            block_gain,
            block_lemma,
            _safe(block_gain, fmt),
            "",
        )
    ]
    for label, depth, forward, bounds, node in rows:
        gain, _, lemma = found[id(node)]
        stages.append(
            StageBound(
                label,
                depth,
                forward,
                forward is not None and fmt.overflows(forward, Fraction(1)),
                gain,
                lemma,
                _safe(gain, fmt),
                "" if bounds is None else bounds.source,
            )
        )
    envelope = BlockEnvelope(spec, nodes, cfg, fmt, tuple(stages))
    if witness:
        envelope = _with_witness(envelope, witness_rounds)
    return envelope


def _safe(gain: Real | None, fmt: Format) -> Fraction | None:
    return Fraction(0) if gain is None else safe_gradient(gain, fmt)


# --------------------------------------------------------------------------------------------
# Witness (evidence): the chain of exact Jacobians at searched points, in float64
# --------------------------------------------------------------------------------------------


def _flatten(nodes: Sequence[Node]) -> list[Stage]:
    out: list[Stage] = []
    for node in nodes:
        out.extend(_flatten(node.branch) if isinstance(node, Residual) else [node])
    return out


def _tokens(envelope: BlockEnvelope) -> int:
    """The witness's token count: the configuration's with an attention, else 1."""
    stages = _flatten(envelope.nodes)
    return envelope.config.tokens if any(s.module == "dp_attention" for s in stages) else 1


def _image_shape(envelope: BlockEnvelope) -> tuple[int, int, int, int]:
    """The witness's batch for image stages: (N, C, s, s) with N s^2 = ``batch`` (the values
    BatchNorm normalizes over per channel), s the largest side up to 16 whose square
    divides it (a convolution's taps reach past its border at s >= 2)."""
    cfg = envelope.config
    side = max(s for s in range(1, 17) if cfg.batch % (s * s) == 0)
    return cfg.batch // (side * side), cfg.dim, side, side


def _witness_shape(envelope: BlockEnvelope) -> tuple[int, ...]:
    """The shape of the witness's block input: tokens x width, or an image batch."""
    if any(s.module in _IMAGE_MODULES for s in _flatten(envelope.nodes)):
        return _image_shape(envelope)
    return _tokens(envelope), envelope.config.dim


def _with_witness(envelope: BlockEnvelope, rounds: int | None = None) -> BlockEnvelope:
    stages = _flatten(envelope.nodes)
    runs = (*_WITNESS_MODULES, *_IMAGE_MODULES)
    if any(s.module not in runs for s in stages):
        note = "witness: not built (the witness runs these stages only: " + ", ".join(runs) + ")."
        return replace(envelope, witness_note=note)
    shape = _witness_shape(envelope)
    image = len(shape) == 4
    if image and math.prod(shape) > WITNESS_IMAGE:
        note = (
            f"witness: not built (an image batch of {' x '.join(map(str, shape))} values, "
            f"above {WITNESS_IMAGE})."
        )
        return replace(envelope, witness_note=note)
    widths = [envelope.config.dim] + [s.width for s in stages if s.width]
    dense = not image and _tokens(envelope) * max(widths) <= WITNESS_WIDTH
    if dense:
        best, trials, point = _search(envelope, _realized, rounds or 12)
    else:  # a few passes per point, but each pass runs the whole block
        best, trials, point = _search(envelope, _realized_by_passes, rounds or 4)
    labelled = [replace(s, witness_gain=g) for s, g in zip(envelope.stages, best, strict=True)]
    why = (
        f"image batches of {' x '.join(map(str, shape))} and, for near-constant inputs, "
        f"{shape[0] * shape[2] * shape[3]} x {shape[1]} x 1 x 1; convolutions padded to keep "
        "the size"
        if image
        else f"tokens x width above {WITNESS_WIDTH}"
    )
    what = (
        "the largest column sum of |J| from each stage's input to the block output (dense "
        "Jacobians)"
        if dense
        else f"|J^T g| at each stage's input for output gradients g of max|g| = 1 ({why}: "
        "no dense Jacobian; g is all ones or the signs of the block Jacobian's column at "
        "the largest input gradient, by central differences, and the kernels' VJPs give the "
        "gains)"
    )
    note = (
        f"witness (evidence, float64, {trials} points searched over inputs within max|x| <= "
        f"{envelope.config.input_max:g} and over parameters within their bounds): {what}; "
        "the proven gain is at least it."
    )
    return replace(envelope, stages=tuple(labelled), witness_note=note, witness_point=point)


def _search(
    envelope: BlockEnvelope,
    realized: Callable[..., tuple[list[float], np.ndarray]],
    rounds: int = 12,
) -> tuple[list[float], int, tuple]:
    """The best realized gain per envelope row over a small search (evidence: ``rounds``
    parameter draws, every third at the bounds, each at four input spreads), the number of
    points tried, and the point of the best gain at the block input."""
    cfg = envelope.config
    rng = np.random.default_rng(20261126)
    best = [0.0] * len(envelope.stages)
    trials = 0
    point: tuple = ()
    full = _witness_shape(envelope)
    # a centre per token row (LayerNorm's gain peaks at near-constant rows), or per channel
    # (BatchNorm's, at near-constant channels); near-constant image batches are 1 x 1 maps,
    # where a padded convolution keeps a channel constant (BatchNorm after it peaks too)
    centres = (full[0], 1) if len(full) == 2 else (1, full[1], 1, 1)
    flat = full if len(full) == 2 else (cfg.batch, full[1], 1, 1)
    for trial in range(rounds):
        params = _parameters(envelope, rng, extremal=trial % 3 == 0)
        for spread in (1e-6, 1e-3, 1e-1, 1.0):
            shape = flat if spread < 1e-2 else full
            centre = rng.uniform(-1, 1, centres) * (1 - spread)
            x = cfg.input_max * np.clip(centre + spread * rng.uniform(-1, 1, shape), -1, 1)
            gains, signs = realized(envelope, params, x)
            if gains[0] > best[0]:
                point = (x, params, signs)
            best = [max(a, b) for a, b in zip(best, gains, strict=True)]
            trials += 1
    return best, trials, point


def _parameters(envelope: BlockEnvelope, rng, extremal: bool) -> dict[str, np.ndarray]:
    """Parameters for every stage: the file's where it names them, else random within the
    bounds (``extremal``: every entry at its bound, positive; under ``weight_norm`` the
    matrices come from :func:`_within_norm`)."""
    cfg = envelope.config
    given = cfg.weights or {}
    out: dict[str, np.ndarray] = {}
    width = cfg.dim
    for stage in _flatten(envelope.nodes):
        width_out = stage.width or width
        if stage.module == "linear":
            parts = {"weight": ((width_out, width), cfg.weight_max)}
            parts["bias"] = ((width_out,), cfg.bias_max)
        elif stage.module in ("layernorm", "rmsnorm", "batchnorm"):
            parts = {"weight": ((width,), cfg.gamma_max), "bias": ((width,), cfg.beta_max)}
        elif stage.module == "conv2d":
            size = (width_out, width, cfg.kernel, cfg.kernel)
            parts = {"weight": (size, cfg.weight_max), "bias": ((width_out,), cfg.bias_max)}
        elif stage.module == "dp_attention":
            head = cfg.head or width
            parts = {
                "wq": ((head, width), cfg.weight_max),
                "wk": ((head, width), cfg.weight_max),
                "wv": ((width, width), cfg.weight_max),
            }
        else:
            parts = {}
        for part, (size, bound) in parts.items():
            key = f"{stage.name}.{part}"
            if key in given:
                out[key] = given[key]
                continue
            if len(size) == 2 and cfg.weight_norm is not None:
                out[key] = _within_norm(size, bound, cfg.weight_norm, rng, extremal)
            elif extremal:  # every entry at its bound, one sign: Linear's column sums peak
                out[key] = np.full(size, bound)
            else:
                out[key] = bound * rng.choice((-1.0, 1.0), size=size) * rng.uniform(0, 1, size)
        width = width_out
    return out


def _within_norm(size: tuple[int, int], bound: float, norm: float, rng, extremal: bool):
    """A matrix with 2-norm at most ``norm`` and entries at most ``bound``: random within
    the entry bound and scaled into the norm, or (``extremal``) every singular value at
    ``norm`` (an orthonormal factor of a Gaussian matrix, scaled; a one-sign matrix would
    be rank one, which LayerNorm's zero-mean rows annihilate)."""
    if extremal:
        q, _ = np.linalg.qr(rng.standard_normal(size if size[0] >= size[1] else size[::-1]))
        W = norm * (q if size[0] >= size[1] else q.T)
    else:
        W = bound * rng.choice((-1.0, 1.0), size=size) * rng.uniform(0, 1, size)
    top = float(np.linalg.norm(W, 2)) / norm
    largest = float(np.max(np.abs(W))) / bound if bound > 0 else math.inf
    shrink = max(top, largest)
    return W / (shrink * (1 + 1e-12)) if shrink > 1 else W


def _block_diagonal(blocks: Sequence[np.ndarray]) -> np.ndarray:
    rows, cols = sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks)
    out = np.zeros((rows, cols))
    r = c = 0
    for b in blocks:
        out[r : r + b.shape[0], c : c + b.shape[1]] = b
        r, c = r + b.shape[0], c + b.shape[1]
    return out


def _realized(
    envelope: BlockEnvelope, params: dict, x: np.ndarray
) -> tuple[list[float], np.ndarray]:
    """For each envelope row, the largest column sum of |J| from its input to the output
    (activations are (tokens, width) matrices, Jacobians act on them flattened in C order),
    and the signs of the block Jacobian's largest column: the output gradient that gives
    it."""
    from kernels import dp_attention

    cfg = envelope.config
    norms, activations = _kernel_tables()
    jacobians: dict[int, np.ndarray] = {}

    def run(nodes: Sequence[Node], v: np.ndarray) -> np.ndarray:
        """The output of ``nodes`` at ``v``; each node's Jacobian into ``jacobians``."""
        for node in nodes:
            if isinstance(node, Residual):
                out = run(node.branch, v)
                chain = np.eye(v.size)
                for inner in node.branch:
                    chain = jacobians[id(inner)] @ chain
                jacobians[id(node)] = np.eye(v.size) + chain
                v = v + out
            elif node.module == "linear":
                W, b = params[f"{node.name}.weight"], params[f"{node.name}.bias"]
                jacobians[id(node)] = np.kron(np.eye(v.shape[0]), W)
                v = v @ W.T + b
            elif node.module == "dp_attention":
                Wq, Wk, Wv = (params[f"{node.name}.{k}"] for k in ("wq", "wk", "wv"))
                jacobians[id(node)] = dp_attention.jacobian(v, Wq, Wk, Wv)
                v = dp_attention.forward(v, Wq, Wk, Wv)
            elif node.module in norms:
                kernel, default = norms[node.module]
                g, b = params[f"{node.name}.weight"], params[f"{node.name}.bias"]
                eps = default if cfg.eps is None else cfg.eps
                jacobians[id(node)] = _block_diagonal([kernel.jacobian(r, g, b, eps) for r in v])
                v = kernel.forward(v, g, b, eps)
            else:
                kernel, options = activations[node.module]
                jacobians[id(node)] = np.diag(kernel.derivative(v, **options).ravel())
                v = kernel.forward(v, **options)
        return v

    to_output: dict[int, np.ndarray] = {}

    def back(nodes: Sequence[Node], after: np.ndarray) -> np.ndarray:
        """``after``: the Jacobian from the output of ``nodes`` to the block's output."""
        for node in reversed(nodes):
            if isinstance(node, Residual):
                back(node.branch, after)  # y = x + f(x): f's output meets y directly
            after = after @ jacobians[id(node)]
            to_output[id(node)] = after
        return after

    out = run(envelope.nodes, np.asarray(x, dtype=np.float64))
    total = back(envelope.nodes, np.eye(out.size))
    columns = [total] + [to_output[id(node)] for node in _row_nodes(envelope.nodes)]
    column = int(np.argmax(np.sum(np.abs(total), axis=0)))
    signs = np.where(total[:, column] < 0, -1.0, 1.0).reshape(out.shape)
    return [float(np.max(np.sum(np.abs(J), axis=0))) for J in columns], signs


def _realized_by_passes(
    envelope: BlockEnvelope, params: dict, x: np.ndarray
) -> tuple[list[float], np.ndarray]:
    """What :func:`_realized` gives, without dense Jacobians: for each envelope row, the
    largest ``max|J^T g|`` at its input over two output gradients g of max-norm 1: all
    ones, and the sign pattern of the block Jacobian's column at the input entry where the
    first gives the largest gradient (by central differences of the float64 block
    forward); the kernels' VJPs give the gradients. Each value is a realized gain (a lower
    bound of the row's), as the dense one is; the second g realizes the block input's
    column sum exactly when the differences get every sign right."""
    passes = _Passes(envelope, params)
    x = np.asarray(x, dtype=np.float64)
    rows: list[Node | None] = [None, *_row_nodes(envelope.nodes)]  # None: the block input

    def gradients(g: np.ndarray) -> list[np.ndarray]:
        """The gradient at each row's input from ``g`` at the output (at ``x``)."""
        passes.forward(x)
        dx = passes.backward(g)
        return [dx if r is None else passes.grads[id(r)] for r in rows]

    ones = np.ones_like(passes.forward(x))
    candidates = [ones]
    # the sign pattern of the block Jacobian's column at the block input's largest gradient
    gradient = gradients(ones)[0]
    bump = np.zeros_like(x)
    bump[np.unravel_index(int(np.argmax(np.abs(gradient))), x.shape)] = 2.0**-30 * max(
        1.0, float(np.max(np.abs(x)))
    )
    column = passes.forward(x + bump) - passes.forward(x - bump)
    candidates.append(np.where(column < 0, -1.0, 1.0))
    best, best_signs = [0.0] * len(rows), ones
    for g in candidates:
        found = [float(np.max(np.abs(h))) for h in gradients(g)]
        if found[0] > best[0]:
            best_signs = g
        best = [max(a, b) for a, b in zip(best, found, strict=True)]
    return best, best_signs


def _kernel_tables() -> tuple[dict[str, tuple], dict[str, tuple]]:
    """The kernels of the row-wise stages: the normalizations with their default eps, and
    the activations with their keyword arguments."""
    from kernels import batchnorm, gelu, layernorm, relu, rmsnorm, sigmoid, swish

    # the same call for each: forward(x, weight, bias, eps), vjp(x, g, weight, bias, eps)
    norms = {
        "layernorm": (layernorm, 1e-5),
        "rmsnorm": (rmsnorm, 1e-6),
        "batchnorm": (batchnorm, 1e-5),  # training mode, over N H W per channel
    }
    activations = {
        "relu": (relu, {}),
        "sigmoid": (sigmoid, {}),
        "swish": (swish, {}),
        "gelu": (gelu, {}),
        "gelu_tanh": (gelu, {"approximate": "tanh"}),
        "gelu_sigmoid": (gelu, {"approximate": "sigmoid"}),
    }
    return norms, activations


def _row_nodes(nodes: Sequence[Node]) -> list[Node]:
    """The nodes in the order of the envelope's rows (a residual before its branch)."""
    out: list[Node] = []
    for node in nodes:
        out.append(node)
        if isinstance(node, Residual):
            out.extend(_row_nodes(node.branch))
    return out


class _Passes:
    """Forward and backward passes of the block through the kernels, node by node: the
    input of every node (``inputs``) and the gradient at it (``grads``). ``narrow`` rounds
    an array to the pass's format, ``settle`` stores a stage's output as the format keeps
    it, ``plus`` is the residual add; the float64 pass (the default) keeps every value."""

    def __init__(
        self,
        envelope: BlockEnvelope,
        params: dict[str, np.ndarray],
        narrow: Callable[[np.ndarray], np.ndarray] = lambda a: a,
        settle: Callable[[np.ndarray], np.ndarray] = lambda a: a,
        plus: Callable[[np.ndarray, np.ndarray], np.ndarray] = np.add,
    ) -> None:
        self.nodes, self.cfg = envelope.nodes, envelope.config
        self.p = {k: narrow(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
        self.narrow, self.settle, self.plus = narrow, settle, plus
        self.norms, self.activations = _kernel_tables()
        self.inputs: dict[int, np.ndarray] = {}
        self.grads: dict[int, np.ndarray] = {}
        self.finite = True

    def _eps(self, module: str) -> float:
        return self.norms[module][1] if self.cfg.eps is None else self.cfg.eps

    def forward(self, v: np.ndarray, nodes: Sequence[Node] | None = None) -> np.ndarray:
        """The output of ``nodes`` (the block's by default) at ``v``."""
        from kernels import conv2d, dp_attention, linear

        p = self.p
        for node in self.nodes if nodes is None else nodes:
            self.inputs[id(node)] = v
            if isinstance(node, Residual):
                v = self.plus(v, self.forward(v, node.branch))
            elif node.module == "linear":
                v = linear.forward(v, p[f"{node.name}.weight"], p[f"{node.name}.bias"])
            elif node.module == "conv2d":
                W = p[f"{node.name}.weight"]
                v = conv2d.forward(v, W, p[f"{node.name}.bias"], padding=W.shape[-1] // 2)
            elif node.module == "dp_attention":
                v = dp_attention.forward(v, *(p[f"{node.name}.{k}"] for k in ("wq", "wk", "wv")))
            elif node.module in self.norms:
                kernel = self.norms[node.module][0]
                weight, bias = p[f"{node.name}.weight"], p[f"{node.name}.bias"]
                v = kernel.forward(v, weight, bias, self._eps(node.module))
            else:
                kernel, options = self.activations[node.module]
                v = kernel.forward(v, **options)
            v = self.settle(v)
        return v

    def backward(self, g: np.ndarray, nodes: Sequence[Node] | None = None) -> np.ndarray:
        """The gradient at the input of ``nodes`` (the block's by default) from ``g`` at
        their output, at the inputs of the last :meth:`forward`."""
        from kernels import conv2d, dp_attention, linear

        p = self.p
        for node in reversed(self.nodes if nodes is None else nodes):
            v = self.inputs[id(node)]
            if isinstance(node, Residual):
                g = self.plus(g, self.backward(g, node.branch))
            elif node.module == "linear":
                g = linear.vjp(v, g, p[f"{node.name}.weight"], p[f"{node.name}.bias"])[0]
            elif node.module == "conv2d":
                W = p[f"{node.name}.weight"]
                bias = p[f"{node.name}.bias"]
                g = conv2d.vjp(v, g, W, bias, padding=W.shape[-1] // 2)[0]
            elif node.module == "dp_attention":
                weights = (p[f"{node.name}.{k}"] for k in ("wq", "wk", "wv"))
                g = dp_attention.vjp(v, g, *weights)[0]
            elif node.module in self.norms:
                kernel = self.norms[node.module][0]
                weight, bias = p[f"{node.name}.weight"], p[f"{node.name}.bias"]
                g = kernel.vjp(v, g, weight, bias, self._eps(node.module))[0]
            else:
                kernel, options = self.activations[node.module]
                g = kernel.vjp(v, g, **options)
            g = self.settle(g)
            self.grads[id(node)] = g
            self.finite = self.finite and bool(np.isfinite(g.astype(np.float64)).all())
        return g


def kernel_check(envelope: BlockEnvelope, size: Fraction | float) -> dict[str, Any]:
    """The block's forward and backward pass through the kernels in the envelope's format
    (mixed mode; the residual adds by :func:`kernels.cast.add`), at the witness point with
    the output gradient ``size`` times its sign pattern: the largest ``|dx|`` at the block
    input and whether every gradient on the way stayed finite. float16, bfloat16 and
    float32 run the kernels in that format; the FP8 formats, which the kernels do not take,
    run the float64 kernels on FP8 values and round every stage's output (and each
    residual sum) once to the format, which is mixed mode."""
    from kernels import cast as glue

    if envelope.witness_point is None:
        raise ValueError(f"no witness to run: {envelope.witness_note}")
    name = envelope.format.name
    fp8 = name.startswith("float8")
    x, params, signs = envelope.witness_point

    def narrow(a: np.ndarray) -> np.ndarray:
        if name == "float32":
            return a.astype(np.float32)
        rounded = glue.cast(a, name)
        return rounded.astype(np.float64) if fp8 else rounded  # FP8 values, held exactly

    def settle(a: np.ndarray) -> np.ndarray:
        """A stage's output as mixed mode stores it: FP8 rounds the float64 kernel's result
        once; the other formats' kernels have rounded it already."""
        return narrow(a) if fp8 else a

    def plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if name == "float32":
            return a + b
        return narrow(a + b) if fp8 else glue.add(a, b)  # FP8 + FP8 is exact in float64

    passes = _Passes(envelope, params, narrow, settle, plus)
    with np.errstate(over="ignore", invalid="ignore"):
        passes.forward(narrow(np.asarray(x, dtype=np.float64)))
        dx = passes.backward(narrow(float(size) * signs)).astype(np.float64)
    return {
        "size": float(size),
        "max_abs_dx": float(np.max(np.abs(dx))),
        "finite": passes.finite and bool(np.isfinite(dx).all()),
    }
