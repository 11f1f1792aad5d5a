"""The kernel emitter: SymPy expressions -> Numba source, in three arithmetic modes.

An expression is lowered to straight-line single-assignment code, one operation per line,
with common subexpressions shared. Each mode fixes how values are represented:

``f64``   float64 constants and arithmetic. Used for float32 and float16 ("mixed")
          inputs, widened to float64 with the result rounded once, and for float64 inputs
          of forms whose sums cannot cancel.
``dd``    double-double (about 106 bits, ``kernels/_dd.py``): every value is a pair
          ``(hi, lo)``, sums and products are error-free transformations, and the result
          is rounded to float64 once. Used for float64 inputs of forms whose sums may
          cancel (``StableForm.cancels``).
``f16s``  "strict" half precision: values are float64 holding binary16 numbers, and the
          result of every operation (including ``exp``, ``erf``, ...) is rounded to
          binary16 by ``round_to_half``, as pure half arithmetic would do.
``bf16s`` "strict" bfloat16, the same with ``round_to_bfloat16`` (8 significant bits).

Why wider arithmetic than the input's: the stable forms still add terms of opposite sign
near the roots and minima of the derivatives (GeLU-tanh's derivative at x = -1.18 sums
terms three times larger than the result), so a formula evaluated in its own format loses
up to 9 ULPs where the function itself is well conditioned (measured: float32 9.4 ULPs,
float64 7.8 ULPs). One more level of precision removes that loss.

The emitter fails loudly (:class:`EmitError`) on any node it does not know how to lower,
instead of emitting partial code: a new function needs a line in :data:`FUNCTIONS`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import mpmath
import sympy as sp

from derive.definitions.activations import x


class EmitError(ValueError):
    """An expression the emitter cannot translate."""


@dataclass(frozen=True)
class Mode:
    """An arithmetic mode: its name suffix, constant precision, rounding wrapper, and
    whether values are double-double pairs."""

    name: str
    constant_type: str
    constant_bits: int
    rounding: str | None
    pairs: bool = False

    def wrap(self, code: str) -> str:
        return f"{self.rounding}({code})" if self.rounding else code

    def scalar(self, name: str) -> str:
        """The float that stands for value ``name`` (a pair's leading part)."""
        return f"{name}h" if self.pairs else name


MODES: dict[str, Mode] = {
    "f64": Mode("f64", "np.float64", 53, None),
    "dd": Mode("dd", "np.float64", 53, None, pairs=True),
    "f16s": Mode("f16s", "np.float64", 11, "round_to_half"),
    "bf16s": Mode("bf16s", "np.float64", 8, "round_to_bfloat16"),
}

#: Double-double operations of ``kernels/_dd.py`` for the binary operators.
DD_OPERATORS = {"+": "dd_add", "-": "dd_sub", "*": "dd_mul", "/": "dd_div"}

#: SymPy function -> Numba-compatible Python call.
FUNCTIONS: dict[type, str] = {
    sp.exp: "math.exp",
    sp.log: "math.log",
    sp.erf: "math.erf",
    sp.erfc: "math.erfc",
    sp.tanh: "math.tanh",
    sp.Abs: "abs",
}

#: The same functions on double-double pairs.
DD_FUNCTIONS: dict[type, str] = {
    sp.exp: "dd_exp",
    sp.log: "dd_log",
    sp.erf: "dd_erf",
    sp.erfc: "dd_erfc",
    sp.tanh: "dd_tanh",
    sp.Abs: "dd_abs",
}

#: Relational classes allowed in Piecewise conditions, with their operator.
RELATIONS: dict[type, str] = {
    sp.StrictGreaterThan: ">",
    sp.GreaterThan: ">=",
    sp.StrictLessThan: "<",
    sp.LessThan: "<=",
}

#: The largest integer power lowered to repeated multiplication.
MAX_POWER = 4


def rounded_constant(value: sp.Expr, bits: int) -> float:
    """``value`` correctly rounded to ``bits`` significant bits (as a Python float)."""
    if value in (sp.oo, -sp.oo):
        return float(value)
    if not value.is_real:
        raise EmitError(f"constant {value} is not real")
    digits = sp.N(value, 60)
    with mpmath.workprec(bits):
        return float(+mpmath.mpf(str(digits)))


@dataclass
class Constants:
    """The module-level constants of one generated file, per mode, named in order."""

    lines: list[str] = field(default_factory=list)
    names: dict[tuple[str, float], str] = field(default_factory=dict)

    def name(self, value: sp.Expr, mode: Mode) -> str:
        number = rounded_constant(value, mode.constant_bits)
        key = (mode.name, number)
        if key not in self.names:
            name = f"_{mode.name.upper()}_{len(self.names)}"
            self.names[key] = name
            exact = sp.sstr(value)
            if mode.pairs:
                tail = _tail(value, number)
                self.lines.append(f"{name}h = {mode.constant_type}({_literal(number)})  # {exact}")
                self.lines.append(f"{name}l = {mode.constant_type}({_literal(tail)})")
            else:
                self.lines.append(f"{name} = {mode.constant_type}({_literal(number)})  # {exact}")
        return self.names[key]


def _literal(number: float) -> str:
    if number != number:
        raise EmitError("NaN constant")
    if abs(number) == float("inf"):
        return "np.inf" if number > 0 else "-np.inf"
    return repr(number)


def _tail(value: sp.Expr, head: float) -> float:
    """The float64 nearest to ``value - head``: the low part of a double-double constant."""
    if abs(head) == float("inf"):
        return 0.0
    with mpmath.workprec(200):
        exact = mpmath.mpf(str(sp.N(value, 70)))
        rest = exact - mpmath.mpf(head)
    with mpmath.workprec(53):
        return float(+rest)


class Lowering:
    """Lowers expressions of one scalar function to single-assignment lines."""

    def __init__(
        self,
        mode: Mode,
        constants: Constants,
        indent: str,
        first_temp: int = 0,
        arguments: dict[sp.Symbol, str] | None = None,
    ):
        self.mode = mode
        self.constants = constants
        self.indent = indent
        self.lines: list[str] = []
        self.values: dict[sp.Expr, str] = dict(arguments) if arguments else {x: "x"}
        self.counter = first_temp

    def _assign(self, code: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        target = f"{name}h, {name}l" if self.mode.pairs else name
        self.lines.append(f"{self.indent}{target} = {code}")
        return name

    def _op(self, left: str, op: str, right: str) -> str:
        if self.mode.pairs:
            operator = DD_OPERATORS[op]
            return self._assign(f"{operator}({left}h, {left}l, {right}h, {right}l)")
        return self._assign(self.mode.wrap(f"{left} {op} {right}"))

    def _call(self, function: type, argument: str) -> str:
        if self.mode.pairs:
            return self._assign(f"{DD_FUNCTIONS[function]}({argument}h, {argument}l)")
        return self._assign(self.mode.wrap(f"{FUNCTIONS[function]}({argument})"))

    def _neg(self, operand: str) -> str:
        if self.mode.pairs:
            return self._assign(f"-{operand}h, -{operand}l")
        return self._assign(f"-{operand}")

    def value(self, expr: sp.Expr) -> str:
        """The name holding ``expr``, emitting the lines that compute it."""
        if expr in self.values:
            return self.values[expr]
        if expr.is_number:
            name = self.constants.name(expr, self.mode)
        elif isinstance(expr, sp.Add):
            name = self._add(expr)
        elif isinstance(expr, sp.Mul):
            name = self._mul(expr)
        elif isinstance(expr, sp.Pow):
            name = self._pow(expr)
        elif type(expr) in FUNCTIONS:
            if len(expr.args) != 1:
                raise EmitError(f"{expr.func} with {len(expr.args)} arguments")
            name = self._call(type(expr), self.value(expr.args[0]))
        else:
            raise EmitError(f"cannot emit {type(expr).__name__}: {expr}")
        self.values[expr] = name
        return name

    def _add(self, expr: sp.Add) -> str:
        terms = sorted(expr.args, key=sp.default_sort_key)
        negative = [t.could_extract_minus_sign() for t in terms]
        if all(negative):
            return self._neg(self.value(-expr))
        first = negative.index(False)
        total = self.value(terms[first])
        for i, term in enumerate(terms):
            if i != first:
                op, operand = ("-", -term) if negative[i] else ("+", term)
                total = self._op(total, op, self.value(operand))
        return total

    def _mul(self, expr: sp.Mul) -> str:
        constant = sp.Mul(*[f for f in expr.args if f.is_number])
        if constant.is_negative:
            return self._neg(self.value(-expr))
        numerator, denominator = [], []
        if constant != 1:
            numerator.append(constant)
        for factor in sorted(expr.args, key=sp.default_sort_key):
            if factor.is_number:
                continue
            base, exponent = factor.as_base_exp()
            if exponent.is_Integer and exponent < 0:
                denominator.append(base ** (-exponent))
            else:
                numerator.append(factor)
        top = self._product(numerator) if numerator else self.constants.name(sp.S.One, self.mode)
        if not denominator:
            return top
        return self._op(top, "/", self._product(denominator))

    def _product(self, factors: list[sp.Expr]) -> str:
        result = self.value(factors[0])
        for factor in factors[1:]:
            result = self._op(result, "*", self.value(factor))
        return result

    def _pow(self, expr: sp.Pow) -> str:
        base, exponent = expr.args
        if exponent == sp.S.Half:
            b = self.value(base)
            if self.mode.pairs:
                return self._assign(f"dd_sqrt({b}h, {b}l)")
            return self._assign(self.mode.wrap(f"math.sqrt({b})"))
        if exponent == -sp.S.Half:
            one = self.constants.name(sp.S.One, self.mode)
            return self._op(one, "/", self.value(sp.sqrt(base)))
        if exponent.is_Integer and 2 <= exponent <= MAX_POWER:
            return self._op(self.value(base ** (exponent - 1)), "*", self.value(base))
        if exponent.is_Integer and -MAX_POWER <= exponent <= -1:
            one = self.constants.name(sp.S.One, self.mode)
            return self._op(one, "/", self.value(base ** (-exponent)))
        raise EmitError(f"cannot emit power {expr}")

    def condition(self, relation: sp.Basic) -> str:
        """A branch condition: a relation between ``x`` and a number."""
        if type(relation) not in RELATIONS:
            raise EmitError(f"cannot emit condition {relation}")
        left, right = relation.args
        if left != x or not right.is_number:
            raise EmitError(f"condition must compare x with a number: {relation}")
        bound = self.mode.scalar(self.constants.name(right, self.mode))
        return f"x {RELATIONS[type(relation)]} {bound}"


def docstring(doc: str) -> list[str]:
    """The lines of a generated function's docstring: ``doc`` wrapped at 88 columns."""
    lines = textwrap.wrap(doc, width=88)
    if len(lines) == 1:
        return [f'    """{lines[0]}"""']
    return [f'    """{lines[0]}', *(f"    {line}" for line in lines[1:]), '    """']


def scalar_function(
    name: str,
    expr: sp.Expr,
    mode: Mode,
    constants: Constants,
    limits: tuple[sp.Expr, sp.Expr],
    saturation: sp.Expr | None,
    doc: str,
    tail_signs: tuple[int, int] = (0, 0),
) -> str:
    """Source of one ``@njit`` scalar function ``name(x)`` computing ``expr``.

    ``limits`` are the values at -inf and +inf; with ``saturation``, inputs beyond
    +-saturation return them too, a zero limit with the sign the function has out there
    (``tail_signs``, -1 for a function negative beyond -saturation or +saturation). NaN
    returns NaN.
    """
    low, high = (mode.scalar(constants.name(v, mode)) for v in limits)
    if saturation is not None:
        low, high = (
            f"-{name}" if limit == 0 and sign < 0 else name
            for name, limit, sign in zip((low, high), limits, tail_signs, strict=True)
        )
    head = [
        "@njit(cache=True)",
        f"def {name}(x):",
        *docstring(doc),
        "    if x != x:",
        "        return x",
    ]
    if saturation is None:
        at_infinity = high if high == low else f"{high} if x > 0 else {low}"
        head += ["    if math.isinf(x):", f"        return {at_infinity}"]
    else:
        bound = mode.scalar(constants.name(saturation, mode))
        head += [
            f"    if x > {bound}:",
            f"        return {high}",
            f"    if x < -{bound}:",
            f"        return {low}",
        ]
    pieces = expr.args if isinstance(expr, sp.Piecewise) else ((expr, sp.true),)
    if pieces[-1][1] != sp.true:
        raise EmitError(f"Piecewise without a final True branch: {expr}")
    body: list[str] = []
    counter = 0
    for i, (branch, cond) in enumerate(pieces):
        if branch.has(sp.Piecewise):
            raise EmitError(f"nested Piecewise: {branch}")
        last = i == len(pieces) - 1
        indent = "    " if len(pieces) == 1 else "        "
        lowering = Lowering(mode, constants, indent, first_temp=counter)
        if not last:
            body.append(f"    {'if' if i == 0 else 'elif'} {lowering.condition(cond)}:")
        elif i > 0:
            body.append("    else:")
        result = lowering.value(branch)
        body += lowering.lines
        body.append(
            f"{indent}return {result}h + {result}l" if mode.pairs else f"{indent}return {result}"
        )
        counter = lowering.counter
    if mode.pairs and any(("xh" in line or "xl" in line) for line in body):
        head.append("    xh, xl = x, 0.0")
    return "\n".join(head + body)


def expression_function(
    name: str,
    expr: sp.Expr,
    arguments: tuple[sp.Symbol, ...],
    mode: Mode,
    constants: Constants,
    doc: str,
) -> str:
    """Source of one ``@njit`` function ``name(*arguments)`` computing ``expr`` straight-line.

    For the per-element stages of the vector modules: no branches, and IEEE arithmetic
    decides what NaN and inf give (``error_model="numpy"``: 1/0 is inf, not an exception).
    ``f64``, ``f16s`` and ``bf16s`` modes only (arguments are floats).
    """
    if mode.pairs:
        raise EmitError("expression_function: double-double arguments are not supported")
    names = {symbol: symbol.name for symbol in arguments}
    unknown = expr.free_symbols - set(names)
    if unknown:
        raise EmitError(f"{name}: symbols {sorted(map(str, unknown))} are not arguments")
    head = [
        '@njit(cache=True, error_model="numpy")',
        f"def {name}({', '.join(names.values())}):",
        *docstring(doc),
    ]
    lowering = Lowering(mode, constants, "    ", arguments=names)
    result = lowering.value(expr)
    return "\n".join(head + lowering.lines + [f"    return {result}"])


#: Functions the bounded mode evaluates with a proven error bound (``kernels/_vmath.py``).
BOUNDED_FUNCTIONS: dict[type, str] = {sp.exp: "exp_bounded", sp.erfc: "erfc_bounded"}

#: The nonnegative |x| that the bounded mode's branches are written in.
MAGNITUDE = sp.Symbol("a", nonnegative=True)


def bounded_supported(expr: sp.Expr) -> bool:
    """Whether :func:`bounded_function` can emit ``expr``: its functions have bounded
    versions and a Piecewise splits once at 0 (``x >= 0`` or ``x > 0``)."""
    functions = {type(f) for f in expr.atoms(sp.Function)} - {sp.Piecewise}
    if not functions <= set(BOUNDED_FUNCTIONS):
        return False
    if isinstance(expr, sp.Piecewise):
        return len(expr.args) == 2 and expr.args[0][1] in (x >= 0, x > 0)
    return True


class BoundedLowering(Lowering):
    """Lowers to float64 values ``tN`` each with an absolute error bound ``eN``.

    The rules are those of ``kernels/_vmath.py``'s docstring (running error analysis):
    every rounded operation adds ``U |result| + TINY``; products propagate their operands'
    bounds exactly (``|a| eb + |b| ea + ea eb``), a quotient is the product with the
    reciprocal of its denominator (one division per denominator, none in the bounds);
    ``exp`` and ``erfc`` call ``exp_bounded`` and ``erfc_bounded``. The bounds' products
    are accumulated by fused multiply-adds.
    Values are named ``tN``; their bounds are ``tN_e``.
    """

    def __init__(self, constants: Constants, indent: str, argument: sp.Symbol):
        name = "a" if argument == MAGNITUDE else "x"
        super().__init__(MODES["f64"], constants, indent, arguments={argument: name})
        self.exact: set[str] = {name}
        self.reciprocals: dict[str, str] = {}

    def bound(self, name: str) -> str:
        """The expression of ``name``'s error bound: ``0.0`` for exact values."""
        return "0.0" if name in self.exact else f"{name}_e"

    def value(self, expr: sp.Expr) -> str:
        if expr.is_number and expr not in self.values:
            name = self.constants.name(expr, self.mode)
            exact = sp.Rational(rounded_constant(expr, 53)) == expr
            if exact:
                self.exact.add(name)
            else:
                self.lines.append(f"{self.indent}{name}_e = U * abs({name})")
            self.values[expr] = name
            return name
        return super().value(expr)

    def _op(self, left: str, op: str, right: str) -> str:
        exact_left, exact_right = left in self.exact, right in self.exact
        el, er = self.bound(left), self.bound(right)
        name = f"t{self.counter}"
        sums: list[str] = []  # bounds added as they are
        products: list[tuple[str, str]] = []  # products added by fused multiply-adds
        if op in "+-":
            code = f"{left} {op} {right}"
            sums = [e for e in (el, er) if e != "0.0"]
        elif op == "*":
            code = f"{left} * {right}"
            if not exact_right:
                products.append((f"abs({left})", er))
            if not exact_left:
                products.append((f"abs({right})", el))
            if not (exact_left or exact_right):
                products.append((el, er))
        elif op == "/":
            reciprocal = self._reciprocal(right)
            one = self.constants.name(sp.S.One, self.mode)
            return reciprocal if left == one else self._op(left, "*", reciprocal)
        else:
            raise EmitError(f"bounded mode: operator {op}")
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        self._bound_lines(name, sums, [("U", f"abs({name})"), *products])
        return name

    def _bound_lines(self, name: str, sums: list[str], products: list[tuple[str, str]]) -> None:
        """``name_e = TINY + sum(sums) + sum(p q)``, the products by fused multiply-adds
        (one rounding each, of nonnegative terms: inside the bound's slack)."""
        start = " + ".join([*sums, "TINY"])
        self.lines.append(f"{self.indent}{name}_e = {start}")
        for p, q in products:
            self.lines.append(f"{self.indent}{name}_e = fma({p}, {q}, {name}_e)")

    def _reciprocal(self, operand: str) -> str:
        """``1 / operand``, once per operand: a quotient is a product with it, so a form
        divides once per distinct denominator. For ``|q| e <= 2^-20`` the error of the
        reciprocal is at most ``q^2 e / (1 - |q| e) <= q^2 e (1 + 2^-19)``; beyond, inf."""
        if operand in self.reciprocals:
            return self.reciprocals[operand]
        name = f"t{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = 1.0 / {operand}")
        if operand in self.exact:
            self._bound_lines(name, [], [("U", f"abs({name})")])
        else:
            e = self.bound(operand)
            spread = f"{name} * {name} * {e} * RECIPROCAL_SLACK"
            self.lines.append(
                f"{self.indent}{name}_s = {spread} if abs({name}) * {e} <= RECIPROCAL_LIMIT "
                "else np.inf"
            )
            self._bound_lines(name, [f"{name}_s"], [("U", f"abs({name})")])
        self.reciprocals[operand] = name
        return name

    def _call(self, function: type, argument: str) -> str:
        if function not in BOUNDED_FUNCTIONS:
            raise EmitError(f"bounded mode: no error-bounded {function.__name__}")
        name = f"t{self.counter}"
        self.counter += 1
        call = f"{BOUNDED_FUNCTIONS[function]}({argument}, {self.bound(argument)})"
        self.lines.append(f"{self.indent}{name}, {name}_e = {call}")
        return name

    def _neg(self, operand: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = -{operand}")
        if operand in self.exact:
            self.exact.add(name)
        else:
            self.lines.append(f"{self.indent}{name}_e = {operand}_e")
        return name

    def _pow(self, expr: sp.Pow) -> str:
        base, exponent = expr.args
        if exponent.is_Integer and 2 <= exponent <= MAX_POWER:
            return self._op(self.value(base ** (exponent - 1)), "*", self.value(base))
        if exponent.is_Integer and -MAX_POWER <= exponent <= -1:
            one = self.value(sp.S.One)
            return self._op(one, "/", self.value(base ** (-exponent)))
        raise EmitError(f"bounded mode: cannot emit power {expr}")


def bounded_function(name: str, expr: sp.Expr, constants: Constants, doc: str) -> str:
    """Source of an inlined ``@njit`` function ``name(x) -> (v, e)``: ``expr`` evaluated in
    branch-free float64 with ``|v - expr(x)| <= e`` (``e`` NaN or inf where no bound holds).

    A Piecewise split at 0 is written in ``a = |x|`` (``x = a`` on the first branch,
    ``x = -a`` on the second), so both branches share their subexpressions (``exp(-a)``),
    are both evaluated, and the sign of x selects one: no branch for the vectorizer. Any
    other expression is evaluated in x as it is.
    """
    if not bounded_supported(expr):
        raise EmitError(f"{name}: not supported by the bounded mode: {expr}")
    if isinstance(expr, sp.Piecewise):
        first, second = (branch for branch, _ in expr.args)
        condition = f"x {RELATIONS[type(expr.args[0][1])]} 0.0"
        lowering = BoundedLowering(constants, "    ", MAGNITUDE)
        positive = lowering.value(first.subs(x, MAGNITUDE))
        negative = lowering.value(second.subs(x, -MAGNITUDE))
        prologue = ["    a = abs(x)"]
    else:  # one expression in x itself
        lowering = BoundedLowering(constants, "    ", x)
        positive = negative = lowering.value(expr)
        condition = ""
        prologue = []
    head = [
        '@njit(cache=True, inline="always", error_model="numpy")',
        f"def {name}(x):",
        *docstring(doc),
        *prologue,
    ]
    if positive == negative:
        tail = [f"    return {positive}, {lowering.bound(positive)}"]
    else:
        tail = [
            f"    v = {positive} if {condition} else {negative}",
            f"    e = {lowering.bound(positive)} if {condition} else {lowering.bound(negative)}",
            "    return v, e",
        ]
    return "\n".join(head + lowering.lines + tail)
