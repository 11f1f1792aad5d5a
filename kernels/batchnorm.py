"""BatchNorm over the batch: (N, D) inputs per feature D, (N, C, H, W) per channel C.

Training mode (``training=True``) normalizes each feature by the statistics of its batch
values (M = N, or N*H*W): ``mu = mean``, ``var = mean((x - mu)^2)`` (biased), and

- ``denom="sqrt_var_eps"`` (PyTorch; 001_76ce3a8a4b6079c3.txt Eq. 15):
  ``y = gamma (x - mu) / sqrt(var + eps) + beta``;
- ``denom="std_plus_eps"`` (004_a581282367ea7257.txt Definition 17):
  ``y = gamma (x - mu) / (sqrt(var) + eps) + beta``.

Inference mode (``training=False``) uses ``running_mean`` and ``running_var`` instead: an
affine map, Jacobian ``diag(gamma r)``. No kernel writes into its inputs, so PyTorch's update
of the running statistics after a training batch is :func:`running_update`, which returns
them. ``momentum`` is in the signature for PyTorch's sake and used by :func:`running_update`
only: in training mode, forward, vjp and jacobian refuse running statistics and any
momentum but the default (ValueError naming them and :func:`running_update`) rather than
ignore them silently; in inference mode momentum is checked (a real in [0, 1]) and, as in
PyTorch's eval mode, has no effect.

Backward (proven equal to sympy.diff of the forward, M = 1..5, ``derive/definitions/batchnorm.py``):
with d = x - mu, r the scale, a = gamma g, ``dx = r (a - mean(a) - d w mean(a d))``,
``w = r^2`` (sqrt_var_eps) or ``r / sqrt(var)`` (std_plus_eps), ``dgamma = sum g d r``,
``dbeta = sum g`` (sums over the batch). The Jacobian of one feature is
``gamma r (I - 11^T/M - d d^T w / M)`` (numerator layout, ``J[k, l] = dy_k / dx_l``);
:func:`jacobian` returns one (M, M) block per feature.

Edge cases. N = 1 (M = 1): the centered batch is 0, so y = beta and dx = 0. A constant
feature (zero variance) gives y = beta and the largest Jacobian, ``gamma (I - 11^T/M) /
sqrt(eps)`` (or ``/ eps`` for std_plus_eps, where the sigma path vanishes: y is
differentiable there although sqrt(var) is not); with eps = 0 it is 0/0 = NaN.

>>> import numpy as np
>>> from kernels import batchnorm
>>> x = np.array([[1.0], [2.0], [3.0]])
>>> batchnorm.forward(x, np.ones(1), np.zeros(1), eps=0.0)
array([[-1.22474487],
       [ 0.        ],
       [ 1.22474487]])
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import ArrayLike

from kernels._bf16 import to_bfloat16
from kernels._generated import batchnorm as _generated
from kernels._grain import loop_for
from kernels._strict import bfloat16_kernel, is_bfloat16, narrow
from kernels._validate import choice, eps_value, flag, float_array, real, strict_mode
from kernels.cast import cast, widen

#: The denominators: the generated loops and stages take ``std`` (True for std_plus_eps).
DENOMS = ("sqrt_var_eps", "std_plus_eps")

#: PyTorch's default momentum; forward, vjp and jacobian accept no other value in training
#: mode (see :func:`_refuse_unused_statistics`).
DEFAULT_MOMENTUM = 0.1

#: What to use instead of running statistics in training mode (named in the error).
_RUNNING_HINT = (
    "the kernels never update statistics in place; use batchnorm.running_update(x, "
    "running_mean, running_var, momentum) for PyTorch's updated running statistics, or "
    "training=False to normalize with them"
)


class _Prepared:
    """Checked arguments, x laid out features-last as (N, L, C), and the loop path."""

    def __init__(
        self, x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict
    ):
        x = float_array(x, "x", bfloat16=True)
        if x.ndim not in (2, 4):
            raise ValueError(f"x: expected shape (N, D) or (N, C, H, W), got {x.shape}")
        self.denom = choice(denom, "denom", DENOMS)
        #: the loops' denominator argument: std_plus_eps if True, else sqrt_var_eps
        self.std = self.denom == "std_plus_eps"
        self.strict = strict_mode(strict, x.dtype)
        self.bf = is_bfloat16(x)
        if self.bf and not self.strict:
            raise TypeError("x: bfloat16 reaches this path in strict mode only (bfloat16_kernel)")
        self.training = flag(training, "training")
        momentum = real(momentum, "momentum", low=0.0, high=1.0)
        features = x.shape[1]
        self.x = x
        self.gamma = self._parameter(gamma, "gamma", features)
        self.beta = self._parameter(beta, "beta", features)
        self.eps = eps_value(eps)
        if self.training:
            _refuse_unused_statistics(running_mean, running_var, momentum)
            if x.size == 0 and features:
                raise ValueError("x: BatchNorm in training mode needs a non-empty batch")
        else:
            if running_mean is None or running_var is None:
                raise ValueError(
                    "running_mean, running_var: required in inference mode (training=False)"
                )
            mean, var = _running_statistics(running_mean, running_var, features, self.bf)
            self.mean, self.var = self._statistic(mean), self._statistic(var)
        self.columns = self.layout(x)
        self.block = _block(features, numba.get_num_threads())

    def layout(self, array: np.ndarray) -> np.ndarray:
        """``array`` as (N, L, C), features last, as the loops read it: an (N, D) input is
        a view (N, 1, D); an (N, C, H, W) input is copied to (N, H*W, C). float16 in mixed
        mode is widened to float32 first (exactly, by ``kernels.cast.widen``'s parallel
        loop): the loops read x three times in the forward and five in the VJP, and reading
        halves each widened its bits in software every time (forward + VJP at (4096, 1024),
        fastest of 25 calls in four runs taking turns: 19.3-22.4 ms that way, 13.5-17.0 ms
        widened first; the same bits). The results are still stored as half bits."""
        return _features_last(array, self._compute)

    def _parameter(self, value, name, features):
        array = float_array(value, name, bfloat16=True)
        if array.shape != (features,):
            raise ValueError(
                f"{name}: expected shape ({features},) (axis 1 of x), got {array.shape}"
            )
        if array.dtype != self.x.dtype:
            raise TypeError(
                f"{name}: expected dtype {self.x.dtype} (the dtype of x), got {array.dtype}"
            )
        return np.ascontiguousarray(array, dtype=self._compute)

    def _statistic(self, array: np.ndarray) -> np.ndarray:
        """A checked running statistic as the loops read it: float64, rounded to the 16-bit
        format in strict mode (float16: inf past 65519, as half arithmetic gives, without a
        warning)."""
        values = np.ascontiguousarray(array, dtype=np.float64)
        if not self.strict:
            return values
        if self.bf:
            return to_bfloat16(values).astype(np.float64)
        with np.errstate(over="ignore"):  # strict mode: statistics rounded to half too
            return values.astype(np.float16).astype(np.float64)

    @property
    def _halves(self) -> bool:
        """float16 in mixed mode: the loops read x widened to float32 and write the halves' bits."""
        return self.x.dtype == np.float16 and not self.strict

    @property
    def _compute(self) -> np.dtype:
        if self.strict:
            return np.dtype(np.float64)
        if self.x.dtype == np.float16:
            return np.dtype(np.float32)
        return self.x.dtype

    @property
    def path(self) -> str:
        """The generated loops' path: f64, wide, or the strict f16s and bf16s."""
        if self.x.dtype == np.float64:
            return "f64"
        if self.strict:
            return "bf16s" if self.bf else "f16s"
        return "wide"

    def loop(self, name: str):
        mode = "" if self.training else "inference_"
        loop = getattr(_generated, f"{name}_{mode}{self.path}")
        return loop_for(loop, self.columns.size)

    def loop_eps(self) -> float:
        """eps rounded to the 16-bit format in strict mode (float16: inf from 65520 on,
        without a warning)."""
        return narrow(self.eps, self.bf) if self.strict else self.eps

    def buffer(self, shape, bits: bool = True) -> np.ndarray:
        """The loops' output: with ``bits``, in mixed float16 mode, the bits of halves (the
        forward and VJP loops round each result once, from float64, as they store it:
        ``kernels._rownorm.narrow``); otherwise float64 for float16 and the strict modes
        (rounded once by :meth:`finish`), else x's dtype (the store rounds once)."""
        if self._halves and bits:
            return np.empty(shape, np.uint16)
        wide = self.x.dtype == np.float16 or self.bf
        return np.empty(shape, np.float64 if wide else self.x.dtype)

    def finish(self, values: np.ndarray) -> np.ndarray:
        """Round once to x's dtype (the bits of halves are viewed as such); an overflow to
        inf is a result, not a warning."""
        if values.dtype == np.uint16:
            return values.view(np.float16)
        if self.x.dtype == np.float16:
            return cast(values, "float16")
        with np.errstate(over="ignore"):
            return values.astype(self.x.dtype, copy=False)

    def feature_row(self, j: int) -> np.ndarray:
        """Feature j's batch values, C order over (N, H, W) (halves widened exactly to
        float32)."""
        return np.ascontiguousarray(self.columns[:, :, j]).reshape(-1)

    def restore(self, values: np.ndarray) -> np.ndarray:
        """(N, L, C) results back to the layout of x."""
        if self.x.ndim == 2:
            return values.reshape(self.x.shape)
        n, c, h, w = self.x.shape
        return np.ascontiguousarray(np.moveaxis(values.reshape(n, h, w, c), -1, 1))


#: The widest block of features: the statistics and the VJP's sums pass over a block's batch
#: values several times, and at this width a block of a short batch (x and g) stays in a
#: core's L2 cache between the passes, while its inner loops still run over long contiguous
#: runs of features. The outputs (y, dx) are then written by rows, in parallel: each row's
#: features in one loop (forward + VJP at (4096, 1024) float32: 7.8-9.1 ms by blocks,
#: 6.5-7.4 ms by rows, the fastest of 25 calls in four runs taking turns; the same bits).
MAX_BLOCK = 512


def _block(features: int, threads: int) -> int:
    """Features per parallel block: at most :data:`MAX_BLOCK`, and the same number of blocks
    for every thread (one each if that is enough). Results do not depend on it (each feature
    is computed by one thread, in the same order)."""
    blocks = max(1, -(-features // MAX_BLOCK))
    blocks = -(-blocks // threads) * threads
    return max(1, -(-features // blocks))


def _features_last(array: np.ndarray, dtype) -> np.ndarray:
    """(N, D) -> (N, 1, D) (a view when already contiguous in ``dtype``);
    (N, C, H, W) -> (N, H*W, C)."""
    if array.ndim == 2:
        return widen(array, dtype).reshape(array.shape[0], 1, array.shape[1])
    n, c, h, w = array.shape
    return widen(np.moveaxis(array, 1, -1), dtype).reshape(n, h * w, c)


def _running_statistics(
    running_mean: ArrayLike, running_var: ArrayLike, features: int, bfloat16: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The running statistics checked alike wherever they are read (inference mode and
    :func:`running_update`): float arrays of shape (features,) (bfloat16 too, for a strict
    bfloat16 call), the variance >= 0 (NaN passes and propagates)."""
    checked = []
    for name, value in (("running_mean", running_mean), ("running_var", running_var)):
        array = float_array(value, name, bfloat16=bfloat16)
        if array.shape != (features,):
            raise ValueError(
                f"{name}: expected shape ({features},) (axis 1 of x), got {array.shape}"
            )
        checked.append(array)
    if np.any(checked[1] < 0):
        raise ValueError("running_var: a variance must be >= 0")
    return checked[0], checked[1]


def _refuse_unused_statistics(running_mean: object, running_var: object, momentum: float) -> None:
    """Training mode normalizes by the batch's statistics and updates nothing: running
    statistics or a momentum other than the default would be silently ignored, so they are
    refused (ValueError naming them and :func:`running_update`)."""
    for name, value in (("running_mean", running_mean), ("running_var", running_var)):
        if value is not None:
            raise ValueError(
                f"{name}: not read in training mode (training=True), which normalizes by "
                f"the batch's statistics; {_RUNNING_HINT}"
            )
    if momentum != DEFAULT_MOMENTUM:
        raise ValueError(
            f"momentum: has no effect in training mode (training=True), got {momentum!r} "
            f"(only the default {DEFAULT_MOMENTUM} is accepted); {_RUNNING_HINT}"
        )


def _prepare(x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict):
    return _Prepared(
        x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict
    )


@bfloat16_kernel
def forward(
    x: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike,
    eps: float = 1e-5,
    training: bool = True,
    running_mean: ArrayLike | None = None,
    running_var: ArrayLike | None = None,
    momentum: float = DEFAULT_MOMENTUM,
    denom: str = "sqrt_var_eps",
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """BatchNorm of ``x``; same shape and dtype as ``x``."""
    p = _prepare(
        x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict_fp16
    )
    out = p.buffer(p.columns.shape)
    if p.training:
        p.loop("forward")(p.columns, p.gamma, p.beta, p.loop_eps(), p.std, p.block, out)
    else:
        p.loop("forward")(
            p.columns, p.gamma, p.beta, p.mean, p.var, p.loop_eps(), p.std, p.block, out
        )
    return p.restore(p.finish(out))


@bfloat16_kernel
def vjp(
    x: ArrayLike,
    g: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike,
    eps: float = 1e-5,
    training: bool = True,
    running_mean: ArrayLike | None = None,
    running_var: ArrayLike | None = None,
    momentum: float = DEFAULT_MOMENTUM,
    denom: str = "sqrt_var_eps",
    *,
    strict_fp16: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dx, dgamma, dbeta)`` for the upstream gradient ``g`` (shape of ``x``)."""
    p = _prepare(
        x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict_fp16
    )
    g = float_array(g, "g", bfloat16=True)
    if g.shape != p.x.shape:
        raise ValueError(f"g: expected shape {p.x.shape} (the shape of x), got {g.shape}")
    if g.dtype != p.x.dtype:
        raise TypeError(f"g: expected dtype {p.x.dtype} (the dtype of x), got {g.dtype}")
    gcols = p.layout(g)
    features = p.columns.shape[2]
    dx = p.buffer(p.columns.shape)
    dgamma, dbeta = np.empty(features), np.empty(features)
    eps_ = p.loop_eps()
    if p.training:
        p.loop("vjp")(p.columns, gcols, p.gamma, eps_, p.std, p.block, dx, dgamma, dbeta)
    else:
        p.loop("vjp")(
            p.columns, gcols, p.gamma, p.mean, p.var, eps_, p.std, p.block, dx, dgamma, dbeta
        )
    return p.restore(p.finish(dx)), p.finish(dgamma), p.finish(dbeta)


@bfloat16_kernel
def jacobian(
    x: ArrayLike,
    gamma: ArrayLike,
    beta: ArrayLike,
    eps: float = 1e-5,
    training: bool = True,
    running_mean: ArrayLike | None = None,
    running_var: ArrayLike | None = None,
    momentum: float = DEFAULT_MOMENTUM,
    denom: str = "sqrt_var_eps",
    *,
    strict_fp16: bool = False,
) -> np.ndarray:
    """One (M, M) block per feature, shape (features, M, M): ``J[j, k, l] = dy_kj / dx_lj``
    with the batch positions k, l in C order over (N, H, W). Numerator layout."""
    p = _prepare(
        x, gamma, beta, eps, training, running_mean, running_var, momentum, denom, strict_fp16
    )
    features = p.columns.shape[2]
    size = p.columns.shape[0] * p.columns.shape[1]
    out = p.buffer((features, size, size), bits=False)  # the Jacobian loops store floats
    for j in range(features):
        if p.training:
            loop = getattr(_generated, f"jacobian_{p.path}")
            loop(p.feature_row(j), p.gamma[j], p.loop_eps(), p.std, out[j])
        else:
            scale = _inference_scale(p, j)
            with np.errstate(over="ignore"):  # rounds past the format's max to inf, as IEEE
                out[j] = np.diag(np.full(size, scale))
    return p.finish(out)


def _inference_scale(p: _Prepared, j: int) -> float:
    """gamma_j r_j in inference mode, by the generated stages of the mode's arithmetic."""
    mode = p.path if p.strict else "f64"
    r = getattr(_generated, f"scale_{mode}")(float(p.var[j]), p.loop_eps(), p.std)
    return getattr(_generated, f"dx_inference_{mode}")(r, float(p.gamma[j]), 1.0)


def running_update(
    x: ArrayLike,
    running_mean: ArrayLike,
    running_var: ArrayLike,
    momentum: float = DEFAULT_MOMENTUM,
) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's update of the running statistics after one training batch ``x``:
    ``(1 - momentum) running + momentum batch``, the batch variance unbiased (M/(M-1)).

    The notes (003_54d3154625e0c3ca.txt) write ``m running + (1 - m) batch``: their m is
    ``1 - momentum``, and their batch variance is the biased one. M = 1 gives NaN variance
    (the unbiased variance of one value is undefined). Returns new arrays in the dtypes
    of ``running_mean`` and ``running_var``. The statistics are checked as in inference
    mode (a negative ``running_var`` is a ValueError); ``momentum`` is a real in [0, 1].
    """
    x = float_array(x, "x")
    if x.ndim not in (2, 4):
        raise ValueError(f"x: expected shape (N, D) or (N, C, H, W), got {x.shape}")
    features = x.shape[1]
    mean_in, var_in = _running_statistics(running_mean, running_var, features)
    momentum = real(momentum, "momentum", low=0.0, high=1.0)
    columns = _features_last(x, np.float64 if x.dtype == np.float64 else np.float32)
    size = columns.shape[0] * columns.shape[1]
    if size == 0:
        raise ValueError("x: the running statistics need a non-empty batch")
    path = "f64" if x.dtype == np.float64 else "wide"
    center, correction, var = getattr(_generated, f"column_statistics_{path}")(columns, 0, features)
    mean = center + correction
    with np.errstate(divide="ignore", invalid="ignore"):
        unbiased = var * size / (size - 1) if size > 1 else np.full(features, np.nan)
    keep = 1.0 - momentum
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are results (IEEE)
        new_mean = keep * mean_in.astype(np.float64) + momentum * mean
        new_var = keep * var_in.astype(np.float64) + momentum * unbiased
        return new_mean.astype(mean_in.dtype), new_var.astype(var_in.dtype)
