"""The kernel contract (SPEC, "Modules and kernel API" and "Bad input"), checked for every
module of the catalog (``derive/catalog.py``), one test per rule:

- the signature rule: ``vjp`` and ``jacobian`` (and ``vjp2d``/``jacobian2d`` next to
  ``forward2d``) take exactly the parameters ``forward`` takes, in the same order, with the
  same kinds and defaults, and the upstream gradient inserted right after the input
  (``g`` after ``x``; ``G`` after ``X`` for the attentions);
- outputs have the input's dtype (float16, float32, float64): forward, every array the vjp
  returns (parameter gradients included) and the Jacobian;
- no kernel writes into its inputs (every array argument and the branch's parameters,
  compared bit for bit after forward, vjp and jacobian), and no result shares memory with
  one;
- a NaN input entry gives a NaN in the forward output (every module here reads every input
  entry into some output: elementwise, row, window, batch, attention and residual maps);
- ``strict_fp16`` is a bool: ``"no"``, 1 and None are a TypeError naming it, in every
  public function that has the keyword;
- every public function and class has a docstring, and every module docstring names its
  source (the seed file and the Table 2 row or equation) and its conventions (the Jacobian's
  numerator layout and the module's own convention at kinks, ties or zero variance).

``CASES`` builds one valid call per module and use (the residual blocks with an FFN branch
from ``kernels.compose.ffn``); a catalog entry without a case fails
``test_every_catalog_module_has_a_case`` rather than being skipped.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from derive.catalog import CATALOG
from kernels import compose

KEYS = [m.key for m in CATALOG]
FLOATS = (np.float16, np.float32, np.float64)
FLOAT_IDS = ("float16", "float32", "float64")

#: The seed file every module docstring cites.
SEED = "001_76ce3a8a4b6079c3.txt"

#: The convention each module docstring must state, beyond the Jacobian's layout (SPEC:
#: "the convention at kinks (relu'(0), max ties) and zero variance").
CONVENTIONS = {
    "linear": "numerator layout",
    "conv2d": "Padded zeros",
    "sigmoid": "Smooth everywhere",
    "softmax": "FULLY masked row",
    "relu": "relu'(0) = 0",
    "gelu": "+-inf gives the limits",
    "swish": "Smooth everywhere",
    "dp_attention": "non-finite rows",
    "l2_attention": "S_ii = 0",
    "scs_attention": "eps = 0",
    "layernorm": "zero variance",
    "batchnorm": "zero variance",
    "weightnorm": "zero row v_i",
    "rmsnorm": "zero row",
    "centernorm": "D = 1 is rejected",
    "residual": "relu'(0) = 0",
    "weighted_residual": "relu'(0) = 0",
    "maxpool": "Tie convention",
    "avgpool": "count_include_pad",
}


def kernel(key: str) -> ModuleType:
    return importlib.import_module(f"kernels.{key}")


@dataclass
class Use:
    """One valid way to call a module: ``forward(x, *params, **keywords)`` and the matching
    ``vjp(x, g, *params, **keywords)`` and ``jacobian(sample, *params, **keywords)``."""

    name: str
    x: np.ndarray
    params: tuple[Any, ...]
    sample: np.ndarray
    keywords: dict[str, Any] = field(default_factory=dict)
    forward: str = "forward"
    vjp: str = "vjp"
    jacobian: str = "jacobian"

    def arrays(self) -> list[np.ndarray]:
        """Every array the calls read, the branch's parameters included."""
        found = [self.x, self.sample]
        for p in self.params:
            if isinstance(p, np.ndarray):
                found.append(p)
            elif isinstance(p, compose.Sequential):
                found.extend(p.parameters)
        found.extend(v for v in self.keywords.values() if isinstance(v, np.ndarray))
        return found

    def call_forward(self, module: ModuleType, x: np.ndarray | None = None, **extra) -> Any:
        x = self.x if x is None else x
        return getattr(module, self.forward)(x, *self.params, **self.keywords, **extra)

    def call_vjp(self, module: ModuleType, g: np.ndarray, **extra) -> Any:
        return getattr(module, self.vjp)(self.x, g, *self.params, **self.keywords, **extra)

    def call_jacobian(self, module: ModuleType, **extra) -> Any:
        function = getattr(module, self.jacobian)
        return function(self.sample, *self.params, **self.keywords, **extra)

    def gradient(self, module: ModuleType) -> np.ndarray:
        y = self.call_forward(module)
        return np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype)


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _uses(key: str, dtype) -> list[Use]:
    """The valid calls of module ``key`` in ``dtype`` (small shapes)."""
    rng = np.random.default_rng(sum(map(ord, key)))

    def v(*shape: int) -> np.ndarray:
        return _values(rng, shape, dtype)

    if key in ("sigmoid", "relu", "swish", "softmax"):
        return [Use(key, v(2, 3), (), v(3))]
    if key == "gelu":
        return [Use(f"gelu-{form}", v(2, 3), (form,), v(3)) for form in ("none", "tanh", "sigmoid")]
    if key == "linear":
        return [Use("linear", v(2, 3), (v(4, 3), v(4)), v(3))]
    if key == "conv2d":
        W, b = v(3, 2, 2, 2), v(3)
        return [Use("conv2d", v(2, 2, 4, 4), (W, b, 1, 1), v(2, 4, 4))]
    if key in ("layernorm", "rmsnorm", "centernorm"):
        return [Use(key, v(2, 3), (v(3), v(3)), v(3))]
    if key == "weightnorm":
        return [Use(key, v(2, 3), (v(4, 3), v(4), 1e-3), v(3))]
    if key == "batchnorm":
        x = v(4, 3)
        running = {"running_mean": v(3), "running_var": np.abs(v(3)) + dtype(0.5)}
        return [
            Use("batchnorm-training", x, (v(3), v(3)), x),
            Use("batchnorm-4d", v(2, 3, 2, 2), (v(3), v(3)), v(2, 3, 1, 2)),
            Use("batchnorm-inference", x, (v(3), v(3)), x, {"training": False, **running}),
        ]
    if key == "dp_attention":
        X = v(3, 2)
        return [Use(key, X, (v(2, 2), v(2, 2), v(3, 2)), X)]
    if key == "l2_attention":
        X = v(3, 2)
        return [Use(key, X, (v(2, 2), v(3, 2)), X)]
    if key == "scs_attention":
        X = v(3, 2)
        return [Use(key, X, (v(2, 2), v(2, 2), v(3, 2), 1.5, 2.0, 1e-3), X)]
    if key in ("residual", "weighted_residual"):
        branch = compose.ffn(v(4, 3), v(4), v(3, 4), v(3))
        extra = (v(3),) if key == "weighted_residual" else ()
        return [Use(key, v(2, 3), (branch, *extra), v(3))]
    if key in ("maxpool", "avgpool"):
        windowed = Use(f"{key}-2d", v(2, 2, 4, 4), (2, 1, 1), v(2, 4, 4), forward="forward2d")
        windowed.vjp, windowed.jacobian = "vjp2d", "jacobian2d"
        return [Use(f"{key}-global", v(2, 3), (), v(3)), windowed]
    raise KeyError(key)


HAS_CASE = {
    "sigmoid", "relu", "swish", "softmax", "gelu", "linear", "conv2d", "layernorm", "rmsnorm",
    "centernorm", "weightnorm", "batchnorm", "dp_attention", "l2_attention", "scs_attention",
    "residual", "weighted_residual", "maxpool", "avgpool",
}  # fmt: skip

USES = [
    pytest.param(key, use_index, id=use.name)
    for key in KEYS
    if key in HAS_CASE
    for use_index, use in enumerate(_uses(key, np.float64))
]


def use_of(key: str, index: int, dtype) -> Use:
    return _uses(key, dtype)[index]


def flat_outputs(result: Any) -> list[np.ndarray]:
    """Every array in a (possibly nested) tuple of results; None entries (no bias) left out."""
    if isinstance(result, np.ndarray):
        return [result]
    if isinstance(result, tuple):
        return [a for item in result for a in flat_outputs(item)]
    assert result is None, f"unexpected output {result!r}"
    return []


# --------------------------------------------------------------------------------------
# The catalog is covered
# --------------------------------------------------------------------------------------


def test_every_catalog_module_has_a_case():
    assert set(KEYS) == HAS_CASE


# --------------------------------------------------------------------------------------
# Signature rule
# --------------------------------------------------------------------------------------


def _pairs(module: ModuleType) -> list[tuple[str, str]]:
    pairs = [("forward", "vjp"), ("forward", "jacobian")]
    if hasattr(module, "forward2d"):
        pairs += [("forward2d", "vjp2d"), ("forward2d", "jacobian2d")]
    return pairs


def _shape_of(parameter: inspect.Parameter) -> tuple:
    return parameter.name, parameter.kind, parameter.default


@pytest.mark.parametrize("key", KEYS)
def test_vjp_and_jacobian_take_exactly_the_parameters_of_forward(key):
    module = kernel(key)
    for forward_name, other_name in _pairs(module):
        forward = list(inspect.signature(getattr(module, forward_name)).parameters.values())
        other = list(inspect.signature(getattr(module, other_name)).parameters.values())
        if other_name.startswith("vjp"):
            gradient = other.pop(1)
            expected = "G" if forward[0].name == "X" else "g"
            assert gradient.name == expected, f"{key}.{other_name}: {gradient.name!r} after x"
            assert gradient.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, other_name
            assert gradient.default is inspect.Parameter.empty, f"{key}.{other_name}: g default"
        assert [_shape_of(p) for p in other] == [_shape_of(p) for p in forward], (
            f"{key}.{other_name} does not take the parameters of {key}.{forward_name}"
        )


# --------------------------------------------------------------------------------------
# dtypes, writes, NaN
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize(("key", "index"), USES)
def test_outputs_have_the_input_dtype(key, index, dtype):
    module, use = kernel(key), use_of(key, index, dtype)
    y = use.call_forward(module)
    assert y.dtype == dtype, f"{use.forward}: {y.dtype}"
    for i, out in enumerate(flat_outputs(use.call_vjp(module, use.gradient(module)))):
        assert out.dtype == dtype, f"{use.vjp} output {i}: {out.dtype}"
    jacobian = use.call_jacobian(module)
    assert jacobian.dtype == dtype, f"{use.jacobian}: {jacobian.dtype}"


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize(("key", "index"), USES)
def test_inputs_are_not_written(key, index, dtype):
    module, use = kernel(key), use_of(key, index, dtype)
    g = use.gradient(module)
    arrays = [*use.arrays(), g]
    before = [a.copy() for a in arrays]
    use.call_forward(module)
    use.call_vjp(module, g)
    use.call_jacobian(module)
    for i, (a, b) in enumerate(zip(arrays, before, strict=True)):
        assert a.tobytes() == b.tobytes(), f"{key}: input {i} was written"


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize(("key", "index"), USES)
def test_no_output_shares_memory_with_an_input(key, index, dtype):
    """Every result is an array of its own: writing into a Jacobian or a gradient cannot
    change an argument (Linear's Jacobian is W's values, returned as a copy)."""
    module, use = kernel(key), use_of(key, index, dtype)
    g = use.gradient(module)
    arrays = [*use.arrays(), g]
    results = [use.call_forward(module), *flat_outputs(use.call_vjp(module, g))]
    results.append(use.call_jacobian(module))
    for i, out in enumerate(results):
        for j, a in enumerate(arrays):
            assert not np.shares_memory(out, a), f"{key}: result {i} shares input {j}'s memory"


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize(("key", "index"), USES)
def test_a_nan_input_entry_gives_a_nan_output(key, index, dtype):
    module, use = kernel(key), use_of(key, index, dtype)
    x = use.x.copy()
    x.flat[0] = np.nan
    y = use.call_forward(module, x)
    assert np.isnan(y).any(), f"{use.forward} of x with x.flat[0] = NaN: {y!r}"


# --------------------------------------------------------------------------------------
# strict_fp16 is a bool
# --------------------------------------------------------------------------------------


def _strict_callers(key: str, index: int) -> list[tuple[str, Callable[..., Any]]]:
    """Every public function of the use that takes strict_fp16, as a call on float16."""
    module, use = kernel(key), use_of(key, index, np.float16)
    g = use.gradient(module)
    callers = [
        (use.forward, lambda **kw: use.call_forward(module, **kw)),
        (use.vjp, lambda **kw: use.call_vjp(module, g, **kw)),
        (use.jacobian, lambda **kw: use.call_jacobian(module, **kw)),
    ]
    if hasattr(module, "derivative"):
        callers.append(("derivative", lambda **kw: module.derivative(use.x, *use.params, **kw)))
    return callers


@pytest.mark.parametrize("bad", ["no", 1, None], ids=["str", "int", "None"])
@pytest.mark.parametrize(("key", "index"), USES)
def test_strict_fp16_must_be_a_bool(key, index, bad):
    module = kernel(key)
    callers = _strict_callers(key, index)
    for name, call in callers:
        assert "strict_fp16" in inspect.signature(getattr(module, name)).parameters, name
        call(strict_fp16=False)
        call(strict_fp16=True)
        with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
            call(strict_fp16=bad)


def test_every_function_with_strict_fp16_is_exercised():
    """The functions above are all the public functions with the keyword (bar the
    running-statistics update, which has no float16 mode, and conv2d's operator)."""
    exercised = {
        (key, name) for key, index in (p.values for p in USES)
        for name, _ in _strict_callers(key, index)
    }  # fmt: skip
    for key in KEYS:
        module = kernel(key)
        for name, function in _public_functions(module):
            if "strict_fp16" in inspect.signature(function).parameters:
                assert (key, name) in exercised, f"{key}.{name} takes strict_fp16, not tested"


# --------------------------------------------------------------------------------------
# Docstrings
# --------------------------------------------------------------------------------------


def _public_functions(module: ModuleType) -> list[tuple[str, Callable[..., Any]]]:
    return [
        (name, f)
        for name, f in inspect.getmembers(module, inspect.isfunction)
        if not name.startswith("_") and f.__module__ == module.__name__
    ]


@pytest.mark.parametrize("key", KEYS)
def test_every_public_function_and_class_has_a_docstring(key):
    module = kernel(key)
    functions = _public_functions(module)
    assert {"forward", "vjp", "jacobian"} <= {name for name, _ in functions}
    for name, f in functions:
        assert (f.__doc__ or "").strip(), f"kernels.{key}.{name} has no docstring"
    for name, cls in inspect.getmembers(module, inspect.isclass):
        if name.startswith("_") or cls.__module__ != module.__name__:
            continue
        assert (cls.__doc__ or "").strip(), f"kernels.{key}.{name} has no docstring"
        for method, f in inspect.getmembers(cls, inspect.isfunction):
            if not method.startswith("_"):
                assert (f.__doc__ or "").strip(), f"kernels.{key}.{name}.{method}: no docstring"


@pytest.mark.parametrize("entry", CATALOG, ids=KEYS)
def test_module_docstring_names_its_source_and_conventions(entry):
    doc = " ".join((kernel(entry.key).__doc__ or "").split())  # line breaks as spaces
    assert SEED in doc, f"kernels.{entry.key}: the docstring does not cite {SEED}"
    row = entry.source.rpartition("row ")[2]
    assert f"row {row}" in doc or "Eq." in doc, (
        f"kernels.{entry.key}: the docstring names neither Table 2's row {row!r} nor an equation"
    )
    assert "numerator layout" in doc, f"kernels.{entry.key}: the Jacobian's layout is not stated"
    assert CONVENTIONS[entry.key] in doc, (
        f"kernels.{entry.key}: the docstring does not state {CONVENTIONS[entry.key]!r}"
    )
