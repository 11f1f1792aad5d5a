"""Dispatch of the generated row-normalization loops (LayerNorm, RMSNorm, CenterNorm).

Checks the arguments (SPEC, "Bad input"), flattens ``x`` of shape (..., D) to rows, picks
the loop for the dtype and float16 mode, and restores the shape. The loops live in
``kernels/_generated/<key>.py``:

- float64 arrays run the ``_f64`` loops (compensated row sums);
- float32 arrays run the ``_wide`` loops (float64 arithmetic) and store into float32, a
  single rounding;
- float16 arrays ("mixed" mode, the default) are widened exactly to float32, run the
  ``_wide`` loops into float64 and are rounded once to float16; a half result is inf only
  when the exact result rounds to inf;
- float16 with ``strict_fp16=True`` run the ``_f16s`` loops, every operation rounded to
  half (eps too, before use), serially.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
from numpy.typing import ArrayLike

from kernels._f16 import round_to_half
from kernels._threads import thread_safe
from kernels._validate import eps_value, float_array, strict_mode


def parameter(value: ArrayLike, name: str, x: np.ndarray, size: int) -> np.ndarray:
    """A per-feature parameter: shape (size,), x's dtype, C-contiguous."""
    array = float_array(value, name)
    if array.shape != (size,):
        raise ValueError(
            f"{name}: expected shape ({size},) (the last axis of x), got {array.shape}"
        )
    if array.dtype != x.dtype:
        raise TypeError(f"{name}: expected dtype {x.dtype} (the dtype of x), got {array.dtype}")
    return np.ascontiguousarray(array)


class Prepared:
    """Checked arguments of one call: rows of x, parameters, eps and the path to run."""

    def __init__(
        self,
        x: ArrayLike,
        gamma: ArrayLike,
        beta: ArrayLike | None,
        eps: object,
        min_size: int,
        strict_fp16: object,
        title: str,
    ):
        x = float_array(x, "x")
        if x.ndim == 0:
            raise ValueError("x: expected shape (..., D), got a 0-d array")
        size = x.shape[-1]
        if size < min_size:
            raise ValueError(f"x: {title} needs D >= {min_size} on the last axis, got D = {size}")
        self.x = x
        self.size = size
        self.strict = strict_mode(strict_fp16, x.dtype)
        self.gamma = parameter(gamma, "gamma", x, size)
        self.has_beta = beta is not None
        self.beta = (
            parameter(beta, "beta", x, size) if beta is not None else np.zeros(size, x.dtype)
        )
        self.eps = eps_value(eps)
        self.rows = np.ascontiguousarray(x).reshape(-1, size)

    @property
    def path(self) -> str:
        if self.x.dtype == np.float64:
            return "f64"
        return "f16s" if self.strict else "wide"

    def compute_dtype(self) -> np.dtype:
        """What the loops read: float64, float32 (also for mixed half) or float64 halves."""
        if self.x.dtype == np.float16:
            return np.dtype(np.float64 if self.strict else np.float32)
        return self.x.dtype

    def loop_eps(self) -> float:
        """eps as the loops use it: rounded to half in strict mode (inf from 65520 on, as
        half arithmetic gives, without NumPy's overflow warning)."""
        return round_to_half(self.eps) if self.strict else self.eps

    def widen(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array, dtype=self.compute_dtype())

    def result_buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        """float16 results are computed into float64 and rounded once afterwards."""
        return np.empty(shape, np.float64 if self.x.dtype == np.float16 else self.x.dtype)

    def finish(self, values: np.ndarray) -> np.ndarray:
        """Round once to x's dtype; an overflow to inf is a result, not a warning."""
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=False)


def forward(generated: ModuleType, prepared: Prepared) -> np.ndarray:
    """y for every row, in x's shape and dtype."""
    p = prepared
    out = p.result_buffer(p.rows.shape)
    loop = thread_safe(getattr(generated, f"forward_{p.path}"))
    loop(p.widen(p.rows), p.widen(p.gamma), p.widen(p.beta), p.loop_eps(), out)
    return p.finish(out).reshape(p.x.shape)


def vjp(
    generated: ModuleType, prepared: Prepared, g: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(dx, dgamma, dbeta) for the upstream gradient g (dbeta None without beta)."""
    p = prepared
    g = float_array(g, "g")
    if g.shape != p.x.shape:
        raise ValueError(f"g: expected shape {p.x.shape} (the shape of x), got {g.shape}")
    if g.dtype != p.x.dtype:
        raise TypeError(f"g: expected dtype {p.x.dtype} (the dtype of x), got {g.dtype}")
    rows = p.rows.shape[0]
    blocks = -(-rows // generated.BLOCK_ROWS)
    dgamma_blocks = np.zeros((blocks, 2, p.size))
    dbeta_blocks = np.zeros((blocks, 2, p.size))
    dx = p.result_buffer(p.rows.shape)
    loop = thread_safe(getattr(generated, f"vjp_{p.path}"))
    grows = np.ascontiguousarray(g).reshape(-1, p.size)
    loop(
        p.widen(p.rows),
        p.widen(grows),
        p.widen(p.gamma),
        p.loop_eps(),
        dx,
        dgamma_blocks,
        dbeta_blocks,
    )
    combine = getattr(generated, f"combine_blocks_{p.path}")
    dgamma = p.finish(combine(dgamma_blocks).astype(np.float64))
    dbeta = p.finish(combine(dbeta_blocks)) if p.has_beta else None
    return p.finish(dx).reshape(p.x.shape), dgamma, dbeta


def jacobian(generated: ModuleType, prepared: Prepared) -> np.ndarray:
    """The dense (D, D) Jacobian of one sample, numerator layout."""
    p = prepared
    if p.x.ndim != 1:
        raise ValueError(f"x: expected one sample of shape (D,), got shape {p.x.shape}")
    out = p.result_buffer((p.size, p.size))
    loop = getattr(generated, f"jacobian_{p.path}")
    loop(p.widen(p.x), p.widen(p.gamma), p.loop_eps(), out)
    return p.finish(out)
