"""The report's tasks, run in the worker processes: each module's section with its checked
claims (:func:`module_task`), and the sections that span every module
(:func:`closing_task`). They import the checkers, the proofs, the references, the kernels and
matplotlib; :mod:`derive.report.document`, which schedules them and writes the report,
imports none of that, so it starts the workers about 2.5 s sooner.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from derive.catalog import section_entry
from derive.check import Result, check
from derive.claims import CLAIMS
from derive.codegen.activations import module_forms
from derive.definitions.activations import ELEMENTWISE, Elementwise
from derive.report.accuracy import accuracy_section
from derive.report.attention import attention_section, jacobian_figure
from derive.report.batchnorm import batchnorm_section
from derive.report.certificates import certificate_section
from derive.report.descent import descent_section
from derive.report.envelope import envelope_section
from derive.report.figures import derivative_figure
from derive.report.float16 import Float16Facts, float16_facts
from derive.report.initialization import initialization_section
from derive.report.norms import norm_section
from derive.report.rows import row_section
from derive.report.theory import theory_section
from derive.report.updates import updates_section
from proofs.core import Verdict

__all__ = ["Rendered", "closing_task", "module_task"]


def _summary_row(r: Result) -> str:
    """The claim's row of the summary table."""
    value = r.value if len(r.value) <= 48 else r.value[:45] + "..."
    # A pipe ends a table cell in GitHub Markdown, also inside math: escape it.
    statement = r.claim.statement_latex.replace("|", "\\|")
    number = sp.sympify(r.value)
    numeric = isinstance(number, sp.Basic) and number.is_number
    decimal = f"{sp.N(number, 12)}" if numeric else ""
    return (
        f"| `{r.claim.id}` | ${statement}$ | **{r.verdict}** | "
        f"`{value}` | {decimal} | {_rigor(r)} |"
    )


def _rigor(r: Result) -> str:
    """The summary's "rigorous" cell: yes, yes at the sizes checked, or no (evidence)."""
    if not r.rigorous:
        return "no (evidence)"
    return "yes" if r.proven_for == "every size" else f"yes, at {r.proven_for} only"


def _rigor_text(r: Result) -> str:
    if not r.rigorous:
        return "evidence, not proof"
    if r.proven_for == "every size":
        return "rigorous"
    return f"rigorous at {r.proven_for}; not machine-checked for every size"


def _correction(r: Result) -> str | None:
    """The claim's entry in the corrections (None for a claim that holds)."""
    if r.verdict == Verdict.HOLDS:
        return None
    detail = " ".join(r.notes)
    return (
        f"- `{r.claim.id}` ({r.verdict}): printed ${r.claim.statement_latex}$; "
        f"liptable derives `{r.value}`. {detail}"
    ).rstrip()


def _claim_section(r: Result) -> list[str]:
    c = r.claim
    lines = [
        f"#### `{c.id}`: {r.verdict}",
        "",
        f"Source: {c.source}.",
        "",
        f"Printed: ${c.statement_latex}$",
        "",
        f"Derived: `{r.value}` ({_rigor_text(r)}; method: {r.method}).",
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
    if family == "theory":
        return theory_section(name)
    if family == "initialization":
        return initialization_section(name)
    if family == "descent":
        return descent_section(name)
    if family == "updates":
        return updates_section(name)
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


@dataclass(frozen=True)
class Rendered:
    """One claim's checked result as the report prints it (picklable: no proof steps to run)."""

    index: int  # position in derive.claims.CLAIMS
    module: str
    summary_row: str
    correction: str | None
    section: tuple[str, ...]
    record: dict


def _claim_task(index: int) -> Rendered:
    """Check ``CLAIMS[index]`` and render it."""
    r = check(CLAIMS[index])
    return Rendered(
        index,
        r.claim.module,
        _summary_row(r),
        _correction(r),
        tuple(_claim_section(r)),
        r.to_json(),
    )


def _section_task(name: str) -> tuple[list[str], dict[str, str]]:
    """The text of module ``name``'s section and the figures it draws."""
    files: dict[str, str] = {}
    return _family_section(section_entry(name).family, name, files), files


def module_task(
    name: str, indices: tuple[int, ...]
) -> tuple[list[str], dict[str, str], list[Rendered]]:
    """Module ``name``'s section, its figures, and its claims ``CLAIMS[i]`` rendered.

    A module's section and claims are one task: they share work that a process computes
    once and keeps (the attentions' adversarial search, which the Lipschitz claim and the
    section's table both report; a family's SymPy derivations and references, which its
    claims reuse; SymPy's own cache), so one worker pays for it, not each. Measured on the
    full report with two workers and a warm Numba cache: 109 s of CPU and 58 s of wall time,
    against 131 s and 71 s with every claim a task of its own."""
    lines, files = _section_task(name)
    return lines, files, [_claim_task(i) for i in indices]


def closing_task() -> tuple[list[str], dict[str, str]]:
    """The sections that span every module: FP16 envelopes, the certificates, then
    PyTorch's measured accuracy."""
    envelopes, figures = envelope_section()
    certificates, copies = certificate_section()
    accuracy, table = accuracy_section()
    return [*envelopes, *certificates, *accuracy], {**figures, **copies, **table}
