"""The derivation report: ``report/index.md`` for people, ``report/claims.json`` for programs.

Everything in it is computed here from the definitions, the claim checker and the proofs;
nothing is typed in. The output is deterministic: the same code writes the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import sympy as sp

from derive.catalog import SECTIONS, section_entry
from derive.check import Result, check
from derive.claims import CLAIMS
from derive.codegen.activations import module_forms
from derive.definitions.activations import ELEMENTWISE, Elementwise
from derive.report.attention import attention_section, jacobian_figure
from derive.report.batchnorm import batchnorm_section
from derive.report.certificates import certificate_section
from derive.report.envelope import envelope_section
from derive.report.figures import derivative_figure
from derive.report.float16 import Float16Facts, float16_facts
from derive.report.norms import norm_section
from derive.progress import Progress
from derive.report.rows import row_section
from proofs.core import Verdict

#: Report sections, in the order of Table 2 (:data:`derive.catalog.SECTIONS`).
MODULE_ORDER = SECTIONS

CONVENTIONS = """\
## Conventions

- Layout: rows are samples or tokens, as in PyTorch. Elementwise modules act on every
  entry of `x` of any shape; LayerNorm, RMSNorm, CenterNorm, Softmax and the global
  poolings on the last axis of `x` of shape (..., D); WeightNorm and Linear map (..., D)
  to (..., O) (`x W^T + b`); Conv2d and the windowed poolings take NCHW images (PyTorch's
  cross-correlation; zero or circular padding; floor mode). The paper writes one sample as
  a column (`y = W x`): the same maps.
- Jacobians are in numerator layout, `J[i, j] = dy_i / dx_j`; the paper uses denominator
  layout (its Linear Jacobian is `W^T`), and the checker transposes before comparing. For
  elementwise modules both are `diag(f'(x))`.
- Lipschitz constants are in the 2-norm (the Frobenius norm of an image tensor): the
  supremum of the Jacobian's 2-norm over all inputs ("global"), or its value at one input
  ("local"). For an elementwise map the
  Jacobian is diagonal, so the constant is `sup_x |f'(x)|` (by the mean value theorem on
  each coordinate, and for ReLU by the case analysis in its proof).
- `eps` follows PyTorch: added to the variance (LayerNorm) or the mean of squares
  (RMSNorm). The paper adds its eps to a squared norm, so `eps_paper = D * eps`; printed
  formulas are checked with the paper's eps, and constants are given in both.
- Kinks: `relu'(0) = 0`; a tie of max pooling splits the gradient evenly (global) or
  gives it to the first maximum in row-major order (windowed), as PyTorch does.
  Non-finite inputs: NaN gives NaN; `+-inf` gives the limit; in softmax `-inf` is a mask
  (output and gradient 0), and a fully masked row gives 0.
- Arithmetic of the kernels: float32 inputs are evaluated in float64 and rounded once;
  float64 inputs in float64, or in double-double (~106 bits) where a formula's sums may
  cancel (the normalizations' row sums are always compensated for float64 input).
  float16: "mixed" mode widens
  half inputs, computes in float64 and rounds once (round to nearest even); "strict" mode
  rounds every intermediate to half precision, as pure half arithmetic would. Facts below
  are about the exact function rounded to half, unless they say "strict".
- Verdicts: `holds` (true as stated; bounds attained), `holds_loose` (valid, not tight),
  `fails` (false; counterexample given), `misprinted` (wrong as printed, intent holds),
  `approx` (a printed "≈": exact value and relative error given). "rigorous" is true only
  for proofs (symbolic identities, ball-arithmetic enclosures, exact witnesses), never for
  sampling.
"""


def _modules(names: Iterable[str] | None) -> tuple[str, ...]:
    if names is None:
        return MODULE_ORDER
    unknown = sorted(set(names) - set(MODULE_ORDER))
    if unknown:
        raise ValueError(f"--modules: unknown {unknown}; known: {list(MODULE_ORDER)}")
    return tuple(m for m in MODULE_ORDER if m in names)


def _summary(results: tuple[Result, ...]) -> list[str]:
    lines = [
        "## Summary",
        "",
        "| claim | printed | verdict | liptable's value | decimal | rigorous |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        value = r.value if len(r.value) <= 48 else r.value[:45] + "..."
        # A pipe ends a table cell in GitHub Markdown, also inside math: escape it.
        statement = r.claim.statement_latex.replace("|", "\\|")
        number = sp.sympify(r.value)
        numeric = isinstance(number, sp.Basic) and number.is_number
        decimal = f"{sp.N(number, 12)}" if numeric else ""
        lines.append(
            f"| `{r.claim.id}` | ${statement}$ | **{r.verdict}** | "
            f"`{value}` | {decimal} | {'yes' if r.rigorous else 'no (evidence)'} |"
        )
    return [*lines, ""]


def _corrections(results: tuple[Result, ...]) -> list[str]:
    lines = ["## Corrections to Table 2", ""]
    others = [r for r in results if r.verdict != Verdict.HOLDS]
    if not others:
        return [*lines, "Every checked statement holds as printed.", ""]
    lines.append("Every statement whose verdict is not `holds`:")
    lines.append("")
    for r in others:
        detail = " ".join(r.notes)
        lines.append(
            f"- `{r.claim.id}` ({r.verdict}): printed ${r.claim.statement_latex}$; "
            f"liptable derives `{r.value}`. {detail}".rstrip()
        )
    return [*lines, ""]


def _claim_section(r: Result) -> list[str]:
    c = r.claim
    lines = [
        f"#### `{c.id}`: {r.verdict}",
        "",
        f"Source: {c.source}.",
        "",
        f"Printed: ${c.statement_latex}$",
        "",
        f"Derived: `{r.value}` ({'rigorous' if r.rigorous else 'evidence, not proof'}; "
        f"method: {r.method}).",
        "",
    ]
    if r.witness:
        pairs = ", ".join(f"{k} = `{v}`" for k, v in r.witness.items())
        lines += [f"Witness: {pairs}.", ""]
    notes = " ".join(n for n in (c.notes, *r.notes) if n)
    if notes:
        lines += [f"Notes: {notes}", ""]
    claim = r.proof.claim if "$" in r.proof.claim else f"${r.proof.claim}$"
    lines += [f"Proof of: {claim}", ""]
    for i, step in enumerate(r.proof.steps, 1):
        lines.append(f"{i}. *[{step.method}]* {step.statement}")
    return [*lines, ""]


def _float16_section(facts: Float16Facts) -> list[str]:
    return ["##### float16", "", *(f"- {fact}" for fact in facts.lines()), ""]


def _form_section(module: Elementwise, figure: str) -> list[str]:
    forward_form, derivative_form = module_forms(module)
    lines = [
        f"### {module.title}",
        "",
        f"Definition ({module.source}):",
        "",
        f"$$f(x) = {sp.latex(module.forward)}$$",
        "",
        "Derived by `sympy.diff`:",
        "",
        f"$$f'(x) = {sp.latex(module.derivative)}$$",
        "",
        f"At the kink: {module.kink}.",
        "",
        "The kernels evaluate these proven-equal forms (each branch minus the definition "
        "simplifies to 0):",
        "",
        f"$$f(x) = {sp.latex(forward_form.expr)}$$",
        "",
        f"({forward_form.why})",
        "",
        f"$$f'(x) = {sp.latex(derivative_form.expr)}$$",
        "",
        f"({derivative_form.why})",
        "",
        f"![f' of {module.key}]({figure})",
        "",
    ]
    return lines


def _family_section(family: str, name: str, files: dict[str, str]) -> list[str]:
    """The family's section text of ``name`` (figures it draws go into ``files``)."""
    if family == "norms":
        return norm_section(name)
    if family == "batchnorm":
        return batchnorm_section()
    if family == "rows":
        return row_section(name)
    if family == "attention":
        figure = None
        if name == "dp_attention":
            figure = "figures/attention_jacobian.svg"
            files[figure] = jacobian_figure()
        return attention_section(name, figure)
    lines: list[str] = []
    for module in (m for m in ELEMENTWISE if m.name == name):
        figure = f"figures/{module.key}.svg"
        files[figure] = derivative_figure(module)
        lines += _form_section(module, figure)
        lines += _float16_section(float16_facts(module.key))
    return lines


def build(modules: Iterable[str] | None = None) -> dict[str, str]:
    """The report's files (relative name -> text) for the selected modules."""
    names = _modules(modules)
    claims = [c for c in CLAIMS if c.module in names]
    progress = Progress("liptable report: checking claims", len(claims))
    results = []
    for c in claims:
        progress.step(c.key)
        results.append(check(c))
    files: dict[str, str] = {}
    lines = [
        "# liptable report",
        "",
        "Generated by `liptable report` from the SymPy definitions in `derive/definitions/` "
        "(one file per family: activations, norms, batchnorm, rows, attention). "
        "Do not edit: rerun the command.",
        "",
        "Source of the claims: Qi, Wang, Zhang, *Understanding Optimization of Deep Learning "
        "via Jacobian Matrix and Lipschitz Constant* (shared/seeds/001_76ce3a8a4b6079c3.txt), "
        "Table 2, and the course notes in shared/seeds/.",
        "",
        CONVENTIONS,
        *_summary(results),
        *_corrections(results),
        "## Modules",
        "",
    ]
    progress = Progress("liptable report: writing sections", len(names) + (modules is None))
    for name in names:
        progress.step(name)
        lines += [f"## {name}", ""]
        lines += _family_section(section_entry(name).family, name, files)
        lines += ["### Claims", ""]
        for r in results:
            if r.claim.module == name:
                lines += _claim_section(r)
    if modules is None:  # the envelopes span every module: only in the full report
        progress.step("FP16 envelopes")
        section, figures = envelope_section()
        lines += section
        files.update(figures)
        section, certificates = certificate_section()
        lines += section
        files.update(certificates)
    progress.close()
    files["index.md"] = "\n".join(lines).rstrip("\n") + "\n"
    records = [r.to_json() for r in results]
    files["claims.json"] = json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    return files


def write(out: Path, modules: Iterable[str] | None = None) -> list[Path]:
    """Write the report under ``out``; returns the paths written."""
    written = []
    for name, text in sorted(build(modules).items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
