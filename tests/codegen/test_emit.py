"""The emitter, tested three ways: golden strings, failing loudly, and a symbolic round trip
of every generated function back to the stable form it came from. (The numeric check of
emitted code within the ULP table is tests/kernels/test_activations.py.)"""

from __future__ import annotations

import ast
import re

import pytest
import sympy as sp

from derive.codegen import batchnorm as bn_codegen
from derive.codegen import norms as norm_codegen
from derive.codegen.activations import module_forms
from derive.codegen.emit import MODES, Constants, EmitError, scalar_function
from derive.codegen.generate import generate_source
from derive.definitions import norms
from derive.definitions.activations import ELEMENTWISE, x
from derive.definitions.norms import ROW_NORMS
from proofs.core import is_zero

LIMITS = (sp.S.Zero, sp.S.One)


def emit(expr, mode="f64", saturation=None):
    constants = Constants()
    text = scalar_function("f", expr, MODES[mode], constants, LIMITS, saturation, "doc.")
    return text, constants


def test_golden_sigmoid_f64():
    text, constants = emit(1 / (1 + sp.exp(-x)))
    assert constants.lines == [
        "_F64_0 = np.float64(0.0)  # 0",
        "_F64_1 = np.float64(1.0)  # 1",
    ]
    assert text == "\n".join(
        [
            "@njit(cache=True)",
            "def f(x):",
            '    """doc."""',
            "    if x != x:",
            "        return x",
            "    if math.isinf(x):",
            "        return _F64_1 if x > 0 else _F64_0",
            "    t0 = -x",
            "    t1 = math.exp(t0)",
            "    t2 = _F64_1 + t1",
            "    t3 = _F64_1 / t2",
            "    return t3",
        ]
    )


def test_golden_strict_rounds_every_operation():
    text, constants = emit(x**3 / 3 + sp.exp(x), mode="f16s")
    body = [line.strip() for line in text.splitlines() if line.strip().startswith("t")]
    assert body == [
        "t0 = round_to_half(x * x)",
        "t1 = round_to_half(t0 * x)",
        "t2 = round_to_half(_F16S_2 * t1)",
        "t3 = round_to_half(math.exp(x))",
        "t4 = round_to_half(t2 + t3)",
    ], body
    assert "_F16S_2 = np.float64(0.333251953125)  # 1/3" in constants.lines


def test_golden_double_double():
    text, constants = emit(x / sp.sqrt(2) + sp.exp(x), mode="dd")
    assert constants.lines[:6] == [
        "_DD_0h = np.float64(0.0)  # 0",
        "_DD_0l = np.float64(0.0)",
        "_DD_1h = np.float64(1.0)  # 1",
        "_DD_1l = np.float64(0.0)",
        "_DD_2h = np.float64(0.7071067811865476)  # sqrt(2)/2",
        "_DD_2l = np.float64(-4.833646656726457e-17)",
    ], constants.lines
    body = [line.strip() for line in text.splitlines()[7:]]
    assert body == [
        "xh, xl = x, 0.0",
        "t0h, t0l = dd_mul(_DD_2h, _DD_2l, xh, xl)",
        "t1h, t1l = dd_exp(xh, xl)",
        "t2h, t2l = dd_add(t0h, t0l, t1h, t1l)",
        "return t2h + t2l",
    ], body


def test_double_double_constants_are_exact_to_106_bits():
    import mpmath

    _, constants = emit(sp.pi * x, mode="dd")
    values = dict(line.split(" = ", 1) for line in constants.lines)
    head = float(values["_DD_2h"].split("(")[1].split(")")[0])
    tail = float(values["_DD_2l"].split("(")[1].split(")")[0])
    with mpmath.workprec(200):
        error = abs(mpmath.mpf(head) + mpmath.mpf(tail) - mpmath.pi)
        assert error < mpmath.mpf(2) ** -105, error


def test_piecewise_and_saturation():
    text, _ = emit(sp.Piecewise((x, x > 0), (0, True)), saturation=sp.Integer(8))
    lines = [line.strip() for line in text.splitlines()]
    assert lines[5:] == [
        "if x > _F64_2:",
        "return _F64_1",
        "if x < -_F64_2:",
        "return _F64_0",
        "if x > _F64_0:",
        "return x",
        "else:",
        "return _F64_0",
    ], lines


@pytest.mark.parametrize(
    "expr",
    [
        sp.sin(x),
        sp.besselj(0, x),
        x**5,
        x ** sp.Rational(1, 3),
        sp.Piecewise((sp.Piecewise((x, x > 1), (0, True)), x > 0), (0, True)),
        sp.Piecewise((x, x > 0)),
        sp.Piecewise((x, sp.Eq(x, 1)), (0, True)),
        sp.Piecewise((x, x**2 > 1), (0, True)),
        sp.I * x,
    ],
)
def test_emitter_fails_loudly(expr):
    with pytest.raises(EmitError):
        emit(expr)


# --- symbolic round trip -------------------------------------------------------------------

_CONSTANT = re.compile(r"^(_\w+) = np\.float\d+\(([^)]*)\)  # (.*)$")
_CALLS = {
    "math.exp": sp.exp,
    "math.log": sp.log,
    "math.erf": sp.erf,
    "math.erfc": sp.erfc,
    "math.tanh": sp.tanh,
    "math.sqrt": sp.sqrt,
    "abs": sp.Abs,
}


def _exact_constants(text: str) -> dict[str, sp.Expr]:
    """Constant name -> the exact SymPy value its comment records (a double-double
    constant ``_DD_3h``/``_DD_3l`` is recorded once, as ``_DD_3``)."""
    constants = {}
    for line in text.splitlines():
        match = _CONSTANT.match(line)
        if match:
            name = match.group(1)
            constants[name[:-1] if name.startswith("_DD_") else name] = sp.sympify(match.group(3))
    return constants


def _to_sympy(node: ast.AST, names: dict[str, sp.Expr]) -> sp.Expr:
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_to_sympy(node.operand, names)
    if isinstance(node, ast.BinOp):
        a, b = _to_sympy(node.left, names), _to_sympy(node.right, names)
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.Div: a / b}
        return ops[type(node.op)]
    if isinstance(node, ast.Call):
        callee = ast.unparse(node.func)
        (argument,) = (_to_sympy(a, names) for a in node.args)
        rounding = callee in ("round_to_half", "round_to_bfloat16")
        return argument if rounding else _CALLS[callee](argument)
    raise AssertionError(f"unexpected node {ast.unparse(node)}")


def _pair_to_sympy(node: ast.AST, names: dict[str, sp.Expr]) -> sp.Expr:
    """A double-double right-hand side: ``dd_op(ah, al, bh, bl)``, ``-ah, -al`` or
    ``ah + al`` (a return), read as the operation on the values named by the pairs."""
    if isinstance(node, ast.Tuple):  # negation: -ah, -al
        return -_pair_to_sympy(node.elts[0].operand, names)
    if isinstance(node, ast.Name):
        return names[node.id[:-1]]
    if isinstance(node, ast.BinOp):  # return th + tl
        return names[node.left.id[:-1]]
    callee = node.func.id
    args = [names[a.id[:-1]] for a in node.args[::2]]
    binary = {
        "dd_add": sp.Add,
        "dd_sub": lambda a, b: a - b,
        "dd_mul": sp.Mul,
        "dd_div": lambda a, b: a / b,
    }
    unary = {
        "dd_exp": sp.exp,
        "dd_log": sp.log,
        "dd_erf": sp.erf,
        "dd_erfc": sp.erfc,
        "dd_tanh": sp.tanh,
        "dd_abs": sp.Abs,
        "dd_sqrt": sp.sqrt,
    }
    return binary[callee](*args) if callee in binary else unary[callee](*args)


def _branches(function: ast.FunctionDef, names: dict[str, sp.Expr]) -> list[sp.Expr]:
    """The returned expression of every branch after the NaN/inf/saturation guards."""
    results = []

    def walk(statements, env):
        env = dict(env)
        for statement in statements:
            if isinstance(statement, ast.Assign):
                target = statement.targets[0]
                if isinstance(target, ast.Tuple):  # a double-double pair
                    name = target.elts[0].id[:-1]
                    env[name] = env["x"] if name == "x" else _pair_to_sympy(statement.value, env)
                else:
                    env[target.id] = _to_sympy(statement.value, env)
            elif isinstance(statement, ast.Return):
                value = statement.value
                pair = isinstance(value, ast.BinOp) and ast.unparse(value.left).endswith("h")
                results.append(_pair_to_sympy(value, env) if pair else _to_sympy(value, env))
            elif isinstance(statement, ast.If):
                guard = ast.unparse(statement.test)
                if guard == "x != x" or guard.startswith("math.isinf"):
                    continue
                body = statement.body
                returns_constant = (
                    len(body) == 1
                    and isinstance(body[0], ast.Return)
                    and ast.unparse(body[0].value).lstrip("-").startswith("_")
                )
                if returns_constant and not statement.orelse:
                    continue  # a saturation guard: checked against the reference elsewhere
                walk(statement.body, env)
                walk(statement.orelse, env)

    walk(function.body, {**names, "x": x})
    return results


@pytest.mark.parametrize("module", ELEMENTWISE, ids=lambda m: m.key)
def test_round_trip_to_the_stable_forms(module):
    """Parse every generated scalar function back into SymPy (constants from their exact
    comments, round_to_half as the identity) and prove it equal to its stable form."""
    text = generate_source(module)
    names = _exact_constants(text)
    tree = ast.parse(text)
    forms = dict(zip(("forward", "derivative"), module_forms(module), strict=True))
    checked = 0
    for function in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        quantity, _, mode = function.name.rpartition("_")
        if mode not in MODES:
            continue
        form = forms[quantity]
        expected = (
            [e for e, _ in form.expr.args] if isinstance(form.expr, sp.Piecewise) else [form.expr]
        )
        got = _branches(function, names)
        assert len(got) == len(expected), f"{function.name}: {len(got)} branches"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert is_zero(g - e), f"{function.name} branch {i}: {g} != {e}"
        checked += 1
    plain = sum(not mode.pairs for mode in MODES.values())  # f64 and the strict modes
    assert checked == 2 * plain + sum(form.cancels for form in forms.values())


def test_the_row_norms_single_pass_sums_need_a_linear_summand(monkeypatch):
    """The wide VJP's sums about the first-pass center are corrected afterwards: exact for
    the summand gamma g d r, refused (no source generated) for one that is not linear."""
    assert norm_codegen.single_pass_sums_hold()
    monkeypatch.setattr(norm_codegen, "SUMMAND_AZ", norm_codegen.SUMMAND_AZ * norms.d)
    assert not norm_codegen.single_pass_sums_hold()
    with pytest.raises(ValueError, match="not linear"):
        norm_codegen.row_norm_source(ROW_NORMS[0])


def test_batchnorm_wide_sums_are_per_feature_multiples_of_two_sums():
    """The wide VJP sums g and g d once and scales them per feature: the factors are derived
    from the summands (gamma, gamma, r), and a summand that is not such a multiple is
    refused."""
    code = bn_codegen.wide_sums()
    assert "sum_a[k] = gammas[k] * sum_g[k]" in code
    assert "sum_ad[k] = gammas[k] * sum_gd" in code
    assert "sum_gz[k] = r[k] * sum_gd" in code
    g, d = norms.g_i, norms.d
    with pytest.raises(ValueError, match="not a per-feature value"):
        bn_codegen.feature_factor(norms.gamma_i * g * d**2, g * d)
    with pytest.raises(ValueError, match="not a per-feature value"):
        bn_codegen.feature_factor(norms.gamma_i * norms.r * g * d, g * d)
