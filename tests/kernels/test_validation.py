"""Bad input gets a correct result or an error naming the argument (SPEC, "Bad input");
no kernel writes into its inputs."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import gelu, relu, sigmoid, swish

MODULES = (sigmoid, relu, swish, gelu)
FLOATS = (np.float16, np.float32, np.float64)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("bad", [np.arange(3), np.array([True]), np.array([1 + 2j]), ["a"]])
def test_unsupported_dtypes_raise_type_error_naming_x(module, bad):
    with pytest.raises(TypeError, match=r"^x: expected a bfloat16, float16, float32 or float64"):
        module.forward(bad)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_vjp_checks_g(module):
    x = np.zeros(3)
    with pytest.raises(ValueError, match=r"^g: expected shape \(3,\)"):
        module.vjp(x, np.zeros(4))
    with pytest.raises(TypeError, match=r"^g: expected dtype float64"):
        module.vjp(x, np.zeros(3, dtype=np.float32))
    with pytest.raises(TypeError, match=r"^g: expected a bfloat16, float16"):
        module.vjp(x, np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_strict_fp16_needs_float16(module):
    with pytest.raises(ValueError, match=r"^strict_fp16: applies to float16"):
        module.forward(np.zeros(2, dtype=np.float32), strict_fp16=True)


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ValueError, match=r"^approximate: expected one of"):
        gelu.forward(np.zeros(2), approximate="erf")


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_jacobian_needs_one_sample(module):
    with pytest.raises(ValueError, match=r"^x: expected one sample of shape \(D,\)"):
        module.jacobian(np.zeros((2, 3)))


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("dtype", FLOATS)
def test_shapes_dtypes_and_layouts(module, dtype):
    rng = np.random.default_rng(7)
    base = rng.normal(size=(4, 6)).astype(dtype) * 4
    expected = module.forward(np.ascontiguousarray(base))
    assert expected.shape == (4, 6) and expected.dtype == dtype
    transposed = module.forward(base.T)
    assert np.array_equal(transposed, expected.T, equal_nan=True)
    strided = module.forward(base[:, ::2])
    assert np.array_equal(strided, expected[:, ::2], equal_nan=True)
    swapped = base.astype(base.dtype.newbyteorder(">"))
    assert np.array_equal(module.forward(swapped), expected, equal_nan=True)
    assert module.forward(np.empty((0, 3), dtype=dtype)).shape == (0, 3)
    scalar = module.forward(dtype(1.5))
    assert scalar.shape == () and scalar.dtype == dtype


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("dtype", FLOATS)
def test_inputs_are_not_written(module, dtype):
    x = np.linspace(-3, 3, 7).astype(dtype)
    g = np.linspace(1, 2, 7).astype(dtype)
    x0, g0 = x.copy(), g.copy()
    module.forward(x)
    module.derivative(x)
    module.vjp(x, g)
    module.jacobian(x)
    assert np.array_equal(x, x0) and np.array_equal(g, g0)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("dtype", FLOATS)
def test_jacobian_is_diag_of_derivative_and_agrees_with_vjp(module, dtype):
    x = np.linspace(-4, 4, 9).astype(dtype)
    jacobian = module.jacobian(x)
    assert jacobian.shape == (9, 9) and jacobian.dtype == dtype
    assert np.array_equal(jacobian, np.diag(module.derivative(x)))
    for j in range(9):
        e = np.zeros(9, dtype=dtype)
        e[j] = 1
        assert np.array_equal(module.vjp(x, e), jacobian[j]), f"row {j}"


# --- regressions: one check per kind of keyword (kernels/_validate.py) ---------------------


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
@pytest.mark.parametrize(
    "bad", ["no", 1, None, np.array(True)], ids=["str", "int", "None", "array"]
)
def test_strict_fp16_must_be_a_bool_not_a_truthy_value(module, bad):
    """``strict_fp16="no"`` used to run the strict path (a non-empty string is truthy)."""
    x = np.zeros(3, np.float16)
    for call in (module.forward, module.derivative, module.jacobian):
        with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
            call(x, strict_fp16=bad)
    with pytest.raises(TypeError, match=r"^strict_fp16: expected True or False"):
        module.vjp(x, x, strict_fp16=bad)


@pytest.mark.parametrize("bad", [["tanh"], ("none",), None, 1])
def test_gelu_approximate_of_another_kind_is_a_value_error_naming_it(bad):
    """A list used to give "unhashable type: 'list'"."""
    for call in (gelu.forward, gelu.derivative, gelu.jacobian):
        with pytest.raises(ValueError, match=r"^approximate: expected one of 'none', 'tanh'"):
            call(np.zeros(2), approximate=bad)
    with pytest.raises(ValueError, match=r"^approximate: expected one of"):
        gelu.vjp(np.zeros(2), np.zeros(2), approximate=bad)
