"""A verified reference for people who write their own kernels: compare an implementation
of a catalog module with liptable's, in units of the format's spacing.

>>> import numpy as np
>>> from kernels.testing import assert_matches_reference
>>> x = np.linspace(-4, 4, 33, dtype=np.float32)
>>> def swish(x):  # float32 throughout: each operation rounds, up to 1.8 ULPs here
...     return x * (1 / (1 + np.exp(-x)))
>>> assert_matches_reference(swish, "swish", x, grad=False, budget="ulp:2")
Report(module='swish', dtype='float32', budget='ulp:2', passed=True)
>>> assert_matches_reference(swish, "swish", x, grad=False, budget="ulp:1")
... # doctest: +ELLIPSIS
Traceback (most recent call last):
AssertionError: liptable reference check: swish in float32, budget ulp:1: FAILED
  output        max ULP    p99 ULP    allowed  NaN/inf
  forward         1.829      1.829          1        0
  worst forward: index (15,): got -0.10945586115121841, correctly rounded ...; x[15] = -0.25

What is compared. The implementation ``fn`` runs on the inputs as given (NumPy arrays,
PyTorch tensors or any DLPack-capable arrays, in float16, bfloat16, float32 or float64), and
every output and, with ``grad=True``, every gradient it produces is compared with the exact
value as liptable computes it: its float64 kernel on the inputs widened exactly to float64
(whose own error, a few float64 ULPs, is far below one ULP of any of these formats). The
error of an output element is ``|got - exact| / spacing``, with the spacing of the
implementation's format at the correctly rounded value, so a correctly rounded result is
off by at most 0.5 ULP. Gradients: with PyTorch tensors, autograd gives them (the upstream
gradient ``g`` is drawn from the output's format, seeded); a NumPy implementation passes
``vjp=``, a function ``vjp(x, g, *params)`` returning what the kernel's ``vjp`` returns.

Budgets (``budget=``):

- ``"ulp:N"``: every element within N ULPs;
- ``"baseline:K"``: within K times the largest error of a naive evaluation in the same
  format, liptable's strict mode (every operation rounded to the format, as plain half
  arithmetic does), and never less than K times 0.5 ULP, the error of the correctly rounded
  result itself. That floor replaces the ad hoc absolute tolerance that "K times a naive
  baseline" budgets add when the baseline happens to be exact. Strict mode exists for
  float16 and bfloat16 (every module); other formats refuse it;
- ``"bound:K"``: per element, ``0.5 + K u (|y| + S) / spacing`` ULPs: the error, to first
  order, of a computation that is stable in the mixed forward-backward sense with K units
  of roundoff ``u = 2^-p`` of the format (its result within ``K u |y|`` of the exact value
  at inputs each within ``K u |a|`` of the given ones), rounded once at the end.
  ``S = sum_a |d y / d a| |a|`` over every input entry ``a`` (x, the parameters, and for a
  gradient the upstream ``g``) is the module's componentwise condition at those inputs, so
  an ill-conditioned element (a GeLU tail, a row with a huge mean, a cancelling gradient
  sum) is allowed more and a well-conditioned one a few ULPs. The partial derivatives come
  from liptable's float64 kernels by central differences with relative steps of 2^-20 (a
  tolerance, not a proof: their own error is far below the ULPs of these formats); each
  input entry costs two forwards and two VJPs, so inputs are limited to
  :data:`BOUND_ENTRIES` entries.

The assertion fails with a :class:`Report`: per output, the largest and the 99th-percentile
ULP error, the worst element with the input row it came from, the got, correctly rounded and
exact values, and the NaN/inf mismatches. A test is flagged vacuous (a warning) when the
implementation is liptable's own kernel, or when the budget allows more than the output's
whole range.

Importing this module imports neither SymPy nor PyTorch.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from kernels import (
    avgpool,
    batchnorm,
    centernorm,
    dp_attention,
    gelu,
    layernorm,
    linear,
    maxpool,
    relu,
    rmsnorm,
    sigmoid,
    softmax,
    swish,
)
from kernels._bf16 import to_bfloat16
from kernels._validate import BFLOAT16

__all__ = [
    "BOUND_ENTRIES",
    "MODULES",
    "Report",
    "VacuousTestWarning",
    "assert_matches_reference",
    "compare",
    "hard_input_strategy",
    "hard_inputs",
]

#: The modules the harness knows: name -> (kernel module, its fixed keyword options).
MODULES: dict[str, tuple[ModuleType, dict[str, Any]]] = {
    "sigmoid": (sigmoid, {}),
    "relu": (relu, {}),
    "swish": (swish, {}),
    "gelu": (gelu, {"approximate": "none"}),
    "gelu_tanh": (gelu, {"approximate": "tanh"}),
    "gelu_sigmoid": (gelu, {"approximate": "sigmoid"}),
    "softmax": (softmax, {}),
    "layernorm": (layernorm, {}),
    "rmsnorm": (rmsnorm, {}),
    "centernorm": (centernorm, {}),
    "batchnorm": (batchnorm, {}),
    "linear": (linear, {}),
    "maxpool": (maxpool, {}),
    "avgpool": (avgpool, {}),
    "dp_attention": (dp_attention, {}),
}
_ELEMENTWISE = ("sigmoid", "relu", "swish", "gelu", "gelu_tanh", "gelu_sigmoid")

#: Formats and the bits of their significand (the implicit bit included).
_PRECISION = {
    np.dtype(np.float16): 11,
    BFLOAT16: 8,
    np.dtype(np.float32): 24,
    np.dtype(np.float64): 53,
}
#: The error of the correctly rounded result, in ULPs: the floor of a baseline budget.
CORRECTLY_ROUNDED_ULPS = 0.5


class VacuousTestWarning(UserWarning):
    """The comparison cannot fail: the implementation is the reference, or the budget
    exceeds the output's range."""


@dataclass(frozen=True)
class Comparison:
    """One output (the forward's, or one gradient) against its exact value."""

    name: str
    max_ulp: float
    p99_ulp: float
    allowed_ulp: float
    nonfinite_mismatches: int
    worst: str
    #: Where the largest error is, and the input there for an elementwise output.
    worst_index: tuple[int, ...] = ()
    worst_x: float | None = None
    #: Elements beyond their allowance (a "bound" budget allows each element its own;
    #: ``allowed_ulp`` is then the allowance where the error comes closest to or exceeds it).
    over_budget: int = 0

    @property
    def passed(self) -> bool:
        return self.nonfinite_mismatches == 0 and self.over_budget == 0


@dataclass(frozen=True)
class Report:
    """What :func:`assert_matches_reference` found; ``str()`` is the readable table."""

    module: str
    dtype: str
    budget: str
    passed: bool
    comparisons: tuple[Comparison, ...] = field(repr=False)
    notes: tuple[str, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [
            f"liptable reference check: {self.module} in {self.dtype}, budget "
            f"{self.budget}: {verdict}"
        ]
        lines.append(
            f"  {'output':<10} {'max ULP':>10} {'p99 ULP':>10} {'allowed':>10} {'NaN/inf':>8}"
        )
        for c in self.comparisons:
            lines.append(
                f"  {c.name:<10} {c.max_ulp:>10.4g} {c.p99_ulp:>10.4g} {c.allowed_ulp:>10.4g} "
                f"{c.nonfinite_mismatches:>8}"
            )
        lines += [f"  worst {c.name}: {c.worst}" for c in self.comparisons if c.worst]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


# --- arrays in and out ---------------------------------------------------------------------


def _is_torch(value: object) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def to_numpy(value: Any) -> np.ndarray:
    """A NumPy view (no copy where the memory allows) of a NumPy array, a CPU PyTorch
    tensor (bfloat16 as ``ml_dtypes.bfloat16``) or a DLPack-capable array."""
    if isinstance(value, np.ndarray):
        return value
    if _is_torch(value):
        import torch  # the tensor's own library, already loaded by whoever made it

        tensor = value.detach()
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(BFLOAT16)
        return tensor.numpy()
    if hasattr(value, "__dlpack__"):
        return np.from_dlpack(value)
    return np.asarray(value)


def _widened(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64)


def _spacing(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at ``|values|`` (float64; at 0, the smallest subnormal)."""
    info = ml_dtypes.finfo(dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, exponent = np.frexp(np.abs(values))
    top = np.clip(exponent - 1, int(info.minexp), int(info.maxexp) - 1)
    top = np.where(values == 0, int(info.minexp), top)
    return np.ldexp(1.0, top - int(info.nmant))


def _rounded(exact: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``exact`` (float64) rounded once to ``dtype``."""
    if dtype == BFLOAT16:
        return to_bfloat16(exact)
    with np.errstate(over="ignore"):
        return exact.astype(dtype)


# --- the comparison ------------------------------------------------------------------------


def _ulp_errors(got: np.ndarray, exact: np.ndarray, dtype: np.dtype):
    """(errors in ULPs, NaN/inf mismatches) of ``got`` against the float64 ``exact``."""
    rounded = _rounded(exact, dtype).astype(np.float64)
    got = got.astype(np.float64)
    nan_mismatch = np.isnan(got) != np.isnan(rounded)
    inf_mismatch = np.isinf(got) != np.isinf(rounded)
    same_inf = np.isinf(got) & (got == rounded)
    finite = np.isfinite(got) & np.isfinite(rounded)
    errors = np.zeros(got.shape)
    with np.errstate(invalid="ignore"):
        errors[finite] = np.abs(got[finite] - exact[finite]) / _spacing(rounded[finite], dtype)
    errors[same_inf | (np.isnan(got) & np.isnan(rounded))] = 0.0
    wrong_class = nan_mismatch | (inf_mismatch & ~same_inf)
    errors[wrong_class] = np.inf  # NaN or inf against a finite value, or the reverse
    mismatches = int(np.count_nonzero(wrong_class))
    return errors, mismatches, rounded


def _describe(index: tuple, inputs: Sequence[np.ndarray], got, rounded, exact) -> str:
    """The worst element: its index, values, and the row of x it came from (for outputs
    of x's shape; a parameter gradient sums over the rows)."""
    index = tuple(int(i) for i in index)
    text = (
        f"index {index}: got {float(got[index])!r}, correctly rounded "
        f"{float(rounded[index])!r}, exact {float(exact[index])!r}"
    )
    x = inputs[0]
    if got.shape == x.shape and x.ndim == 1:
        text += f"; x[{index[0]}] = {float(x[index]):.17g}"
    elif got.shape == x.shape:
        row = index[:-1]
        shown = np.array2string(np.asarray(x[row], dtype=np.float64), precision=6, threshold=8)
        text += f"; x{list(row)} = {shown}" if row else f"; x = {shown}"
    return text


def _compare(name, got, exact, dtype, allowed, inputs) -> Comparison:
    """``allowed``: ULPs for every element (a number), or per element (an array of the
    output's shape)."""
    got = np.asarray(got)
    exact = np.asarray(exact, dtype=np.float64)
    if got.shape != exact.shape:
        raise AssertionError(f"{name}: shape {got.shape}, expected {exact.shape}")
    errors, mismatches, rounded = _ulp_errors(got, exact, dtype)
    if errors.size == 0:
        return Comparison(name, 0.0, 0.0, float(np.max(allowed, initial=0.0)), 0, "")
    limits = np.broadcast_to(np.asarray(allowed, dtype=np.float64), errors.shape)
    over = np.isfinite(errors) & (errors > limits)
    with np.errstate(divide="ignore", invalid="ignore"):
        closeness = np.where(np.isfinite(errors), errors / limits, -np.inf)
    closest = np.unravel_index(int(np.argmax(closeness)), errors.shape)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(errors)), errors.shape))
    if np.isscalar(allowed) or np.ndim(allowed) == 0:
        shown = float(allowed)
    else:  # the element nearest its own allowance is the one a reader needs
        worst = tuple(int(i) for i in closest)
        shown = float(limits[closest])
    x = inputs[0]
    elementwise = got.shape == x.shape and x.ndim == 1
    described = ""
    if errors.max() > 0 or mismatches:
        described = _describe(worst, inputs, got.astype(np.float64), rounded, exact)
        if not (np.isscalar(allowed) or np.ndim(allowed) == 0):
            described = (
                f"(the element nearest its own allowance: {float(errors[worst]):.4g} ULP of "
                f"{shown:.4g} allowed there; {int(np.count_nonzero(over))} over theirs) "
                + described
            )
    return Comparison(
        name=name,
        max_ulp=float(errors.max()),
        p99_ulp=float(np.percentile(errors, 99, method="higher")),
        allowed_ulp=shown,
        over_budget=int(np.count_nonzero(over)),
        nonfinite_mismatches=mismatches,
        worst=described,
        worst_index=worst,
        worst_x=float(x[worst]) if elementwise else None,
    )


def _parse(budget: str) -> tuple[str, float]:
    kind, _, number = budget.partition(":")
    if kind not in ("ulp", "baseline", "bound") or not number:
        raise ValueError(f"budget: expected 'ulp:N', 'baseline:K' or 'bound:K', got {budget!r}")
    value = float(number)
    if not value >= 0:
        raise ValueError(f"budget: expected a number >= 0, got {budget!r}")
    return kind, value


def _outputs(result: Any) -> list[np.ndarray | None]:
    if isinstance(result, tuple):
        return [None if r is None else to_numpy(r) for r in result]
    return [to_numpy(result)]


def _torch_run(fn, inputs, dtype, rng, grad):
    import torch  # the caller passed torch tensors

    leaves = [t.detach().clone().requires_grad_(grad) for t in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    if not grad:
        return to_numpy(out), None, None
    g = _upstream(out.shape, dtype, rng)
    g_tensor = (
        torch.from_numpy(g.view(np.int16)).view(torch.bfloat16)
        if dtype == BFLOAT16
        else (torch.from_numpy(g))
    )
    out.backward(g_tensor)
    grads = [None if t.grad is None else to_numpy(t.grad) for t in leaves]
    return to_numpy(out), g, grads


def _gradient_names(kernel: ModuleType, count: int) -> list[str]:
    """``dx``, then ``d<parameter>`` for the array parameters the kernel's forward takes."""
    parameters = list(inspect.signature(kernel.forward).parameters)[1:]
    return ["dx", *(f"d{name}" for name in parameters[: count - 1])]


def _upstream(shape, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """An upstream gradient in the output's format: normal entries, exactly representable."""
    return _rounded(rng.standard_normal(shape), dtype)


def assert_matches_reference(
    fn: Callable[..., Any],
    module: str,
    *inputs: Any,
    grad: bool = True,
    budget: str = "ulp:1",
    vjp: Callable[..., Any] | None = None,
    seed: int = 0,
    **options: Any,
) -> Report:
    """Assert that ``fn(*inputs)`` (and its gradients) match ``module`` within ``budget``.

    ``module`` names a catalog module (:data:`MODULES`); ``inputs`` are the arrays its
    kernel's ``forward`` takes, in that order (x first, then parameters such as gamma), all
    of one format; ``options`` are the kernel's keyword options (``eps=...``), which go to
    the reference only: ``fn`` must build them in. Returns the :class:`Report` when the
    check passes; raises AssertionError with the report when it does not.
    """
    report = compare(fn, module, *inputs, grad=grad, budget=budget, vjp=vjp, seed=seed, **options)
    for note in report.notes:
        warnings.warn(note, VacuousTestWarning, stacklevel=2)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def compare(
    fn: Callable[..., Any],
    module: str,
    *inputs: Any,
    grad: bool = True,
    budget: str = "ulp:1",
    vjp: Callable[..., Any] | None = None,
    seed: int = 0,
    **options: Any,
) -> Report:
    """The :class:`Report` of :func:`assert_matches_reference`, passed or not, without
    raising or warning (for tables of many implementations)."""
    if module not in MODULES:
        raise ValueError(f"module: expected one of {', '.join(MODULES)}, got {module!r}")
    kernel, fixed = MODULES[module]
    kind, amount = _parse(budget)
    arrays = [to_numpy(value) for value in inputs]
    dtype = arrays[0].dtype
    if dtype not in _PRECISION:
        raise TypeError(f"inputs: expected float16, bfloat16, float32 or float64, got {dtype}")
    if any(a.dtype != dtype for a in arrays):
        raise TypeError(f"inputs: expected one format, got {[str(a.dtype) for a in arrays]}")
    rng = np.random.default_rng(seed)
    kwargs = {**fixed, **options}
    notes = []
    torch_inputs = any(_is_torch(value) for value in inputs)
    if torch_inputs:
        got, g, grads = _torch_run(fn, list(inputs), dtype, rng, grad)
    else:
        got = _outputs(fn(*inputs))[0]
        g, grads = None, None
        if grad:
            if vjp is None:
                raise ValueError(
                    "grad=True with NumPy arrays needs vjp=, a function (x, g, *params) "
                    "returning what the kernel's vjp returns (or pass grad=False)"
                )
            g = _upstream(got.shape, dtype, rng)
            grads = _outputs(vjp(arrays[0], g, *arrays[1:]))
    wide = [_widened(a) for a in arrays]
    exact = _evaluate(kernel, kwargs, wide, _widened(g) if grad else None)
    named = [("forward", got, exact.pop("forward"))]
    for (name, theirs), mine in zip(exact.items(), grads or (), strict=False):
        if mine is not None and theirs is not None:
            named.append((name, mine, theirs))
    allowed = {name: amount for name, _, _ in named}
    if kind == "baseline":
        allowed = _baseline_allowance(module, kernel, kwargs, arrays, g, named, amount)
    if kind == "bound":
        allowed = _bound_allowance(kernel, kwargs, wide, g, named, dtype, amount)
    if fn is kernel.forward or getattr(fn, "__wrapped__", None) is kernel.forward:
        notes.append("vacuous: the implementation is liptable's own kernel")
    comparisons = []
    for name, mine, theirs in named:
        comparisons.append(_compare(name, mine, theirs, dtype, allowed[name], arrays))
        values = np.asarray(theirs, dtype=np.float64)
        values = values[np.isfinite(values)]
        largest = float(np.max(allowed[name], initial=0.0))
        if values.size and largest * _spacing(values, dtype).max() >= np.ptp(values) > 0:
            notes.append(f"vacuous: the {name} budget exceeds the output's whole range")
    return Report(
        module=module,
        dtype=str(dtype),
        budget=budget,
        passed=all(c.passed for c in comparisons),
        comparisons=tuple(comparisons),
        notes=tuple(notes),
    )


def _baseline_allowance(module, kernel, kwargs, arrays, g, named, factor) -> dict[str, float]:
    """K times the naive same-format evaluation's largest error (strict mode), per output,
    and never below K times 0.5 ULP."""
    dtype = arrays[0].dtype
    if dtype not in (np.float16, BFLOAT16):
        raise ValueError(
            f"budget: a baseline needs liptable's strict mode, which exists for float16 and "
            f"bfloat16; got {module} in {dtype}"
        )
    naive = {"forward": kernel.forward(*arrays, **kwargs, strict_fp16=True)}
    if g is not None:
        grads = kernel.vjp(arrays[0], g, *arrays[1:], **kwargs, strict_fp16=True)
        grads = grads if isinstance(grads, tuple) else (grads,)
        naive |= dict(zip(_gradient_names(kernel, len(grads)), grads, strict=True))
    allowed = {}
    for name, _, exact in named:
        errors, _, _ = _ulp_errors(np.asarray(naive[name]), np.asarray(exact), dtype)
        worst = float(errors[np.isfinite(errors)].max(initial=0.0))
        allowed[name] = factor * max(worst, CORRECTLY_ROUNDED_ULPS)
    return allowed


#: The most input entries (x, parameters and upstream gradient together) a "bound" budget
#: differentiates, one central difference each.
BOUND_ENTRIES = 4096
#: The relative step of those central differences.
_STEP = 2.0**-20


def _evaluate(kernel, kwargs, wide, g) -> dict[str, np.ndarray | None]:
    """The float64 kernel's forward and (with ``g``) gradients, by output name, in the order
    of its ``vjp`` (a gradient the kernel does not give is None)."""
    out = {"forward": np.asarray(kernel.forward(*wide, **kwargs), dtype=np.float64)}
    if g is not None:
        grads = kernel.vjp(wide[0], g, *wide[1:], **kwargs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        names = _gradient_names(kernel, len(grads))
        out |= {
            n: None if v is None else np.asarray(v, dtype=np.float64)
            for n, v in zip(names, grads, strict=True)
        }
    return out


def _bound_allowance(kernel, kwargs, wide, g, named, dtype, factor) -> dict[str, np.ndarray]:
    """Per output, per element: ``0.5 + K u (|y| + S) / spacing`` ULPs with ``S = sum_a
    |d y/d a| |a|`` over every input entry (central differences of the float64 kernels)."""
    g_wide = None if g is None else _widened(g)
    entries = sum(a.size for a in wide) + (0 if g_wide is None else g_wide.size)
    if entries > BOUND_ENTRIES:
        raise ValueError(
            f"budget: 'bound' differentiates every input entry; {entries} > "
            f"{BOUND_ENTRIES} entries, use smaller inputs (or an 'ulp' budget)"
        )
    inputs = [a.copy() for a in wide]  # perturbed in place, one entry at a time
    upstream = None if g_wide is None else g_wide.copy()
    sums = {name: np.zeros(np.shape(exact)) for name, _, exact in named}
    for array in [*inputs, *([] if upstream is None else [upstream])]:
        for flat in range(array.size):
            value = array.flat[flat]
            if value == 0 or not np.isfinite(value):
                continue  # a relative perturbation leaves 0 exact
            step = abs(value) * _STEP
            sides = []
            for sign in (1.0, -1.0):
                array.flat[flat] = value + sign * step
                sides.append(_evaluate(kernel, kwargs, inputs, upstream))
            array.flat[flat] = value
            for name in sums:
                slope = (sides[0][name] - sides[1][name]) / (2.0 * step)
                sums[name] += np.abs(np.where(np.isfinite(slope), slope, 0.0)) * abs(value)
    unit = 2.0 ** -_PRECISION[np.dtype(dtype)]
    allowed = {}
    for name, _, exact in named:
        rounded = _rounded(np.asarray(exact, dtype=np.float64), dtype).astype(np.float64)
        spacing = _spacing(np.where(np.isfinite(rounded), rounded, 0.0), dtype)
        size = np.abs(np.where(np.isfinite(rounded), exact, 0.0)) + sums[name]
        allowed[name] = CORRECTLY_ROUNDED_ULPS + factor * unit * size / spacing
    return allowed


# --- inputs that break naive implementations -----------------------------------------------


def _format_limits(dtype: np.dtype) -> tuple[float, float, float]:
    """(largest finite, smallest normal, smallest subnormal) of ``dtype``."""
    info = ml_dtypes.finfo(dtype)
    return float(info.max), float(info.smallest_normal), float(info.smallest_subnormal)


def _elementwise_hard(dtype: np.dtype) -> dict[str, np.ndarray]:
    biggest, normal, tiny = _format_limits(dtype)
    log_max = float(np.log(biggest))
    cases = {}
    edges = [0.0, -0.0, tiny, -tiny, normal, -normal, biggest, -biggest, np.inf, -np.inf]
    cases["format edges"] = np.array(edges, dtype=np.float64)
    # exp(x) overflows past log(max): naive sigmoid(-x), swish, GeLU-sigmoid forms
    cases["exp overflow"] = np.array([log_max, -log_max, log_max + 1, -log_max - 1, 88.8, 11.1])
    # GeLU's tails: erf(x / sqrt 2) cancels in 1 + erf for x << 0; x^3 in the tanh form
    # overflows (float16: |x| > 40.3), and its derivative multiplies inf by 0
    cases["tails"] = np.array([-5.0, -10.0, -20.0, -38.0, -41.0, -100.0, 41.0, 1000.0])
    hard = {name: _rounded(np.asarray(v, dtype=np.float64), dtype) for name, v in cases.items()}
    if dtype.itemsize == 2:  # every value of a 16-bit format: 65,536 inputs are cheap
        hard["every value"] = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    return hard


def _row_hard(module: str, dtype: np.dtype, width: int) -> dict[str, np.ndarray]:
    biggest, normal, tiny = _format_limits(dtype)
    ramp = np.linspace(-1.0, 1.0, width)
    cases = {
        "constant row": np.full(width, 3.0),
        "near-constant row": 1.0 + ramp * 2.0**-6,
        # a large mean with a small spread: the one-pass variance E[x^2] - E[x]^2 cancels
        "huge mean": min(biggest / 8, 2.0**14) + ramp,
        # |x| = 256 squares to 65536, past float16's largest value
        "squares overflow": np.full(width, 256.0) * np.where(ramp >= 0, 1, -1),
        "near the largest value": biggest / 2 * ramp,
        "subnormal row": tiny * np.arange(1, width + 1),
        "below the normals": normal * 0.5 * ramp,
    }
    if module == "softmax":
        masked = np.full(width, -np.inf)
        masked[0] = 0.0
        cases |= {
            "large logits": biggest / 2 * ramp,
            "masked row": masked,
            "equal logits": np.zeros(width),
        }
    return {name: _rounded(np.asarray(v, np.float64), dtype)[None, :] for name, v in cases.items()}


#: Tokens of the attention cases of :func:`hard_inputs`.
_TOKENS = 4


def _attention_hard(dtype: np.dtype, width: int) -> dict[str, np.ndarray]:
    """Tokens (rows) of ``width`` entries that break naive attention with projections of
    norm about 1 (identity-like), d = ``width``: logits q . k above the format's largest
    value before the 1/sqrt(d) scaling and below it after, one dominant token (a softmax
    without the max shift overflows exp), equal tokens (uniform weights), opposite tokens,
    and subnormal tokens."""
    biggest, _, tiny = _format_limits(dtype)
    over = np.sqrt(1.4 * biggest / width)  # q . k = 1.4 x largest; / sqrt(d) fits for d >= 2
    shape = (_TOKENS, width)
    dominant = np.full(shape, -1.0)
    dominant[0] = min(16.0, np.sqrt(biggest) / 4)
    cases = {
        "logits overflow before scaling": np.full(shape, over),
        "one dominant token": dominant,
        "equal tokens": np.full(shape, 0.5),
        "opposite tokens": np.where(np.arange(_TOKENS)[:, None] % 2 == 0, 4.0, -4.0)
        * np.ones(shape),
        "subnormal tokens": tiny * (1 + np.arange(_TOKENS * width).reshape(shape)),
    }
    return {name: _rounded(np.asarray(v, np.float64), dtype) for name, v in cases.items()}


def hard_inputs(module: str, dtype: Any, width: int = 8) -> dict[str, np.ndarray]:
    """Inputs ``x`` that break naive implementations of ``module`` in ``dtype``, by name.

    Elementwise modules: every value of a 16-bit format (all 65,536), the format's edges
    (zeros, subnormals, the largest values, infinities), exp's overflow points and GeLU's
    tails. Row modules (norms, softmax, pooling), rows of ``width`` entries: constant and
    near-constant rows (zero variance), a huge mean with a small spread, entries whose
    squares overflow float16 (|x| = 256), entries near the largest value, subnormal rows,
    and for softmax large logits, a row masked with -inf but for one entry, equal logits.
    Dot-product attention: token matrices (4 tokens of ``width`` entries), see
    :func:`_attention_hard`.
    """
    dtype = np.dtype(dtype)
    if module not in MODULES:
        raise ValueError(f"module: expected one of {', '.join(MODULES)}, got {module!r}")
    if module in _ELEMENTWISE:
        return _elementwise_hard(dtype)
    if module == "dp_attention":
        return _attention_hard(dtype, width)
    return _row_hard(module, dtype, width)


def hard_input_strategy(module: str, dtype: Any, width: int = 8):
    """A hypothesis strategy drawing the :func:`hard_inputs` rows (or values) of ``module``,
    one at a time, scaled by a drawn power of two (a scaled hard row stays hard)."""
    from hypothesis import strategies as st  # hypothesis is a test dependency

    dtype = np.dtype(dtype)
    cases = list(hard_inputs(module, dtype, width).values())

    def scaled(case: np.ndarray, exponent: int) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return _rounded(case.astype(np.float64) * 2.0**exponent, dtype)

    return st.builds(scaled, st.sampled_from(cases), st.integers(-4, 4))
