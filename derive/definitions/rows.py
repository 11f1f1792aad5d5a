"""Linear, Convolution, Softmax, the poolings and the residual blocks, in SymPy.

Each forward is written once here, at concrete sizes, for one sample as a column vector
(the paper's convention; a kernel's rows are these columns transposed):

* Linear (Table 2; Eq. 9): ``y = W x + b``; PyTorch's ``x W^T + b`` on a row is the same map.
* Convolution (Table 2; Eq. 12-13), PyTorch's cross-correlation on a (C, H, W) image with
  weights (O, C, Kh, Kw), stride and zero or circular padding:
  ``y[o, i, j] = b_o + sum_{c, a, e} W[o, c, a, e] xp[c, s i + a, s j + e]`` with ``xp``
  the padded image.
* Softmax (Table 2): ``y_i = exp(x_i) / sum_j exp(x_j)``.
* MaxPooling and AveragePooling, global (Table 2): ``y = max(x)``, ``y = sum(x) / D``.
* FFN (Eq. 26): ``W2 relu(W1 x + b1) + b2`` with the ReLU of
  :mod:`derive.definitions.activations` (relu'(0) = 0); Residual (Eq. 22): ``y = x + f(x)``;
  Weighted Residual (section 5.3, Eq. 55): ``y = x + nu * f(x)``, ``nu`` per feature.

Jacobians are taken with ``sympy.Matrix.jacobian``, numerator layout
(``J[i, j] = dy_i/dx_j``); the paper prints denominator layout, the transpose.

Linear, Softmax and AveragePooling are also written for every size at once
(:func:`linear_entry`, :func:`softmax_entry`, :func:`avg_pool_entry`): one entry, with sums
over ``1..D`` (and ``1..O``, :data:`OUTPUTS`) of ``IndexedBase`` entries, for the proofs at
a symbolic size (:func:`proofs.core.sum_identity`). Expanded at a concrete size they are
the forwards above (``tests/check/test_rows.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sympy as sp

from derive.definitions import activations
from derive.definitions.activations import RELU

#: A map from a column of inputs to a column of outputs, in SymPy.
Forward = Callable[[sp.Matrix], sp.Matrix]


def vector(name: str, size: int) -> sp.Matrix:
    """A column of real symbols ``name1 .. name<size>`` (``name_1 ..`` if name ends in a
    digit)."""
    sep = "_" if name[-1].isdigit() else ""
    return sp.Matrix([sp.Symbol(f"{name}{sep}{k}", real=True) for k in range(1, size + 1)])


def matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    """A rows x cols matrix of real symbols ``name_i_j`` (1-based)."""
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{i + 1}_{j + 1}", real=True))


def jacobian(y: sp.Matrix, x: sp.Matrix) -> sp.Matrix:
    """``dy/dx`` in numerator layout."""
    return y.jacobian(x)


# --- Every size at once: one entry, sums over 1..D ---------------------------------------

#: The symbolic sizes of the entry forms: the input length D and the output count O of a
#: Linear layer.
D = sp.Symbol("D", integer=True, positive=True)
OUTPUTS = sp.Symbol("O", integer=True, positive=True)


def linear_entry(
    W: sp.IndexedBase, x: sp.IndexedBase, b: sp.IndexedBase, a: sp.Symbol, j: sp.Symbol
) -> sp.Expr:
    """Entry ``a`` of ``W x + b`` for every D: ``sum_{j=1}^{D} W[a, j] x[j] + b[a]``."""
    return sp.Sum(W[a, j] * x[j], (j, 1, D)) + b[a]


def softmax_entry(x: sp.IndexedBase, a: sp.Symbol, j: sp.Symbol) -> sp.Expr:
    """Entry ``a`` of :func:`softmax` for every D: ``exp(x[a]) / sum_{j=1}^{D} exp(x[j])``."""
    return sp.exp(x[a]) / sp.Sum(sp.exp(x[j]), (j, 1, D))


def avg_pool_entry(x: sp.IndexedBase, j: sp.Symbol) -> sp.Expr:
    """:func:`avg_pool` for every D: ``sum_{j=1}^{D} x[j] / D``."""
    return sp.Sum(x[j], (j, 1, D)) / D


# --- Linear --------------------------------------------------------------------------


def linear(x: sp.Matrix, W: sp.Matrix, b: sp.Matrix | None = None) -> sp.Matrix:
    """``W x + b`` (Eq. 9)."""
    y = W * x
    return y if b is None else y + b


# --- Convolution ---------------------------------------------------------------------


def _padded(
    image: Sequence[Sequence[Sequence[sp.Expr]]], padding: int, mode: str
) -> Callable[[int, int, int], sp.Expr]:
    """Read the padded image at (c, row, col): zero outside, or wrapped around."""
    height, width = len(image[0]), len(image[0][0])

    def read(c: int, row: int, col: int) -> sp.Expr:
        row, col = row - padding, col - padding
        if mode == "circular":
            return image[c][row % height][col % width]
        if 0 <= row < height and 0 <= col < width:
            return image[c][row][col]
        return sp.Integer(0)

    return read


def conv2d(
    image: Sequence[Sequence[Sequence[sp.Expr]]],
    weight: Sequence[Sequence[Sequence[Sequence[sp.Expr]]]],
    bias: Sequence[sp.Expr] | None = None,
    stride: int = 1,
    padding: int = 0,
    mode: str = "zeros",
) -> list[list[list[sp.Expr]]]:
    """PyTorch's Conv2d on one (C, H, W) image: nested lists (O, Ho, Wo)."""
    channels, height, width = len(image), len(image[0]), len(image[0][0])
    kh, kw = len(weight[0][0]), len(weight[0][0][0])
    out_h = (height + 2 * padding - kh) // stride + 1
    out_w = (width + 2 * padding - kw) // stride + 1
    read = _padded(image, padding, mode)
    return [
        [
            [
                (bias[o] if bias is not None else 0)
                + sum(
                    weight[o][c][a][e] * read(c, stride * i + a, stride * j + e)
                    for c in range(channels)
                    for a in range(kh)
                    for e in range(kw)
                )
                for j in range(out_w)
            ]
            for i in range(out_h)
        ]
        for o in range(len(weight))
    ]


def image(name: str, channels: int, height: int, width: int) -> list[list[list[sp.Symbol]]]:
    """A (C, H, W) image of real symbols."""
    return [
        [[sp.Symbol(f"{name}_{c}_{i}_{j}", real=True) for j in range(width)] for i in range(height)]
        for c in range(channels)
    ]


def kernel(name: str, out: int, channels: int, kh: int, kw: int) -> list:
    """An (O, C, Kh, Kw) weight of real symbols."""
    return [
        [
            [
                [sp.Symbol(f"{name}_{o}_{c}_{a}_{e}", real=True) for e in range(kw)]
                for a in range(kh)
            ]
            for c in range(channels)
        ]
        for o in range(out)
    ]


def flatten(nested) -> sp.Matrix:
    """A nested list in C order as a column."""
    if isinstance(nested, list):
        return sp.Matrix.vstack(*(flatten(item) for item in nested))
    return sp.Matrix([nested])


# --- Softmax and the global poolings --------------------------------------------------


def softmax(x: sp.Matrix) -> sp.Matrix:
    """``exp(x_i) / sum_j exp(x_j)`` of a column (the one softmax: the attention modules
    apply it to each row of their score matrix)."""
    e = x.applyfunc(sp.exp)
    return e / sum(e)


def max_pool(x: sp.Matrix) -> sp.Matrix:
    """``max(x)`` as a 1-vector."""
    return sp.Matrix([sp.Max(*x)])


def avg_pool(x: sp.Matrix) -> sp.Matrix:
    """``sum(x) / D`` as a 1-vector."""
    return sp.Matrix([sum(x) / len(x)])


# --- FFN and the residual blocks ------------------------------------------------------


def relu(z: sp.Expr) -> sp.Expr:
    """ReLU at ``z``: :data:`derive.definitions.activations.RELU`, the one definition
    (a Piecewise, so ``sympy.diff`` gives the indicator ``1(z > 0)``: relu'(0) = 0)."""
    return RELU.subs(activations.x, z)


def ffn(x: sp.Matrix, W1: sp.Matrix, b1: sp.Matrix, W2: sp.Matrix, b2: sp.Matrix) -> sp.Matrix:
    """``W2 relu(W1 x + b1) + b2`` (Eq. 26)."""
    return W2 * (W1 * x + b1).applyfunc(relu) + b2


def ffn_on_pattern(
    x: sp.Matrix, W1: sp.Matrix, b1: sp.Matrix, W2: sp.Matrix, b2: sp.Matrix, pattern
) -> sp.Matrix:
    """The FFN on the region where pre-activation h is > 0 exactly when ``pattern[h]``.

    There ``relu(z_h)`` is ``z_h`` or 0, so the FFN is affine; the regions with nonempty
    interior cover the input space up to the hyperplanes ``z_h = 0``.
    """
    z = W1 * x + b1
    hidden = sp.Matrix([z[h] if on else 0 for h, on in enumerate(pattern)])
    return W2 * hidden + b2


def residual(x: sp.Matrix, f: Forward) -> sp.Matrix:
    """``x + f(x)`` (Eq. 22)."""
    return x + f(x)


def weighted_residual(x: sp.Matrix, f: Forward, nu: sp.Matrix) -> sp.Matrix:
    """``x + nu * f(x)`` elementwise (Eq. 55)."""
    return x + sp.matrix_multiply_elementwise(nu, f(x))


def generic_branch(size: int) -> Forward:
    """An arbitrary smooth branch ``f_i(x_1, ..., x_D)`` (undefined SymPy functions)."""
    functions = [sp.Function(f"f{i + 1}") for i in range(size)]
    return lambda x: sp.Matrix([f(*x) for f in functions])
