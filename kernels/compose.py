"""Branches for residual blocks, composed from the other kernels: stages and ``Sequential``.

A *stage* is a small frozen object holding its parameters, with

- ``forward(x, *, strict_fp16=False)``: the output for ``x`` of shape (..., D);
- ``vjp(x, g, *, strict_fp16=False) -> (dx, grads)``: the input gradient for the upstream
  gradient ``g`` (shape of the output) and a tuple with one gradient per array of
  ``parameters``, in that order, each summed over all rows;
- ``jacobian(x, *, strict_fp16=False)``: the dense Jacobian of one sample ``x`` of shape
  (D,), numerator layout ``J[i, j] = dy_i/dx_j`` (the paper prints denominator layout,
  the transpose);
- ``output_shape(shape)``: the output's shape for an input of shape ``shape``
  (ValueError naming the stage if it cannot take that input);
- ``parameters``: a tuple of arrays.

The stages: :class:`Linear` (``x W^T + b``, ``kernels.linear``; grads ``(dW, db)``, or
``(dW,)`` without bias), :class:`Activation` (an elementwise kernel module of
:data:`ELEMENTWISE`: ``sigmoid``, ``relu``, ``gelu``, ``swish``; no parameters; any other
module is refused when the stage is built), :class:`LayerNorm` (``kernels.layernorm``;
grads ``(dgamma, dbeta)``) and :class:`Sequential`, itself a stage. For
``Sequential(f_1, ..., f_n)`` with ``x_0 = x``, ``x_k = f_k(x_{k-1})`` (the chain rule)::

    forward:  x_n
    vjp:      g_n = g;  (g_{k-1}, grads_k) = f_k.vjp(x_{k-1}, g_k) for k = n, ..., 1;
              returns (g_0, grads_1 + ... + grads_n)    (one flat tuple, stage order)
    jacobian: J_n(x_{n-1}) ... J_2(x_1) J_1(x_0)

(``Sequential.forward_and_vjp`` returns ``(x_n, g_0, grads)`` from one forward pass:
``kernels.weighted_residual`` needs both.)

:func:`ffn` builds the feed-forward network of Eq. 26 (001_76ce3a8a4b6079c3.txt,
section 3.1.7), ``FFN(x) = W2 max(0, W1 x + b1) + b2``; with rows as samples it computes
``relu(x W1^T + b1) W2^T + b2``. Its Jacobian at one sample is
``W2 diag(1(W1 x + b1 > 0)) W1`` (numerator layout); Eq. 27 prints the transpose,
``W1^T diag(1(W1 x + b1 > 0)) W2^T`` (denominator layout). ReLU is not differentiable where
a pre-activation is exactly 0; the kernels use ``relu'(0) = 0`` (``kernels.relu``), which
is Eq. 27's indicator ``1(. > 0)``: there the Jacobian and VJP are the one-sided ones of
the side where the unit is off.

Checks. A stage may be any object with these methods, so what it returns is checked before
it is used (:func:`checked_forward`, :func:`checked_vjp`, :func:`checked_jacobian`, also
inside a Sequential): a forward output of the shape ``output_shape`` promised, an input
gradient of x's shape, one gradient per parameter of that parameter's shape, a Jacobian of
shape (output size, D), each in the input's (parameter's) dtype; else ValueError (shape)
or TypeError (dtype, not an array) naming the stage (``branch``, ``stages[k]``).

Arithmetic. Every stage is one kernel call in x's dtype, so a float32, float16 or bfloat16
branch rounds its intermediate results to that dtype between stages, as a network stored
in that dtype does; ``strict_fp16`` is passed to every stage. Each kernel's own guarantee (computed
wide, rounded once; a float16 result is inf only when its exact value rounds to inf) holds
stage by stage, not for the composition: a float16 pre-activation can overflow although
the block's exact output is finite. The Jacobian's matrix product is taken in float64
(NumPy/BLAS) from the stages' Jacobians and rounded once to x's dtype; with
``strict_fp16=True`` every product and partial sum of it is rounded to x's 16-bit format
(half or bfloat16).

Threads. A Sequential with a Linear stage (at any depth) runs the Numba loops of all its
stages on one thread (``numba.set_num_threads``, which is per calling thread, restored
afterwards); its matrix products keep OpenBLAS's threads. Those threads spin for a while
after each product, and a parallel loop that runs then loses a core to them: measured
here, ``relu.forward`` of (4096, 1024) float32 took 7.1 ms on two threads right after a
float64 product, 1.6 ms on one (4.6 and 1.7 ms after a pause, when Numba's own threads
must wake up). No result depends on the thread count.

>>> import numpy as np
>>> from kernels import compose
>>> W1 = np.array([[1.0, 0.0], [0.0, -1.0]])
>>> W2 = np.array([[2.0, 1.0], [0.0, 3.0]])
>>> f = compose.ffn(W1, np.zeros(2), W2, np.zeros(2))
>>> f.forward(np.array([[1.0, 1.0]]))  # relu([1, -1]) = [1, 0]
array([[2., 0.]])
>>> f.jacobian(np.array([1.0, 1.0]))  # W2 diag(1, 0) W1
array([[2., 0.],
       [0., 0.]])
>>> dx, (dW1, db1, dW2, db2) = f.vjp(np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]))
>>> dx, db1
(array([[2., 0.]]), array([2., 0.]))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

from kernels import gelu, layernorm, linear, relu, sigmoid, swish
from kernels._bf16 import to_bfloat16
from kernels._dd import dd_add, two_prod, two_sum
from kernels._generated.weightnorm import matmul_nt_bf16s, matmul_nt_f16s
from kernels._grain import one_thread
from kernels._strict import is_bfloat16, narrow
from kernels._validate import eps_value, float_array, strict_mode
from kernels.cast import cast, widen

__all__ = [
    "ELEMENTWISE",
    "Activation",
    "LayerNorm",
    "Linear",
    "Sequential",
    "Stage",
    "ffn",
    "wide_jacobian",
]

Grads = tuple[np.ndarray, ...]

#: The kernel modules :class:`Activation` takes: the elementwise ones, the ``activations``
#: family of ``derive.catalog`` in Table 2's order (kept here so that ``import kernels``
#: reads no catalog; ``tests/kernels/test_residual.py`` checks that the two agree).
ELEMENTWISE: tuple[ModuleType, ...] = (sigmoid, relu, gelu, swish)


@runtime_checkable
class Stage(Protocol):
    """What a branch of a residual block provides (see the module docstring)."""

    @property
    def parameters(self) -> tuple[np.ndarray, ...]: ...

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]: ...

    def forward(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray: ...

    def vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, Grads]: ...

    def jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray: ...


def require_stage(value: Any, name: str) -> None:
    """TypeError unless ``value`` has the stage methods (see :class:`Stage`)."""
    if not isinstance(value, Stage):
        raise TypeError(
            f"{name}: expected a stage (compose.Linear, Activation, LayerNorm, Sequential, or "
            f"an object with forward, vjp, jacobian, output_shape and parameters), "
            f"got {type(value).__name__}"
        )


def _last_axis(shape: tuple[int, ...], size: int, title: str, what: str) -> None:
    if len(shape) == 0 or shape[-1] != size:
        raise ValueError(f"{title}: expected input of shape (..., {size}) ({what}), got {shape}")


@dataclass(frozen=True, eq=False)
class Linear:
    """``x W^T + b`` (``kernels.linear``): W of shape (O, D), b of shape (O,) or None."""

    W: np.ndarray
    b: np.ndarray | None = None

    def __post_init__(self) -> None:
        W = float_array(self.W, "W", bfloat16=True)
        if W.ndim != 2:
            raise ValueError(f"W: expected shape (O, D), got {W.shape}")
        object.__setattr__(self, "W", W)
        if self.b is not None:
            b = float_array(self.b, "b", bfloat16=True)
            if b.shape != (W.shape[0],):
                raise ValueError(f"b: expected shape ({W.shape[0]},) (rows of W), got {b.shape}")
            if b.dtype != W.dtype:
                raise TypeError(f"b: expected dtype {W.dtype} (the dtype of W), got {b.dtype}")
            object.__setattr__(self, "b", b)

    @property
    def parameters(self) -> tuple[np.ndarray, ...]:
        return (self.W,) if self.b is None else (self.W, self.b)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        _last_axis(shape, self.W.shape[1], "Linear", f"W has shape {self.W.shape}")
        return (*shape[:-1], self.W.shape[0])

    def forward(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return linear.forward(x, self.W, self.b, strict_fp16=strict_fp16)

    def vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, Grads]:
        dx, dW, db = linear.vjp(x, g, self.W, self.b, strict_fp16=strict_fp16)
        return dx, ((dW,) if db is None else (dW, db))

    def jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return linear.jacobian(x, self.W, self.b, strict_fp16=strict_fp16)


@dataclass(frozen=True, eq=False, init=False)
class Activation:
    """An elementwise kernel module (``kernels.relu``, ``gelu``, ``sigmoid``, ``swish``)
    with its keyword options, e.g. ``Activation(gelu, approximate="tanh")``."""

    module: ModuleType
    options: Mapping[str, Any]

    def __init__(self, module: ModuleType, **options: Any) -> None:
        if not any(module is elementwise for elementwise in ELEMENTWISE):
            names = ", ".join(m.__name__ for m in ELEMENTWISE)
            got = module.__name__ if isinstance(module, ModuleType) else repr(module)
            raise TypeError(
                f"module: expected an elementwise kernel module (one of {names}), got {got}"
            )
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "options", MappingProxyType(dict(options)))

    @property
    def parameters(self) -> tuple[np.ndarray, ...]:
        return ()

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def forward(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return self.module.forward(x, **self.options, strict_fp16=strict_fp16)

    def vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, Grads]:
        return self.module.vjp(x, g, **self.options, strict_fp16=strict_fp16), ()

    def jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return self.module.jacobian(x, **self.options, strict_fp16=strict_fp16)


@dataclass(frozen=True, eq=False)
class LayerNorm:
    """``kernels.layernorm`` over the last axis, with its gamma, beta (shape (D,)) and eps."""

    gamma: np.ndarray
    beta: np.ndarray
    eps: float = 1e-5

    def __post_init__(self) -> None:
        gamma = float_array(self.gamma, "gamma", bfloat16=True)
        if gamma.ndim != 1:
            raise ValueError(f"gamma: expected shape (D,), got {gamma.shape}")
        beta = float_array(self.beta, "beta", bfloat16=True)
        if beta.shape != gamma.shape:
            raise ValueError(
                f"beta: expected shape {gamma.shape} (that of gamma), got {beta.shape}"
            )
        if beta.dtype != gamma.dtype:
            raise TypeError(f"beta: expected dtype {gamma.dtype} (gamma's), got {beta.dtype}")
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "beta", beta)
        object.__setattr__(self, "eps", eps_value(self.eps))

    @property
    def parameters(self) -> tuple[np.ndarray, ...]:
        return (self.gamma, self.beta)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        _last_axis(shape, self.gamma.shape[0], "LayerNorm", f"gamma has shape {self.gamma.shape}")
        return tuple(shape)

    def forward(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return layernorm.forward(x, self.gamma, self.beta, self.eps, strict_fp16=strict_fp16)

    def vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, Grads]:
        dx, dgamma, dbeta = layernorm.vjp(
            x, g, self.gamma, self.beta, self.eps, strict_fp16=strict_fp16
        )
        return dx, (dgamma, dbeta)

    def jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        return layernorm.jacobian(x, self.gamma, self.beta, self.eps, strict_fp16=strict_fp16)


@dataclass(frozen=True, eq=False)
class Sequential:
    """The stages applied in order, ``f_n(...f_2(f_1(x)))``; see the module docstring."""

    stages: tuple[Any, ...]

    def __post_init__(self) -> None:
        stages = tuple(self.stages) if isinstance(self.stages, Iterable) else None
        if stages is None:
            raise TypeError(f"stages: expected a sequence of stages, got {self.stages!r}")
        if not stages:
            raise ValueError("stages: expected at least one stage, got none")
        for index, stage in enumerate(stages):
            require_stage(stage, f"stages[{index}]")
        object.__setattr__(self, "stages", stages)

    @property
    def parameters(self) -> tuple[np.ndarray, ...]:
        return tuple(p for stage in self.stages for p in stage.parameters)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for index, stage in enumerate(self.stages):
            try:
                shape = stage.output_shape(shape)
            except ValueError as error:
                raise ValueError(f"stages[{index}]: {error}") from error
        return tuple(shape)

    def _inputs(self, x: np.ndarray, strict_fp16: bool, count: int) -> list[np.ndarray]:
        """``[x_0, ..., x_{count-1}]``: the inputs of the first ``count`` stages."""
        inputs = [x]
        for index, stage in enumerate(self.stages[: count - 1]):
            inputs.append(checked_forward(stage, inputs[-1], strict_fp16, f"stages[{index}]"))
        return inputs

    @property
    def has_products(self) -> bool:
        """Whether a stage, at any depth, is a :class:`Linear` (a BLAS product)."""
        return any(
            isinstance(stage, Linear) or (isinstance(stage, Sequential) and stage.has_products)
            for stage in self.stages
        )

    def forward(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        x = float_array(x, "x", bfloat16=True)
        self.output_shape(x.shape)
        with _threads_for(self):
            for index, stage in enumerate(self.stages):
                x = checked_forward(stage, x, strict_fp16, f"stages[{index}]")
        return x

    def vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, Grads]:
        x, g = self._arrays(x, g)
        with _threads_for(self):
            inputs = self._inputs(x, strict_fp16, len(self.stages))
            return self._backward(inputs, g, strict_fp16)

    def forward_and_vjp(
        self, x: ArrayLike, g: ArrayLike, *, strict_fp16: bool = False
    ) -> tuple[np.ndarray, np.ndarray, Grads]:
        """``(forward(x), *vjp(x, g))`` with each stage's forward run once: the stage
        inputs the VJP needs and the output come from the same pass (the same values)."""
        x, g = self._arrays(x, g)
        with _threads_for(self):
            inputs = self._inputs(x, strict_fp16, len(self.stages) + 1)
            return (inputs[-1], *self._backward(inputs, g, strict_fp16))

    def _arrays(self, x: ArrayLike, g: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """``x`` and ``g`` as float arrays, ``g`` of the output's shape (ValueError else)."""
        x = float_array(x, "x", bfloat16=True)
        g = float_array(g, "g", bfloat16=True)
        expected = self.output_shape(x.shape)
        if g.shape != expected:
            raise ValueError(
                f"g: expected shape {expected} (the shape of the output), got {g.shape}"
            )
        return x, g

    def _backward(
        self, inputs: list[np.ndarray], g: np.ndarray, strict_fp16: bool
    ) -> tuple[np.ndarray, Grads]:
        """The chain rule from the last stage to the first, given the stage inputs."""
        grads: list[Grads] = []
        for index in reversed(range(len(self.stages))):
            g, stage_grads = checked_vjp(
                self.stages[index], inputs[index], g, strict_fp16, f"stages[{index}]"
            )
            grads.append(stage_grads)
        return g, tuple(grad for stage_grads in reversed(grads) for grad in stage_grads)

    def jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        x = float_array(x, "x", bfloat16=True)
        return finish(self.wide_jacobian(x, strict_fp16=strict_fp16), x.dtype)

    def wide_jacobian(self, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
        """The Jacobian as a float64 array before the final rounding to x's dtype."""
        x = float_array(x, "x", bfloat16=True)
        if x.ndim != 1:
            raise ValueError(f"x: expected one sample of shape (D,), got shape {x.shape}")
        self.output_shape(x.shape)
        inputs = self._inputs(x, strict_fp16, len(self.stages))
        product = None
        for index, (stage, stage_input) in enumerate(zip(self.stages, inputs, strict=True)):
            factor = checked_jacobian(stage, stage_input, strict_fp16, f"stages[{index}]")
            product = factor if product is None else _matmul(factor, product, strict_fp16, x.dtype)
        return product


def _threads_for(sequential: Sequential) -> AbstractContextManager:
    """One Numba thread for the calling thread while ``sequential`` runs, if it has matrix
    products (see "Threads" in the module docstring)."""
    return one_thread() if sequential.has_products else nullcontext()


def wide_jacobian(stage: Any, x: ArrayLike, *, strict_fp16: bool = False) -> np.ndarray:
    """``stage``'s Jacobian at one sample as float64, not yet rounded to x's dtype.

    A Sequential's product of stage Jacobians stays in float64 (halves in strict mode) so
    that a residual block adds the identity before the only rounding.
    """
    require_stage(stage, "stage")
    return checked_jacobian(stage, float_array(x, "x", bfloat16=True), strict_fp16, "stage")


# --- checked calls of a stage: what it returns is checked before any loop reads it ---------
#
# A stage may be made by the user, and its output_shape() is only its word: a forward
# output, input gradient or parameter gradient of another shape would make the float64
# loops below read past its end. So every result is checked against what the stage
# promised: shape (ValueError) and dtype (TypeError), naming the stage.


def _check_result(value: Any, name: str, what: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name}: its {what} must be a NumPy array, got {type(value).__name__}")
    if value.shape != tuple(shape):
        raise ValueError(f"{name}: its {what} has shape {value.shape}, expected {tuple(shape)}")
    if value.dtype != dtype:
        raise TypeError(f"{name}: its {what} has dtype {value.dtype}, expected {dtype}")
    return value


def checked_forward(stage: Any, x: np.ndarray, strict_fp16: Any, name: str) -> np.ndarray:
    """``stage.forward(x)``, checked to be an array of shape ``stage.output_shape(x.shape)``
    in x's dtype (ValueError/TypeError naming the stage ``name`` otherwise)."""
    expected = tuple(stage.output_shape(x.shape))
    output = stage.forward(x, strict_fp16=strict_fp16)
    return _check_result(output, name, "forward output", expected, x.dtype)


def checked_vjp(
    stage: Any, x: np.ndarray, g: np.ndarray, strict_fp16: Any, name: str
) -> tuple[np.ndarray, Grads]:
    """``stage.vjp(x, g)``, checked: ``(dx, grads)`` with dx of x's shape and dtype and one
    gradient per parameter, of that parameter's shape and dtype."""
    return _checked_vjp_result(stage, x, stage.vjp(x, g, strict_fp16=strict_fp16), name)


def checked_forward_and_vjp(
    stage: Any, x: np.ndarray, g: np.ndarray, strict_fp16: Any, name: str
) -> tuple[np.ndarray, np.ndarray, Grads]:
    """``(stage.forward(x), *stage.vjp(x, g))``, checked as :func:`checked_forward` and
    :func:`checked_vjp` check them; one pass through the stages when the stage has a
    ``forward_and_vjp`` method (:class:`Sequential`)."""
    method = getattr(stage, "forward_and_vjp", None)
    if method is None:  # the VJP first, then the forward (its errors come in that order)
        dx, grads = checked_vjp(stage, x, g, strict_fp16, name)
        return checked_forward(stage, x, strict_fp16, name), dx, grads
    expected = tuple(stage.output_shape(x.shape))
    result = method(x, g, strict_fp16=strict_fp16)
    if not isinstance(result, tuple) or len(result) != 3:
        raise TypeError(
            f"{name}: its forward_and_vjp must return (y, dx, grads), got {result!r:.80}"
        )
    output = _check_result(result[0], name, "forward output", expected, x.dtype)
    return (output, *_checked_vjp_result(stage, x, result[1:], name))


def _checked_vjp_result(stage: Any, x: np.ndarray, result: Any, name: str):
    """``result``, a stage's ``(dx, grads)`` for input ``x``, checked (see checked_vjp)."""
    if not isinstance(result, tuple) or len(result) != 2:
        raise TypeError(f"{name}: its vjp must return a pair (dx, grads), got {result!r:.80}")
    dx, grads = result
    dx = _check_result(dx, name, "vjp input gradient", x.shape, x.dtype)
    if not isinstance(grads, (tuple, list)):
        raise TypeError(
            f"{name}: its vjp must return its parameter gradients as a tuple, "
            f"got {type(grads).__name__}"
        )
    parameters = tuple(stage.parameters)
    if len(grads) != len(parameters):
        raise ValueError(
            f"{name}: its vjp returned {len(grads)} parameter gradients for "
            f"{len(parameters)} parameters"
        )
    for index, (grad, parameter) in enumerate(zip(grads, parameters, strict=True)):
        what = f"gradient of parameters[{index}]"
        _check_result(grad, name, what, np.shape(parameter), np.asarray(parameter).dtype)
    return dx, tuple(grads)


def checked_jacobian(stage: Any, x: np.ndarray, strict_fp16: Any, name: str) -> np.ndarray:
    """``stage``'s Jacobian at one sample ``x`` as float64, checked to have the shape
    (output size, D) (ValueError naming the stage ``name`` otherwise)."""
    expected = (int(np.prod(stage.output_shape(x.shape))), x.size)
    method = getattr(stage, "wide_jacobian", None)
    if method is not None:
        values = method(x, strict_fp16=strict_fp16)
        return _check_result(values, name, "wide Jacobian", expected, np.dtype(np.float64))
    values = stage.jacobian(x, strict_fp16=strict_fp16)
    values = _check_result(values, name, "Jacobian", expected, x.dtype)
    return values.astype(np.float64, copy=False)


def ffn(W1: ArrayLike, b1: ArrayLike | None, W2: ArrayLike, b2: ArrayLike | None) -> Sequential:
    """The FFN of Eq. 26, ``relu(x W1^T + b1) W2^T + b2`` (rows as samples).

    W1 has shape (H, D), b1 (H,), W2 (D', H), b2 (D',); either bias may be None. Its
    parameters, and the gradients of its ``vjp``, are ``(W1, b1, W2, b2)`` (a None bias is
    left out).
    """
    return Sequential((Linear(W1, b1), Activation(relu), Linear(W2, b2)))


# --- float64 helpers shared by kernels.residual and kernels.weighted_residual --------------


def check_block(x: ArrayLike, branch: Any, strict_fp16: Any) -> tuple[np.ndarray, bool]:
    """The checked input of a residual block and its strict flag: x of shape (..., D) with
    D >= 1, and a stage mapping that shape to itself (ValueError naming the branch)."""
    x = float_array(x, "x", bfloat16=True)
    if x.ndim == 0:
        raise ValueError("x: expected shape (..., D), got a 0-d array")
    if x.shape[-1] == 0:
        raise ValueError("x: a residual block needs D >= 1 on the last axis, got D = 0")
    strict = strict_mode(strict_fp16, x.dtype)
    require_stage(branch, "branch")
    try:
        shape = tuple(branch.output_shape(x.shape))
    except ValueError as error:
        raise ValueError(f"branch: cannot take x of shape {x.shape}: {error}") from error
    if shape != x.shape:
        raise ValueError(
            f"branch: a residual branch must map x of shape {x.shape} to the same shape, "
            f"but its output has shape {shape}"
        )
    return x, strict


def finish(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round once to ``dtype`` (to bfloat16 directly from float64: ml_dtypes' own cast
    rounds twice, through float32); an overflow to inf is a result, not a warning."""
    if is_bfloat16(dtype):
        return to_bfloat16(values)
    if np.dtype(dtype) == np.float16:
        return cast(values, "float16")
    with np.errstate(over="ignore"):
        return values.astype(dtype, copy=False)


def _rows(array: np.ndarray, width: int) -> np.ndarray:
    return widen(array).reshape(-1, width)


def _matmul(a: np.ndarray, b: np.ndarray, strict_fp16: bool, dtype: np.dtype) -> np.ndarray:
    """``a @ b`` in float64 (BLAS), or with every product and partial sum rounded to the
    16-bit ``dtype`` (half or bfloat16)."""
    if not strict_fp16:
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]))
    strict = matmul_nt_bf16s if is_bfloat16(dtype) else matmul_nt_f16s
    strict(np.ascontiguousarray(a), np.ascontiguousarray(b.T), out)
    return out


@njit(cache=True)
def _scaled_sum_dd(base, f, nu, out):
    """``out[m, i] = base[m, i] + nu[i] f[m, i]``, product and sum exact, rounded once."""
    for m in range(base.shape[0]):
        for i in range(base.shape[1]):
            p, e = two_prod(nu[i], f[m, i])
            s, t = two_sum(base[m, i], p)
            r = t + e
            out[m, i] = s + r if r != 0.0 else s  # s alone keeps IEEE's -0 + -0 = -0


@njit(cache=True)
def _scaled_sum_strict(base, f, nu, out, bf):
    """``out = h(base + h(nu f))``, ``h`` = rounding to half (to bfloat16 if ``bf``; values
    of that format in and out)."""
    for m in range(base.shape[0]):
        for i in range(base.shape[1]):
            out[m, i] = narrow(base[m, i] + narrow(nu[i] * f[m, i], bf), bf)


@njit(cache=True)
def _column_dots_dd(a, b, out):
    """``out[i] = sum_m a[m, i] b[m, i]`` in double-double, rounded once to float64."""
    hi = np.zeros(a.shape[1])
    lo = np.zeros(a.shape[1])
    for m in range(a.shape[0]):
        for i in range(a.shape[1]):
            p, e = two_prod(a[m, i], b[m, i])
            hi[i], lo[i] = dd_add(hi[i], lo[i], p, e)
    for i in range(a.shape[1]):
        out[i] = hi[i] + lo[i]


@njit(cache=True)
def _column_dots_strict(a, b, out, bf):
    """``out[i] = sum_m a[m, i] b[m, i]``, every product and partial sum rounded to half
    (to bfloat16 if ``bf``), rows ascending."""
    for i in range(a.shape[1]):
        out[i] = 0.0
    for m in range(a.shape[0]):
        for i in range(a.shape[1]):
            out[i] = narrow(out[i] + narrow(a[m, i] * b[m, i], bf), bf)


def scaled_sum(
    base: np.ndarray, f: np.ndarray, nu: np.ndarray, strict_fp16: bool, *, bf: bool = False
) -> np.ndarray:
    """``base + nu * f`` in float64 (``nu`` of shape (D,) along the last axis), exact
    before one rounding to float64; in strict mode ``h(base + h(nu f))``, ``h`` rounding to
    half (to bfloat16 if ``bf``). Shape of base."""
    width = nu.shape[0]
    if f.shape != base.shape or base.ndim == 0 or base.shape[-1] != width:
        raise ValueError(  # the loop would read past the end of f
            f"f: expected shape {base.shape} (ending in {width}), got {f.shape}"
        )
    out = np.empty((base.size // width, width))
    if strict_fp16:
        _scaled_sum_strict(_rows(base, width), _rows(f, width), nu, out, bf)
    else:
        _scaled_sum_dd(_rows(base, width), _rows(f, width), nu, out)
    return out.reshape(base.shape)


def column_dots(
    a: np.ndarray, b: np.ndarray, width: int, strict_fp16: bool, *, bf: bool = False
) -> np.ndarray:
    """``sum over rows of a * b`` for the arrays viewed as rows of ``width``: shape (width,),
    float64 (double-double accumulation), or in strict mode in half steps (bfloat16 steps
    if ``bf``)."""
    if a.shape != b.shape or a.size % width:
        raise ValueError(  # the loop would read past the end of b
            f"b: expected shape {a.shape} (rows of {width}), got {b.shape}"
        )
    out = np.empty(width)
    if strict_fp16:
        _column_dots_strict(_rows(a, width), _rows(b, width), out, bf)
    else:
        _column_dots_dd(_rows(a, width), _rows(b, width), out)
    return out
