"""The kernel emitter: SymPy expressions -> Numba source, in three arithmetic modes.

An expression is lowered to straight-line single-assignment code, one operation per line,
with common subexpressions shared. Each mode fixes how values are represented:

``f64``   float64 inputs, float64 constants and arithmetic.
``f32``   float32 inputs, constants rounded once to float32, float32 arithmetic
          (Numba's ``math`` functions on float32 call the float32 libm entry points).
``f16s``  "strict" half precision: values are float64 holding binary16 numbers, and the
          result of every operation (including ``exp``, ``erf``, ...) is rounded to
          binary16 by ``round_to_half``, as pure half arithmetic would do.

The float16 "mixed" mode needs no code of its own: its loops widen the half inputs to
float64, call the ``f64`` function and round the result once.

The emitter fails loudly (:class:`EmitError`) on any node it does not know how to lower,
instead of emitting partial code: a new function needs a line in :data:`FUNCTIONS`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import mpmath
import sympy as sp

from derive.modules import x


class EmitError(ValueError):
    """An expression the emitter cannot translate."""


@dataclass(frozen=True)
class Mode:
    """An arithmetic mode: its name suffix, constant precision and rounding wrapper."""

    name: str
    constant_type: str
    constant_bits: int
    rounding: str | None

    def wrap(self, code: str) -> str:
        return f"{self.rounding}({code})" if self.rounding else code


MODES: dict[str, Mode] = {
    "f64": Mode("f64", "np.float64", 53, None),
    "f32": Mode("f32", "np.float32", 24, None),
    "f16s": Mode("f16s", "np.float64", 11, "round_to_half"),
}

#: SymPy function -> Numba-compatible Python call.
FUNCTIONS: dict[type, str] = {
    sp.exp: "math.exp",
    sp.log: "math.log",
    sp.erf: "math.erf",
    sp.erfc: "math.erfc",
    sp.tanh: "math.tanh",
    sp.Abs: "abs",
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
            literal = repr(number) if number == number and abs(number) != float("inf") else None
            if literal is None:
                literal = "np.inf" if number > 0 else "-np.inf"
            exact = sp.sstr(value)
            self.lines.append(f"{name} = {mode.constant_type}({literal})  # {exact}")
        return self.names[key]


class Lowering:
    """Lowers expressions of one scalar function to single-assignment lines."""

    def __init__(self, mode: Mode, constants: Constants, indent: str, first_temp: int = 0):
        self.mode = mode
        self.constants = constants
        self.indent = indent
        self.lines: list[str] = []
        self.values: dict[sp.Expr, str] = {x: "x"}
        self.counter = first_temp

    def _assign(self, code: str) -> str:
        name = f"t{self.counter}"
        self.counter += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        return name

    def _op(self, left: str, op: str, right: str) -> str:
        return self._assign(self.mode.wrap(f"{left} {op} {right}"))

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
            argument = self.value(expr.args[0])
            name = self._assign(self.mode.wrap(f"{FUNCTIONS[type(expr)]}({argument})"))
        else:
            raise EmitError(f"cannot emit {type(expr).__name__}: {expr}")
        self.values[expr] = name
        return name

    def _add(self, expr: sp.Add) -> str:
        terms = sorted(expr.args, key=sp.default_sort_key)
        negative = [t.could_extract_minus_sign() for t in terms]
        if all(negative):
            return self._assign(f"-{self.value(-expr)}")
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
            return self._assign(f"-{self.value(-expr)}")
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
            return self._assign(self.mode.wrap(f"math.sqrt({self.value(base)})"))
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
        return f"x {RELATIONS[type(relation)]} {self.constants.name(right, self.mode)}"


def scalar_function(
    name: str,
    expr: sp.Expr,
    mode: Mode,
    constants: Constants,
    limits: tuple[sp.Expr, sp.Expr],
    saturation: sp.Expr | None,
    doc: str,
) -> str:
    """Source of one ``@njit`` scalar function ``name(x)`` computing ``expr``.

    ``limits`` are the values at -inf and +inf; with ``saturation``, inputs beyond
    +-saturation return them too. NaN returns NaN.
    """
    low, high = (constants.name(v, mode) for v in limits)
    doc_lines = textwrap.wrap(doc, width=88)
    head = [
        "@njit(cache=True)",
        f"def {name}(x):",
        f'    """{doc_lines[0]}' + ('"""' if len(doc_lines) == 1 else ""),
        *(f"    {line}" for line in doc_lines[1:]),
        *(['    """'] if len(doc_lines) > 1 else []),
        "    if x != x:",
        "        return x",
    ]
    if saturation is None:
        at_infinity = high if high == low else f"{high} if x > 0 else {low}"
        head += ["    if math.isinf(x):", f"        return {at_infinity}"]
    else:
        bound = constants.name(saturation, mode)
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
        body.append(f"{indent}return {result}")
        counter = lowering.counter
    return "\n".join(head + body)
