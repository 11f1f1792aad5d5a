"""Shared pieces of the three attention kernels (``dp_attention``, ``l2_attention``,
``scs_attention``): argument checks, the two kinds of arithmetic, the row softmax and its
backward pass, and the Jacobian assembled from VJPs.

Arithmetic (an :class:`Arith` object carries the choice through a kernel):

* float64 -- float64, float32 and float16 ("mixed", the default) inputs are widened exactly
  to float64 (bfloat16 too, by ``kernels._bf16.widened`` before the kernel runs); matrix
  products run in NumPy/BLAS (float64), the row-wise softmax and its backward pass in the
  Numba loops below (serial: see ``PARALLEL``); the caller rounds the results once to the
  input dtype. The softmax's exponentials come from libm's ``exp`` for float64 input
  (glibc: below 1 ulp) and from ``kernels._vmath.exp_bounded`` for float32 and float16
  input: float64 arithmetic that LLVM vectorizes, with a proven relative error below
  ``EXP_REL_ERROR = 2^-50`` (4 ulps of float64), before the one rounding to float32 or
  float16. No intermediate overflows for float16 input (the longest chain of products,
  L2's backward pass, multiplies nine values below 65504), so a float16 result is inf
  exactly when the value computed in float64 rounds to inf; float32 input could overflow an
  intermediate only with magnitudes near its own maximum 3.4e38.
* strict -- ``strict_fp16=True`` (float16 or bfloat16 input): every product, partial sum
  (sequential, ascending index), difference, quotient, square root and ``exp`` is rounded to
  the input's format (``kernels/_strict.narrow``: half precision, or bfloat16 for bfloat16
  input, whose arrays are widened exactly to float64 first), as naive 16-bit arithmetic
  would. The values are stored in float64 arrays; one float64 operation on two values of
  the format followed by one rounding to it is the correctly rounded operation of the
  format (53 >= 2 p + 2 for p = 11 and 8, so the double rounding is innocuous), which lets
  elementwise steps run in NumPy (bfloat16 rounded by ``kernels._bf16.to_bfloat16``,
  directly from float64). bfloat16 has float32's range, so its products and sums overflow
  only past 3.4e38, but 8 significant bits: a running sum of ones stops at 256
  (``256 + 1`` rounds back to 256; float16's at 2048), so a softmax row of N > 256 equal
  logits gets the weights ``1/256`` instead of ``1/N`` (``tests/kernels/test_attention.py``).

Row softmax (both modes): ``m`` = the first index of the row's largest entry,
``e_j = exp(s_j - s_m)``, ``P_j = e_j / sum_j e_j`` (the sum in any order in float64,
ascending in strict mode). Non-finite rows follow
IEEE arithmetic on that formula: a NaN or a +inf in the row, or a row that is all -inf, makes
the whole row NaN (``inf - inf`` and ``0/0``); a -inf entry in a row with a finite maximum
gets ``P_j = 0``. There are no masks.

Softmax backward: ``dS = P * (dP - rowsum(dP * P))``, evaluated without the cancellation of
``dP_m - <dP, P>`` when ``P_m`` is near 1 (the trick of ``kernels/softmax.py``): with
``c = sum_{j != m} P_j (dP_m - dP_j)`` (using ``sum_j P_j = 1``),
``dS_m = P_m c`` and ``dS_i = P_i ((dP_i - dP_m) + c)`` for ``i != m``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike

from kernels._bf16 import to_bfloat16
from kernels._strict import is_bfloat16, narrow
from kernels._validate import float_array, strict_mode
from kernels._vmath import exp_bounded
from kernels.cast import cast, widen

#: Whether the row loops run in parallel (``prange``). Off: on the 2-core target, forward +
#: vjp at N = 512 ran about 3x slower with it, because the loops alternate with multithreaded
#: BLAS products and libgomp's spinning worker threads compete with OpenBLAS's for the cores
#: (measured: dp_attention 15.7 ms parallel, 4.9 ms serial; l2_attention 24.1 / 9.2 ms).
#: float16 input is widened and its results rounded serially for the same reason
#: (``kernels.cast``'s parallel loops: forward + VJP of float16 dp_attention at N = 512,
#: D = 64 took 27-44 ms with them, 21 ms without).
PARALLEL = False

# --- argument checks --------------------------------------------------------------------------


def check_input(X: ArrayLike) -> np.ndarray:
    """``X`` checked: a bfloat16 or float16/32/64 array of shape (N, D), N >= 1, D >= 1."""
    X = float_array(X, "X", bfloat16=True)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X: expected shape (N, D) with N >= 1 and D >= 1, got {X.shape}")
    return X


def check_weight(W: ArrayLike, name: str, X: np.ndarray, rows: int | None = None) -> np.ndarray:
    """A projection ``W`` of shape (rows, D) in X's dtype (any rows >= 1 if ``rows`` is None)."""
    W = float_array(W, name, bfloat16=True)
    D = X.shape[1]
    if W.ndim != 2 or W.shape[1] != D or W.shape[0] == 0:
        raise ValueError(
            f"{name}: expected shape (d, {D}) with d >= 1 (D = X.shape[1]), got {W.shape}"
        )
    if rows is not None and W.shape[0] != rows:
        raise ValueError(
            f"{name}: expected shape ({rows}, {D}) (the shape of Wq: queries and keys must "
            f"have the same width), got {W.shape}"
        )
    if W.dtype != X.dtype:
        raise TypeError(f"{name}: expected dtype {X.dtype} (the dtype of X), got {W.dtype}")
    return W


def check_gradient(G: ArrayLike, n: int, dv: int, dtype: np.dtype) -> np.ndarray:
    """The upstream gradient ``G``: shape (N, dv) (the shape of Y), X's dtype."""
    G = float_array(G, "G", bfloat16=True)
    if G.shape != (n, dv):
        raise ValueError(f"G: expected shape {(n, dv)} (the shape of Y), got {G.shape}")
    if G.dtype != dtype:
        raise TypeError(f"G: expected dtype {dtype} (the dtype of X), got {G.dtype}")
    return G


def ieee() -> np.errstate:
    """Overflow, inf - inf, 0 * inf, 0/0: IEEE results, not warnings."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore")


def ieee_kernel(kernel: Callable) -> Callable:
    """``kernel`` run inside one :func:`ieee` context: :class:`Arith`'s operations count on
    it (one context per call instead of one per operation, which cost a quarter of the
    time of a small attention's Jacobian)."""

    @functools.wraps(kernel)
    def call(*args, **kwargs):
        with ieee():
            return kernel(*args, **kwargs)

    return call


def finish(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round once to ``dtype`` (exact in strict mode: the values are halves, or bfloat16
    values, already); called inside :func:`ieee_kernel`. float16 serially (see
    :data:`PARALLEL`)."""
    if np.dtype(dtype) == np.float16:
        return cast(values, "float16", threads=False)
    return np.ascontiguousarray(values).astype(dtype)


# --- Numba loops --------------------------------------------------------------------------------


@njit(cache=True)
def _row_max(s):
    """``(m, ok)``: the first index of the row's maximum, and False if the row is NaN by
    IEEE arithmetic (a NaN or +inf entry, or every entry -inf)."""
    m = 0
    best = -math.inf
    for j in range(s.size):
        v = s[j]
        if math.isnan(v) or v == math.inf:
            return 0, False
        if v > best:
            best = v
            m = j
    return m, best > -math.inf


@njit(cache=True)
def _row_start(P, argmax, i):
    """``(m, ok)`` of row i by :func:`_row_max`, m recorded in ``argmax``; a row that is NaN
    by IEEE arithmetic is filled with NaN."""
    m, ok = _row_max(P[i])
    argmax[i] = m
    if not ok:
        P[i, :] = math.nan
    return m, ok


# The row loops below work in place, reading and writing one array: given the logits and
# the result as two arguments that were one array, LLVM's run-time overlap check sent the
# vectorized loops to their scalar versions (512 x 512 logits: 3.8-5.4 ms a softmax,
# against 1.2-1.3 ms in place, the same bits).


@njit(cache=True, parallel=PARALLEL, error_model="numpy", fastmath={"reassoc", "contract"})
def _softmax_rows(P, argmax):
    """Each row of the logits ``P`` replaced by its softmax."""
    for i in prange(P.shape[0]):
        m, ok = _row_start(P, argmax, i)
        if not ok:
            continue
        top = P[i, m]
        total = 0.0
        for j in range(P.shape[1]):
            e = math.exp(P[i, j] - top)
            P[i, j] = e
            total += e
        for j in range(P.shape[1]):
            P[i, j] = P[i, j] / total


@njit(cache=True, error_model="numpy")
def _shifted_exponentials(p, top):
    """``p_j = exp(p_j - top)`` by ``exp_bounded``, in place, a loop LLVM vectorizes. No
    fast-math flag here: reassociation would undo exp_bounded's rounding of ``k`` by
    ``1.5 2^52``."""
    for j in range(p.size):
        p[j] = exp_bounded(p[j] - top, 0.0)[0]


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _normalize(p):
    """``p / sum(p)`` in place (the sum in any order, as in :func:`_softmax_rows`)."""
    total = 0.0
    for j in range(p.size):
        total += p[j]
    for j in range(p.size):
        p[j] = p[j] / total


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _softmax_rows_vector(P, argmax):
    """:func:`_softmax_rows` with the exponentials of :func:`_shifted_exponentials`. A
    ``-inf`` entry (of a row with a finite maximum) gets ``exp_bounded(-inf) = 0``."""
    for i in prange(P.shape[0]):
        m, ok = _row_start(P, argmax, i)
        if not ok:
            continue
        _shifted_exponentials(P[i], P[i, m])
        _normalize(P[i])


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _softmax_rows_strict(P, argmax, bf):
    for i in prange(P.shape[0]):
        m, ok = _row_start(P, argmax, i)
        if not ok:
            continue
        top = P[i, m]
        total = 0.0
        for j in range(P.shape[1]):
            e = narrow(math.exp(narrow(P[i, j] - top, bf)), bf)
            P[i, j] = e
            total = narrow(total + e, bf)
        for j in range(P.shape[1]):
            P[i, j] = narrow(P[i, j] / total, bf)


@njit(cache=True, parallel=PARALLEL, error_model="numpy", fastmath={"reassoc", "contract"})
def _softmax_backward_rows(P, dS, argmax):
    """``dS`` holds ``dP`` and is overwritten, in place (each entry is read before it is
    written, ``dP_m`` first). The loops split at m, so that none branches and LLVM
    vectorizes them."""
    for i in prange(P.shape[0]):
        m = argmax[i]
        top = dS[i, m]
        c = 0.0
        for j in range(m):
            c += P[i, j] * (top - dS[i, j])
        for j in range(m + 1, P.shape[1]):
            c += P[i, j] * (top - dS[i, j])
        for j in range(P.shape[1]):
            dS[i, j] = P[i, j] * ((dS[i, j] - top) + c)
        dS[i, m] = P[i, m] * c


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _softmax_backward_rows_strict(P, dS, argmax, bf):
    for i in prange(P.shape[0]):
        m = argmax[i]
        top = dS[i, m]
        c = 0.0
        for j in range(P.shape[1]):
            if j != m:
                c = narrow(c + narrow(P[i, j] * narrow(top - dS[i, j], bf), bf), bf)
        for j in range(P.shape[1]):
            if j != m:
                dS[i, j] = narrow(P[i, j] * narrow(narrow(dS[i, j] - top, bf) + c, bf), bf)
        dS[i, m] = narrow(P[i, m] * c, bf)


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _matmul_nt_strict(a, b, out, bf):
    """``out = a b^T`` for halves (bfloat16 values if ``bf``): each product and partial sum
    (ascending) rounded."""
    for i in prange(a.shape[0]):
        for k in range(b.shape[0]):
            acc = 0.0
            for j in range(a.shape[1]):
                acc = narrow(acc + narrow(a[i, j] * b[k, j], bf), bf)
            out[i, k] = acc


@njit(cache=True, parallel=PARALLEL, error_model="numpy", fastmath={"reassoc", "contract"})
def _neg_sq_dist(Q, scale, S):
    """``S_ij = -(sum_c (q_ic - q_jc)^2) / scale`` from the differences: S_ii = 0, S <= 0.

    S is symmetric, bit for bit: ``fl(q_jc - q_ic) = -fl(q_ic - q_jc)``, so the squares and
    the sum (the same loop) are the same; each pair is computed once, for ``j >= i``."""
    n, width = Q.shape
    for i in prange(n):
        for j in range(i, n):
            acc = 0.0
            for c in range(width):
                t = Q[i, c] - Q[j, c]
                acc += t * t
            S[i, j] = -(acc / scale)
    for i in range(n):
        for j in range(i):
            S[i, j] = S[j, i]


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _neg_sq_dist_strict(Q, scale, S, bf):
    n, width = Q.shape
    for i in prange(n):
        for j in range(n):
            acc = 0.0
            for c in range(width):
                t = narrow(Q[i, c] - Q[j, c], bf)
                acc = narrow(acc + narrow(t * t, bf), bf)
            S[i, j] = -narrow(acc / scale, bf)


@njit(cache=True, error_model="numpy")
def _rowdot_strict(a, b, out, bf):
    for i in range(a.shape[0]):
        acc = 0.0
        for j in range(a.shape[1]):
            acc = narrow(acc + narrow(a[i, j] * b[i, j], bf), bf)
        out[i, 0] = acc


@njit(cache=True, parallel=PARALLEL, error_model="numpy", fastmath={"reassoc", "contract"})
def _weighted_differences(T, Q, out):
    """``out_a = sum_j T_aj (q_a - q_j)`` (= ``rowsum(T)_a q_a - (T Q)_a`` without its
    cancellation when the q_j lie close together far from 0), each sum over j in order.

    Four rows a at a time, so that each q_j is read once for the four: 2.0-2.3 ms a call at
    N = 512, d = 64, against 3.2-3.5 ms a row at a time, the same bits (each entry's
    terms, products and sums are those of the one-row loop, which the last ``N mod 4`` rows
    keep)."""
    n, width = Q.shape
    full = n - n % 4
    for group in prange(full // 4):
        a = 4 * group
        acc = np.zeros((4, width))
        for j in range(n):
            t0, t1, t2, t3 = T[a, j], T[a + 1, j], T[a + 2, j], T[a + 3, j]
            for c in range(width):
                qj = Q[j, c]
                acc[0, c] += t0 * (Q[a, c] - qj)
                acc[1, c] += t1 * (Q[a + 1, c] - qj)
                acc[2, c] += t2 * (Q[a + 2, c] - qj)
                acc[3, c] += t3 * (Q[a + 3, c] - qj)
        out[a : a + 4] = acc
    for a in range(full, n):
        for c in range(width):
            out[a, c] = 0.0
        for j in range(n):
            t = T[a, j]
            for c in range(width):
                out[a, c] += t * (Q[a, c] - Q[j, c])


@njit(cache=True, parallel=PARALLEL, error_model="numpy")
def _weighted_differences_strict(T, Q, out, bf):
    n, width = Q.shape
    for a in prange(n):
        for c in range(width):
            acc = 0.0
            for j in range(n):
                acc = narrow(acc + narrow(T[a, j] * narrow(Q[a, c] - Q[j, c], bf), bf), bf)
            out[a, c] = acc


# --- the two kinds of arithmetic -------------------------------------------------------------


class Arith:
    """float64 (BLAS and the float64 loops) or strict half (bfloat16 if ``bf``); every method
    returns float64 arrays (holding values of the strict format in strict mode) and writes
    into no argument but the temporaries that :meth:`softmax`, :meth:`softmax_backward` and
    ``inplace`` :meth:`mul` and :meth:`div` are given for it (the kernels pass them fresh
    products; never an input). ``vector_exp``: the float64 softmax takes its exponentials
    from ``exp_bounded`` instead of libm (float32 and float16 input). Its operations give
    IEEE results without warnings inside :func:`ieee` only: the kernels that use it run
    under :func:`ieee_kernel`."""

    def __init__(self, strict: bool, bf: bool = False, vector_exp: bool = False):
        self.strict = strict
        self.bf = bf
        self.vector_exp = vector_exp

    @staticmethod
    def wide(a: np.ndarray) -> np.ndarray:
        """``a`` widened exactly to a C-contiguous float64 array (not copied if it is one),
        serially (see :data:`PARALLEL`)."""
        return widen(a, threads=False)

    def round(self, a: np.ndarray) -> np.ndarray:
        """The result of one elementwise operation: rounded to half (bfloat16) in strict
        mode, directly from float64 (``to_bfloat16``; ml_dtypes' own cast goes through
        float32)."""
        if not self.strict:
            return a
        if self.bf:
            return to_bfloat16(a).astype(np.float64)
        return a.astype(np.float16).astype(np.float64)

    def scalar(self, value: float) -> float:
        """A constant as the arithmetic holds it (rounded to the strict format)."""
        return narrow(float(value), self.bf) if self.strict else value

    def mm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a @ b``."""
        if self.strict:
            out = np.empty((a.shape[0], b.shape[1]))
            _matmul_nt_strict(self.wide(a), self.wide(b.T), out, self.bf)
            return out
        return a @ b

    def rowdot(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``rowsum(a * b)`` as a column (N, 1)."""
        if self.strict:
            out = np.empty((a.shape[0], 1))
            _rowdot_strict(self.wide(a), self.wide(b), out, self.bf)
            return out
        return np.einsum("ij,ij->i", a, b)[:, None]

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.round(a + b)

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.round(a - b)

    def mul(self, a: np.ndarray, b: np.ndarray | float, inplace: bool = False) -> np.ndarray:
        """``a * b``; with ``inplace`` (``a`` a float64 temporary of the caller's, ``b``
        not a view of it) written over ``a`` in float64 arithmetic."""
        if inplace and not self.strict:
            return np.multiply(a, b, out=a)
        return self.round(a * b)

    def div(self, a: np.ndarray, b: np.ndarray | float, inplace: bool = False) -> np.ndarray:
        """``a / b``; ``inplace`` as in :meth:`mul`."""
        if inplace and not self.strict:
            return np.divide(a, b, out=a)
        return self.round(a / b)

    def sqrt(self, a: np.ndarray) -> np.ndarray:
        return self.round(np.sqrt(a))

    def softmax(self, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(P, argmax)``: the row softmax and the first index of each row's maximum. P is
        written over ``S`` (a temporary of the caller's; a fresh large array costs its page
        faults, measured at about 1 ms per 2 MB here), unless S is not C-contiguous
        float64."""
        P = self.wide(S)
        argmax = np.empty(S.shape[0], dtype=np.int64)
        if self.strict:
            _softmax_rows_strict(P, argmax, self.bf)
        elif self.vector_exp:
            _softmax_rows_vector(P, argmax)
        else:
            _softmax_rows(P, argmax)
        return P, argmax

    def softmax_backward(self, P: np.ndarray, dP: np.ndarray, argmax: np.ndarray) -> np.ndarray:
        """``dS = P * (dP - rowsum(dP * P))``, cancellation-free at the argmax; written over
        ``dP`` (a temporary of the caller's) as :meth:`softmax` does."""
        dS = self.wide(dP)
        if self.strict:
            _softmax_backward_rows_strict(P, dS, argmax, self.bf)
        else:
            _softmax_backward_rows(P, dS, argmax)
        return dS

    def weighted_differences(self, T: np.ndarray, Q: np.ndarray) -> np.ndarray:
        """``sum_j T_aj (q_a - q_j)`` for each row a: ``diag(rowsum(T)) Q - T Q``."""
        out = np.empty(Q.shape)
        if self.strict:
            _weighted_differences_strict(self.wide(T), self.wide(Q), out, self.bf)
        else:
            _weighted_differences(self.wide(T), self.wide(Q), out)
        return out

    def neg_sq_dist(self, Q: np.ndarray, scale: float) -> np.ndarray:
        """``S_ij = -|q_i - q_j|^2 / scale`` from the differences."""
        S = np.empty((Q.shape[0], Q.shape[0]))
        if self.strict:
            _neg_sq_dist_strict(self.wide(Q), scale, S, self.bf)
        else:
            _neg_sq_dist(self.wide(Q), scale, S)
        return S


def arithmetic(X: np.ndarray, strict_fp16: object) -> Arith:
    """The arithmetic of a call with the checked ``X``: ``strict_fp16`` checked, strict
    bfloat16 for a bfloat16 ``X``. A bfloat16 ``X`` in mixed mode is a TypeError: the public
    kernels (``kernels._strict.bfloat16_kernel``) send such calls to ``widened``, which
    passes float64 here."""
    strict = strict_mode(strict_fp16, X.dtype)
    bf = is_bfloat16(X)
    if bf and not strict:
        raise TypeError("X: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
    return Arith(strict, bf, vector_exp=not strict and X.dtype != np.float64)


# --- Jacobian -----------------------------------------------------------------------------------


def jacobian_from_vjp(input_vjp: Callable[[np.ndarray], np.ndarray], n: int, dv: int) -> np.ndarray:
    """The dense (N dv, N D) Jacobian ``d vec(Y) / d vec(X)`` (C order, numerator layout):
    row ``r`` is the input gradient for the upstream gradient ``e_r``, one VJP per row."""
    rows = []
    for r in range(n * dv):
        G = np.zeros((n, dv))
        G.flat[r] = 1.0
        rows.append(input_vjp(G).reshape(-1))
    return np.stack(rows)
