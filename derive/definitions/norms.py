"""The row normalizations -- LayerNorm, RMSNorm, CenterNorm -- and WeightNorm, in SymPy.

Each module is written once, as its forward at a concrete size D
(:meth:`RowNorm.forward`, :meth:`WeightNormModule.forward`), in PyTorch's eps convention:
eps is added to the variance (LayerNorm) or to the mean of squares (RMSNorm). The paper
(001_76ce3a8a4b6079c3.txt, Table 2 and Eq. 18) adds its eps to a squared norm instead,
``sqrt(D) y / sqrt(|y|^2 + eps_paper)``, which is the same map with ``eps_paper = D eps``
(:func:`paper_forward` writes the paper's form; the claim checker proves the two equal).

The kernels do not evaluate ``sympy.diff`` of the forward, whose size grows with D: they
use closed forms with two row reductions, written here in per-element *stage* symbols
(:data:`d`, :data:`r`, ...). :func:`closed_form_proof` proves each closed form equal to
the derivative of the forward exactly at D = 1..5; the tests check large D at high
precision against mpmath references.

Row normalizations, for one row x of length D (``c`` = 1 if the row is centered):

    center   m = mean(x) (LayerNorm, CenterNorm) or 0 (RMSNorm); d_i = x_i - m
    moment   s = mean(d^2) (LayerNorm: the biased variance; RMSNorm: the mean square)
    scale    r = 1/sqrt(s + eps) (LayerNorm, RMSNorm) or D/(D - 1) (CenterNorm)
    output   y_i = gamma_i d_i r + beta_i,  z_i = d_i r
    VJP      dx_i = r (gamma_i g_i - c m_a - k z_i m_az),  m_a = mean(gamma g),
             m_az = mean(gamma g z), k = 1 if r depends on x
    params   dgamma_i = sum over rows of g_i z_i,  dbeta_i = sum over rows of g_i
    Jacobian J_ij = gamma_i r (delta_ij - c/D - k z_i z_j / D)  (numerator layout)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from proofs.core import Proof, Step, is_zero, sum_identity

#: The size of a row, as a symbol (closed forms hold for every D >= 1, or >= 2).
n = sp.Symbol("D", positive=True, integer=True)
#: PyTorch's eps (added to the variance / mean square).
eps = sp.Symbol("epsilon", nonnegative=True)

# Stage symbols: one element of one row.
d = sp.Symbol("d", real=True)  # x_i - center
d_j = sp.Symbol("d_j", real=True)  # x_j - center (Jacobian column)
r = sp.Symbol("r", positive=True)  # the row's scale
s = sp.Symbol("s", nonnegative=True)  # the row's second moment
gamma_i = sp.Symbol("gamma_i", real=True)
beta_i = sp.Symbol("beta_i", real=True)
g_i = sp.Symbol("g_i", real=True)  # upstream gradient
m_a = sp.Symbol("m_a", real=True)  # mean(gamma g)
m_az = sp.Symbol("m_az", real=True)  # mean(gamma g z)
delta = sp.Symbol("delta", nonnegative=True)  # Kronecker delta_ij, 0 or 1

#: Sizes at which every closed form is proven equal to sympy.diff of the forward.
PROOF_SIZES = (1, 2, 3, 4, 5)
#: Where identities proven for a symbolic D are cross-checked with concrete vectors.
CROSS_CHECK_SIZES = (2, 3)


def substituted(expr: sp.Expr, values: dict[sp.Symbol, object]) -> sp.Expr:
    """``expr`` with its symbols replaced by ``values``, all at once: what SymPy's
    ``subs(values, simultaneous=True)`` gives for symbols (each rebuilt node evaluates as
    ``subs`` rebuilds it; the same expressions, compared on every closed form of BatchNorm and
    the row norms at sizes 1..5), without ``subs``'s pattern matching and its round trip
    through dummies: those closed forms take 0.3 s of CPU instead of 3.6-5.7 s.

    >>> a, b = sp.symbols("a b")
    >>> substituted(a + 2 * b, {a: b, b: a})
    2*a + b
    """
    return expr.xreplace({symbol: sp.sympify(value) for symbol, value in values.items()})


def vector(name: str, size: int) -> sp.Matrix:
    """A column of real symbols ``name1 .. name<size>``."""
    return sp.Matrix(sp.symbols(f"{name}1:{size + 1}", real=True))


def sum_statistics(x: sp.IndexedBase, centered: bool = True) -> tuple[sp.Expr, sp.Expr]:
    """``(center, second moment)`` of the entries ``x[1..D]`` for every size D (``n``), as
    sums over 1..D: the mean (0 if not ``centered``) and the mean square about it."""
    k = sp.Symbol("l", integer=True, positive=True)
    center = sp.Sum(x[k], (k, 1, n)) / n if centered else sp.S.Zero
    return center, sp.Sum((x[k] - center) ** 2, (k, 1, n)) / n


@dataclass(frozen=True)
class RowNorm:
    """A normalization of each row: center, second moment, scale, affine output.

    ``centered``: the row's mean is subtracted. ``scale``: r as an expression of the
    second moment s, eps and D. ``scaled_by_moment``: r depends on x (through s).
    """

    key: str
    title: str
    source: str
    centered: bool
    scale: sp.Expr
    scaled_by_moment: bool
    min_size: int
    has_eps: bool

    @property
    def output(self) -> sp.Expr:
        """y_i in stage symbols."""
        return gamma_i * d * r + beta_i

    @property
    def vjp(self) -> sp.Expr:
        """dx_i in stage symbols: the closed form with its two row means."""
        c = 1 if self.centered else 0
        k = 1 if self.scaled_by_moment else 0
        return r * (gamma_i * g_i - c * m_a - k * d * r * m_az)

    @property
    def dgamma_term(self) -> sp.Expr:
        """One row's contribution to dgamma_i."""
        return g_i * d * r

    @property
    def jacobian_entry(self) -> sp.Expr:
        """J_ij in stage symbols (``delta`` is 1 on the diagonal, else 0)."""
        c = 1 if self.centered else 0
        k = 1 if self.scaled_by_moment else 0
        return gamma_i * r * (delta - c / n - k * (d * r) * (d_j * r) / n)

    def statistics(self, xs: sp.Matrix) -> tuple[sp.Matrix, sp.Expr]:
        """(deviations d, scale r) of the row ``xs``, from the definition."""
        size = len(xs)
        center = sum(xs) / size if self.centered else sp.S.Zero
        deviations = xs - sp.ones(size, 1) * center
        second_moment = sum(v**2 for v in deviations) / size
        scale = self.scale.subs({s: second_moment, n: size}, simultaneous=True)
        return deviations, scale

    def forward(self, size: int) -> tuple[sp.Matrix, sp.Matrix, sp.Matrix, sp.Matrix]:
        """(x, gamma, beta, y): the definition at D = ``size``, PyTorch eps convention."""
        xs, gammas, betas = vector("x", size), vector("gamma", size), vector("beta", size)
        deviations, scale = self.statistics(xs)
        y = sp.Matrix([gammas[i] * deviations[i] * scale + betas[i] for i in range(size)])
        return xs, gammas, betas, y

    def scale_of(self, second_moment: sp.Expr) -> sp.Expr:
        """r for a row whose second moment is ``second_moment`` (any D: ``n`` stays)."""
        return self.scale.subs(s, second_moment)

    def entry_forms(self, a: sp.Symbol, b: sp.Symbol) -> dict[str, sp.Expr]:
        """For every size D (``n``): the definition and the closed forms at entries ``a``
        and ``b``, with the row's statistics as sums over 1..D of ``IndexedBase`` entries.

        ``y_a`` and ``y_b`` (PyTorch eps), ``jacobian`` (J_ab), ``vjp`` (dx_a for the
        upstream gradient ``g``) and ``dgamma`` (one row's term of dgamma_a), the stage
        symbols replaced as :meth:`closed_forms` does.
        """
        x, gamma, beta, g = (
            sp.IndexedBase(name, real=True) for name in ("x", "gamma", "beta", "g")
        )
        k = sp.Symbol("l", integer=True, positive=True)
        center, second = sum_statistics(x, self.centered)
        scale = self.scale_of(second)

        def output(t):
            return gamma[t] * (x[t] - center) * scale + beta[t]

        means = {
            m_a: sp.Sum(gamma[k] * g[k], (k, 1, n)) / n,
            m_az: sp.Sum(gamma[k] * g[k] * (x[k] - center) * scale, (k, 1, n)) / n,
        }
        values = {
            d: x[a] - center,
            d_j: x[b] - center,
            r: scale,
            gamma_i: gamma[a],
            beta_i: beta[a],
            g_i: g[a],
            delta: sp.KroneckerDelta(a, b),
            **means,
        }
        return {
            "y_a": output(a),
            "y_b": output(b),
            "jacobian": substituted(self.jacobian_entry, values),
            "vjp": substituted(self.vjp, values),
            "dgamma": substituted(self.dgamma_term, values),
        }

    def closed_forms(self, size: int, g: sp.Matrix) -> dict[str, sp.Matrix]:
        """The stage expressions with the row's statistics substituted, at D = ``size``."""
        xs, gammas, betas, _ = self.forward(size)
        deviations, scale = self.statistics(xs)
        zs = [deviations[i] * scale for i in range(size)]
        a = [gammas[i] * g[i] for i in range(size)]
        means = {m_a: sum(a) / size, m_az: sum(a[i] * zs[i] for i in range(size)) / size}

        def at(expr: sp.Expr, i: int, j: int | None = None) -> sp.Expr:
            values = {
                d: deviations[i],
                r: scale,
                gamma_i: gammas[i],
                beta_i: betas[i],
                g_i: g[i],
                n: size,
                **means,
            }
            if j is not None:
                values |= {d_j: deviations[j], delta: 1 if i == j else 0}
            return substituted(expr, values)

        return {
            "output": sp.Matrix([at(self.output, i) for i in range(size)]),
            "vjp": sp.Matrix([at(self.vjp, i) for i in range(size)]),
            "dgamma": sp.Matrix([at(self.dgamma_term, i) for i in range(size)]),
            "jacobian": sp.Matrix(size, size, lambda i, j: at(self.jacobian_entry, int(i), int(j))),
        }


LAYERNORM = RowNorm(
    key="layernorm",
    title="LayerNorm",
    source="001_76ce3a8a4b6079c3.txt, Table 2 row LayerNorm; Eq. 18",
    centered=True,
    scale=1 / sp.sqrt(s + eps),
    scaled_by_moment=True,
    min_size=1,
    has_eps=True,
)
RMSNORM = RowNorm(
    key="rmsnorm",
    title="RMSNorm",
    source="001_76ce3a8a4b6079c3.txt, Table 2 row RMSNorm",
    centered=False,
    scale=1 / sp.sqrt(s + eps),
    scaled_by_moment=True,
    min_size=1,
    has_eps=True,
)
CENTERNORM = RowNorm(
    key="centernorm",
    title="CenterNorm",
    source="001_76ce3a8a4b6079c3.txt, Table 2 row CenterNorm",
    centered=True,
    scale=n / (n - 1),
    scaled_by_moment=False,
    min_size=2,
    has_eps=False,
)

ROW_NORMS: tuple[RowNorm, ...] = (LAYERNORM, RMSNORM, CENTERNORM)


def row_norm(key: str) -> RowNorm:
    """The row normalization called ``key``."""
    for module in ROW_NORMS:
        if module.key == key:
            return module
    raise KeyError(f"unknown row normalization {key!r}; known: {[m.key for m in ROW_NORMS]}")


def paper_forward(key: str, size: int, eps_paper: sp.Expr) -> sp.Matrix:
    """The forward as Table 2 prints it (eps added to a squared norm), at D = ``size``.

    LayerNorm: y = (I - 11^T/D) x, z = sqrt(D) y / sqrt(|y|^2 + eps), LN = gamma z + beta.
    RMSNorm: gamma sqrt(D) x / sqrt(|x|^2 + eps) + beta. CenterNorm: D/(D-1) gamma y + beta.
    """
    xs, gammas, betas = vector("x", size), vector("gamma", size), vector("beta", size)
    centering = sp.eye(size) - sp.ones(size, size) / size
    if key == "layernorm":
        y = centering * xs
        z = sp.sqrt(size) * y / sp.sqrt((y.T * y)[0] + eps_paper)
    elif key == "rmsnorm":
        z = sp.sqrt(size) * xs / sp.sqrt((xs.T * xs)[0] + eps_paper)
    elif key == "centernorm":
        z = sp.Rational(size, size - 1) * centering * xs
    else:
        raise KeyError(key)
    return sp.Matrix([gammas[i] * z[i] + betas[i] for i in range(size)])


def paper_forward_entry(key: str, b: sp.Symbol) -> sp.Expr:
    """Entry ``b`` of :func:`paper_forward` for every size D at once: ``x``, ``gamma`` and
    ``beta`` as ``IndexedBase`` entries, the row sums as sums over 1..D (:func:`sum_statistics`;
    ``n`` is ``proofs.core.SIZE``), the paper's eps ``epsilon_p``."""
    x, gamma, beta = (sp.IndexedBase(name, real=True) for name in ("x", "gamma", "beta"))
    eps_paper = sp.Symbol("epsilon_p", positive=True)
    center, second = sum_statistics(x, centered=key != "rmsnorm")
    if key in ("layernorm", "rmsnorm"):  # |y|^2 = D times the second moment
        z = sp.sqrt(n) * (x[b] - center) / sp.sqrt(n * second + eps_paper)
    elif key == "centernorm":
        z = n / (n - 1) * (x[b] - center)
    else:
        raise KeyError(key)
    return gamma[b] * z + beta[b]


# WeightNorm: stage symbols of one weight row v_i (length D) and one entry of it.
v_ij = sp.Symbol("v_ij", real=True)
gamma_o = sp.Symbol("gamma_o", real=True)  # gamma of the output row
q = sp.Symbol("q", nonnegative=True)  # |v_i|^2
dw = sp.Symbol("dW_ij", real=True)  # dL/dW_ij = sum over rows g_i x_j
p = sp.Symbol("p", real=True)  # sum_j dW_ij v_ij


@dataclass(frozen=True)
class WeightNormModule:
    """WeightNorm: W_i = gamma_i v_i / sqrt(|v_i|^2 + eps), y = x W^T (a linear map of x).

    Gradients: dx = g W, dW = g^T x, dv_ij = gamma_i r_i (dW_ij - v_ij r_i^2 p_i),
    dgamma_i = r_i p_i, with r_i = 1/sqrt(|v_i|^2 + eps) and p_i = sum_j dW_ij v_ij.
    """

    key: str = "weightnorm"
    title: str = "WeightNorm"
    source: str = "001_76ce3a8a4b6079c3.txt, Table 2 row WeightNorm"

    @property
    def scale(self) -> sp.Expr:
        return 1 / sp.sqrt(q + eps)

    @property
    def weight(self) -> sp.Expr:
        """W_ij in stage symbols."""
        return gamma_o * v_ij * r

    @property
    def dv(self) -> sp.Expr:
        return gamma_o * r * (dw - v_ij * r * r * p)

    @property
    def dgamma(self) -> sp.Expr:
        return r * p

    def forward(self, size: int, outputs: int) -> tuple[sp.Matrix, sp.Matrix, sp.Matrix, sp.Matrix]:
        """(x, V, gamma, y) for one sample x of length ``size``, ``outputs`` rows of V."""
        xs = vector("x", size)
        vs = sp.Matrix(outputs, size, lambda i, j: sp.Symbol(f"v{i + 1}_{j + 1}", real=True))
        gammas = vector("gamma", outputs)
        w = self.weights(vs, gammas)
        return xs, vs, gammas, w * xs

    def weights(self, vs: sp.Matrix, gammas: sp.Matrix) -> sp.Matrix:
        """W from V and gamma, by the definition."""
        rows = []
        for i in range(vs.rows):
            norm2 = sum(vs[i, j] ** 2 for j in range(vs.cols))
            rows.append([gammas[i] * vs[i, j] / sp.sqrt(norm2 + eps) for j in range(vs.cols)])
        return sp.Matrix(rows)


WEIGHTNORM = WeightNormModule()


def _zero_matrix(m: sp.Matrix) -> bool:
    return all(is_zero(entry) for entry in m)


@cache
def row_norm_checks(key: str, size: int) -> dict[str, bool]:
    """Each closed form of ``key`` against sympy.diff of the forward, at D = ``size``."""
    module = row_norm(key)
    xs, gammas, betas, y = module.forward(size)
    g = vector("g", size)
    forms = module.closed_forms(size, g)
    jacobian = y.jacobian(xs)
    objective = (g.T * y)[0]
    return {
        "output": _zero_matrix(forms["output"] - y),
        "jacobian": _zero_matrix(forms["jacobian"] - jacobian),
        "vjp": _zero_matrix(forms["vjp"] - jacobian.T * g),
        "dgamma": _zero_matrix(forms["dgamma"] - sp.Matrix([objective]).jacobian(gammas).T),
        "dbeta": _zero_matrix(g - sp.Matrix([objective]).jacobian(betas).T),
    }


@cache
def weightnorm_checks(size: int, outputs: int) -> dict[str, bool]:
    """WeightNorm's closed forms against sympy.diff, for one sample, D = ``size``."""
    module = WEIGHTNORM
    xs, vs, gammas, y = module.forward(size, outputs)
    g = vector("g", outputs)
    objective = (g.T * y)[0]
    w = module.weights(vs, gammas)
    dW = g * xs.T
    results = {"jacobian": _zero_matrix(y.jacobian(xs) - w)}
    results["vjp"] = _zero_matrix(w.T * g - sp.Matrix([objective]).jacobian(xs).T)
    dv_ok, dgamma_ok = True, True
    for i in range(outputs):
        norm2 = sum(vs[i, j] ** 2 for j in range(size))
        scale = module.scale.subs(q, norm2)
        pi = sum(dW[i, j] * vs[i, j] for j in range(size))
        for j in range(size):
            closed = module.dv.subs(
                {gamma_o: gammas[i], r: scale, dw: dW[i, j], v_ij: vs[i, j], p: pi},
                simultaneous=True,
            )
            dv_ok &= is_zero(closed - sp.diff(objective, vs[i, j]))
        closed = module.dgamma.subs({r: scale, p: pi}, simultaneous=True)
        dgamma_ok &= is_zero(closed - sp.diff(objective, gammas[i]))
    results["dv"], results["dgamma"] = dv_ok, dgamma_ok
    return results


@cache
def symbolic_row_norm_checks(key: str) -> dict[str, bool]:
    """The closed forms of ``key`` against sympy.diff of the definition for a symbolic size
    D (:meth:`RowNorm.entry_forms`): the Jacobian's entry (a, b), the VJP's entry a (the
    sum over b of dy_b/dx_a g_b) and one row's dgamma_a."""
    module = row_norm(key)
    a, b = sp.symbols("a b", integer=True, positive=True)
    x, g = sp.IndexedBase("x", real=True), sp.IndexedBase("g", real=True)
    gamma = sp.IndexedBase("gamma", real=True)
    forms = module.entry_forms(a, b)
    dx = sp.Sum(sp.diff(forms["y_b"], x[a]) * g[b], (b, 1, n))
    objective = sp.Sum(forms["y_b"] * g[b], (b, 1, n))
    return {
        "jacobian": sum_identity(forms["jacobian"], sp.diff(forms["y_a"], x[b]))(),
        "vjp": sum_identity(forms["vjp"], dx)(),
        "dgamma": sum_identity(forms["dgamma"], sp.diff(objective, gamma[a]))(),
    }


def closed_form_proof(key: str) -> Proof:
    """The closed forms the kernels of ``key`` use, proven equal to sympy.diff for a symbolic
    size D (Jacobian, VJP, dgamma) and, with concrete vectors, at D = 1..5 (all five forms)."""
    steps = []
    if key == "weightnorm":
        for size in PROOF_SIZES:
            for outputs in (1, 2):
                for name in ("jacobian", "vjp", "dv", "dgamma"):
                    steps.append(
                        Step(
                            statement=(
                                f"D = {size}, O = {outputs}: the kernel's {name} equals "
                                "sympy.diff of the forward"
                            ),
                            method="symbolic identity",
                            check=lambda s=size, o=outputs, k=name: weightnorm_checks(s, o)[k],
                        )
                    )
        return Proof(claim="WeightNorm: closed forms equal the derivatives", steps=tuple(steps))
    module = row_norm(key)
    steps += [
        Step(
            statement=(
                f"every D (symbolic, D >= {module.min_size}): the kernel's {name} equals "
                f"sympy.diff of the forward, {what}, with the row's statistics as sums over "
                "1..D (proofs.core.sum_identity)"
            ),
            method="symbolic identity",
            check=lambda k=name: symbolic_row_norm_checks(key)[k],
        )
        for name, what in (
            ("jacobian", "entry (a, b)"),
            ("vjp", "entry a of J^T g"),
            ("dgamma", "entry a of one row's d<g, y>/dgamma"),
        )
    ]
    for size in PROOF_SIZES:
        if size < module.min_size:
            continue
        for name in ("output", "jacobian", "vjp", "dgamma", "dbeta"):
            steps.append(
                Step(
                    statement=(
                        f"D = {size}: the kernel's {name} equals "
                        + ("the forward" if name == "output" else "sympy.diff of the forward")
                    ),
                    method="symbolic identity",
                    check=lambda s=size, k=name: row_norm_checks(key, s)[k],
                )
            )
    return Proof(claim=f"{module.title}: closed forms equal the derivatives", steps=tuple(steps))
