"""Float linear algebra with the same bits on every machine.

NumPy's linear algebra runs the BLAS and LAPACK it was built with, and OpenBLAS picks its
kernels for the CPU when it loads: its Haswell and SkylakeX kernels add in different orders,
so ``np.linalg.svd`` and ``np.linalg.norm`` differ in their last bits from one machine to
the next. A search that follows those bits (the attentions' ascent) ends elsewhere, and the
report, compared byte for byte, changes. The routines here use only IEEE additions,
multiplications, divisions and square roots in a fixed order, compiled by Numba without
fastmath (no reassociation, no contraction into FMAs), so their results depend on the
input alone.

>>> import numpy as np
>>> s, u, v = top_singular(np.array([[3.0, 0.0], [0.0, 4.0]]))
>>> float(s), np.abs(u).tolist(), np.abs(v).tolist()
(4.0, [0.0, 1.0], [0.0, 1.0])
>>> float(frobenius(np.array([3.0, 4.0])))
5.0
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: One-sided Jacobi stops rotating a pair of columns when their cosine is below this.
ORTHOGONAL = 2.0**-53
#: Sweeps over all pairs; one-sided Jacobi converges quadratically, in well under 30.
MAX_SWEEPS = 60


@njit(cache=True)
def _dot(a: np.ndarray, p: int, q: int) -> float:
    total = 0.0
    for i in range(a.shape[0]):
        total += a[i, p] * a[i, q]
    return total


@njit(cache=True)
def _rotate(a: np.ndarray, p: int, q: int, c: float, s: float) -> None:
    for i in range(a.shape[0]):
        ap, aq = a[i, p], a[i, q]
        a[i, p] = c * ap - s * aq
        a[i, q] = s * ap + c * aq


@njit(cache=True)
def _jacobi(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Jacobi (Hestenes): ``B = A V`` with orthogonal columns and ``V`` orthogonal,
    so the singular values are the column norms of ``B``."""
    b = matrix.copy()
    n = b.shape[1]
    v = np.eye(n)
    for _ in range(MAX_SWEEPS):
        rotated = False
        for p in range(n - 1):
            for q in range(p + 1, n):
                alpha, beta, gamma = _dot(b, p, p), _dot(b, q, q), _dot(b, p, q)
                if gamma == 0.0 or abs(gamma) <= ORTHOGONAL * np.sqrt(alpha) * np.sqrt(beta):
                    continue
                rotated = True
                zeta = (beta - alpha) / (2.0 * gamma)
                if abs(zeta) > 1e150:
                    t = 0.5 / zeta
                else:
                    t = 1.0 / (abs(zeta) + np.sqrt(1.0 + zeta * zeta))
                    t = t if zeta >= 0.0 else -t
                c = 1.0 / np.sqrt(1.0 + t * t)
                _rotate(b, p, q, c, c * t)
                _rotate(v, p, q, c, c * t)
        if not rotated:
            break
    return b, v


@njit(cache=True)
def _top(matrix: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    b, v = _jacobi(matrix)
    best, top = -1.0, 0
    for j in range(b.shape[1]):
        size = np.sqrt(_dot(b, j, j))
        if size > best:
            best, top = size, j
    u = np.zeros(b.shape[0])
    if best > 0.0:
        for i in range(b.shape[0]):
            u[i] = b[i, top] / best
    else:
        u[0] = 1.0
    return best, u, v[:, top].copy()


def top_singular(matrix: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(sigma_max, u, v)`` of a real matrix (m x n, any m and n): ``A v = sigma_max u``
    with unit ``u`` and ``v``, by one-sided Jacobi on the columns (on ``A^T`` when it has
    fewer). The signs of ``u`` and ``v`` are one of the two valid choices. The matrix is
    first scaled by the power of two that brings its largest entry into [1/2, 1), so that
    the sums of squares neither overflow nor underflow."""
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"expected a nonempty matrix, got shape {a.shape}")
    largest = float(np.max(np.abs(a)))
    if not math.isfinite(largest):
        raise ValueError("expected finite entries")
    exponent = math.frexp(largest)[1]
    a = np.ldexp(a, -exponent)
    if a.shape[1] > a.shape[0]:
        s, v, u = _top(np.ascontiguousarray(a.T))
    else:
        s, u, v = _top(np.ascontiguousarray(a))
    return math.ldexp(s, exponent), u, v


def frobenius(array: np.ndarray) -> float:
    """The Euclidean (Frobenius) norm of any real array, summed in index order."""
    column = np.ascontiguousarray(array, dtype=np.float64).reshape(-1, 1)
    return float(np.sqrt(_dot(column, 0, 0)))
