"""High-precision mpmath references for BatchNorm: forward, VJP, Jacobian, running statistics.

Like :mod:`derive.reference.norms`, BatchNorm is written here straight from its definition,
step by step, sharing no code with the kernels (``kernels/``) and no closed-form derivative:

* the forward evaluates the steps of the definition in order, per feature
  (mean -> deviations -> variance -> square root -> scale -> normalized -> affine);
* the VJP is reverse-mode differentiation of those same steps, written out by hand: the
  adjoint of every intermediate is accumulated from the adjoints of the steps that use it,
  last step first -- through the three paths by which ``x`` reaches ``xhat``: directly
  (``d``), through the mean and through the variance. No closed-form VJP is used (not the
  course notes' Key Equation 21 either: that is what the references check);
* the Jacobian is forward-mode differentiation: the unit vector ``e_l`` of one batch position
  is pushed through the same steps, and the tangent of the output is column ``l``
  (numerator layout, ``J_j[k][l] = dy_kj/dx_lj``).

Definitions (PyTorch conventions)
---------------------------------
``x`` has shape ``(N, D)`` -- batch axis 0, features on axis 1 -- or ``(N, C, H, W)`` --
features ``C``, statistics over ``(N, H, W)``. For feature ``j`` let ``x_kj`` be its ``M``
values (``M = N`` or ``N*H*W``; batch positions ``k`` flattened in C order over
``(N, H, W)``). In training mode (``training=True``)::

    mu_j = mean_k x_kj,   d_kj = x_kj - mu_j,   var_j = mean_k d_kj^2     (biased, 1/M)
    s_j  = sqrt(var_j + eps)        denom="sqrt_var_eps"  (001 Eq. 15; PyTorch)
    s_j  = sqrt(var_j) + eps        denom="std_plus_eps"  (004 Definition 17, Eq. B.43)
    r_j = 1/s_j,   xhat_kj = d_kj r_j,   y_kj = gamma_j xhat_kj + beta_j

Sources: ``shared/seeds/001_76ce3a8a4b6079c3.txt`` Eq. 15 and Table 2, row BatchNorm (its
Jacobian: Eqs. 16-17); ``shared/seeds/004_a581282367ea7257.txt`` Definition 17 and the
backprop of B.2.1 (Eqs. B.43-B.52, Key Equation 21), with ``sigma`` the biased standard
deviation.

In inference mode (``training=False``) ``mu_j`` and ``var_j`` are the given
``running_mean_j`` and ``running_var_j`` (both required), with the same two denominators;
``y`` is then an affine map of ``x`` and each Jacobian block is ``diag(gamma_j r_j)``. In
training mode the running statistics are not used by the forward (they are checked for
shape if given); :func:`running_update` gives their new values, as PyTorch's training step
does::

    new_mean_j = (1 - momentum) running_mean_j + momentum mu_j
    new_var_j  = (1 - momentum) running_var_j  + momentum var_j M/(M - 1)   (unbiased)

For ``M = 1`` the unbiased variance is 0/0 (PyTorch's ``var(unbiased=True)`` gives NaN and
``BatchNorm1d`` refuses such a batch in training), so ``new_var`` is NaN for every momentum;
``new_mean`` is still defined. :func:`running_sequence` applies the update over a list of
batches; the statistics carried from step to step are kept at the working precision (not
rounded to a float dtype, as PyTorch's float32 buffers would be).

Zero variance
-------------
* ``sqrt_var_eps``: if ``var_j + eps == 0`` (a constant feature, or ``M = 1``, with
  ``eps = 0``; in inference ``running_var_j + eps == 0``) the exact result is 0/0, and every
  entry that depends on it is ``mpmath.nan``: column ``j`` of ``y`` and of ``dx``,
  ``dgamma_j`` and the Jacobian block ``J_j`` (``dbeta_j`` stays the sum of ``g``).
* ``std_plus_eps`` with ``eps = 0`` and ``var_j = 0``: likewise NaN (``s_j = 0``).
* ``std_plus_eps`` with ``eps > 0`` and ``var_j = 0`` (a constant feature): ``sigma = sqrt(var)``
  is not differentiable at ``var = 0``, yet ``y`` is, and its derivative there takes no
  contribution through ``sigma``. Argument: write ``c = x - mean(x)`` (linear in ``x``) and
  ``sigma = |c| / sqrt(M)`` (a norm of ``c``). At a constant point ``c = 0``, and for any
  perturbation ``v`` (with ``c_v`` its centred part)::

      y(x + v) - beta - gamma c_v / eps = gamma c_v (1/(sigma_v + eps) - 1/eps)
                                        = -gamma c_v sigma_v / (eps (sigma_v + eps)),

  whose size is at most ``|gamma| |c_v| sigma_v / eps^2 = O(|v|^2)``. So ``y`` is
  (Frechet) differentiable there with ``J_j = gamma_j/eps (I - 11^T/M)``: the direct and the
  mean paths only, the ``sigma`` path contributing 0. This is also the limit of the
  Jacobian from non-constant points, where the ``sigma`` path contributes
  ``-gamma r^2 d d^T / (M sigma)``, of norm ``|gamma| r^2 sigma -> 0``. The VJP and the
  Jacobian set the adjoint (tangent) through ``sigma`` to 0 exactly when ``var_j == 0``.
  ``y`` is ``C^1`` but not ``C^2`` there (the ``sigma`` term is ``|gamma| r^2 sigma`` times
  the projector ``d d^T / |d|^2``, which has no limit as ``d -> 0``), so finite differences
  converge to ``J_j`` only like ``O(h)``: one-sided ones, and central ones too, since ``y``
  is odd along every line through the point.
  ``y = beta`` there, so ``dgamma_j = 0``; with ``M = 1`` also ``dx = 0`` exactly.
* In inference a negative ``running_var_j + eps`` (``sqrt_var_eps``) or ``running_var_j``
  (``std_plus_eps``) gives NaN for feature ``j``, as IEEE ``sqrt`` does.

Inputs and outputs
------------------
Arrays may be NumPy arrays of any real floating dtype, integer arrays, or nested lists;
each element is converted exactly (:func:`derive.reference.core.exact`; long doubles
through their integer ratio), and elements that are already ``mpf`` are used
as they are, so :func:`~derive.reference.norms.directional_derivative` can evaluate the
forward at points no float represents. ``eps`` and ``momentum`` are taken exactly as the
float64 (or other float) they are; ``eps`` must be finite and >= 0, ``momentum`` finite in
``[0, 1]``. All arithmetic happens inside ``mpmath.workdps(dps)`` (``dps >= 20``); mpmath's
global precision is never changed. The exact conversion and the exact-sum deviations are
those of :mod:`derive.reference.norms`, so both references take their inputs identically.

Outputs are nested Python lists of ``mpf`` in the shape of the corresponding array: ``y``
and ``dx`` like ``x`` (nested four deep for ``(N, C, H, W)``), ``dgamma``, ``dbeta`` and
the running statistics like ``gamma`` (length ``C``). Gradients of parameters are summed
over all batch positions. An empty batch (``N = 0``, ``H = 0`` or ``W = 0``) or no feature
is a :class:`ValueError`, as are an unknown ``denom`` and inference without both running
statistics.

Why 50 digits are plenty
------------------------
As in :mod:`derive.reference.norms`: the inputs are dyadic rationals, so the feature sum is
exact and each deviation ``d_kj`` is rounded at most twice relative to itself; the variance
is a sum of non-negative terms (``fsum``: exact, one rounding); products, quotients and
square roots have no cancellation. Every ``y_kj`` is therefore correct to a few units of
``2^-p`` (``p = 169`` bits at 50 digits) relative to ``|gamma_j xhat_kj| + |beta_j|``. The
reverse and tangent sweeps add signed terms (``sum_k d_k bar_xhat_k``, ``-sum_k bar_d_k``),
with error at most about ``M 2^-p`` times the sum of the absolute values of the terms:
still ~45 digits relative to that scale for ``M`` up to ``10^5``. The running update is a
convex combination (one exactly computed ``fdot`` per step); over ``T`` steps its rounding
errors add up to at most about ``T`` units of ``2^-p`` relative.

>>> import numpy as np
>>> y = batchnorm_forward(np.array([[1.0], [2.0], [3.0]]), np.ones(1), np.zeros(1), 0.0)
>>> [mpmath.nstr(row[0], 20) for row in y]
['-1.2247448713915890491', '0.0', '1.2247448713915890491']
>>> running_update(np.array([[1.0], [3.0]]), np.zeros(1), np.ones(1), 0.5)
([mpf('1.0')], [mpf('1.5')])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import mpmath
import numpy as np
import numpy.typing as npt

from derive.reference.core import check_dps, exact_array, exact_scalar, exact_vector, real_array
from derive.reference.norms import DEFAULT_DPS, MIN_DPS, deviations, nonnegative, unit

__all__ = [
    "DENOMINATORS",
    "batchnorm_forward",
    "batchnorm_jacobian",
    "batchnorm_vjp",
    "running_sequence",
    "running_update",
]

#: The two denominators: ``sqrt(var + eps)`` (001 Eq. 15, PyTorch) and ``sqrt(var) + eps``
#: (004 Definition 17).
DENOMINATORS = ("sqrt_var_eps", "std_plus_eps")

Row = list[mpmath.mpf]
Rows = list[Row]


# --------------------------------------------------------------------------------------
# Inputs: features as rows of exact mpf values, and back to the array's nesting
# --------------------------------------------------------------------------------------


class _Batch(NamedTuple):
    """``x`` regrouped by feature: ``features[j]`` holds the ``M`` values of feature ``j``
    in C order over ``(N, H, W)``; ``shape`` is the array's shape."""

    shape: tuple[int, ...]
    features: Rows


def _batch(value: npt.ArrayLike, name: str = "x") -> _Batch:
    array = real_array(value, name)
    if array.ndim not in (2, 4):
        raise ValueError(f"{name}: expected shape (N, D) or (N, C, H, W), got {array.shape}")
    if 0 in array.shape:
        raise ValueError(
            f"{name}: expected a non-empty batch and at least one feature, got {array.shape}"
        )
    by_feature = np.moveaxis(array, 1, 0).reshape(array.shape[1], -1)
    return _Batch(array.shape, [exact_array(row, name).tolist() for row in by_feature])


def _like(g: npt.ArrayLike, batch: _Batch) -> Rows:
    """The upstream gradient, which must have the shape of ``x`` (the output's shape)."""
    if np.shape(g) != batch.shape:
        raise ValueError(f"g: expected the output's shape {batch.shape}, got {np.shape(g)}")
    return _batch(g, "g").features


def _nest(features: Rows, shape: tuple[int, ...]) -> Any:
    """Per-feature rows back into nested lists of ``shape`` (inverse of :func:`_batch`)."""
    out = np.empty((shape[1], len(features[0])), dtype=object)
    for j, row in enumerate(features):
        for k, value in enumerate(row):
            out[j, k] = value
    return np.moveaxis(out.reshape(shape[1], shape[0], *shape[2:]), 0, 1).tolist()


def _denom(denom: str) -> str:
    if denom not in DENOMINATORS:
        raise ValueError(f"denom: expected one of {DENOMINATORS}, got {denom!r}")
    return denom


def _statistics(
    training: bool,
    running_mean: npt.ArrayLike | None,
    running_var: npt.ArrayLike | None,
    width: int,
) -> tuple[Row, Row] | None:
    """The running statistics inference uses (``None`` in training, after a shape check)."""
    if not isinstance(training, (bool, np.bool_)):
        raise TypeError(f"training: expected a bool, got {type(training).__name__}")
    given = [
        None if value is None else exact_vector(value, name, width)
        for name, value in (("running_mean", running_mean), ("running_var", running_var))
    ]
    if training:
        return None
    if given[0] is None or given[1] is None:
        names = ("running_mean", "running_var")
        missing = " and ".join(name for name, v in zip(names, given, strict=True) if v is None)
        raise ValueError(f"{missing}: inference (training=False) needs both running statistics")
    return given[0], given[1]


def _momentum(momentum: float) -> mpmath.mpf:
    value = exact_scalar(momentum, "momentum")
    if not mpmath.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"momentum: expected a finite number in [0, 1], got {momentum!r}")
    return value


class _Inputs(NamedTuple):
    batch: _Batch
    gamma: Row
    beta: Row
    eps: mpmath.mpf
    stats: tuple[Row, Row] | None
    denom: str

    def feature_steps(self) -> Iterator[tuple[int, Row, _Steps]]:
        """Each feature ``j``, its batch values and their steps (call inside ``workdps``)."""
        for j, row in enumerate(self.batch.features):
            yield j, row, _steps(row, self.eps, self.denom, _feature_stats(self.stats, j))


def _inputs(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    training: bool,
    running_mean: npt.ArrayLike | None,
    running_var: npt.ArrayLike | None,
    denom: str,
) -> _Inputs:
    """Every argument checked and taken exactly (call inside ``workdps``)."""
    denom = _denom(denom)
    batch = _batch(x)
    width = len(batch.features)
    return _Inputs(
        batch,
        exact_vector(gamma, "gamma", width),
        exact_vector(beta, "beta", width),
        nonnegative(eps),
        _statistics(training, running_mean, running_var, width),
        denom,
    )


# --------------------------------------------------------------------------------------
# The steps of one feature (plain arithmetic on mpf, no kernel code)
# --------------------------------------------------------------------------------------


class _Steps(NamedTuple):
    """The intermediates of one feature's forward (see the module docstring)."""

    d: Row  # x - mu
    var: mpmath.mpf  # mean(d^2) in training, running_var in inference
    sigma: mpmath.mpf | None  # sqrt(var) (std_plus_eps only)
    s: mpmath.mpf  # the denominator
    r: mpmath.mpf  # 1/s, NaN where s is 0 or undefined
    xhat: Row  # d * r
    training: bool


def _root(u: mpmath.mpf) -> mpmath.mpf:
    """``sqrt(u)``, NaN for ``u < 0`` (as IEEE sqrt; mpmath would go complex)."""
    return mpmath.nan if u < 0 else mpmath.sqrt(u)


def _steps(
    x: Row, eps: mpmath.mpf, denom: str, stats: tuple[mpmath.mpf, mpmath.mpf] | None
) -> _Steps:
    if stats is None:
        d = deviations(x)  # mu = mean(x); d = x - mu (exact sum, see reference_norms)
        var = mpmath.fsum(d, squared=True) / len(d)  # var = mean(d^2), biased
    else:
        mean, var = stats  # inference: the running statistics
        d = [x_k - mean for x_k in x]
    if denom == "sqrt_var_eps":
        sigma = None
        s = _root(var + eps)  # s = sqrt(var + eps)
    else:
        sigma = _root(var)  # sigma = sqrt(var)
        s = sigma + eps  # s = sigma + eps
    r = mpmath.nan if s == 0 or mpmath.isnan(s) else 1 / s  # the scale r = 1/s
    xhat = [d_k * r for d_k in d]  # xhat = d * r
    return _Steps(d, var, sigma, s, r, xhat, stats is None)


def _feature_stats(stats: tuple[Row, Row] | None, j: int) -> tuple[mpmath.mpf, mpmath.mpf] | None:
    return None if stats is None else (stats[0][j], stats[1][j])


def _reverse(steps: _Steps, g: Row, gamma: mpmath.mpf, denom: str) -> Row:
    """``bar_x`` of one feature: the reverse sweep of :func:`_steps`, last step first::

        y = gamma xhat + beta     ->  bar_xhat = g gamma
        xhat = d r                ->  bar_d = bar_xhat r;  bar_r = sum(bar_xhat d)
        r = 1/s                   ->  bar_s = -bar_r r^2
        s = sqrt(var + eps)       ->  bar_var = bar_s / (2 s) = bar_s r / 2
        s = sigma + eps           ->  bar_sigma = bar_s
        sigma = sqrt(var)         ->  bar_var = bar_sigma / (2 sigma)   (0 if var == 0)
        var = sum(d^2) / M        ->  bar_d += 2 d bar_var / M
        d = x - mu                ->  bar_x = bar_d;  bar_mu = -sum(bar_d)
        mu = sum(x) / M           ->  bar_x += bar_mu / M

    In inference ``mu`` and ``var`` are constants: the sweep stops at ``bar_x = bar_d``.
    """
    bar_xhat = [g_k * gamma for g_k in g]
    bar_d = [b * steps.r for b in bar_xhat]
    if not steps.training:
        return bar_d
    bar_r = mpmath.fdot(bar_xhat, steps.d)
    bar_s = -bar_r * steps.r**2
    if denom == "sqrt_var_eps":
        bar_var = bar_s * steps.r / 2
    else:
        bar_sigma = bar_s
        # sigma = sqrt(var) has no derivative at var = 0, but y does, and its sigma path
        # contributes 0 there (module docstring, "Zero variance").
        bar_var = mpmath.mpf(0) if steps.var == 0 else bar_sigma / (2 * steps.sigma)
    size = len(steps.d)
    weight = 2 * bar_var / size
    bar_d = [b + weight * d_k for b, d_k in zip(bar_d, steps.d, strict=True)]
    bar_mu = -mpmath.fsum(bar_d)
    share = bar_mu / size
    return [b + share for b in bar_d]


def _tangent(steps: _Steps, t: Row, gamma: mpmath.mpf, denom: str) -> Row:
    """``y'`` of one feature along the input tangent ``t`` (forward mode of :func:`_steps`)::

        mu' = mean(t);  d' = t - mu';  var' = 2 sum(d d') / M
        s' = var' / (2 s) = var' r / 2                     (sqrt_var_eps)
        sigma' = var' / (2 sigma) (0 if var == 0);  s' = sigma'   (std_plus_eps)
        r' = -r^2 s';  xhat' = d' r + d r';  y' = gamma xhat'

    In inference ``d' = t`` and ``s' = 0``.
    """
    if steps.training:
        d_t = deviations(t)
        var_t = 2 * mpmath.fdot(steps.d, d_t) / len(t)
        if denom == "sqrt_var_eps":
            s_t = var_t * steps.r / 2
        else:
            s_t = mpmath.mpf(0) if steps.var == 0 else var_t / (2 * steps.sigma)
    else:
        d_t, s_t = t, mpmath.mpf(0)
    r_t = -(steps.r**2) * s_t
    return [gamma * (dt * steps.r + d_k * r_t) for dt, d_k in zip(d_t, steps.d, strict=True)]


# --------------------------------------------------------------------------------------
# Forward, VJP, Jacobian
# --------------------------------------------------------------------------------------


def batchnorm_forward(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    training: bool = True,
    running_mean: npt.ArrayLike | None = None,
    running_var: npt.ArrayLike | None = None,
    denom: str = "sqrt_var_eps",
    dps: int = DEFAULT_DPS,
) -> Any:
    """BatchNorm ``y = gamma_j (x - mu_j) / s_j + beta_j`` per feature ``j``, at ``dps`` digits.

    ``s_j = sqrt(var_j + eps)`` (``denom="sqrt_var_eps"``, 001 Eq. 15, PyTorch) or
    ``sqrt(var_j) + eps`` (``"std_plus_eps"``, 004 Definition 17); ``mu_j``, ``var_j``
    (biased) are the batch statistics over axis 0 of ``(N, D)`` or over ``(N, H, W)`` of
    ``(N, C, H, W)``, or ``running_mean``, ``running_var`` when ``training`` is False.
    Returns nested lists of mpf shaped like ``x``; NaN where ``s_j`` is 0 (module docstring,
    "Zero variance").
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        inputs = _inputs(x, gamma, beta, eps, training, running_mean, running_var, denom)
        out = []
        for j, _, steps in inputs.feature_steps():
            gm, bt = inputs.gamma[j], inputs.beta[j]
            out.append([gm * z + bt for z in steps.xhat])  # y = gamma xhat + beta
        return _nest(out, inputs.batch.shape)


def batchnorm_vjp(
    x: npt.ArrayLike,
    g: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    training: bool = True,
    running_mean: npt.ArrayLike | None = None,
    running_var: npt.ArrayLike | None = None,
    denom: str = "sqrt_var_eps",
    dps: int = DEFAULT_DPS,
) -> tuple[Any, Row, Row]:
    """``(dx, dgamma, dbeta)`` of BatchNorm by a hand-written reverse sweep of its steps.

    ``g`` has the shape of ``x`` and ``dx`` is nested like it; ``dgamma_j = sum g xhat`` and
    ``dbeta_j = sum g`` over the batch positions of feature ``j``. The sweep per feature
    (three paths from ``x`` to ``xhat``: direct, through ``mu``, through the variance) is
    written out in ``_reverse``; at ``var_j = 0`` with ``std_plus_eps`` the ``sigma`` path
    contributes 0 (the derivative of ``y`` there, see "Zero variance"). Backprop of
    004 B.2.1 (Key Equation 21) and 001 Eqs. 16-17 is what this checks, not what it uses.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        inputs = _inputs(x, gamma, beta, eps, training, running_mean, running_var, denom)
        upstream = _like(g, inputs.batch)
        dx, dgamma, dbeta = [], [], []
        for (j, _, steps), g_row in zip(inputs.feature_steps(), upstream, strict=True):
            dgamma.append(mpmath.fdot(g_row, steps.xhat))  # y = gamma xhat + beta
            dbeta.append(mpmath.fsum(g_row))
            dx.append(_reverse(steps, g_row, inputs.gamma[j], inputs.denom))
        return _nest(dx, inputs.batch.shape), dgamma, dbeta


def batchnorm_jacobian(
    x: npt.ArrayLike,
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike,
    eps: float,
    training: bool = True,
    running_mean: npt.ArrayLike | None = None,
    running_var: npt.ArrayLike | None = None,
    denom: str = "sqrt_var_eps",
    dps: int = DEFAULT_DPS,
) -> list[Rows]:
    """The Jacobian of BatchNorm as its diagonal blocks: ``J[j][k][l] = dy_kj / dx_lj``.

    Features do not interact, so ``dy_kj / dx_li = 0`` for ``i != j`` and only the ``C``
    blocks of size ``M x M`` are returned (batch positions in C order over ``(N, H, W)``).
    Forward mode (``_tangent``): the tangent ``e_l`` gives column ``l``. In inference each
    block is ``diag(gamma_j r_j)``; at a constant feature with ``std_plus_eps`` and
    ``eps > 0`` it is ``gamma_j / eps (I - 11^T/M)``. 001 Eqs. 16-17; 004 Key Equation 21.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        inputs = _inputs(x, gamma, beta, eps, training, running_mean, running_var, denom)
        blocks = []
        for j, row, steps in inputs.feature_steps():
            size = len(row)
            columns = [
                _tangent(steps, unit(size, position), inputs.gamma[j], inputs.denom)
                for position in range(size)
            ]
            blocks.append([list(r) for r in zip(*columns, strict=True)])
        return blocks


# --------------------------------------------------------------------------------------
# Running statistics
# --------------------------------------------------------------------------------------


def _update(batch: _Batch, mean: Row, var: Row, momentum: mpmath.mpf) -> tuple[Row, Row]:
    """One PyTorch running-statistics step (module docstring); ``new_var`` NaN for M = 1."""
    keep = 1 - momentum
    new_mean, new_var = [], []
    for row, mean_j, var_j in zip(batch.features, mean, var, strict=True):
        size = len(row)
        batch_mean = mpmath.fsum(row) / size
        if size > 1:
            unbiased = mpmath.fsum(deviations(row), squared=True) / (size - 1)
        else:
            unbiased = mpmath.nan  # 0/0: PyTorch's unbiased variance of one value
        new_mean.append(mpmath.fdot([keep, momentum], [mean_j, batch_mean]))
        new_var.append(mpmath.fdot([keep, momentum], [var_j, unbiased]))
    return new_mean, new_var


def running_update(
    x: npt.ArrayLike,
    running_mean: npt.ArrayLike,
    running_var: npt.ArrayLike,
    momentum: float,
    dps: int = DEFAULT_DPS,
) -> tuple[Row, Row]:
    """``(new_mean, new_var)`` after one training step on the batch ``x`` (PyTorch):

    ``new_mean = (1 - momentum) running_mean + momentum mean(x)`` and
    ``new_var = (1 - momentum) running_var + momentum var(x) M/(M - 1)`` per feature, with
    the batch statistics over axis 0 of ``(N, D)`` or ``(N, H, W)`` of ``(N, C, H, W)``.
    ``new_var`` is NaN when ``M = 1`` (the unbiased variance of one value is undefined).
    ``momentum`` must be finite in ``[0, 1]``: 0 keeps the statistics, 1 replaces them.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        batch = _batch(x)
        width = len(batch.features)
        mean, var = (
            exact_vector(running_mean, "running_mean", width),
            exact_vector(running_var, "running_var", width),
        )
        return _update(batch, mean, var, _momentum(momentum))


def running_sequence(
    batches: Sequence[npt.ArrayLike],
    running_mean: npt.ArrayLike,
    running_var: npt.ArrayLike,
    momentum: float,
    dps: int = DEFAULT_DPS,
) -> list[tuple[Row, Row]]:
    """:func:`running_update` applied in turn over ``batches``; returns ``(mean, var)``
    after each step. The statistics carried between steps stay at ``dps`` digits (no
    rounding to a float dtype). Every batch must have the same number of features.
    """
    check_dps(dps, MIN_DPS)
    with mpmath.workdps(dps):
        momentum_ = _momentum(momentum)
        shape = np.shape(running_mean)
        if len(shape) != 1:
            raise ValueError(f"running_mean: expected shape (C,), got {shape}")
        mean = exact_vector(running_mean, "running_mean", shape[0])
        var = exact_vector(running_var, "running_var", shape[0])
        steps: list[tuple[Row, Row]] = []
        for index, x in enumerate(batches):
            batch = _batch(x, f"batches[{index}]")
            if len(batch.features) != len(mean):
                raise ValueError(
                    f"batches[{index}]: expected C = {len(mean)} features like running_mean, "
                    f"got shape {batch.shape}"
                )
            mean, var = _update(batch, mean, var, momentum_)
            steps.append((mean, var))
        return steps
