r"""Certified spectral norms: dense matrices, convolutions and pooling (Table 2 of seed 001).

Every bound returned here is an exact rational, established by rigorous arithmetic
(python-flint ``arb``/``acb`` balls and exact ``fmpz`` integers); floating point (NumPy)
only *proposes* eigenvectors, singular vectors and witnesses, which are then certified.
Each result carries ``steps()`` -- :class:`proofs.core.Step` s whose checks re-run the
computation -- and ``proof(claim)``.

* :func:`sigma_max` -- the largest singular value of a real matrix.
* :func:`conv_circular_lipschitz` -- the operator 2-norm of a multi-channel 2-D
  cross-correlation with circular padding, through the 2-D DFT (any stride).
* :func:`conv_zero_padding_bounds` -- bounds for zero padding (PyTorch's default mode).
* :func:`avgpool2d_lipschitz`, :func:`maxpool2d_lipschitz` -- windowed pooling, exactly;
  :func:`avgpool_lipschitz_limit` -- the average-pooling constant for large inputs.
* :func:`exact_lambda_max` -- the largest eigenvalue of a symmetric integer matrix as an
  algebraic number (SymPy string) with an arb enclosure.
* :func:`dense_conv_matrix` -- a convolution's dense matrix from the definition (float64).

Inputs are taken exactly: a float is the binary rational it stores; ints and Fractions
are exact. Layout: numerator layout, ``A[y_index, x_index]``, images flattened in C order
(``x[c, r, q]`` at ``c*H*W + r*W + q``, ``y[o, i, j]`` likewise), as in PyTorch.

**Convolution** (PyTorch ``conv2d``: cross-correlation, dilation 1, groups 1; a bias does
not change a Lipschitz constant). With weights ``W`` of shape (O, C, Kh, Kw), stride
``(sh, sw)`` and padding ``(ph, pw)``::

    y[o, i, j] = sum_{c, a, b} W[o, c, a, b] * xp[c, sh*i + a, sw*j + b]

where ``xp`` is ``x`` padded by ``p`` on each side -- with zeros (``padding_mode="zeros"``)
or periodically (``"circular"``: ``xp[c, u, v] = x[c, (u - ph) % H, (v - pw) % W]``) -- and
``i < OH = (H + 2 ph - Kh) // sh + 1`` (floor). ``"periodic"`` is the operator on the torus
studied by :func:`conv_circular_lipschitz`: the circular formula for every
``i < H / sh``, ``j < W / sw`` (``sh | H``, ``sw | W``). It *is* PyTorch's circular mode
whenever ``Kh - sh <= 2 ph <= Kh - 1`` (and likewise for w), because then ``OH = H / sh``;
its singular values do not depend on ``p`` (a circular shift of the input is orthogonal).

**Fourier analysis** (verified against dense matrices in ``tests/proofs/test_spectral.py``). Put
``What(k) = sum_{a,b} W[:, :, a, b] exp(2 pi i (a k1 / H + b k2 / W))`` (O x C). A plane wave
``x[c, r, q] = u_c exp(2 pi i (k1 r / H + k2 q / W))`` is mapped to
``y[:, i, j] = exp(-2 pi i (k1 ph / H + k2 pw / W)) exp(2 pi i (l1 i / m1 + l2 j / m2)) What(k) u``
with ``m = (H / sh, W / sw)`` and ``l = k mod m`` (aliasing:
``exp(2 pi i k1 sh i / H) = exp(2 pi i l1 i / m1)`` since ``(k1 - l1) sh i / H`` is an
integer). Normalising the waves (norms ``sqrt(H W)`` and ``sqrt(m1 m2)``), ``A`` maps the
``sh*sw`` input frequencies ``k = l + m*t`` (``t`` in ``[0, sh) x [0, sw)``) onto output
frequency ``l`` by the O x (C sh sw) matrix ``B_l = [What(l + m*t)]_t / sqrt(sh sw)``;
waves of different frequencies are orthogonal, so ``||A||_2 = max_l sigma_max(B_l)``. With
stride 1 that is ``max_k sigma_max(What(k))``. As ``W`` is real, ``What(-k)`` is the
complex conjugate of ``What(k)``: ``B_{-l}`` is ``conj(B_l)`` up to a column permutation,
and only half of the ``l`` are computed.

**The largest eigenvalue of a Hermitian positive semidefinite matrix** ``G`` (a Gram
matrix ``B^H B``) is enclosed by one of two certified methods:

* ``"eig"`` -- ``acb_mat.eig(multiple=True)``: balls that together contain every
  eigenvalue, each ball at least one; ``lambda_max`` lies between the largest lower and
  the largest upper end of their real parts. Cost grows fast (about 1 s at n = 64).
* ``"congruence"`` -- a float eigenbasis ``Q`` (NumPy ``eigh``) and a Schur-complement
  certificate in ball arithmetic, n^3 work in C. With ``M = Q^H G Q`` and ``N = Q^H Q``,
  the top cluster ``I`` of float eigenvalues is first improved by one Jacobi step
  (``Q_I <- Q_I + Q_R X``, ``X_ji = -(M_ji - theta_i N_ji) / (M_jj - theta_i N_jj)``, which
  squares the coupling to the rest ``R``). The Ritz values of the pencil
  ``(M_II, N_II)`` bound ``lambda_max`` from below (Courant--Fischer); for the upper bound
  ``mu``, ``mu N - M = Q^H (mu I - G) Q = [[A, B], [B^H, C]]`` is positive semidefinite
  when ``Q`` is nonsingular (Gershgorin on ``N``), ``lambda_min(C) >= c > 0`` (Gershgorin)
  and ``(mu - theta_max) lambda_min(N_II) >= ||B||_F^2 / c`` (then
  ``A - B C^{-1} B^H >= 0``). The width is about ``||B||_F^2 / gap`` with ``||B||_F`` of
  order ``u^2 ||G||`` after the Jacobi step, so it is set by the working precision (about
  1e-58 relative at 200 bits in the tests). The top cluster (float eigenvalues within
  :data:`CLUSTER_GAP`, at most :data:`EIG_LIMIT` of them) is resolved by acb eig on the
  small pencil, so repeated top singular values are no obstacle.

A Gershgorin enclosure (``max_i G_ii <= lambda_max <= max_i sum_j |G_ij|``) is the last
resort when both fail (e.g. a block that is 0 up to rounding); the result names the
method used. For a convolution every frequency is first certified at
:data:`SCREEN_PREC` bits; those whose upper bound reaches the largest lower bound are
certified again at full precision (and the largest also by acb eig, the enclosures
intersected), so the reported ``hi`` is the maximum of certified upper bounds over *all*
frequencies.

**Exact closed forms.** Where the phases at the maximizing frequency are powers of ``i``
(``4 k = 0 mod n`` on each axis with a kernel wider than 1: frequency 0, half and quarter
periods) the block is exact over the
Gaussian integers; its real embedding ``[[Re, -Im], [Im, Re]]`` has an integer Gram
matrix, whose largest eigenvalue :func:`exact_lambda_max` writes as a SymPy string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce
from itertools import product

import numpy as np
import sympy as sp
from flint import acb, acb_mat, arb, arb_mat, fmpq, fmpz_mat, fmpz_poly

from proofs.arb import (
    DEFAULT_PREC,
    SearchFailed,
    certify_unique_root,
    endpoints,
    interval,
    point,
    to_decimal,
    working_precision,
)
from proofs.core import Proof, Step

#: Largest Gram dimension handed to ``acb_mat.eig`` by ``method="auto"`` (about 1 s).
EIG_LIMIT = 64
#: Largest dense Gram dimension (min of input and output size) for the dense route of
#: :func:`conv_zero_padding_bounds`; beyond it the circular embedding bounds it.
DENSE_LIMIT = 1200
#: Largest number of entries of a dense operator built by :func:`conv_zero_padding_bounds`.
DENSE_ENTRIES = 4_000_000
#: Largest Gram dimension given an exact algebraic closed form in :func:`conv_circular_lipschitz`.
EXACT_LIMIT = 12
#: Weights count as simple (worth a closed form) with at most this many bits, before and
#: after the binary point.
EXACT_BITS = 24
#: Precision (bits) of the first sweep over the frequencies of a circular convolution.
SCREEN_PREC = 64
#: Float eigenvalues closer than this (relative to the largest) form the top cluster.
CLUSTER_GAP = 1e-7
#: Significant digits of the decimal strings (at least 30 are promised).
DIGITS = 40
#: Lanczos steps per restart, and restarts, for the zero-padding witness.
LANCZOS_STEPS = 60
LANCZOS_RESTARTS = 6

_METHODS = ("auto", "eig", "congruence")
_PADDING_MODES = ("zeros", "circular", "periodic")


class SpectralError(ArithmeticError):
    """A certificate could not be completed (cluster too large, enclosure too wide)."""


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Bounds:
    """Certified bounds ``lo <= value <= hi`` (exact rationals)."""

    lo: Fraction
    hi: Fraction

    def ball(self, prec: int = DEFAULT_PREC) -> arb:
        """An arb ball containing ``[lo, hi]``."""
        with working_precision(prec):
            return interval(self.lo, self.hi)

    def decimal(self, digits: int = DIGITS) -> tuple[str, str]:
        """``lo`` rounded down and ``hi`` rounded up to ``digits`` significant digits."""
        return to_decimal(self.lo, digits, "floor"), to_decimal(self.hi, digits, "ceiling")

    def contains(self, value: float | Fraction | int) -> bool:
        """True iff the exact value of ``value`` lies in ``[lo, hi]``."""
        q = Fraction(value)
        return self.lo <= q <= self.hi

    @property
    def relative_width(self) -> float:
        """``(hi - lo) / hi`` as a float (0 for the zero enclosure)."""
        return float((self.hi - self.lo) / self.hi) if self.hi else 0.0

    def __str__(self) -> str:
        lo, hi = self.decimal()
        return f"[{lo}, {hi}]"

    def steps(self) -> tuple[Step, ...]:
        raise NotImplementedError

    def proof(self, claim: str | None = None) -> Proof:
        """The claim (default: the enclosure itself) with :meth:`steps`."""
        lo, hi = self.decimal()
        return Proof(claim or f"the value lies in [{lo}, {hi}]", self.steps())


def _as_bounds(lam_lo: Fraction, lam_hi: Fraction, scale: Fraction, prec: int):
    """Bounds on ``sqrt(lambda * scale)`` from bounds on ``lambda`` (outward rounding)."""
    with working_precision(prec):
        lo = max(lam_lo * scale, Fraction(0))
        hi = lam_hi * scale
        low = endpoints(point(lo).sqrt(), prec=prec)[0] if lo > 0 else Fraction(0)
        high = endpoints(point(hi).sqrt(), prec=prec)[1] if hi > 0 else Fraction(0)
    return max(low, Fraction(0)), high


def _sqrt_lower(q: Fraction, prec: int) -> Fraction:
    """A rational lower bound of ``sqrt(q)``."""
    return _as_bounds(q, q, Fraction(1), prec)[0]


# --------------------------------------------------------------------------------------
# Exact input conversion and validation
# --------------------------------------------------------------------------------------


def _scaled_integers(values: np.ndarray) -> tuple[list[int], int]:
    """Integers ``n`` and ``e`` with ``values.ravel() == n * 2**e`` exactly (finite floats).

    >>> _scaled_integers(np.array([0.75, -2.0, 0.0]))
    ([3, -8, 0], -2)
    """
    flat = np.ascontiguousarray(values, dtype=np.float64).ravel()
    mantissas, exponents = np.frexp(flat)
    ints = np.ldexp(mantissas, 53).astype(np.int64)  # exact: |m| < 1 has 53 bits
    exponents = exponents.astype(np.int64) - 53
    nonzero = ints != 0
    if not nonzero.any():
        return [0] * flat.size, 0
    lowest = ints & -ints  # the lowest set bit (two's complement), a power of 2
    zeros = np.zeros_like(ints)
    trailing = np.where(nonzero, np.log2(np.where(nonzero, lowest, 1)).astype(np.int64), zeros)
    odd = np.where(nonzero, ints >> trailing, zeros)
    valuation = exponents + trailing
    base = int(valuation[nonzero].min())
    shifts = np.where(nonzero, valuation - base, zeros)
    return [int(m) << int(s) for m, s in zip(odd.tolist(), shifts.tolist(), strict=True)], base


def _to_float64(values, name: str, ndim: int) -> np.ndarray:
    """A float64 copy of a real numeric array, refusing inexact or unusable input."""
    if isinstance(values, np.ndarray):
        array = values
    else:
        try:
            array = np.asarray(values)
        except (ValueError, TypeError) as error:
            raise TypeError(f"{name} must be a real numeric array: {error}") from None
    kind = array.dtype.kind
    if kind == "f":
        result = array.astype(np.float64)
    elif kind in "iu":
        result = array.astype(np.float64)
        if not np.array_equal(result.astype(array.dtype), array):
            raise ValueError(f"{name} has integers that float64 cannot hold exactly")
    else:
        raise TypeError(f"{name} must be a real float or integer array, got dtype {array.dtype}")
    if result.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {result.shape}")
    if 0 in result.shape:
        raise ValueError(f"{name} must not be empty, got shape {result.shape}")
    if not np.all(np.isfinite(result)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return result


@dataclass(frozen=True, eq=False)
class _ExactMatrix:
    """A real matrix ``integers / denominator`` and a float approximation."""

    integers: fmpz_mat
    denominator: int
    approx: np.ndarray


def _exact_matrix(values) -> _ExactMatrix:
    """Convert a float/int array or a nested list of ints/Fractions/floats exactly."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        array = _to_float64(values, "W", 2)
        ints, base = _scaled_integers(array)
        if base >= 0:
            ints, denominator = [n << base for n in ints], 1
        else:
            denominator = 1 << -base
        rows, cols = array.shape
        return _ExactMatrix(fmpz_mat(rows, cols, ints), denominator, array)
    if isinstance(values, np.ndarray) and values.dtype != object:
        raise TypeError(f"W must be real, got dtype {values.dtype}")
    try:
        rows = [list(row) for row in values]
    except TypeError:
        raise TypeError("W must be a 2-D matrix (an array or a list of rows)") from None
    if not rows or not rows[0] or any(len(row) != len(rows[0]) for row in rows):
        raise ValueError("W must be a non-empty rectangular matrix")
    fractions = [[_exact_entry(v) for v in row] for row in rows]
    denominator = reduce(math.lcm, (q.denominator for row in fractions for q in row), 1)
    ints = [int(q * denominator) for row in fractions for q in row]
    approx = np.array([[float(q) for q in row] for row in fractions])
    return _ExactMatrix(fmpz_mat(len(rows), len(rows[0]), ints), denominator, approx)


def _exact_entry(value) -> Fraction:
    if isinstance(value, bool | np.bool_):
        raise TypeError("W has a boolean entry; expected a real number")
    if isinstance(value, sp.Rational):
        return Fraction(int(value.p), int(value.q))
    if isinstance(value, int | np.integer | Fraction):
        return Fraction(value)
    if isinstance(value, float | np.floating):
        if not math.isfinite(value):
            raise ValueError("W must be finite (no NaN or inf)")
        return Fraction(float(value))
    raise TypeError(f"W has an entry of type {type(value).__name__}; expected a real number")


def _pair(value, name: str, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each at least ``minimum``."""
    items = value if isinstance(value, tuple | list) else (value, value)
    if len(items) != 2 or not all(
        isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in items
    ):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    pair = (int(items[0]), int(items[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return pair


def _weights(values) -> np.ndarray:
    return _to_float64(values, "W", 4)


def _input_hw(input_shape, channels: int) -> tuple[int, int]:
    shape = tuple(input_shape) if isinstance(input_shape, tuple | list) else None
    if shape is None or len(shape) not in (2, 3):
        raise TypeError(f"input_shape must be (C, H, W) or (H, W), got {input_shape!r}")
    if len(shape) == 3:
        if _pair(shape[0], "input_shape[0]", 1)[0] != channels:
            raise ValueError(
                f"input_shape has {shape[0]} channels but W expects {channels} (W.shape[1])"
            )
        shape = shape[1:]
    return _pair(tuple(shape), "input_shape", 1)


# --------------------------------------------------------------------------------------
# The largest eigenvalue of a Hermitian positive semidefinite ball matrix
# --------------------------------------------------------------------------------------


def _adjoint(m):
    return m.transpose() if isinstance(m, arb_mat) else m.conjugate().transpose()


def _re(x) -> arb:
    return x.real if isinstance(x, acb) else x


def _mid(x) -> complex | float:
    return complex(x.mid()) if isinstance(x, acb) else float(x.mid())


@dataclass(frozen=True, eq=False)
class Gram:
    """``G = F^H F`` for a ball matrix ``F`` (``arb_mat``/``acb_mat``, containing the exact
    factor); ``approx`` a float ``F``; ``exact`` the integer ``G`` when it is known exactly."""

    factor: arb_mat | acb_mat
    approx: np.ndarray
    exact: fmpz_mat | None = None

    @property
    def size(self) -> int:
        return self.factor.ncols()

    def ball(self):
        if self.exact is not None:
            return arb_mat(self.exact)
        return _adjoint(self.factor) * self.factor

    def approx_gram(self) -> np.ndarray:
        return self.approx.conj().T @ self.approx


def float_eigh(grams: Sequence[Gram]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Float eigenpairs (descending) of each Gram matrix; same-size ones in one batched call
    (small LAPACK calls are slow when BLAS threads compete for the cores)."""
    out: list = [None] * len(grams)
    by_size: dict[int, list[int]] = {}
    for index, gram in enumerate(grams):
        by_size.setdefault(gram.size, []).append(index)
    for indices in by_size.values():
        values, vectors = np.linalg.eigh(np.stack([grams[i].approx_gram() for i in indices]))
        for i, v, q in zip(indices, values, vectors, strict=True):
            out[i] = (v[::-1], q[:, ::-1])
    return out


def _lambda_max_bounds(gram: Gram, prec: int, method: str = "auto", eigen=None):
    """``(lo, hi, method)``: rational bounds of ``lambda_max`` of the Gram matrix.

    Tries ``method`` ("auto": eig up to :data:`EIG_LIMIT` rows, else the congruence
    certificate), then the other, then Gershgorin (always succeeds, maybe loosely).
    ``eigen``: precomputed float eigenpairs (descending) for the congruence certificate.
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    n = gram.size
    first = method if method != "auto" else ("eig" if n <= EIG_LIMIT else "congruence")
    order = (first, "congruence" if first == "eig" else "eig")
    failures = []
    with working_precision(prec):
        for name in order:
            if name == "eig" and n > 4 * EIG_LIMIT:
                continue  # hours of work: not a fallback
            try:
                if name == "eig":
                    lo, hi = eig_top(gram.ball(), prec)
                else:
                    lo, hi = congruence_top(gram, prec, eigen)
                return lo, hi, name
            except (SpectralError, SearchFailed, ValueError, ZeroDivisionError) as error:
                failures.append(f"{name}: {error}")
        lo, hi = _gershgorin_top(gram.ball(), prec)
    return lo, hi, "gershgorin (" + "; ".join(failures) + ")"


def eig_top(G, prec: int) -> tuple[Fraction, Fraction]:
    """Bounds from ``acb_mat.eig(multiple=True)`` (raises ValueError if it cannot isolate)."""
    values = acb_mat(G).eig(multiple=True)
    ends = [endpoints(v.real, prec=prec) for v in values]
    return max(lo for lo, _ in ends), max(hi for _, hi in ends)


def _gershgorin_top(G, prec: int) -> tuple[Fraction, Fraction]:
    """``max(0, max_i G_ii) <= lambda_max <= max_i sum_j |G_ij|`` (G Hermitian PSD)."""
    rows = G.tolist()
    lo, hi = Fraction(0), None
    for i, row in enumerate(rows):
        lo = max(lo, endpoints(_re(row[i]), prec=prec)[0])
        radius = _re(row[i]) + sum((abs(v) for j, v in enumerate(row) if j != i), arb(0))
        top = endpoints(radius, prec=prec)[1]
        hi = top if hi is None else max(hi, top)
    return lo, hi


def congruence_top(gram: Gram, prec: int, eigen=None) -> tuple[Fraction, Fraction]:
    """The Schur-complement certificate of the module docstring."""
    n = gram.size
    complex_ = isinstance(gram.factor, acb_mat)
    matrix = acb_mat if complex_ else arb_mat
    values, vectors = eigen if eigen is not None else float_eigh([gram])[0]
    scale = float(np.max(np.abs(values)))
    if not (math.isfinite(scale) and scale > 0):
        raise SpectralError("the float eigenvalues are all 0: nothing to separate")
    k = 1
    while k < n and values[k - 1] - values[k] <= CLUSTER_GAP * scale:
        k += 1
    if k > EIG_LIMIT:
        raise SpectralError(f"the top {k} eigenvalues form one cluster (limit {EIG_LIMIT})")
    q = matrix((vectors if complex_ else vectors.real).tolist())
    qh = _adjoint(q)
    if gram.exact is not None:
        m = qh * (arb_mat(gram.exact) * q)
    else:
        image = gram.factor * q
        m = _adjoint(image) * image
    nn = qh * q
    if k < n:
        dtype = complex if complex_ else float
        theta = [_mid(m[i, i] / nn[i, i]).real for i in range(k)]
        x = np.zeros((n, k), dtype=dtype)
        x[:k, :k] = np.eye(k)
        for j in range(k, n):
            m_jj, n_jj = _mid(m[j, j]).real, _mid(nn[j, j]).real
            for i in range(k):
                x[j, i] = -(_mid(m[j, i]) - theta[i] * _mid(nn[j, i])) / (m_jj - theta[i] * n_jj)
        z = matrix(x.tolist())
        zh = _adjoint(z)
        mz, nz = m * z, nn * z
        m_ii, n_ii = zh * mz, zh * nz
    else:
        m_ii, n_ii = m, nn
    # Ritz values of the pencil (M_II, N_II): the lower bound, and theta_max for the upper.
    if k == 1:
        theta_lo, theta_hi = endpoints(_re(m_ii[0, 0] / n_ii[0, 0]), prec=prec)
    else:
        theta_lo, theta_hi = eig_top(n_ii.solve(m_ii), prec)
    n_min = min(_gershgorin_low(n_ii.tolist(), i, range(k), prec) for i in range(k))
    if not n_min > 0:
        raise SpectralError("the Ritz vectors are not certainly independent")
    if k == n:
        return theta_lo, theta_hi
    mu0 = point(theta_hi)
    d_rows = (mu0 * nn - m).tolist()
    n_rows = nn.tolist()
    rest = range(k, n)
    for j in range(n):
        if not _gershgorin_low(n_rows, j, range(n), prec) > 0:
            raise SpectralError("the float eigenvectors are not certainly independent")
    c_min = min(_gershgorin_low(d_rows, j, rest, prec) for j in rest)
    if not c_min > 0:
        raise SpectralError("no certified gap below the top cluster")
    coupling = [[mu0 * nz[j, i] - mz[j, i] for i in range(k)] for j in rest]
    b_sq = _upper_sum_sq((v for row in coupling for v in row), prec)
    nir_sq = _upper_sum_sq((nz[j, i] for j in rest for i in range(k)), prec)
    b, nir = point(b_sq).sqrt(), point(nir_sq).sqrt()
    c, low = point(c_min), point(n_min)
    eta = endpoints(2 * point(b_sq) / (c * low), prec=prec)[1]
    for _ in range(16):
        step = point(eta)
        if step * low >= (b + step * nir) ** 2 / c:
            return theta_lo, theta_hi + eta
        eta = 4 * eta if eta > 0 else Fraction(scale) * Fraction(1, 2**prec)
    raise SpectralError("the coupling to the other eigenvectors is too large")


def _upper_sum_sq(values, prec: int) -> Fraction:
    """A rational upper bound of ``sum |v|^2`` (in arb the square of a ball around 0 can
    dip below 0, and its square root is then NaN: bound each ``|v|`` by its upper end)."""
    return sum((endpoints(abs(v), prec=prec)[1] ** 2 for v in values), Fraction(0))


def _gershgorin_low(rows, j: int, indices, prec: int) -> Fraction:
    """A rational lower bound of ``Re a_jj - sum_{l in indices, l != j} |a_jl|``."""
    row = rows[j]
    radius = sum((abs(row[col]) for col in indices if col != j), arb(0))
    return endpoints(_re(row[j]) - radius, prec=prec)[0]


# --------------------------------------------------------------------------------------
# 1. sigma_max of a dense matrix
# --------------------------------------------------------------------------------------


#: A float witness is rounded to multiples of 2^-WITNESS_BITS of its largest entry.
WITNESS_BITS = 24


def settled(vector: np.ndarray) -> np.ndarray:
    """A proposed witness scaled to largest entry 1 and rounded to multiples of
    ``2^-WITNESS_BITS``, so that the last bits of the float computation that proposed it
    (which differ between machines: OpenBLAS picks its kernels for the CPU, and they add in
    different orders) do not reach the certificate. Exact: the lower bound is computed from
    whatever float vector this returns; rounding costs it about ``2^-2 WITNESS_BITS``
    relatively (the quotient is stationary at the top singular vector).

    >>> settled(np.array([0.5, -0.25 + 2.0**-40]))
    array([ 1. , -0.5])
    """
    scaled = np.asarray(vector, dtype=np.float64) / np.max(np.abs(vector))
    return np.ascontiguousarray(np.round(scaled * 2.0**WITNESS_BITS) / 2.0**WITNESS_BITS)


@dataclass(frozen=True, eq=False)
class SigmaMax(Bounds):
    """Certified ``lo <= sigma_max(W) <= hi``.

    ``method`` names the eigenvalue certificate used for ``W^T W`` (or ``W W^T``, the
    smaller), which gives ``certificate_lo <= sigma_max <= hi``; ``witness`` is a float
    vector ``v`` with ``|W v| / |v| >= witness_lo`` exactly; ``lo`` is the larger of the two.
    """

    certificate_lo: Fraction
    method: str
    witness: np.ndarray
    witness_lo: Fraction
    shape: tuple[int, int]
    prec: int
    exact_input: _ExactMatrix = field(repr=False)

    def steps(self) -> tuple[Step, ...]:
        gram = "W^\\top W" if self.shape[1] <= self.shape[0] else "W W^\\top"
        _, hi = self.decimal()
        clo = to_decimal(self.certificate_lo, DIGITS, "floor")
        wlo = to_decimal(self.witness_lo, DIGITS, "floor")
        return (
            Step(
                f"$\\sigma_{{\\max}}(W) \\in [{clo}, {hi}]$ for the {self.shape[0]} x "
                f"{self.shape[1]} matrix $W$: the square root of $\\lambda_{{\\max}}({gram})$, "
                f"enclosed by the {self.method} certificate on the exact integer Gram matrix",
                "arb enclosure",
                self._check_enclosure,
            ),
            Step(
                "The witness $v$ (a float vector, taken exactly) gives "
                f"$\\|W v\\|_2 / \\|v\\|_2 \\ge {wlo}$, an exact rational evaluation",
                "exact witness",
                self._check_witness,
            ),
        )

    def _check_enclosure(self) -> bool:
        name = self.method if self.method in _METHODS else "auto"
        lam_lo, lam_hi, _ = _sigma_lambda_bounds(self.exact_input, self.prec, name)
        scale = Fraction(1, self.exact_input.denominator**2)
        lo, hi = _as_bounds(lam_lo, lam_hi, scale, self.prec)
        return self.certificate_lo <= lo and hi <= self.hi

    def _check_witness(self) -> bool:
        ratio = _matrix_witness_ratio(self.exact_input, self.witness)
        return self.witness_lo**2 <= ratio and self.witness_lo <= self.hi


def _gram(exact: _ExactMatrix, prec: int) -> Gram:
    """``W^T W`` or ``W W^T`` (the smaller) as a factor and its exact integer value."""
    w, f = exact.integers, exact.approx
    if w.ncols() > w.nrows():
        w, f = w.transpose(), f.T
    with working_precision(prec):
        factor = arb_mat(w)
    return Gram(factor, f, w.transpose() * w)


def _sigma_lambda_bounds(exact: _ExactMatrix, prec: int, method: str):
    gram = _gram(exact, prec)
    if gram.exact.is_zero():
        return Fraction(0), Fraction(0), "exact (W = 0)"
    return _lambda_max_bounds(gram, prec, method)


def _matrix_witness_ratio(exact: _ExactMatrix, v: np.ndarray) -> Fraction:
    """``|W v|^2 / |v|^2`` exactly (0 for v = 0)."""
    ints, _ = _scaled_integers(v)
    norm_sq = sum(n * n for n in ints)
    if norm_sq == 0:
        return Fraction(0)
    image = exact.integers * fmpz_mat(len(ints), 1, ints)
    image_sq = sum(int(e) ** 2 for e in image.entries())
    return Fraction(image_sq, norm_sq * exact.denominator**2)


def sigma_max(W, prec: int = DEFAULT_PREC, *, method: str = "auto") -> SigmaMax:
    r"""A certified enclosure of the largest singular value of the real matrix ``W``.

    ``W``: a 2-D NumPy float/int array (entries taken exactly) or a nested list of ints,
    Fractions or floats. ``method``: "eig", "congruence" or "auto" (eig when the Gram
    matrix has at most :data:`EIG_LIMIT` rows). The Gram matrix ``W^T W`` (or ``W W^T``,
    the smaller) is computed exactly in integers; the lower bound is the larger of the
    certificate's and the witness's (the top right singular vector from NumPy, rounded to
    floats, ``|W v| / |v|`` evaluated exactly).

    >>> r = sigma_max([[1, 1], [0, 1]])  # the golden ratio
    >>> r.decimal(30)
    ('1.61803398874989484820458683436', '1.61803398874989484820458683437')
    >>> r.proof().verify().ok
    True
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    exact = _exact_matrix(W)
    lam_lo, lam_hi, used = _sigma_lambda_bounds(exact, prec, method)
    lo, hi = _as_bounds(lam_lo, lam_hi, Fraction(1, exact.denominator**2), prec)
    _, _, vt = np.linalg.svd(exact.approx, full_matrices=False)
    witness = settled(vt[0])
    witness_lo = _sqrt_lower(_matrix_witness_ratio(exact, witness), prec)
    shape = tuple(exact.approx.shape)
    return SigmaMax(max(lo, witness_lo), hi, lo, used, witness, witness_lo, shape, prec, exact)


# --------------------------------------------------------------------------------------
# Convolution: dense matrices, index tables, exact witnesses
# --------------------------------------------------------------------------------------


def _axis_sources(n: int, k: int, s: int, p: int, mode: str) -> np.ndarray:
    """``src[i, a]``: the input index read by output ``i`` at kernel offset ``a``, -1 for a
    padded zero (``mode`` "zeros"), wrapped for "circular" and "periodic"."""
    if mode == "periodic":
        if n % s:
            raise ValueError(f"periodic mode needs the stride {s} to divide the size {n}")
        out = n // s
    else:
        out = (n + 2 * p - k) // s + 1
        if out < 1:
            raise ValueError(f"kernel {k} is larger than the padded input {n} + 2*{p}")
    u = s * np.arange(out)[:, None] + np.arange(k)[None, :] - p
    if mode == "zeros":
        return np.where((u >= 0) & (u < n), u, -1)
    return u % n


def _conv_setup(W, input_shape, stride, padding, padding_mode):
    weight = _weights(W)
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")
    _, c, kh, kw = weight.shape
    h, w = _input_hw(input_shape, c)
    sh, sw = _pair(stride, "stride", 1)
    ph, pw = _pair(padding, "padding", 0)
    if padding_mode == "circular" and (ph > h or pw > w):
        raise ValueError(f"circular padding {padding!r} wraps more than once around {(h, w)}")
    rows = _axis_sources(h, kh, sh, ph, padding_mode)
    cols = _axis_sources(w, kw, sw, pw, padding_mode)
    return weight, (h, w), rows, cols


def dense_conv_matrix(
    W,
    input_shape,
    stride=1,
    padding=0,
    padding_mode: str = "zeros",
) -> np.ndarray:
    """The dense matrix (float64) of the 2-D cross-correlation ``x -> y``, from the definition.

    ``W``: (O, C, Kh, Kw); ``input_shape``: (C, H, W) or (H, W); ``stride``, ``padding``:
    int or pair; ``padding_mode``: "zeros" or "circular" (PyTorch, output
    ``(H + 2p - K) // s + 1`` rows) or "periodic" (the torus operator, ``H / s`` rows; see
    the module docstring). Shape ``(O * OH * OW, C * H * W)``, numerator layout.

    >>> dense_conv_matrix(np.ones((1, 1, 2, 1)), (3, 1), padding_mode="periodic")
    array([[1., 1., 0.],
           [0., 1., 1.],
           [1., 0., 1.]])
    """
    weight, (h, w), rows, cols = _conv_setup(W, input_shape, stride, padding, padding_mode)
    o, c, kh, kw = weight.shape
    oh, ow = rows.shape[0], cols.shape[0]
    dense = np.zeros((o, oh, ow, c, h, w))
    for i, j, a, b in product(range(oh), range(ow), range(kh), range(kw)):
        r, q = rows[i, a], cols[j, b]
        if r >= 0 and q >= 0:
            dense[:, i, j, :, r, q] += weight[:, :, a, b]
    return dense.reshape(o * oh * ow, c * h * w)


def _columns(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``x[c, rows[i, a], cols[j, b]]`` as (C, Kh, Kw, OH, OW), 0 where an index is -1."""
    c, h, w = x.shape
    padded = np.zeros((c, h + 1, w + 1), dtype=x.dtype)  # index -1 reads the zero border
    padded[:, :h, :w] = x
    return padded[:, rows.T[:, None, :, None], cols.T[None, :, None, :]]


def _conv_apply(weight: np.ndarray, x: np.ndarray, rows, cols) -> np.ndarray:
    o = weight.shape[0]
    patches = _columns(x, rows, cols)
    flat = weight.reshape(o, -1) @ patches.reshape(
        patches.shape[0] * rows.shape[1] * cols.shape[1], -1
    )
    return flat.reshape(o, rows.shape[0], cols.shape[0])


def _conv_adjoint(weight: np.ndarray, g: np.ndarray, rows, cols, hw) -> np.ndarray:
    """``A^T g``: each kernel offset (a, b) scatters into distinct pixels (distinct outputs
    read distinct pixels at a fixed offset), except padded zeros, which all land on the
    discarded border -- so plain fancy-index addition is exact."""
    o, c, kh, kw = weight.shape
    patches = (weight.reshape(o, -1).T @ g.reshape(o, -1)).reshape(
        c, kh, kw, rows.shape[0], cols.shape[0]
    )
    padded = np.zeros((c, hw[0] + 1, hw[1] + 1))
    for a, b in product(range(kh), range(kw)):
        padded[:, rows[:, a][:, None], cols[:, b][None, :]] += patches[:, a, b]
    return padded[:, : hw[0], : hw[1]]


def _conv_witness_ratio(weight: np.ndarray, x: np.ndarray, rows, cols) -> Fraction:
    """``|A x|^2 / |x|^2`` exactly, ``A x`` computed from the definition in integers."""
    w_ints, w_exp = _scaled_integers(weight)
    x_ints, _ = _scaled_integers(x)
    norm_sq = sum(n * n for n in x_ints)
    if norm_sq == 0:
        return Fraction(0)
    o = weight.shape[0]
    grid = np.empty(x.shape, dtype=object)
    grid.ravel()[:] = x_ints
    patches = _columns(grid, rows, cols)
    depth = patches.shape[0] * rows.shape[1] * cols.shape[1]
    flat = patches.reshape(depth, -1)
    image = fmpz_mat(o, depth, w_ints) * fmpz_mat(depth, flat.shape[1], flat.ravel().tolist())
    image_sq = sum(int(e) ** 2 for e in image.entries())
    return Fraction(image_sq, norm_sq) * Fraction(2) ** (2 * w_exp)


# --------------------------------------------------------------------------------------
# 2. Circular padding through the DFT
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrequencyBound:
    """``lo <= lambda_max(G_l) <= hi`` for the unscaled Gram matrix of output frequency ``l``
    (``sigma_max(B_l)^2 = lambda_max / (sh sw)``)."""

    frequency: tuple[int, int]
    lo: Fraction
    hi: Fraction
    method: str


def _phase_table(n: int, k: int) -> list[list[acb]]:
    """``exp(2 pi i a f / n)`` for ``a < k``, ``f < n``, rigorously (exact rationals of pi)."""
    table = []
    for a in range(k):
        row = []
        for f in range(n):
            sin, cos = arb.sin_cos_pi_fmpq(fmpq((2 * a * f) % (2 * n), n))
            row.append(acb(cos, sin))
        table.append(row)
    return table


def _aliases(freq: tuple[int, int], m: tuple[int, int], s: tuple[int, int]):
    """The input frequencies ``l + m*t`` folded onto output frequency ``l`` (t row-major)."""
    return [(freq[0] + m[0] * t0, freq[1] + m[1] * t1) for t0 in range(s[0]) for t1 in range(s[1])]


def _canonical(m: tuple[int, int]) -> list[tuple[int, int]]:
    """One output frequency of each conjugate pair ``{l, -l}``."""
    out = []
    for freq in product(range(m[0]), range(m[1])):
        partner = ((-freq[0]) % m[0], (-freq[1]) % m[1])
        if freq <= partner:
            out.append(freq)
    return out


def _float_blocks(weight: np.ndarray, grid, stride) -> dict:
    """``B_l * sqrt(sh sw)`` (O x C sh sw) in float, from the FFT, for every ``l``."""
    o, c, kh, kw = weight.shape
    padded = np.zeros((o, c, grid[0], grid[1]))
    padded[:, :, :kh, :kw] = weight
    hat = np.fft.ifft2(padded, axes=(2, 3)) * (grid[0] * grid[1])  # + sign, no 1/N
    m = (grid[0] // stride[0], grid[1] // stride[1])
    return {
        freq: np.concatenate([hat[:, :, k0, k1] for k0, k1 in _aliases(freq, m, stride)], axis=1)
        for freq in product(range(m[0]), range(m[1]))
    }


def _circular_frequency_bounds(
    weight: np.ndarray, grid, stride, prec: int, method: str, only=None
) -> list[FrequencyBound]:
    """Certified ``lambda_max`` bounds of ``B_l^H B_l * (sh sw)`` for the canonical ``l``
    (or those in ``only``), at ``prec`` bits."""
    o, c, kh, kw = weight.shape
    m = (grid[0] // stride[0], grid[1] // stride[1])
    freqs = _canonical(m) if only is None else list(only)
    floats = _float_blocks(weight, grid, stride)
    needed = sorted({k for freq in freqs for k in _aliases(freq, m, stride)})
    row_of = {k: idx for idx, k in enumerate(needed)}
    with working_precision(prec):
        p0, p1 = _phase_table(grid[0], kh), _phase_table(grid[1], kw)
        phases = acb_mat(
            [[p0[a][k[0]] * p1[b][k[1]] for a in range(kh) for b in range(kw)] for k in needed]
        )
        w_mat = acb_mat(arb_mat(weight.reshape(o * c, kh * kw).T.tolist()))
        hat = (phases * w_mat).tolist()  # row: frequency k, column o*C + c: What(k)[o, c]
        grams = []
        for freq in freqs:
            parts = [hat[row_of[k]] for k in _aliases(freq, m, stride)]
            block = [[v for part in parts for v in part[oo * c : (oo + 1) * c]] for oo in range(o)]
            ball, approx = acb_mat(block), floats[freq]
            if ball.ncols() <= o:  # G = B^H B, else G = B B^H = (B^H)^H (B^H)
                grams.append(Gram(ball, approx))
            else:
                grams.append(Gram(_adjoint(ball), approx.conj().T))
        eigen = float_eigh(grams) if method != "eig" else [None] * len(grams)
        bounds = []
        for freq, gram, pairs in zip(freqs, grams, eigen, strict=True):
            lo, hi, used = _lambda_max_bounds(gram, prec, method, pairs)
            bounds.append(FrequencyBound(freq, lo, hi, f"{used} ({prec} bits)"))
    return bounds


def _gaussian_frequency(freq, m, stride, grid, kernel) -> bool:
    """True iff every phase ``exp(2 pi i (a k1/n1 + b k2/n2))`` of every alias of ``freq`` is
    a power of ``i`` (then the block has Gaussian-integer entries over the weights)."""
    return all(
        (kernel[0] == 1 or (4 * k0) % grid[0] == 0) and (kernel[1] == 1 or (4 * k1) % grid[1] == 0)
        for k0, k1 in _aliases(freq, m, stride)
    )


def _gaussian_block(weight: np.ndarray, freq, grid, stride) -> tuple[_ExactMatrix, int]:
    """``d sqrt(sh sw) B_l`` exactly, for a frequency of :func:`_gaussian_frequency`: the
    block itself when it is real, else its real embedding ``[[Re, -Im], [Im, Re]]`` (the
    same singular values, each twice). ``d`` is the weights' common denominator."""
    o, c, kh, kw = weight.shape
    m = (grid[0] // stride[0], grid[1] // stride[1])
    ints, base = _scaled_integers(weight)
    w_int = np.array(ints, dtype=object).reshape(weight.shape)
    real_parts, imag_parts = [], []
    for k0, k1 in _aliases(freq, m, stride):
        parts = [np.zeros((o, c), dtype=object), np.zeros((o, c), dtype=object)]
        for a, b in product(range(kh), range(kw)):
            power = ((4 * a * k0) // grid[0] + (4 * b * k1) // grid[1]) % 4  # phase i^power
            sign = 1 if power < 2 else -1
            parts[power % 2] = parts[power % 2] + sign * w_int[:, :, a, b]
        real_parts.append(parts[0])
        imag_parts.append(parts[1])
    re, im = np.concatenate(real_parts, axis=1), np.concatenate(imag_parts, axis=1)
    block = re if not im.any() else np.block([[re, -im], [im, re]])
    if base >= 0:
        block, denominator = block * (1 << base), 1
    else:
        denominator = 1 << -base
    values = [int(v) for v in block.ravel()]
    approx = np.array([float(v) for v in values]).reshape(block.shape)
    rows, cols = block.shape
    return _ExactMatrix(fmpz_mat(rows, cols, values), 1, approx), denominator


def _circular_all(weight: np.ndarray, grid, stride, prec: int, method: str):
    """``(bounds, best, description)``: every canonical frequency certified, ``best`` the
    one with the largest lower bound.

    "auto": a congruence sweep at :data:`SCREEN_PREC` bits, then every frequency whose
    upper bound reaches the largest lower bound again at ``prec`` bits, and the best one
    also by acb eig (when at most :data:`EIG_LIMIT` wide), the two enclosures intersected.
    """
    if method != "auto":
        bounds = _circular_frequency_bounds(weight, grid, stride, prec, method)
        return tuple(bounds), max(bounds, key=lambda b: b.lo), f"{method} at every frequency"
    screen = _circular_frequency_bounds(weight, grid, stride, min(prec, SCREEN_PREC), "congruence")
    top = max(b.lo for b in screen)
    contenders = [b.frequency for b in screen if b.hi >= top]
    refined = {
        b.frequency: b
        for b in _circular_frequency_bounds(
            weight, grid, stride, prec, "congruence", only=contenders
        )
    }
    best = max(refined.values(), key=lambda b: b.lo)
    used = sorted({b.method.split(" (")[0] for b in screen})
    description = (
        f"{'/'.join(used)} at every frequency ({min(prec, SCREEN_PREC)} bits), "
        f"again at {prec} bits for the {len(contenders)} that could be the largest"
    )
    o, c = weight.shape[:2]
    if min(o, c * stride[0] * stride[1]) <= EIG_LIMIT:
        (eig,) = _circular_frequency_bounds(weight, grid, stride, prec, "eig", [best.frequency])
        best = FrequencyBound(
            best.frequency,
            max(best.lo, eig.lo),
            min(best.hi, eig.hi),
            f"{best.method} & {eig.method}",
        )
        refined[best.frequency] = best
        description += "; the largest also by acb eig"
    bounds = tuple(refined.get(b.frequency, b) for b in screen)
    return bounds, best, description


@dataclass(frozen=True, eq=False)
class ConvNorm(Bounds):
    """Certified ``lo <= ||A||_2 <= hi`` for the periodic (circular) convolution ``A``.

    ``frequency``: the output frequency ``l*`` with the largest certified lower bound
    ``frequency_lo`` of ``sigma_max(B_l)``; ``witness``: a real float image (C, n1, n2)
    with ``|A x| / |x| >= witness_lo`` exactly (for the padding offset given); ``exact``: a
    SymPy-parsable closed form when the phases at ``l*`` are powers of ``i`` (e.g. ``l* = 0``
    or a quarter period), the block is small, and every other frequency is certainly
    smaller or the same algebraic number (else None); ``frequencies``: the per-frequency bounds
    of ``lambda_max`` (unscaled, see :class:`FrequencyBound`). ``lo`` is the largest of
    the three lower bounds; ``hi`` is ``certificate_hi`` (the sweep over all frequencies),
    lowered to the exact value's enclosure when ``exact`` is set.
    """

    frequency: tuple[int, int]
    frequency_lo: Fraction
    certificate_hi: Fraction
    witness: np.ndarray
    witness_lo: Fraction
    exact: str | None
    method: str
    description: str
    grid: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    prec: int
    frequencies: tuple[FrequencyBound, ...] = field(repr=False)
    weight: np.ndarray = field(repr=False)
    _rerun: dict = field(default_factory=dict, repr=False)

    def steps(self) -> tuple[Step, ...]:
        hi = to_decimal(self.certificate_hi, DIGITS, "ceiling")
        o, c, _, _ = self.weight.shape
        m = (self.grid[0] // self.stride[0], self.grid[1] // self.stride[1])
        width = c * self.stride[0] * self.stride[1]
        flo = to_decimal(self.frequency_lo, DIGITS, "floor")
        wlo = to_decimal(self.witness_lo, DIGITS, "floor")
        steps = [
            Step(
                "A plane wave $u\\,e^{2\\pi i (k_1 r/n_1 + k_2 q/n_2)}$ with $k = l + m t$ "
                "is mapped to $e^{2\\pi i (l_1 i/m_1 + l_2 j/m_2)} \\hat W(k) u$ (up to a "
                "constant phase from the padding offset), because "
                "$e^{2\\pi i k (s i + a)/(m s)} = e^{2\\pi i l i/m} e^{2\\pi i k a/(m s)}$ "
                "for integers; the waves are orthogonal, so $\\|A\\|_2 = \\max_l "
                "\\sigma_{\\max}(B_l)$ with $B_l = [\\hat W(l + m t)]_t/\\sqrt{s_1 s_2}$, "
                "and $B_{-l} = \\overline{B_l}$ up to a column permutation ($W$ real)",
                "symbolic identity",
                _aliasing_identity,
            ),
            Step(
                f"For each of the {len(self.frequencies)} output frequencies $l$ (one per "
                f"conjugate pair; output grid {m[0]} x {m[1]}, blocks {o} x {width}), "
                f"$\\sigma_{{\\max}}(B_l) \\le {hi}$: certified enclosures of "
                "$\\lambda_{\\max}(B_l^H B_l)$, $\\hat W$ evaluated in acb "
                f"({self.description})",
                "arb enclosure",
                self._check_upper,
            ),
            Step(
                f"At $l^* = {self.frequency}$, $\\sigma_{{\\max}}(B_{{l^*}}) \\ge {flo}$",
                "arb enclosure",
                self._check_lower,
            ),
            Step(
                "The real image $x$ (the real part of the top singular mode at $l^*$, in "
                f"floats, taken exactly) gives $\\|A x\\|_2/\\|x\\|_2 \\ge {wlo}$, $A x$ "
                "computed from the definition in exact integers",
                "exact witness",
                self._check_witness,
            ),
        ]
        if self.exact is not None:
            steps.append(
                Step(
                    f"$\\|A\\|_2 = {self.exact}$ exactly: the phases at $l^*$ are powers of "
                    "$i$, so the block is exact over the Gaussian integers; the largest "
                    "eigenvalue of the exact integer Gram matrix (of its real embedding) is "
                    "isolated from the characteristic polynomial; every other frequency is "
                    "certainly smaller, or exactly the same algebraic number",
                    "exact witness",
                    self._check_exact,
                )
            )
        return tuple(steps)

    def _scale(self) -> Fraction:
        return Fraction(1, self.stride[0] * self.stride[1])

    def _recomputed(self):
        """The frequency sweep, re-run once for all the checks of one proof."""
        if "all" not in self._rerun:
            self._rerun["all"] = _circular_all(
                self.weight, self.grid, self.stride, self.prec, self.method
            )
        return self._rerun["all"]

    def _check_upper(self) -> bool:
        bounds, _, _ = self._recomputed()
        top = max(b.hi for b in bounds)
        found = _as_bounds(top, top, self._scale(), self.prec)[1]
        return found <= self.certificate_hi and self.hi <= self.certificate_hi

    def _check_lower(self) -> bool:
        _, best, _ = self._recomputed()
        found = _as_bounds(best.lo, best.lo, self._scale(), self.prec)[0]
        return best.frequency == self.frequency and found >= self.frequency_lo

    def _check_witness(self) -> bool:
        rows, cols = _torus_tables(self.weight, self.grid, self.stride, self.padding)
        ratio = _conv_witness_ratio(self.weight, self.witness, rows, cols)
        return self.witness_lo**2 <= ratio and self.witness_lo <= self.hi

    def _check_exact(self) -> bool:
        bounds, _, _ = self._recomputed()
        found = _exact_maximum(
            self.weight, self.grid, self.stride, bounds, self.frequency, self.prec
        )
        if found is None:
            return False
        text, lam, d2 = found
        lo, hi = _as_bounds(lam.lo, lam.hi, Fraction(1, d2) * self._scale(), self.prec)
        return lam.certify(self.prec) and text == self.exact and self.lo <= hi and lo <= self.hi


def _aliasing_identity() -> bool:
    """exp(2 pi i k (s i + a)/(m s)) == exp(2 pi i l i/m) exp(2 pi i k a/(m s)), k = l + m t."""
    freq, t, i, a = sp.symbols("freq t i a", integer=True)
    m, s = sp.symbols("m s", integer=True, positive=True)
    k = freq + m * t
    exponent = 2 * sp.pi * sp.I * (k * (s * i + a) / (m * s) - freq * i / m - k * a / (m * s))
    return sp.exp(sp.expand(exponent)) == 1


def _torus_tables(weight, grid, stride, padding):
    _, _, kh, kw = weight.shape
    rows = _axis_sources(grid[0], kh, stride[0], padding[0], "periodic")
    cols = _axis_sources(grid[1], kw, stride[1], padding[1], "periodic")
    return rows, cols


def _exact_circular(weight, grid, stride, freq, prec):
    """``(text, ExactEigenvalue, d^2)`` for a frequency with phases in {1, i, -1, -i} and a
    small block, else None: ``lambda_max`` of the integer Gram matrix is ``d^2`` times the
    :class:`FrequencyBound` value, and ``||B_l||_2 = sqrt(lambda / (d^2 sh sw))``."""
    m = (grid[0] // stride[0], grid[1] // stride[1])
    if not _gaussian_frequency(freq, m, stride, grid, weight.shape[2:]):
        return None
    block, denominator = _gaussian_block(weight, freq, grid, stride)
    gram = _gram(block, prec).exact
    if gram.nrows() > 2 * EXACT_LIMIT or gram.is_zero():
        return None
    lam = exact_lambda_max(gram, prec=prec)
    d2 = denominator**2
    value = sp.sympify(lam.expression) / (d2 * stride[0] * stride[1])
    return str(sp.sqrt(value)), lam, d2


def _exact_maximum(weight, grid, stride, bounds, freq, prec):
    """:func:`_exact_circular` at ``freq`` if it is provably the maximum over all
    frequencies: every other one is certainly smaller (its upper bound), or has an exact
    form that is the same algebraic number (the largest root of the same irreducible
    factor) or certainly smaller. Else None."""
    found = _exact_circular(weight, grid, stride, freq, prec)
    if found is None:
        return None
    _, lam, d2 = found
    for b in bounds:
        if b.frequency == freq or b.hi * d2 < lam.lo:
            continue
        other = _exact_circular(weight, grid, stride, b.frequency, prec)
        if other is None:
            return None
        _, o_lam, o_d2 = other
        same = o_lam.factor == lam.factor and o_d2 == d2
        if not (same or o_lam.hi * d2 < lam.lo * o_d2):
            return None
    return found


def _circular_witness(weight, grid, stride, padding, freq) -> np.ndarray:
    """The real part (or imaginary part, the larger) of the top singular mode at ``l``."""
    c = weight.shape[1]
    m = (grid[0] // stride[0], grid[1] // stride[1])
    block = _float_blocks(weight, grid, stride)[freq]
    _, _, vh = np.linalg.svd(block)
    v = vh[0].conj()
    r = np.arange(grid[0])[:, None]
    q = np.arange(grid[1])[None, :]
    image = np.zeros((c, grid[0], grid[1]), dtype=complex)
    for t, (k0, k1) in enumerate(_aliases(freq, m, stride)):
        phase = k0 * (r + padding[0]) / grid[0] + k1 * (q + padding[1]) / grid[1]
        wave = np.exp(2j * np.pi * phase)
        image += v[t * c : (t + 1) * c, None, None] * wave[None, :, :]
    part = image.real if np.linalg.norm(image.real) >= np.linalg.norm(image.imag) else image.imag
    return settled(part)


def conv_circular_lipschitz(
    W,
    grid,
    stride=1,
    padding=0,
    *,
    prec: int = DEFAULT_PREC,
    method: str = "auto",
    exact: bool | None = None,
) -> ConvNorm:
    r"""The operator 2-norm of the periodic 2-D cross-correlation on an ``grid`` torus.

    ``W``: weights (O, C, Kh, Kw); ``grid``: (n1, n2) (an int for a square grid);
    ``stride``: int or pair dividing the grid; ``padding``: the offset ``p`` (PyTorch's
    circular padding; it shifts the witness only -- the norm does not depend on it). The
    operator maps (C, n1, n2) to (O, n1/s1, n2/s2) (``dense_conv_matrix(..., "periodic")``;
    PyTorch's ``padding_mode="circular"`` when ``K - s <= 2p <= K - 1``).

    ``||A||_2 = max_l sigma_max(B_l)`` (module docstring); ``What`` is evaluated in acb with
    the phases ``exp(2 pi i a k / n)`` enclosed from the exact rationals ``2 a k / n``, and
    every frequency's ``lambda_max(B_l^H B_l)`` is certified ("auto": the congruence
    certificate, the maximizing frequency also by ``acb_mat.eig`` when the block is at
    most :data:`EIG_LIMIT` wide, the two intersected; "eig" or "congruence" everywhere).
    ``exact``: look for an exact closed form (True), never (False), or only for simple
    weights (None: integers or dyadic rationals of at most :data:`EXACT_BITS` bits -- for
    arbitrary floats the closed form is exact but has 100-digit integers).

    >>> r = conv_circular_lipschitz(np.ones((1, 1, 3, 3)), (6, 6), padding=1)
    >>> r.exact, r.frequency, r.decimal(5)
    ('9', (0, 0), ('9.0000', '9.0000'))
    """
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    weight = _weights(W)
    grid = _pair(grid, "grid", 1)
    stride = _pair(stride, "stride", 1)
    padding = _pair(padding, "padding", 0)
    if grid[0] % stride[0] or grid[1] % stride[1]:
        raise ValueError(f"stride {stride} must divide the grid {grid}")
    scale = Fraction(1, stride[0] * stride[1])
    bounds, best, description = _circular_all(weight, grid, stride, prec, method)
    lam_hi = max(b.hi for b in bounds)
    frequency_lo, certificate_hi = _as_bounds(best.lo, lam_hi, scale, prec)
    lo, hi = frequency_lo, certificate_hi
    exact_text = None
    if exact is None:
        ints, base = _scaled_integers(weight)
        exact = base >= -EXACT_BITS and max(abs(n) for n in ints) < 2**EXACT_BITS
    found = _exact_maximum(weight, grid, stride, bounds, best.frequency, prec) if exact else None
    if found is not None:
        exact_text, lam, d2 = found
        e_lo, e_hi = _as_bounds(lam.lo, lam.hi, Fraction(1, d2) * scale, prec)
        lo, hi = max(lo, e_lo), min(hi, e_hi)
    witness = _circular_witness(weight, grid, stride, padding, best.frequency)
    rows, cols = _torus_tables(weight, grid, stride, padding)
    witness_lo = _sqrt_lower(_conv_witness_ratio(weight, witness, rows, cols), prec)
    return ConvNorm(
        max(lo, witness_lo), hi, best.frequency, frequency_lo, certificate_hi, witness, witness_lo,
        exact_text, method, description, grid, stride, padding, prec, bounds, weight,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# 3. Zero padding
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ConvBounds(Bounds):
    """Certified ``lo <= ||A||_2 <= hi`` for the zero-padded convolution ``A``.

    ``method``: "dense" (``sigma_max`` of the dense matrix; ``dense`` holds it) or
    "circular embedding" (``hi`` from the periodic operator on ``grid``, held in
    ``circular``; ``lo`` from the Lanczos witness image ``witness``).
    """

    method: str
    witness: np.ndarray
    witness_lo: Fraction
    grid: tuple[int, int] | None
    input_hw: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    prec: int
    dense: SigmaMax | None = field(repr=False)
    circular: ConvNorm | None = field(repr=False)
    weight: np.ndarray = field(repr=False)

    def steps(self) -> tuple[Step, ...]:
        wlo = to_decimal(self.witness_lo, DIGITS, "floor")
        if self.dense is not None:
            return (
                Step(
                    "The dense matrix is the operator: its column $j$ equals the "
                    "convolution of the basis image $e_j$, computed by the index tables "
                    "(every column checked)",
                    "exhaustive enumeration",
                    self._check_dense_matrix,
                ),
                *self.dense.steps(),
            )
        n = self.grid
        return (
            Step(
                f"Zero padding is a compression of the periodic operator on the {n[0]} x "
                f"{n[1]} torus: with $x$ placed at offset $p$ (zeros elsewhere), every "
                "output of the zero-padded map reads rows $s i + a \\le H + 2p - 1 < n$ "
                "(no wrap-around), and the output grid fits; so $y = P A_{circ} E x$ with "
                "$E$ an isometry and $P$ a coordinate projection, and "
                "$\\|A\\|_2 \\le \\|A_{circ}\\|_2$ (every output row index checked)",
                "exhaustive enumeration",
                self._check_embedding,
            ),
            *self.circular.steps(),
            Step(
                f"The Lanczos image $x$ (floats, taken exactly) gives "
                f"$\\|A x\\|_2 / \\|x\\|_2 \\ge {wlo}$ for the zero-padded map, computed "
                "from the definition in exact integers",
                "exact witness",
                self._check_witness,
            ),
        )

    def _tables(self):
        _, _, kh, kw = self.weight.shape
        rows = _axis_sources(self.input_hw[0], kh, self.stride[0], self.padding[0], "zeros")
        cols = _axis_sources(self.input_hw[1], kw, self.stride[1], self.padding[1], "zeros")
        return rows, cols

    def _check_dense_matrix(self) -> bool:
        rows, cols = self._tables()
        dense = dense_conv_matrix(self.weight, self.input_hw, self.stride, self.padding, "zeros")
        c = self.weight.shape[1]
        size = c * self.input_hw[0] * self.input_hw[1]
        for j in range(size):
            basis = np.zeros(size)
            basis[j] = 1.0
            image = _conv_apply(self.weight, basis.reshape(c, *self.input_hw), rows, cols)
            if not np.array_equal(image.ravel(), dense[:, j]):
                return False
        return bool(np.array_equal(dense, self.dense.exact_input.approx))

    def _check_embedding(self) -> bool:
        return _embedding_ok(self.weight.shape, self.input_hw, self.stride, self.padding, self.grid)

    def _check_witness(self) -> bool:
        rows, cols = self._tables()
        ratio = _conv_witness_ratio(self.weight, self.witness, rows, cols)
        return self.witness_lo**2 <= ratio and self.witness_lo <= self.hi


def _embedding_ok(shape, hw, stride, padding, grid) -> bool:
    """Every output row/column of the zero-padded map reads inside the torus without wrap."""
    _, _, kh, kw = shape
    for n, k, s, p, big in zip(hw, (kh, kw), stride, padding, grid, strict=True):
        outputs = (n + 2 * p - k) // s + 1
        if big % s or outputs > big // s or big < n + 2 * p:
            return False
        if any(s * i + a >= big for i in range(outputs) for a in range(k)):
            return False
    return True


def _lanczos_witness(weight, hw, rows, cols, start: np.ndarray) -> np.ndarray:
    """A float approximation of the top right singular vector of ``A``: Lanczos on
    ``A^T A`` with full reorthogonalisation, restarted from the Ritz vector until the Ritz
    value settles (:data:`LANCZOS_STEPS` steps, at most :data:`LANCZOS_RESTARTS` times)."""

    def gram(v: np.ndarray) -> np.ndarray:
        image = _conv_apply(weight, v.reshape(start.shape), rows, cols)
        return _conv_adjoint(weight, image, rows, cols, hw).ravel()

    x = start.ravel() / np.linalg.norm(start)
    previous = 0.0
    for _ in range(LANCZOS_RESTARTS):
        basis = [x]
        alphas, betas = [], []
        for _ in range(min(LANCZOS_STEPS, x.size)):
            w = gram(basis[-1])
            alphas.append(float(basis[-1] @ w))
            stacked = np.array(basis)
            for _ in range(2):  # full reorthogonalisation, twice is enough
                w = w - stacked.T @ (stacked @ w)
            beta = float(np.linalg.norm(w))
            if beta <= 1e-14 * max(abs(alphas[-1]), 1e-300):
                break
            betas.append(beta)
            basis.append(w / beta)
        size = len(alphas)
        tridiagonal = (
            np.diag(alphas) + np.diag(betas[: size - 1], 1) + np.diag(betas[: size - 1], -1)
        )
        values, vectors = np.linalg.eigh(tridiagonal)
        x = np.array(basis[:size]).T @ vectors[:, -1]
        x /= np.linalg.norm(x)
        if abs(values[-1] - previous) <= 1e-15 * values[-1]:
            break
        previous = values[-1]
    return settled(x.reshape(start.shape))


def conv_zero_padding_bounds(
    W,
    input_hw,
    stride=1,
    padding=0,
    *,
    dense_limit: int = DENSE_LIMIT,
    grid=None,
    prec: int = DEFAULT_PREC,
) -> ConvBounds:
    r"""Certified bounds on the 2-norm of the zero-padded 2-D cross-correlation (PyTorch's
    ``padding_mode="zeros"``, floor output size) on ``input_hw`` = (H, W) images.

    Dense route (when ``min(C H W, O OH OW) <= dense_limit`` and the matrix has at most
    :data:`DENSE_ENTRIES` entries): :func:`sigma_max` of :func:`dense_conv_matrix`, whose
    entries are single weights, so exact -- ``lo`` and ``hi`` agree to ~40 digits.

    Otherwise, circular embedding: on a torus ``N >= H + 2p`` (N a multiple of the stride;
    default the smallest), put ``x`` at offset ``p`` with zeros around it. Output ``i`` of
    the zero-padded map reads rows ``s i + a <= s (OH - 1) + K - 1 <= H + 2p - 1 < N`` --
    never wrapping -- so it equals output ``i`` of the periodic operator (offset 0), and
    ``OH <= N / s``. Hence ``A = P A_circ E`` with ``E`` an isometric embedding and ``P`` a
    coordinate projection: ``||A|| <= ||A_circ||`` (:func:`conv_circular_lipschitz`). The
    lower bound is a witness image from Lanczos on ``A^T A`` (float64), its ratio
    ``|A x| / |x|`` evaluated exactly.

    >>> r = conv_zero_padding_bounds(np.ones((1, 1, 2, 2)), (3, 3))  # A A^T 1 = 9 * 1
    >>> r.method, r.contains(3), r.relative_width < 1e-40
    ('dense', True, True)
    """
    weight = _weights(W)
    o, c, kh, kw = weight.shape
    hw = _pair(tuple(input_hw) if isinstance(input_hw, list) else input_hw, "input_hw", 1)
    stride = _pair(stride, "stride", 1)
    padding = _pair(padding, "padding", 0)
    rows = _axis_sources(hw[0], kh, stride[0], padding[0], "zeros")
    cols = _axis_sources(hw[1], kw, stride[1], padding[1], "zeros")
    inputs = c * hw[0] * hw[1]
    outputs = o * rows.shape[0] * cols.shape[0]
    if min(inputs, outputs) <= dense_limit and inputs * outputs <= DENSE_ENTRIES:
        dense = sigma_max(dense_conv_matrix(weight, hw, stride, padding, "zeros"), prec)
        witness = dense.witness.reshape(c, *hw)
        return ConvBounds(
            dense.lo, dense.hi, "dense", witness, dense.witness_lo, None, hw, stride,
            padding, prec, dense, None, weight,
        )  # fmt: skip
    if grid is None:
        grid = tuple(-(-(n + 2 * p) // s) * s for n, p, s in zip(hw, padding, stride, strict=True))
    grid = _pair(grid, "grid", 1)
    if not _embedding_ok(weight.shape, hw, stride, padding, grid):
        raise ValueError(f"grid {grid} must be multiples of the stride and at least H + 2p")
    circular = conv_circular_lipschitz(weight, grid, stride, prec=prec)
    start = circular.witness[:, padding[0] : padding[0] + hw[0], padding[1] : padding[1] + hw[1]]
    if not np.any(start):
        start = np.random.default_rng(0).standard_normal((c, *hw))
    witness = _lanczos_witness(weight, hw, rows, cols, np.array(start, dtype=np.float64))
    witness_lo = _sqrt_lower(_conv_witness_ratio(weight, witness, rows, cols), prec)
    return ConvBounds(
        witness_lo, circular.hi, "circular embedding", witness, witness_lo, grid, hw, stride,
        padding, prec, None, circular, weight,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# Exact largest eigenvalues of integer symmetric matrices
# --------------------------------------------------------------------------------------

_X = sp.Symbol("x")


@dataclass(frozen=True, eq=False)
class ExactEigenvalue:
    """``lambda_max`` of a symmetric integer matrix: the largest root of the irreducible
    ``factor`` of the characteristic polynomial ``charpoly``; ``expression`` is a SymPy
    string (a rational, a quadratic surd or ``CRootOf(q, deg - 1)``), ``lo <= value <= hi``."""

    charpoly: fmpz_poly
    factor: fmpz_poly
    expression: str
    lo: Fraction
    hi: Fraction

    def certify(self, prec: int = DEFAULT_PREC) -> bool:
        """Re-establish the enclosure: the factor divides the charpoly, has exactly one
        root in ``[lo, hi]`` (sign change and monotonicity, or an exact rational root),
        and every root of the charpoly outside it is below ``lo``."""
        if self.charpoly % self.factor != 0:
            return False
        prec = max(prec, self._evaluation_bits())
        if self.factor.degree() == 1:
            c0, c1 = (int(v) for v in self.factor.coeffs())
            root = Fraction(-c0, c1)
            if not (self.lo <= root <= self.hi):
                return False
        elif not certify_unique_root(_poly_expr(self.factor), _X, self.lo, self.hi, prec=prec):
            return False
        with working_precision(prec + 64):
            low = point(self.lo)
            for f, _ in self.charpoly.factor()[1]:
                if f == self.factor:
                    roots = [r for r, _ in f.complex_roots()]
                    top = max(roots, key=lambda r: r.real.mid())
                    roots = [r for r in roots if r is not top]
                else:
                    roots = [r for r, _ in f.complex_roots()]
                if not all(r.imag == 0 and r.real < low for r in roots):
                    return False
        return True

    def _evaluation_bits(self) -> int:
        """Bits that decide the factor's sign at ``lo`` and ``hi``: the interval's relative
        width, plus the coefficients' and the powers' growth, plus a margin."""
        if self.hi <= self.lo:
            return 0
        top = max(abs(self.lo), abs(self.hi), Fraction(1))
        width = (self.hi - self.lo) / top
        width_bits = width.denominator.bit_length() - width.numerator.bit_length() + 1
        coefficient_bits = max(abs(int(c)) for c in self.factor.coeffs()).bit_length()
        degree = self.factor.degree()
        power_bits = degree * (int(top).bit_length() + 1)
        return width_bits + coefficient_bits + power_bits + 64


def _poly_expr(f: fmpz_poly) -> sp.Expr:
    return sp.Poly([int(v) for v in reversed(f.coeffs())], _X).as_expr()


def exact_lambda_max(G: fmpz_mat, *, prec: int = DEFAULT_PREC) -> ExactEigenvalue:
    """The largest eigenvalue of the symmetric integer matrix ``G``, exactly.

    ``charpoly`` (exact, flint), its irreducible factors, and their real roots isolated by
    arb (``fmpz_poly.complex_roots``; distinct factors have distinct roots, so the factor
    holding the maximum is found by raising the precision until the balls separate).

    >>> e = exact_lambda_max(fmpz_mat([[2, 1], [1, 2]]))
    >>> e.expression, e.lo, e.hi
    ('3', Fraction(3, 1), Fraction(3, 1))
    >>> exact_lambda_max(fmpz_mat([[1, 1], [1, 0]])).expression
    '1/2 + sqrt(5)/2'
    """
    if G.nrows() != G.ncols() or G != G.transpose():
        raise ValueError("G must be a symmetric integer matrix")
    charpoly = G.charpoly()
    factors = [f for f, _ in charpoly.factor()[1]]
    work = prec + 32
    for _ in range(8):
        with working_precision(work):
            tops = []
            for f in factors:
                roots = [r for r, _ in f.complex_roots()]
                if not all(r.imag == 0 for r in roots):
                    raise SpectralError(f"the factor {f} has non-real roots (G not symmetric?)")
                tops.append((f, max((r.real for r in roots), key=lambda b: b.mid())))
            factor, top = max(tops, key=lambda ft: ft[1].mid())
            if all(top > other for f, other in tops if f != factor):
                lo, hi = endpoints(top, prec=work)
                break
        work *= 2
    else:
        raise SpectralError("could not separate the largest roots of the factors")
    degree = factor.degree()
    if degree == 1:
        c0, c1 = (int(v) for v in factor.coeffs())
        root = Fraction(-c0, c1)
        lo = hi = root
        expression = str(sp.Rational(root.numerator, root.denominator))
    elif degree == 2:
        expression = str(sp.rootof(_poly_expr(factor), 1, radicals=True))
    else:
        expression = f"CRootOf({_poly_expr(factor)}, {degree - 1})"
    return ExactEigenvalue(charpoly, factor, expression, lo, hi)


# --------------------------------------------------------------------------------------
# 4. Pooling
# --------------------------------------------------------------------------------------


def _pool_setup(input_hw, kernel_size, stride, padding):
    hw = _pair(tuple(input_hw) if isinstance(input_hw, list) else input_hw, "input_hw", 1)
    kernel = _pair(kernel_size, "kernel_size", 1)
    stride = kernel if stride is None else _pair(stride, "stride", 1)
    padding = _pair(padding, "padding", 0)
    for k, p in zip(kernel, padding, strict=True):
        if 2 * p > k:
            raise ValueError(f"padding {padding!r} must be at most half the kernel {kernel!r}")
    for n, k, p in zip(hw, kernel, padding, strict=True):
        if n + 2 * p < k:
            raise ValueError(f"kernel {kernel!r} is larger than the padded input {hw!r}")
    return hw, kernel, stride, padding


def window_incidence(n: int, k: int, s: int, p: int) -> np.ndarray:
    """``S[i, r] = 1`` iff input ``r`` lies in window ``i`` (``s i - p <= r < s i - p + k``),
    windows ``i < (n + 2p - k) // s + 1`` (PyTorch's floor mode).

    >>> window_incidence(3, 2, 1, 0)
    array([[1, 1, 0],
           [0, 1, 1]])
    """
    out = (n + 2 * p - k) // s + 1
    start = s * np.arange(out)[:, None] - p
    r = np.arange(n)[None, :]
    return ((r >= start) & (r < start + k)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class PoolNorm(Bounds):
    """The exact 2-norm Lipschitz constant of a pooling layer: ``exact`` (a SymPy string)
    and ``lo <= value <= hi``.

    Average pooling: ``axes`` holds each axis' :class:`ExactEigenvalue` of ``S S^T``.
    Max pooling: ``coverage`` = (m_h, m_w), the most windows covering one pixel per axis,
    and ``spike`` a pixel covered by ``m_h m_w`` windows.
    """

    exact: str
    kind: str
    input_hw: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    prec: int
    axes: tuple[ExactEigenvalue, ExactEigenvalue] | None = None
    coverage: tuple[int, int] | None = None
    spike: tuple[int, int] | None = None

    def steps(self) -> tuple[Step, ...]:
        return self._avg_steps() if self.kind == "avgpool" else self._max_steps()

    def _incidences(self):
        return [
            window_incidence(n, k, s, p)
            for n, k, s, p in zip(
                self.input_hw, self.kernel, self.stride, self.padding, strict=True
            )
        ]

    def _avg_steps(self) -> tuple[Step, ...]:
        kh, kw = self.kernel
        steps = [
            Step(
                f"$A = (S_h \\otimes S_w)/{kh * kw}$ with $S$ the 0/1 window incidence of "
                "each axis (count_include_pad: every window divides by $k_h k_w$), checked "
                "entry by entry against the definition of the pooled image; the singular "
                "values of a Kronecker product are the pairwise products, so "
                f"$\\|A\\|_2 = \\|S_h\\|_2 \\|S_w\\|_2/{kh * kw}$",
                "exhaustive enumeration",
                self._check_kronecker,
            )
        ]
        for axis, name in ((0, "h"), (1, "w")):
            root = self.axes[axis]
            lo = to_decimal(root.lo, DIGITS, "floor")
            steps.append(
                Step(
                    f"$\\lambda_{{\\max}}(S_{name} S_{name}^\\top)$: the characteristic "
                    f"polynomial is ${sp.latex(_poly_expr(root.charpoly))}$ (exact integer "
                    f"computation); its largest root ${root.expression} \\ge {lo}$ is a "
                    f"simple root of the factor ${sp.latex(_poly_expr(root.factor))}$ in "
                    "the stated interval, and every other root lies below it",
                    "arb root isolation",
                    lambda axis=axis: self._check_axis(axis),
                )
            )
        lo, hi = self.decimal()
        steps.append(
            Step(
                f"$\\|A\\|_2 = \\sqrt{{\\lambda_h \\lambda_w}}/{kh * kw} = {self.exact} "
                f"\\in [{lo}, {hi}]$",
                "arb enclosure",
                self._check_value,
            )
        )
        return tuple(steps)

    def _check_kronecker(self) -> bool:
        s_h, s_w = self._incidences()
        (h, w), (kh, kw) = self.input_hw, self.kernel
        (sh, sw), (ph, pw) = self.stride, self.padding
        dense = np.zeros((s_h.shape[0], s_w.shape[0], h, w), dtype=np.int64)
        for i, j in product(range(s_h.shape[0]), range(s_w.shape[0])):
            for a, b in product(range(kh), range(kw)):
                r, q = sh * i + a - ph, sw * j + b - pw
                if 0 <= r < h and 0 <= q < w:
                    dense[i, j, r, q] += 1  # the weight 1/(kh kw) times kh kw
        return bool(np.array_equal(dense.reshape(-1, h * w), np.kron(s_h, s_w)))

    def _check_axis(self, axis: int) -> bool:
        incidence = self._incidences()[axis]
        gram = _small_gram(incidence)
        root = self.axes[axis]
        return gram.charpoly() == root.charpoly and root.certify(self.prec)

    def _check_value(self) -> bool:
        (kh, kw), (a, b) = self.kernel, self.axes
        if sp.sympify(self.exact) != _avg_expression(a, b, kh * kw):
            return False
        lo, hi = _avg_bounds(a, b, kh * kw, self.prec)
        return self.lo <= lo and hi <= self.hi

    def _max_steps(self) -> tuple[Step, ...]:
        mh, mw = self.coverage
        return (
            Step(
                f"Every pixel lies in at most $m_h = {mh}$ windows along the rows and "
                f"$m_w = {mw}$ along the columns (every pixel counted), pixel "
                f"{self.spike} in exactly $m = {mh * mw}$ windows; as "
                "$|\\max_w x - \\max_w x'| \\le \\max_{i \\in w} |x_i - x'_i|$, "
                "$\\|\\Delta y\\|^2 \\le \\sum_w \\sum_{i \\in w} \\Delta x_i^2 \\le m "
                "\\|\\Delta x\\|^2$",
                "exhaustive enumeration",
                self._check_coverage,
            ),
            Step(
                f"The spike $x = 0$, $x' = e_{{{self.spike}}}$ gives "
                f"$\\|y(x') - y(x)\\|_2 = \\sqrt{{{mh * mw}}} = {self.exact}$ "
                "(max pooling with -inf padding evaluated from the definition)",
                "exact witness",
                self._check_spike,
            ),
        )

    def _check_coverage(self) -> bool:
        counts = [s.sum(axis=0) for s in self._incidences()]
        found = tuple(int(c.max()) for c in counts)
        spike_ok = all(int(c[i]) == m for c, i, m in zip(counts, self.spike, found, strict=True))
        return found == self.coverage and spike_ok

    def _check_spike(self) -> bool:
        h, w = self.input_hw
        spike = np.zeros((h, w))
        spike[self.spike] = 1.0
        base = _maxpool_reference(np.zeros((h, w)), self.kernel, self.stride, self.padding)
        moved = _maxpool_reference(spike, self.kernel, self.stride, self.padding)
        m = self.coverage[0] * self.coverage[1]
        return int(np.sum((moved - base) ** 2)) == m and sp.sympify(self.exact) == sp.sqrt(m)


def _small_gram(incidence: np.ndarray) -> fmpz_mat:
    """``S S^T`` or ``S^T S``, the smaller (same nonzero eigenvalues), exactly."""
    s = fmpz_mat(incidence.tolist())
    return s * s.transpose() if s.nrows() <= s.ncols() else s.transpose() * s


def _avg_expression(a: ExactEigenvalue, b: ExactEigenvalue, area: int) -> sp.Expr:
    """``sqrt(lambda_h lambda_w) / area`` in SymPy (parses CRootOf: slow for high degrees)."""
    if a.expression == b.expression:
        return sp.sympify(a.expression) / area
    return sp.sqrt(sp.sympify(a.expression) * sp.sympify(b.expression)) / area


def _avg_text(a: ExactEigenvalue, b: ExactEigenvalue, area: int) -> str:
    """:func:`_avg_expression` as a string, simplified by SymPy unless a CRootOf occurs."""
    if "CRootOf" not in a.expression + b.expression:
        return str(_avg_expression(a, b, area))
    if a.expression == b.expression:
        return f"({a.expression})/{area}"
    return f"sqrt(({a.expression})*({b.expression}))/{area}"


def _avg_bounds(a: ExactEigenvalue, b: ExactEigenvalue, area: int, prec: int):
    return _as_bounds(a.lo * b.lo, a.hi * b.hi, Fraction(1, area * area), prec)


def avgpool2d_lipschitz(
    input_hw, kernel_size, stride=None, padding=0, *, prec: int = DEFAULT_PREC
) -> PoolNorm:
    r"""The exact 2-norm of 2-D average pooling on one (H, W) plane (channels are
    independent, so the same for any number of channels).

    PyTorch ``AvgPool2d`` with ``count_include_pad=True`` and ``ceil_mode=False``: window
    ``(i, j)`` averages the padded input over ``[s_h i, s_h i + k_h) x [s_w j, s_w j + k_w)``
    (zeros outside the image) and divides by ``k_h k_w``. So ``A = (S_h (x) S_w)/(k_h k_w)``
    and ``||A||_2 = sqrt(lambda_max(S_h S_h^T) lambda_max(S_w S_w^T))/(k_h k_w)``, each
    ``lambda_max`` the largest root of an integer characteristic polynomial
    (:func:`exact_lambda_max`). ``stride`` defaults to ``kernel_size``.

    >>> avgpool2d_lipschitz((4, 4), 2).exact  # non-overlapping windows: 1/sqrt(k_h k_w)
    '1/2'
    >>> avgpool2d_lipschitz((3, 3), 2, 1).exact  # S S^T = [[2, 1], [1, 2]]: 3/4
    '3/4'
    """
    hw, kernel, stride, padding = _pool_setup(input_hw, kernel_size, stride, padding)
    axes = tuple(
        exact_lambda_max(_small_gram(window_incidence(n, k, s, p)), prec=prec)
        for n, k, s, p in zip(hw, kernel, stride, padding, strict=True)
    )
    area = kernel[0] * kernel[1]
    lo, hi = _avg_bounds(*axes, area, prec)
    text = _avg_text(*axes, area)
    return PoolNorm(lo, hi, text, "avgpool", hw, kernel, stride, padding, prec, axes)


def avgpool_lipschitz_limit(kernel_size, stride=None) -> sp.Expr:
    """``lim ||A||_2`` as H, W grow (any fixed padding): ``sqrt(c_h c_w)/(k_h k_w)``,
    ``c = sum_m max(0, k - |m| s)``.

    ``S S^T`` has entries ``max(0, k - |i - j| s)`` (the overlap of windows ``i`` and
    ``j``) away from the borders: a section of the Toeplitz matrix with nonnegative
    symbol ``f(theta) = sum_m max(0, k - |m| s) e^{i m theta}``, maximal at ``theta = 0``;
    the largest eigenvalues of its sections increase to ``f(0) = c``. Stride 1 gives
    ``c = k^2`` and the limit 1; stride ``>= k`` gives ``c = k`` and ``1/sqrt(k_h k_w)``.

    >>> avgpool_lipschitz_limit(3, 1), avgpool_lipschitz_limit(3, 2), avgpool_lipschitz_limit(2)
    (1, 5/9, 1/2)
    """
    kernel = _pair(kernel_size, "kernel_size", 1)
    stride = kernel if stride is None else _pair(stride, "stride", 1)
    symbol = [
        sum(max(0, k - abs(m) * s) for m in range(-k, k + 1))
        for k, s in zip(kernel, stride, strict=True)
    ]
    return sp.sqrt(sp.Integer(symbol[0] * symbol[1])) / (kernel[0] * kernel[1])


def _maxpool_reference(x: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """2-D max pooling from the definition (-inf padding, floor mode)."""
    h, w = x.shape
    padded = np.full((h + 2 * padding[0], w + 2 * padding[1]), -np.inf)
    padded[padding[0] : padding[0] + h, padding[1] : padding[1] + w] = x
    oh = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
    out = np.empty((oh, ow))
    for i, j in product(range(oh), range(ow)):
        r, q = stride[0] * i, stride[1] * j
        out[i, j] = padded[r : r + kernel[0], q : q + kernel[1]].max()
    return out


def maxpool2d_lipschitz(input_hw, kernel_size, stride=None, padding=0) -> PoolNorm:
    r"""The exact 2-norm Lipschitz constant ``sqrt(m)`` of 2-D max pooling on one plane.

    ``m = m_h m_w`` is the largest number of windows covering one pixel (windows are
    products, so the counts multiply; counted exhaustively per axis). Upper bound:
    ``|max_w x - max_w x'| <= max_{i in w} |x_i - x'_i|``, so ``||dy||^2 <= sum_i c_i dx_i^2
    <= m ||dx||^2`` with ``c_i`` the windows covering pixel ``i``; the spike ``x' = e_i`` at a
    pixel with ``c_i = m`` attains it. PyTorch ``MaxPool2d`` (-inf padding, floor mode,
    dilation 1); ``stride`` defaults to ``kernel_size``.

    >>> maxpool2d_lipschitz((8, 8), 3, 1).exact, maxpool2d_lipschitz((8, 8), 2).exact
    ('3', '1')
    """
    hw, kernel, stride, padding = _pool_setup(input_hw, kernel_size, stride, padding)
    counts = [
        window_incidence(n, k, s, p).sum(axis=0)
        for n, k, s, p in zip(hw, kernel, stride, padding, strict=True)
    ]
    coverage = tuple(int(c.max()) for c in counts)
    spike = tuple(int(np.argmax(c)) for c in counts)
    m = coverage[0] * coverage[1]
    lo, hi = _as_bounds(Fraction(m), Fraction(m), Fraction(1), DEFAULT_PREC)
    if math.isqrt(m) ** 2 == m:
        lo = hi = Fraction(math.isqrt(m))
    return PoolNorm(
        lo, hi, str(sp.sqrt(m)), "maxpool", hw, kernel, stride, padding, DEFAULT_PREC,
        coverage=coverage, spike=spike,
    )  # fmt: skip


__all__: Sequence[str] = (
    "CLUSTER_GAP",
    "DENSE_LIMIT",
    "EIG_LIMIT",
    "Bounds",
    "ConvBounds",
    "ConvNorm",
    "ExactEigenvalue",
    "FrequencyBound",
    "PoolNorm",
    "SigmaMax",
    "SpectralError",
    "avgpool2d_lipschitz",
    "avgpool_lipschitz_limit",
    "conv_circular_lipschitz",
    "conv_zero_padding_bounds",
    "dense_conv_matrix",
    "exact_lambda_max",
    "maxpool2d_lipschitz",
    "sigma_max",
    "window_incidence",
)
